// PrefixIndex: construction, Match, inserting and removing, locations (see
// index/prefix_index_internal.h for the layout).
#include "index/prefix_index.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>  // std::shared_lock
#include <string>
#include <utility>

#include "index/prefix_index_internal.h"

namespace cachepawl {

using namespace prefix_index_internal;  // NOLINT(google-build-using-namespace): its internals

namespace {

// Finds the entries of a query's pages in order, for Match. EntryAllocator gives a chain grown
// page by page consecutive indices inside aligned blocks of kBlock and a new block where one
// ends, so page j+1 is most likely at x+1 when page j is at x and x+1 is in the same block.
// Three stages, each ahead of the next:
//  1. (kFar pages ahead) the table slot of a page that will need the table is prefetched: every
//     page in table mode, else only pages where a block is expected to begin (`phase_`);
//  2. (kNear pages ahead) each page gets a predicted index: in sequential mode x+1 inside a
//     block, else (table mode, a block boundary) the first slot whose tag matches; the entry's
//     line is prefetched;
//  3. (the caller's page) the predicted entry is checked (live, same hash). When it is not the
//     page's, the table is asked (full hash compare) and predictions restart after that page
//     in table mode.
// Table mode turns into sequential mode once the table has given each of kToSequential pages
// in a row the index after the previous page's. When the table shows, at a block boundary, that the
// chain goes on in the next block (a chain inserted by InsertChain is one run of blocks),
// boundaries are predicted as x+1 too, until a misprediction. An index whose chains are scattered
// (no two pages in a row consecutive) stays in table mode: one table slot and one entry line per
// page, in parallel.
class ChainFinder {
 public:
  ChainFinder(const PageTable& table, const ChunkedArray<HotEntry, 16>& hot, uint32_t high_water,
              std::span<const PageHash> hashes)
      : table_(table), hot_(hot), high_water_(high_water), hashes_(hashes), n_(hashes.size()) {
    std::fill(std::begin(mixed_page_), std::end(mixed_page_), kNoPage);
  }

  // The index of hashes[i] or kNone; called for i = 0, 1, 2... and not after a kNone.
  // Always inlined (as are the helpers below): Match instantiates its walk twice (with and
  // without windowed KV), and an out-of-line call per page costs ~20% of a warm Match.
  [[gnu::always_inline]] uint32_t Find(size_t i) {
    Advance(i);
    const uint32_t c = predicted_[i % kRing];
    if (c == kNone) return kNone;  // no table slot of the probe run has the tag: absent
    if (c < high_water_) {
      const HotEntry& e = hot_[c];
      if (e.depth != 0 && index_internal::SameHash(e.hash, hashes_[i])) return c;
    }
    // Mispredicted or a tag collision: ask the table, predict again from there in table mode.
    const uint32_t found = table_.Find(hashes_[i], EntryKeys{&hot_});
    s2_ = i + 1;
    last_ = found;
    table_mode_ = true;
    blocks_follow_ = false;
    run_ = 0;
    if (found == kNone) n_ = i + 1;  // the match ends here
    return found;
  }

 private:
  // Measured on the dev box: 48/24 and 64/32 were slower (more lines in flight than the core
  // keeps); in table mode this is the same pipeline as before the allocator had blocks.
  static constexpr size_t kRing = 64, kFar = 32, kNear = 16;
  static constexpr uint32_t kBlock = EntryAllocator::kBlock;
  static constexpr size_t kToSequential = 2;
  static constexpr size_t kNoPage = ~size_t{0};

  [[gnu::always_inline]] uint64_t MixedOf(size_t j) {
    if (mixed_page_[j % kRing] != j) {
      mixed_[j % kRing] = PageTable::Mix(hashes_[j]);
      mixed_page_[j % kRing] = j;
    }
    return mixed_[j % kRing];
  }
  [[gnu::always_inline]] void PrefetchSlot(size_t j) { table_.Prefetch(MixedOf(j)); }

  // Runs stage 1 up to page i + kFar and stage 2 up to page i + kNear.
  [[gnu::always_inline]] void Advance(size_t i) {
    for (const size_t end = std::min(n_, i + kFar); s1_ < end; ++s1_) {
      if (table_mode_ || (!blocks_follow_ && s1_ % kBlock == phase_)) PrefetchSlot(s1_);
    }
    for (const size_t end = std::min(s1_, i + kNear); s2_ < end; ++s2_) {
      const size_t j = s2_;
      uint32_t c;
      if (!table_mode_ && last_ != kNone && ((last_ + 1) % kBlock != 0 || blocks_follow_)) {
        c = last_ + 1;
      } else {
        size_t pos;
        c = table_.FirstTagMatch(MixedOf(j), &pos);
        if (!table_mode_ && c != kNone && last_ != kNone && c == last_ + 1) {
          blocks_follow_ = true;  // a block boundary, and the next block is the chain's too
        }
        if (table_mode_) {
          run_ = (c != kNone && last_ != kNone && c == last_ + 1) ? run_ + 1 : 0;
          table_mode_ = run_ < kToSequential;
        }
        if (c != kNone && !table_mode_) {
          // A block begins at page j - c % kBlock: the next at j + kBlock - c % kBlock.
          const size_t phase = (j + kBlock - c % kBlock) % kBlock;
          if (phase != phase_) {
            phase_ = phase;
            // Stage 1 went past the next boundaries with the old phase: fetch them now.
            for (size_t b = j + kBlock - c % kBlock; b < s1_; b += kBlock) PrefetchSlot(b);
          }
        }
      }
      predicted_[j % kRing] = c;
      last_ = c;
      if (c == kNone) {  // absent: nothing after it can match
        n_ = j + 1;
        s1_ = std::min(s1_, n_);
        break;
      }
      // A prediction across a block boundary may lie past the last entry (checked in Find).
      if (c < high_water_) __builtin_prefetch(&hot_[c]);
    }
  }

  const PageTable& table_;
  const ChunkedArray<HotEntry, 16>& hot_;
  const uint32_t high_water_;
  const std::span<const PageHash> hashes_;
  size_t n_;  // pages that may still match
  uint64_t mixed_[kRing];
  size_t mixed_page_[kRing];  // the page whose Mix is in mixed_ there
  uint32_t predicted_[kRing];
  size_t s1_ = 0;          // pages [0, s1_) went through stage 1
  size_t s2_ = 0;          // pages [0, s2_) went through stage 2
  uint32_t last_ = kNone;  // the index predicted for page s2_ - 1
  bool table_mode_ = true;
  size_t run_ = 0;    // table mode: pages in a row before s2_ with consecutive indices
  size_t phase_ = 0;  // sequential mode: blocks begin at pages j with j % kBlock == phase_
  // Sequential mode: a block boundary found the chain going on in the next block (a chain
  // inserted whole), so x+1 is predicted across boundaries too, without the table.
  bool blocks_follow_ = false;
};

}  // namespace

// ===== construction ==========================================================================

StatusOr<std::unique_ptr<PrefixIndex>> PrefixIndex::Create(const IndexOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<PrefixIndex>(new PrefixIndex(std::make_unique<Impl>(options)));
}

PrefixIndex::PrefixIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PrefixIndex::~PrefixIndex() = default;

const IndexOptions& PrefixIndex::options() const { return impl_->options; }

// ===== Match =================================================================================

MatchResult PrefixIndex::Match(std::span<const PageHash> hashes) {
  MatchResult r;
  Match(hashes, &r);
  return r;
}

void PrefixIndex::Match(std::span<const PageHash> hashes, MatchResult* out) {
  Impl& m = *impl_;
  out->Clear();
  std::shared_lock lock(m.mu);
  if (m.options.window_pages == 0) {
    m.MatchChain<false>(hashes, out);
  } else {
    m.MatchChain<true>(hashes, out);
  }
}

// kWindowed: the layout has windowed layers (window_pages > 0), so the rule also needs the
// windowed KV of the last W pages, which is in the cold part: only then is it read.
template <bool kWindowed>
void Core::MatchChain(std::span<const PageHash> hashes, MatchResult* out) {
  Core& m = *this;
  const uint64_t now = m.clock + 1;
  const size_t n = hashes.size();

  ChainFinder finder(m.table, m.hot, m.entry_ids.high_water(), hashes);
  uint32_t prev = kNone;
  uint32_t last_kv = kNone;
  uint32_t last_state = kNone;
  size_t last_state_pages = 0;
  size_t kv_only = 0;
  size_t indexed = 0;
  bool kv_run = true;
  const bool payload = m.options.kv_payload;
  [[maybe_unused]] const size_t window = m.options.window_pages;
  [[maybe_unused]] size_t window_run = 0;  // pages in a row up to page i with windowed KV
  [[maybe_unused]] uint32_t reusable_at = kNone;
  [[maybe_unused]] size_t reusable = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t idx = finder.Find(i);
    if (idx == kNone) break;
    HotEntry& e = m.hot[idx];
    if (e.parent != prev) break;
    prev = idx;
    indexed = i + 1;
    if (!kv_run) continue;
    if (e.kv_mask == 0 && payload) {
      kv_run = false;
      continue;
    }
    kv_only = i + 1;
    last_kv = idx;
    if (e.last_use.load(std::memory_order_relaxed) != now) {
      e.last_use.store(now, std::memory_order_relaxed);
    }
    if (e.state != kNone) {
      last_state = idx;
      last_state_pages = i + 1;
    }
    if constexpr (kWindowed) {
      window_run = m.win[idx].record != kNone ? window_run + 1 : 0;
      if (window_run >= std::min(window, i + 1) && (!m.options.require_mamba || e.state != kNone)) {
        reusable = i + 1;
        reusable_at = idx;
      }
    }
    if (!payload) continue;  // the page is its chain link: no tier holds KV for it
    // Slots of tiers not held are 0 (DropKvSlot), so copying all three is exact; a spilled
    // slot (rare) is looked up.
    TierLocations& loc = out->pages.emplace_back();
    loc.mask = e.kv_mask;
    loc.slot = {e.kv_slot[0], e.kv_slot[1], e.kv_slot[2]};
    if ((e.kv_slot[0] == kSpilledSlot) | (e.kv_slot[1] == kSpilledSlot) |
        (e.kv_slot[2] == kSpilledSlot)) {
      for (int t = 0; t < kNumTiers; ++t) {
        if (loc.mask & Bit(t)) loc.slot[t] = m.KvSlot(idx, t);
      }
    }
  }

  out->kv_only_pages = kv_only;
  out->indexed_pages = indexed;
  out->checkpoint_hint_pages = kv_only - kv_only % m.options.track_interval_pages;
  uint32_t state_at = kNone;
  if constexpr (kWindowed) {
    out->reusable_pages = reusable;
    state_at = reusable_at;
    // The windowed KV of the last min(W, reusable) pages: reusable_at and its ancestors.
    out->window.resize(std::min(window, reusable));
    out->window_first_page = reusable - out->window.size();
    uint32_t at = reusable_at;
    for (size_t k = out->window.size(); k-- > 0; at = m.hot[at].parent) {
      State& w = m.windows[m.win[at].record];
      out->window[k] = RecordLocations(w);
      if (w.last_use.load(std::memory_order_relaxed) != now) {
        w.last_use.store(now, std::memory_order_relaxed);
      }
    }
  } else if (m.options.require_mamba) {
    out->reusable_pages = last_state_pages;
    state_at = last_state;
  } else {
    out->reusable_pages = kv_only;
    state_at = last_kv;
  }
  if (state_at != kNone && m.hot[state_at].state != kNone) {
    out->state = m.StateLocations(state_at);
    State& s = m.states[m.hot[state_at].state];
    if (s.last_use.load(std::memory_order_relaxed) != now) {
      s.last_use.store(now, std::memory_order_relaxed);
    }
    if (m.hybrid_states()) m.ScoreStateHit(state_at, s);
  }
  m.matches.fetch_add(1, std::memory_order_relaxed);
  m.match_pages.fetch_add(kv_only, std::memory_order_relaxed);
}

// ===== inserting / removing ==================================================================

Status Core::InsertOne(const std::optional<PageHash>& parent, uint32_t parent_index,
                       uint64_t parent_mixed, const PageHash& hash, uint64_t mixed, uint32_t* index,
                       bool* added) {
  *index = kNone;
  *added = false;
  if (index_internal::IsZeroHash(hash)) {
    ++errors.err_bad_hash;
    return Status::InvalidArgument("hash: the all-zero hash is reserved for \"no parent\"");
  }
  const bool has_parent = parent.has_value() && !index_internal::IsZeroHash(*parent);
  if (has_parent && index_internal::SameHash(*parent, hash)) {
    ++errors.err_bad_hash;
    return Status::InvalidArgument(Describe(hash) + ": its own parent");
  }
  uint32_t p = has_parent ? parent_index : kNone;
  if (p == kUnresolved) {
    p = table.Find(*parent, parent_mixed, KeyOf());
    if (p == kNone) {
      ++errors.err_parent_missing;
      return Status::NotFound("parent " + parent->ToHex() + " of " + Describe(hash) +
                              ": not in the index");
    }
  }
  table.ReserveOneMore(KeyOf());
  PageTable::InsertPoint insert_at;
  const uint32_t existing = table.FindForInsert(hash, mixed, KeyOf(), &insert_at);
  if (existing != kNone) {
    *index = existing;
    if (hot[existing].parent == p) return Status::OK();
    ++errors.err_parent_conflict;
    const std::string had = hot[existing].parent == kNone
                                ? std::string("no parent")
                                : "parent " + hot[hot[existing].parent].hash.ToHex();
    return Status::InvalidArgument(Describe(hash) + ": already in the index with " + had);
  }
  if (table.size() >= options.max_pages) {
    ++errors.err_full;
    return Status::NoSpace("index.max_pages: " + std::to_string(options.max_pages) +
                           " pages indexed, cannot add " + Describe(hash));
  }
  HotEntry* const pe = p != kNone ? &hot[p] : nullptr;
  ColdEntry* const pc = p != kNone ? &cold[p] : nullptr;
  if (p != kNone && (pe->depth == kMaxDepth || pc->children == kMaxCount)) {
    ++errors.err_overflow;
    return Status::FailedPrecondition("parent " + parent->ToHex() +
                                      ": depth or child count at its limit");
  }
  const uint32_t i = entry_ids.Allocate(p);
  if (entry_ids.high_water() > entries_reserved) {  // a new block: room for it
    hot.Reserve(entry_ids.high_water());
    cold.Reserve(entry_ids.high_water());
    if (windowed()) win.Reserve(entry_ids.high_water());
    if (hybrid_kv()) subtree_states.Reserve(entry_ids.high_water());
    entries_reserved = entry_ids.high_water();
  }
  HotEntry& e = hot[i];
  ColdEntry& ec = cold[i];
  e.hash = hash;
  e.last_use.store(clock, std::memory_order_relaxed);
  e.parent = p;
  e.depth = p == kNone ? 1 : pe->depth + 1;
  for (int t = 0; t < kNumTiers; ++t) {
    e.kv_slot[t] = 0;
    ec.tier_children[t] = 0;
    ec.kv_pins[t] = 0;
  }
  ec.children = 0;
  ec.kv_locks = 0;
  ec.state_locks = 0;
  if (hybrid_kv()) subtree_states[i] = 0;
  if (windowed()) win[i] = WindowEntry{};
  e.state = kNone;
  e.kv_mask = 0;
  ec.flags = 0;
  table.InsertAt(insert_at, i);
  if (p != kNone) ++pc->children;
  if ((i + 1) % EntryAllocator::kBlock != 0) {
    // Where this chain's next page most likely goes (EntryAllocator): other chains may be
    // inserted meanwhile, so fetch its lines now, for writing.
    __builtin_prefetch(&hot[i + 1], 1);
    __builtin_prefetch(&cold[i + 1], 1);
  }
  *index = i;
  *added = true;
  return Status::OK();
}

// Entry i has no location, lock, pin or child.
void Core::RemoveUnlinked(uint32_t i) {
  HotEntry& e = hot[i];
  ColdEntry& ec = cold[i];
  table.Erase(e.hash, i, KeyOf());
  if (e.parent != kNone) --cold[e.parent].children;
  e.depth = 0;
  e.parent = kNone;
  ec.flags = 0;
  entry_ids.Free(i);
}

Status PrefixIndex::InsertKv(const std::optional<PageHash>& parent, const PageHash& hash) {
  Impl& m = *impl_;
  // The table slots' cache misses overlap taking the lock.
  const uint64_t mixed = PageTable::Mix(hash);
  m.table.PrefetchUnguarded(mixed);
  uint64_t parent_mixed = 0;
  if (parent.has_value()) {
    parent_mixed = PageTable::Mix(*parent);
    m.table.PrefetchUnguarded(parent_mixed);
  }
  Impl::Exclusive section(m);
  uint32_t index;
  bool added;
  return m.InsertOne(parent, Impl::kUnresolved, parent_mixed, hash, mixed, &index, &added);
}

Status PrefixIndex::InsertChain(const std::optional<PageHash>& parent,
                                std::span<const PageHash> hashes) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  std::vector<uint32_t> new_entries;
  constexpr size_t kAhead = 8;  // prefetch the table slots of the pages coming next
  for (size_t i = 0; i < std::min(hashes.size(), kAhead); ++i) {
    m.table.Prefetch(PageTable::Mix(hashes[i]));
  }
  uint32_t up = Impl::kUnresolved;  // page i-1's index, known after the first page
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (i + kAhead < hashes.size()) m.table.Prefetch(PageTable::Mix(hashes[i + kAhead]));
    const std::optional<PageHash> parent_hash =
        i == 0 ? parent : std::optional<PageHash>(hashes[i - 1]);
    bool added;
    const uint64_t parent_mixed =
        (i == 0 && parent.has_value()) ? PageTable::Mix(*parent) : uint64_t{0};
    Status s = m.InsertOne(parent_hash, up, parent_mixed, hashes[i], PageTable::Mix(hashes[i]), &up,
                           &added);
    if (!s.ok()) {
      // Undo in reverse: each new entry is a leaf with nothing attached.
      for (size_t j = new_entries.size(); j-- > 0;) m.RemoveUnlinked(new_entries[j]);
      return s.WithContext("InsertChain page " + std::to_string(i));
    }
    if (added) new_entries.push_back(up);
  }
  return Status::OK();
}

Status PrefixIndex::Remove(const PageHash& hash) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  uint32_t i;
  CACHEPAWL_RETURN_IF_ERROR(m.FindKnown(hash, &i));
  const HotEntry& e = m.hot[i];
  const ColdEntry& ec = m.cold[i];
  if (e.kv_mask != 0 || e.state != kNone || m.WindowRecord(i) != kNone) {
    ++m.errors.err_remove_busy;
    return Status::FailedPrecondition(Describe(hash) + ": still held by a tier");
  }
  if (ec.children != 0) {
    ++m.errors.err_remove_busy;
    return Status::FailedPrecondition(Describe(hash) + ": has " + std::to_string(ec.children) +
                                      " children");
  }
  if (ec.kv_locks != 0 || ec.state_locks != 0) {
    ++m.errors.err_locked;
    return Status::Busy(Describe(hash) + ": locked");
  }
  m.RemoveUnlinked(i);
  return Status::OK();
}

// ===== locations =============================================================================

Status PrefixIndex::SetLocation(const PageHash& hash, Kind kind, Tier tier, uint64_t slot) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckEnums(kind, tier));
  if (kind == Kind::kKV && !m.options.kv_payload) {
    ++m.errors.err_no_kv_payload;
    return Status::InvalidArgument("kind: kv (" + Describe(hash) +
                                   ": the layout has no attention layers, its pages hold no KV)");
  }
  CACHEPAWL_RETURN_IF_ERROR(m.RefuseWithoutWindow(hash, kind));
  uint32_t i;
  CACHEPAWL_RETURN_IF_ERROR(m.FindKnown(hash, &i));
  const int t = static_cast<int>(tier);
  HotEntry& e = m.hot[i];
  if (kind == Kind::kWindowKV) {
    const uint32_t w = m.WindowRecord(i);
    if (w != kNone && (m.windows[w].mask & Bit(t))) {
      return m.SameSlotOrConflict(hash, kind, tier, m.windows[w].slot[t], slot);
    }
    return m.SetWindow(i, t, slot);
  }
  if (kind == Kind::kKV) {
    if (e.kv_mask & Bit(t)) return m.SameSlotOrConflict(hash, kind, tier, m.KvSlot(i, t), slot);
    const Impl::Before before = m.Snapshot(i);
    const uint32_t p = e.parent;
    Impl::Before parent_before{};
    if (p != kNone) parent_before = m.Snapshot(p);
    e.kv_mask |= Bit(t);
    m.StoreKvSlot(i, t, slot);
    ++m.located[kKv][t];
    if (p != kNone) {
      ++m.cold[p].tier_children[t];
      m.After(p, parent_before);
    }
    m.After(i, before);
    return Status::OK();
  }
  if (e.state != kNone && (m.states[e.state].mask & Bit(t))) {
    return m.SameSlotOrConflict(hash, kind, tier, m.states[e.state].slot[t], slot);
  }
  const Impl::Before before = m.Snapshot(i);
  const bool attach = e.state == kNone;
  if (attach) {
    e.state = m.NewRecord(&m.states, &m.state_ids, i);
    ++m.live_states;
  }
  State& s = m.states[e.state];
  if (attach && m.hybrid_states()) m.ScoreNewState(i, s);
  s.mask |= Bit(t);
  s.slot[t] = slot;
  ++m.located[kMamba][t];
  m.After(i, before);
  if (attach) {
    m.AnchorChanged(i, +1);
    m.SubtreeStatesChanged(i, +1);
  }
  return Status::OK();
}

StatusOr<uint64_t> PrefixIndex::ClearLocation(const PageHash& hash, Kind kind, Tier tier) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckEnums(kind, tier));
  uint32_t i;
  CACHEPAWL_RETURN_IF_ERROR(m.FindKnown(hash, &i));
  const int t = static_cast<int>(tier);
  HotEntry& e = m.hot[i];
  ColdEntry& ec = m.cold[i];
  State* s = kind == Kind::kKV ? nullptr : m.Record(static_cast<int>(kind), i);
  const bool held =
      kind == Kind::kKV ? (e.kv_mask & Bit(t)) != 0 : (s != nullptr && (s->mask & Bit(t)) != 0);
  if (!held) {
    ++m.errors.err_not_located;
    return Status::NotFound(Describe(hash) + ": no " + Where(kind, tier));
  }
  const uint16_t pins = kind == Kind::kKV ? ec.kv_pins[t] : s->pins[t];
  if (pins != 0) {
    ++m.errors.err_pinned;
    return Status::Busy(Describe(hash) + ": " + Where(kind, tier) + " pinned by " +
                        std::to_string(pins) + " transfers");
  }
  const uint32_t locks = kind == Kind::kKV      ? ec.kv_locks
                         : kind == Kind::kMamba ? ec.state_locks
                                                : m.win[i].locks;
  if (locks != 0) {
    ++m.errors.err_locked;
    return Status::Busy(Describe(hash) + ": " + std::string(KindName(kind)) + " locked " +
                        std::to_string(locks) + " times");
  }
  if (kind == Kind::kWindowKV) return m.ClearWindow(i, t);
  const Impl::Before before = m.Snapshot(i);
  uint64_t slot;
  if (kind == Kind::kKV) {
    const uint32_t p = e.parent;
    Impl::Before parent_before{};
    if (p != kNone) parent_before = m.Snapshot(p);
    slot = m.KvSlot(i, t);
    m.DropKvSlot(i, t);
    e.kv_mask &= static_cast<uint8_t>(~Bit(t));
    --m.located[kKv][t];
    m.After(i, before);
    if (p != kNone) {
      --m.cold[p].tier_children[t];
      m.After(p, parent_before);
    }
    return slot;
  }
  slot = s->slot[t];
  s->mask &= static_cast<uint8_t>(~Bit(t));
  s->slot[t] = 0;
  --m.located[kMamba][t];
  const bool detach = s->mask == 0;
  if (detach) {
    // The state is gone from every tier: detach it. Its queue items become stale (identity
    // still matches the entry, but StateEvictable is false until a new state is attached, and
    // a new state's recency is never smaller than theirs).
    s->entry = kNone;
    m.state_ids.Free(e.state);
    e.state = kNone;
    --m.live_states;
  }
  m.After(i, before);
  if (detach) {
    m.AnchorChanged(i, -1);
    m.SubtreeStatesChanged(i, -1);
  }
  return slot;
}

}  // namespace cachepawl
