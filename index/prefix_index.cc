// PrefixIndex implementation.
//
// Layout. Entries are named by 32-bit indices and live in two ChunkedArrays (never moved): a
// 64-byte aligned hot part with everything Match reads (one cache line per page) and a 32-byte
// cold part; a PageTable maps a hash to its index. An EntryAllocator hands out the indices so
// that a chain grown page by page, even interleaved with other chains (pages inserted as
// requests decode), has consecutive indices inside aligned blocks of 16: Match then predicts
// most pages' entries from the previous page's and reads the table about once per block (see
// ChainFinder). A KV location is kept inline as a 32-bit slot;
// slots that do not fit (>= 0xFFFFFFFF) go to a side map keyed by (index, tier). Mamba states
// are few and large, so they live in their own slab with full 64-bit slots, named by the
// entry's `state` index.
//
// Eviction bookkeeping. Per (kind, tier) a VictimQueue holds at least one item for every
// evictable entry (see victim_queue.h for why items may be stale). A `queued` bit per entry
// (per state for Mamba) and tier says an item is already there, so an entry that becomes
// evictable again is queued at most once. Queues are rebuilt when they hold more than twice
// the evictable count (plus slack), which bounds their memory and amortizes to O(1) per push.
// Every change to something evictability depends on (presence, child presence, locks, pins)
// goes through Before/After helpers that keep the evictable counters exact and queue entries
// that became evictable.
#include "index/prefix_index.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <shared_mutex>  // std::shared_lock
#include <string>
#include <unordered_map>
#include <utility>

#include "index/chunked_slab.h"
#include "index/page_table.h"
#include "index/rw_lock.h"
#include "index/victim_queue.h"

namespace cachepawl {
namespace {

using index_internal::ChunkedArray;
using index_internal::EntryAllocator;
using index_internal::HashOrderKey;
using index_internal::IndexAllocator;
using index_internal::PageTable;
using index_internal::VictimItem;
using index_internal::VictimQueue;

constexpr uint32_t kNone = 0xFFFFFFFFu;
constexpr uint32_t kSpilledSlot = 0xFFFFFFFFu;  // the slot is in Impl::spilled
constexpr uint8_t kPickedBit = 1u << 3;         // scratch mark during one PickVictims
constexpr uint16_t kMaxPins = 0xFFFF;
constexpr uint32_t kMaxCount = 0xFFFFFFFFu;
constexpr uint32_t kMaxDepth = (1u << 24) - 1;  // HotEntry::depth is 24 bits
constexpr int kKv = static_cast<int>(Kind::kKV);
constexpr int kMamba = static_cast<int>(Kind::kMamba);
// Queues may hold this many items beyond twice the evictable count before a rebuild.
constexpr size_t kQueueSlack = 1024;

constexpr uint8_t Bit(int tier) { return static_cast<uint8_t>(1u << tier); }

// An entry is two parts at the same index. The hot part is what Match reads: one aligned cache
// line. The cold part is the bookkeeping of mutations and eviction.
struct alignas(64) HotEntry {
  PageHash hash;
  std::atomic<uint64_t> last_use{0};  // written by Match under the shared lock
  uint32_t parent = kNone;
  uint32_t state = kNone;  // index into Impl::states
  uint32_t kv_slot[kNumTiers] = {};
  uint32_t depth : 24 = 0;  // pages from the root, 1 for a first page; 0 marks a free entry
  uint32_t kv_mask : 8 = 0;
};
static_assert(sizeof(HotEntry) == 64, "the hot part of an entry is one cache line");

struct ColdEntry {
  uint32_t tier_children[kNumTiers] = {};  // children whose KV the tier holds
  uint32_t children = 0;
  uint32_t kv_locks = 0;
  uint32_t state_locks = 0;
  uint16_t kv_pins[kNumTiers] = {};
  uint8_t flags = 0;  // Bit(tier): queued in the KV queue of that tier; kPickedBit
};
static_assert(sizeof(ColdEntry) == 32, "an entry is 96 bytes: the 128 bytes/page budget");

struct State {
  std::atomic<uint64_t> last_use{0};  // written by Match under the shared lock
  uint64_t slot[kNumTiers] = {};
  uint32_t entry = kNone;
  uint16_t pins[kNumTiers] = {};
  uint8_t mask = 0;
  uint8_t flags = 0;  // Bit(tier): queued in the Mamba queue of that tier; kPickedBit
};

// The PageTable's view of the entries: the hash stored at an index.
struct EntryKeys {
  const ChunkedArray<HotEntry, 16>* hot;
  const PageHash& operator()(uint32_t i) const { return (*hot)[i].hash; }
};

std::string Describe(const PageHash& h) { return "page " + h.ToHex(); }

Status CheckKindTier(Kind kind, Tier tier) {
  if (!IsValidKind(static_cast<uint8_t>(kind))) {
    return Status::InvalidArgument("kind: " + std::to_string(static_cast<int>(kind)) +
                                   " (expected 0..1)");
  }
  if (!IsValidTier(static_cast<uint8_t>(tier))) {
    return Status::InvalidArgument("tier: " + std::to_string(static_cast<int>(tier)) +
                                   " (expected 0..2)");
  }
  return Status::OK();
}

std::string Where(Kind kind, Tier tier) {
  return std::string(KindName(kind)) + " in " + std::string(TierName(tier));
}

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
  uint32_t Find(size_t i) {
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

  uint64_t MixedOf(size_t j) {
    if (mixed_page_[j % kRing] != j) {
      mixed_[j % kRing] = PageTable::Mix(hashes_[j]);
      mixed_page_[j % kRing] = j;
    }
    return mixed_[j % kRing];
  }
  void PrefetchSlot(size_t j) { table_.Prefetch(MixedOf(j)); }

  // Runs stage 1 up to page i + kFar and stage 2 up to page i + kNear.
  void Advance(size_t i) {
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

struct PrefixIndex::Impl {
  explicit Impl(const IndexOptions& o) : options(o) {
    if (options.expected_pages > 0) {
      hot.Reserve(options.expected_pages);
      cold.Reserve(options.expected_pages);
      table.Reserve(options.expected_pages, KeyOf());
    }
  }

  EntryKeys KeyOf() const { return EntryKeys{&hot}; }
  uint32_t FindIndex(const PageHash& h) const { return table.Find(h, KeyOf()); }

  // ----- slots ------------------------------------------------------------------------------
  static uint64_t SpillKey(uint32_t i, int t) { return (uint64_t{i} << 2) | unsigned(t); }
  uint64_t KvSlot(uint32_t i, int t) const {
    const uint32_t s = hot[i].kv_slot[t];
    if (s != kSpilledSlot) return s;
    return spilled.find(SpillKey(i, t))->second;
  }
  void StoreKvSlot(uint32_t i, int t, uint64_t slot) {
    if (slot < kSpilledSlot) {
      hot[i].kv_slot[t] = static_cast<uint32_t>(slot);
    } else {
      hot[i].kv_slot[t] = kSpilledSlot;
      spilled[SpillKey(i, t)] = slot;
    }
  }
  void DropKvSlot(uint32_t i, int t) {
    if (hot[i].kv_slot[t] == kSpilledSlot) spilled.erase(SpillKey(i, t));
    hot[i].kv_slot[t] = 0;
  }
  TierLocations KvLocations(uint32_t i) const {
    TierLocations loc;
    loc.mask = hot[i].kv_mask;
    for (int t = 0; t < kNumTiers; ++t) {
      if (loc.mask & Bit(t)) loc.slot[t] = KvSlot(i, t);
    }
    return loc;
  }
  TierLocations StateLocations(uint32_t i) const {
    TierLocations loc;
    if (hot[i].state == kNone) return loc;
    const State& s = states[hot[i].state];
    loc.mask = s.mask;
    for (int t = 0; t < kNumTiers; ++t) {
      if (loc.mask & Bit(t)) loc.slot[t] = s.slot[t];
    }
    return loc;
  }

  // ----- evictability -----------------------------------------------------------------------
  // `picked_children`: children of this entry already picked in the running PickVictims.
  bool KvEvictable(uint32_t i, int t, uint32_t picked_children = 0) const {
    const ColdEntry& ec = cold[i];
    return (hot[i].kv_mask & Bit(t)) && ec.tier_children[t] == picked_children &&
           ec.kv_locks == 0 && ec.kv_pins[t] == 0;
  }
  bool StateEvictable(uint32_t i, int t) const {
    if (hot[i].state == kNone || cold[i].state_locks != 0) return false;
    const State& s = states[hot[i].state];
    return (s.mask & Bit(t)) && s.pins[t] == 0;
  }
  struct Before {
    bool kv[kNumTiers];
    bool state[kNumTiers];
  };
  Before Snapshot(uint32_t i) const {
    Before b;
    for (int t = 0; t < kNumTiers; ++t) {
      b.kv[t] = KvEvictable(i, t);
      b.state[t] = StateEvictable(i, t);
    }
    return b;
  }
  // Call after changing entry i when Snapshot(i) was taken before the change.
  void After(uint32_t i, const Before& b) {
    for (int t = 0; t < kNumTiers; ++t) {
      const bool kv = KvEvictable(i, t);
      if (kv != b.kv[t]) evictable[kKv][t] += kv ? 1 : uint64_t(-1);
      if (kv) QueueKv(i, t, /*may_rebuild=*/true);
      const bool st = StateEvictable(i, t);
      if (st != b.state[t]) evictable[kMamba][t] += st ? 1 : uint64_t(-1);
      if (st) QueueState(i, t, /*may_rebuild=*/true);
    }
  }

  bool SameIdentity(const VictimItem& item) const {
    if (item.index >= entry_ids.high_water()) return false;
    const HotEntry& e = hot[item.index];
    return e.depth == item.depth && HashOrderKey(e.hash) == item.order;
  }
  VictimItem ItemFor(uint32_t i, uint64_t last_use) const {
    const HotEntry& e = hot[i];
    return VictimItem{last_use, HashOrderKey(e.hash), e.depth, i};
  }
  void QueueKv(uint32_t i, int t, bool may_rebuild) {
    HotEntry& e = hot[i];
    ColdEntry& ec = cold[i];
    if (ec.flags & Bit(t)) return;
    ec.flags |= Bit(t);
    queues[kKv][t].Push(ItemFor(i, e.last_use.load(std::memory_order_relaxed)));
    if (may_rebuild) MaybeRebuild(kKv, t);
  }
  void QueueState(uint32_t i, int t, bool may_rebuild) {
    State& s = states[hot[i].state];
    if (s.flags & Bit(t)) return;
    s.flags |= Bit(t);
    queues[kMamba][t].Push(ItemFor(i, s.last_use.load(std::memory_order_relaxed)));
    if (may_rebuild) MaybeRebuild(kMamba, t);
  }
  uint8_t* QueuedFlags(int k, uint32_t i) {
    HotEntry& e = hot[i];
    ColdEntry& ec = cold[i];
    if (k == kKv) return &ec.flags;
    return e.state == kNone ? nullptr : &states[e.state].flags;
  }
  void MaybeRebuild(int k, int t) {
    if (queues[k][t].size() > 2 * evictable[k][t] + kQueueSlack) Rebuild(k, t);
  }
  // Drops stale and duplicate items, refreshing recency: one item per evictable entry.
  void Rebuild(int k, int t) {
    VictimQueue& q = queues[k][t];
    for (const VictimItem& item : q.items()) {
      if (!SameIdentity(item)) continue;
      if (uint8_t* f = QueuedFlags(k, item.index)) *f &= static_cast<uint8_t>(~Bit(t));
    }
    q.Rebuild([&](VictimItem& item) {
      if (!SameIdentity(item)) return false;
      const HotEntry& e = hot[item.index];
      if (k == kKv ? !KvEvictable(item.index, t) : !StateEvictable(item.index, t)) return false;
      uint8_t* f = QueuedFlags(k, item.index);
      if (*f & Bit(t)) return false;
      *f |= Bit(t);
      item.last_use =
          (k == kKv ? e.last_use : states[e.state].last_use).load(std::memory_order_relaxed);
      return true;
    });
  }

  std::vector<Victim> PickKv(int t, size_t max_count);
  std::vector<Victim> PickStates(int t, size_t max_count);

  // ----- checks shared by the methods (each counts its error) ----------------------------------
  Status CheckEnums(Kind kind, Tier tier) {
    Status s = CheckKindTier(kind, tier);
    if (!s.ok()) ++errors.err_bad_enum;
    return s;
  }
  // The index of `hash`, or NotFound.
  Status FindKnown(const PageHash& hash, uint32_t* i) {
    *i = FindIndex(hash);
    if (*i != kNone) return Status::OK();
    ++errors.err_unknown_hash;
    return Status::NotFound(Describe(hash) + ": not in the index");
  }
  // OK when `tier` holds `kind` of `hash` at `slot` already; else FailedPrecondition.
  Status SameSlotOrConflict(const PageHash& hash, Kind kind, Tier tier, uint64_t have,
                            uint64_t slot) {
    if (have == slot) return Status::OK();
    ++errors.err_slot_conflict;
    return Status::FailedPrecondition(Describe(hash) + ": " + Where(kind, tier) +
                                      " already at slot " + std::to_string(have) + ", not " +
                                      std::to_string(slot));
  }

  // ----- mutations (mu held exclusively) -----------------------------------------------------
  // Inserts `hash` under `parent`; `parent_index` is its index when the caller knows it (else
  // kUnresolved, and `parent_mixed` is Mix(*parent) when there is one). `mixed` is Mix(hash).
  // *index: the entry, new or already there; *added: whether it is new.
  static constexpr uint32_t kUnresolved = kNone - 1;
  Status InsertOne(const std::optional<PageHash>& parent, uint32_t parent_index,
                   uint64_t parent_mixed, const PageHash& hash, uint64_t mixed, uint32_t* index,
                   bool* added);
  void RemoveUnlinked(uint32_t i);
  Status PinOne(const PageHash& hash, int k, int t, bool pin);

  EntryInfo Info(uint32_t i) const;

  // Holds mu exclusively and advances the clock: mutations stamp `clock`, Matches until the
  // next mutation stamp clock + 1, so a Match is strictly between the mutations around it.
  class Exclusive {
   public:
    explicit Exclusive(Impl& m) : lock_(m.mu) { m.clock += 2; }

   private:
    std::unique_lock<index_internal::RwLock> lock_;
  };

  const IndexOptions options;
  mutable index_internal::RwLock mu;
  // The recency clock: advanced by every Exclusive section, read by Match.
  uint64_t clock = 0;                              // guarded by mu
  ChunkedArray<HotEntry, 16> hot;                  // guarded by mu (last_use: atomic)
  ChunkedArray<ColdEntry, 16> cold;                // guarded by mu
  EntryAllocator entry_ids;                        // guarded by mu
  uint64_t entries_reserved = 0;                   // guarded by mu: hot, cold hold this many
  ChunkedArray<State, 10> states;                  // guarded by mu (last_use: atomic)
  IndexAllocator state_ids;                        // guarded by mu
  PageTable table;                                 // guarded by mu
  std::unordered_map<uint64_t, uint64_t> spilled;  // guarded by mu: SpillKey -> slot
  VictimQueue queues[kNumKinds][kNumTiers];        // guarded by mu
  uint64_t located[kNumKinds][kNumTiers] = {};     // guarded by mu
  uint64_t evictable[kNumKinds][kNumTiers] = {};   // guarded by mu
  uint64_t locked_entries = 0;                     // guarded by mu
  uint64_t live_states = 0;                        // guarded by mu
  IndexStats errors;                               // guarded by mu: only the err_* fields
  std::vector<uint32_t> path;                      // guarded by mu: scratch for Lock/Unlock
  std::atomic<uint64_t> matches{0};
  std::atomic<uint64_t> match_pages{0};
};

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
  if (m.options.require_mamba) {
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
  }
  m.matches.fetch_add(1, std::memory_order_relaxed);
  m.match_pages.fetch_add(kv_only, std::memory_order_relaxed);
}

// ===== Lookup / inspection ===================================================================

EntryInfo PrefixIndex::Impl::Info(uint32_t i) const {
  const HotEntry& e = hot[i];
  const ColdEntry& ec = cold[i];
  EntryInfo info;
  info.hash = e.hash;
  if (e.parent != kNone) info.parent = hot[e.parent].hash;
  info.depth_pages = e.depth;
  info.kv = KvLocations(i);
  info.state = StateLocations(i);
  info.children = ec.children;
  info.kv_locks = ec.kv_locks;
  info.state_locks = ec.state_locks;
  for (int t = 0; t < kNumTiers; ++t) info.kv_pins[t] = ec.kv_pins[t];
  info.kv_last_use = e.last_use.load(std::memory_order_relaxed);
  if (e.state != kNone) {
    const State& s = states[e.state];
    for (int t = 0; t < kNumTiers; ++t) info.state_pins[t] = s.pins[t];
    info.state_last_use = s.last_use.load(std::memory_order_relaxed);
  }
  return info;
}

std::optional<EntryInfo> PrefixIndex::Lookup(const PageHash& hash) const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  const uint32_t i = m.FindIndex(hash);
  if (i == kNone) return std::nullopt;
  return m.Info(i);
}

std::optional<std::vector<PageHash>> PrefixIndex::Ancestors(const PageHash& hash) const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  const uint32_t i = m.FindIndex(hash);
  if (i == kNone) return std::nullopt;
  std::vector<PageHash> out(m.hot[i].depth - 1);
  uint32_t at = m.hot[i].parent;
  for (size_t k = out.size(); k-- > 0; at = m.hot[at].parent) out[k] = m.hot[at].hash;
  return out;
}

std::vector<EntryInfo> PrefixIndex::DumpEntries() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  std::vector<EntryInfo> out;
  out.reserve(m.table.size());
  for (uint32_t i = 0; i < m.entry_ids.high_water(); ++i) {
    if (m.hot[i].depth != 0) out.push_back(m.Info(i));
  }
  std::sort(out.begin(), out.end(),
            [](const EntryInfo& a, const EntryInfo& b) { return a.hash < b.hash; });
  return out;
}

IndexStats PrefixIndex::Stats() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  IndexStats s = m.errors;
  s.entries = m.table.size();
  s.states = m.live_states;
  for (int k = 0; k < kNumKinds; ++k) {
    const uint64_t unit = k == kKv ? m.options.kv_page_bytes : m.options.mamba_state_bytes;
    for (int t = 0; t < kNumTiers; ++t) {
      s.located[k][t] = m.located[k][t];
      s.located_bytes[k][t] = m.located[k][t] * unit;
      s.evictable[k][t] = m.evictable[k][t];
    }
  }
  s.locked_entries = m.locked_entries;
  uint64_t mem = sizeof(Impl) + m.hot.MemoryBytes() + m.cold.MemoryBytes() +
                 m.entry_ids.MemoryBytes() + m.states.MemoryBytes() + m.state_ids.MemoryBytes() +
                 m.table.MemoryBytes() + m.path.capacity() * sizeof(uint32_t);
  // An unordered_map node holds the pair and a next pointer (and the cached hash is not kept
  // for integer keys); buckets are one pointer each.
  mem += m.spilled.size() * (sizeof(std::pair<const uint64_t, uint64_t>) + sizeof(void*)) +
         m.spilled.bucket_count() * sizeof(void*);
  for (const auto& per_kind : m.queues) {
    for (const VictimQueue& q : per_kind) mem += q.MemoryBytes();
  }
  s.memory_bytes = mem;
  s.matches = m.matches.load(std::memory_order_relaxed);
  s.match_pages = m.match_pages.load(std::memory_order_relaxed);
  return s;
}

// ===== inserting / removing ==================================================================

Status PrefixIndex::Impl::InsertOne(const std::optional<PageHash>& parent, uint32_t parent_index,
                                    uint64_t parent_mixed, const PageHash& hash, uint64_t mixed,
                                    uint32_t* index, bool* added) {
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
void PrefixIndex::Impl::RemoveUnlinked(uint32_t i) {
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
  if (e.kv_mask != 0 || e.state != kNone) {
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
  uint32_t i;
  CACHEPAWL_RETURN_IF_ERROR(m.FindKnown(hash, &i));
  const int t = static_cast<int>(tier);
  HotEntry& e = m.hot[i];
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
  if (e.state == kNone) {
    const uint32_t si = m.state_ids.Allocate();
    m.states.Reserve(uint64_t{si} + 1);
    State& s = m.states[si];
    s.last_use.store(m.clock, std::memory_order_relaxed);
    for (int u = 0; u < kNumTiers; ++u) {
      s.slot[u] = 0;
      s.pins[u] = 0;
    }
    s.entry = i;
    s.mask = 0;
    s.flags = 0;
    e.state = si;
    ++m.live_states;
  }
  State& s = m.states[e.state];
  s.mask |= Bit(t);
  s.slot[t] = slot;
  ++m.located[kMamba][t];
  m.After(i, before);
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
  State* s = e.state == kNone ? nullptr : &m.states[e.state];
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
  const uint32_t locks = kind == Kind::kKV ? ec.kv_locks : ec.state_locks;
  if (locks != 0) {
    ++m.errors.err_locked;
    return Status::Busy(Describe(hash) + ": " + std::string(KindName(kind)) + " locked " +
                        std::to_string(locks) + " times");
  }
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
  if (s->mask == 0) {
    // The state is gone from every tier: detach it. Its queue items become stale (identity
    // still matches the entry, but StateEvictable is false until a new state is attached, and
    // a new state's recency is never smaller than theirs).
    s->entry = kNone;
    m.state_ids.Free(e.state);
    e.state = kNone;
    --m.live_states;
  }
  m.After(i, before);
  return slot;
}

// ===== locks and pins ========================================================================

Status PrefixIndex::Lock(const PageHash& node) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  uint32_t n;
  CACHEPAWL_RETURN_IF_ERROR(m.FindKnown(node, &n));
  m.path.clear();
  for (uint32_t i = n; i != kNone; i = m.hot[i].parent) {
    if (m.cold[i].kv_locks == kMaxCount) {
      ++m.errors.err_overflow;
      return Status::FailedPrecondition(Describe(m.hot[i].hash) + ": lock count at limit");
    }
    m.path.push_back(i);
  }
  if (m.cold[n].state_locks == kMaxCount) {
    ++m.errors.err_overflow;
    return Status::FailedPrecondition(Describe(node) + ": lock count at limit");
  }
  for (uint32_t i : m.path) {
    ColdEntry& ec = m.cold[i];
    if (ec.kv_locks != 0 && i != n) {  // already locked: evictability does not change
      ++ec.kv_locks;
      continue;
    }
    const Impl::Before before = m.Snapshot(i);
    if (ec.kv_locks++ == 0) ++m.locked_entries;
    if (i == n) ++ec.state_locks;
    m.After(i, before);
  }
  return Status::OK();
}

Status PrefixIndex::Unlock(const PageHash& node) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  uint32_t n;
  CACHEPAWL_RETURN_IF_ERROR(m.FindKnown(node, &n));
  if (m.cold[n].state_locks == 0) {
    ++m.errors.err_not_locked;
    return Status::FailedPrecondition(Describe(node) + ": not locked (double unlock?)");
  }
  // kv_locks of each ancestor >= state_locks of `node` >= 1 (invariant), so no check fails
  // past this point.
  for (uint32_t i = n; i != kNone; i = m.hot[i].parent) {
    ColdEntry& ec = m.cold[i];
    if (ec.kv_locks > 1 && i != n) {  // stays locked: evictability does not change
      --ec.kv_locks;
      continue;
    }
    const Impl::Before before = m.Snapshot(i);
    if (--ec.kv_locks == 0) --m.locked_entries;
    if (i == n) --ec.state_locks;
    m.After(i, before);
  }
  return Status::OK();
}

Status PrefixIndex::Impl::PinOne(const PageHash& hash, int k, int t, bool pin) {
  uint32_t i;
  CACHEPAWL_RETURN_IF_ERROR(FindKnown(hash, &i));
  HotEntry& e = hot[i];
  ColdEntry& ec = cold[i];
  const Kind kind = static_cast<Kind>(k);
  const Tier tier = static_cast<Tier>(t);
  uint16_t* count = nullptr;
  if (k == kKv) {
    if (e.kv_mask & Bit(t)) count = &ec.kv_pins[t];
  } else if (e.state != kNone && (states[e.state].mask & Bit(t))) {
    count = &states[e.state].pins[t];
  }
  if (pin) {
    if (count == nullptr) {
      ++errors.err_not_located;
      return Status::NotFound(Describe(hash) + ": no " + Where(kind, tier) + " to pin");
    }
    if (*count == kMaxPins) {
      ++errors.err_overflow;
      return Status::FailedPrecondition(Describe(hash) + ": " + Where(kind, tier) +
                                        " pin count at limit");
    }
  } else if (count == nullptr || *count == 0) {
    ++errors.err_not_pinned;
    return Status::FailedPrecondition(Describe(hash) + ": " + Where(kind, tier) + " is not pinned");
  }
  const Before before = Snapshot(i);
  if (pin) {
    ++*count;
  } else {
    --*count;
  }
  After(i, before);
  return Status::OK();
}

namespace {

template <typename PinFn>
Status PinAll(std::span<const PageHash> hashes, PinFn&& pin_one) {
  for (size_t i = 0; i < hashes.size(); ++i) {
    Status s = pin_one(hashes[i], /*forward=*/true);
    if (!s.ok()) {
      // The reverse of a step that succeeded cannot fail.
      for (size_t j = i; j-- > 0;) (void)pin_one(hashes[j], /*forward=*/false);
      return s;
    }
  }
  return Status::OK();
}

}  // namespace

Status PrefixIndex::PinForTransfer(std::span<const PageHash> hashes, Kind kind, Tier tier) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckEnums(kind, tier));
  const int k = static_cast<int>(kind), t = static_cast<int>(tier);
  return PinAll(hashes,
                [&](const PageHash& h, bool forward) { return m.PinOne(h, k, t, forward); });
}

Status PrefixIndex::PinForTransfer(const PageHash& hash, Kind kind, Tier tier) {
  return PinForTransfer(std::span<const PageHash>(&hash, 1), kind, tier);
}

Status PrefixIndex::Unpin(std::span<const PageHash> hashes, Kind kind, Tier tier) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckEnums(kind, tier));
  const int k = static_cast<int>(kind), t = static_cast<int>(tier);
  return PinAll(hashes,
                [&](const PageHash& h, bool forward) { return m.PinOne(h, k, t, !forward); });
}

Status PrefixIndex::Unpin(const PageHash& hash, Kind kind, Tier tier) {
  return Unpin(std::span<const PageHash>(&hash, 1), kind, tier);
}

// ===== eviction ==============================================================================

std::vector<Victim> PrefixIndex::Impl::PickKv(int t, size_t max_count) {
  std::vector<Victim> out;
  VictimQueue& q = queues[kKv][t];
  std::vector<uint32_t> picked;
  std::unordered_map<uint32_t, uint32_t> picked_children;
  while (out.size() < max_count && !q.empty()) {
    const VictimItem item = q.top();
    q.Pop();
    if (!SameIdentity(item)) continue;  // removed, or its index reused
    HotEntry& e = hot[item.index];
    ColdEntry& ec = cold[item.index];
    ec.flags &= static_cast<uint8_t>(~Bit(t));
    if (ec.flags & kPickedBit) continue;  // a duplicate item of a victim of this call
    const auto pc = picked_children.find(item.index);
    if (!KvEvictable(item.index, t, pc == picked_children.end() ? 0 : pc->second)) continue;
    const uint64_t last_use = e.last_use.load(std::memory_order_relaxed);
    if (last_use != item.last_use) {  // used since it was queued: queue it where it belongs
      ec.flags |= Bit(t);
      q.Push(ItemFor(item.index, last_use));
      continue;
    }
    ec.flags |= kPickedBit;
    picked.push_back(item.index);
    out.push_back(Victim{e.hash, Kind::kKV, static_cast<Tier>(t), KvSlot(item.index, t), e.depth});
    if (e.parent != kNone) {
      const uint32_t n = ++picked_children[e.parent];
      if (KvEvictable(e.parent, t, n)) QueueKv(e.parent, t, /*may_rebuild=*/false);
    }
  }
  // Victims stay evictable until the caller clears them.
  for (uint32_t i : picked) {
    cold[i].flags &= static_cast<uint8_t>(~kPickedBit);
    QueueKv(i, t, /*may_rebuild=*/false);
  }
  MaybeRebuild(kKv, t);
  return out;
}

std::vector<Victim> PrefixIndex::Impl::PickStates(int t, size_t max_count) {
  std::vector<Victim> out;
  VictimQueue& q = queues[kMamba][t];
  std::vector<uint32_t> picked;
  while (out.size() < max_count && !q.empty()) {
    const VictimItem item = q.top();
    q.Pop();
    if (!SameIdentity(item)) continue;
    HotEntry& e = hot[item.index];
    if (e.state == kNone) continue;
    State& s = states[e.state];
    s.flags &= static_cast<uint8_t>(~Bit(t));
    if (s.flags & kPickedBit) continue;
    if (!StateEvictable(item.index, t)) continue;
    const uint64_t last_use = s.last_use.load(std::memory_order_relaxed);
    if (last_use != item.last_use) {
      s.flags |= Bit(t);
      q.Push(ItemFor(item.index, last_use));
      continue;
    }
    s.flags |= kPickedBit;
    picked.push_back(item.index);
    out.push_back(Victim{e.hash, Kind::kMamba, static_cast<Tier>(t), s.slot[t], e.depth});
  }
  for (uint32_t i : picked) {
    states[hot[i].state].flags &= static_cast<uint8_t>(~kPickedBit);
    QueueState(i, t, /*may_rebuild=*/false);
  }
  MaybeRebuild(kMamba, t);
  return out;
}

StatusOr<std::vector<Victim>> PrefixIndex::PickVictims(Tier tier, Kind kind, size_t max_count) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckEnums(kind, tier));
  const int t = static_cast<int>(tier);
  return kind == Kind::kKV ? m.PickKv(t, max_count) : m.PickStates(t, max_count);
}

StatusOr<std::vector<Victim>> PrefixIndex::PickVictimsForBytes(Tier tier, Kind kind,
                                                               uint64_t bytes) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckEnums(kind, tier));
  const bool kv = kind == Kind::kKV;
  const uint64_t unit = kv ? m.options.kv_page_bytes : m.options.mamba_state_bytes;
  if (unit == 0) {
    ++m.errors.err_bytes_unknown;
    return Status::InvalidArgument(
        std::string(kv ? "index.kv_page_bytes" : "index.mamba_state_bytes") +
        ": 0 (PickVictimsForBytes needs the size of one entry)");
  }
  const uint64_t count = bytes / unit + (bytes % unit != 0 ? 1 : 0);
  const int t = static_cast<int>(tier);
  return kv ? m.PickKv(t, count) : m.PickStates(t, count);
}

// ===== invariants ============================================================================

Status PrefixIndex::CheckInvariants() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  auto fail = [](const std::string& what) { return Status::Internal("index invariant: " + what); };
  const uint32_t high = m.entry_ids.high_water();
  std::vector<uint32_t> children(high, 0);
  std::vector<std::array<uint32_t, kNumTiers>> tier_children(high, {0, 0, 0});
  uint64_t live = 0, states = 0, spilled = 0, locked = 0;
  uint64_t located[kNumKinds][kNumTiers] = {};
  uint64_t evictable[kNumKinds][kNumTiers] = {};
  std::vector<uint32_t> by_depth;
  for (uint32_t i = 0; i < high; ++i) {
    const HotEntry& e = m.hot[i];
    const ColdEntry& ec = m.cold[i];
    if (e.depth == 0) continue;
    ++live;
    by_depth.push_back(i);
    const std::string who = Describe(e.hash);
    if (m.FindIndex(e.hash) != i) return fail(who + ": not found at its own index");
    if (e.parent == kNone) {
      if (e.depth != 1) return fail(who + ": no parent but depth " + std::to_string(e.depth));
    } else {
      if (e.parent >= high || m.hot[e.parent].depth == 0) {
        return fail(who + ": parent index " + std::to_string(e.parent) + " is free");
      }
      if (e.depth != m.hot[e.parent].depth + 1) {
        return fail(who + ": depth " + std::to_string(e.depth) + " under a parent of depth " +
                    std::to_string(m.hot[e.parent].depth));
      }
      ++children[e.parent];
      for (int t = 0; t < kNumTiers; ++t) {
        if (e.kv_mask & Bit(t)) ++tier_children[e.parent][t];
      }
    }
    if (e.kv_mask >> kNumTiers) return fail(who + ": bad tier mask");
    if (e.kv_mask != 0 && !m.options.kv_payload) return fail(who + ": KV held without payload");
    if (ec.flags & kPickedBit) return fail(who + ": picked mark left behind");
    for (int t = 0; t < kNumTiers; ++t) {
      const bool held = e.kv_mask & Bit(t);
      const bool spill = m.spilled.count(Impl::SpillKey(i, t)) != 0;
      if (held) ++located[kKv][t];
      if (spill) ++spilled;
      if (spill != (held && e.kv_slot[t] == kSpilledSlot)) return fail(who + ": spilled slot");
      if (!held && e.kv_slot[t] != 0) return fail(who + ": slot left in a tier not held");
      if (ec.kv_pins[t] != 0 && !held) return fail(who + ": KV pinned where not held");
      if (m.KvEvictable(i, t)) ++evictable[kKv][t];
      if (m.StateEvictable(i, t)) ++evictable[kMamba][t];
    }
    if (ec.state_locks > ec.kv_locks) return fail(who + ": state locks exceed KV locks");
    if (ec.kv_locks != 0) ++locked;
    if (e.state != kNone) {
      ++states;
      if (e.state >= m.state_ids.high_water()) return fail(who + ": state index out of range");
      const State& s = m.states[e.state];
      if (s.entry != i) return fail(who + ": state points elsewhere");
      if (s.mask == 0 || (s.mask >> kNumTiers)) return fail(who + ": state with bad mask");
      for (int t = 0; t < kNumTiers; ++t) {
        if (s.mask & Bit(t)) ++located[kMamba][t];
        if (s.pins[t] != 0 && !(s.mask & Bit(t))) return fail(who + ": state pinned, not held");
      }
      if (s.flags & kPickedBit) return fail(who + ": state picked mark left behind");
    }
  }
  if (live != m.table.size()) return fail("table size differs from live entries");
  if (live != m.entry_ids.live()) return fail("entry allocator's live count");
  bool table_ok = true;
  m.table.ForEach([&](const PageTable::Slot& slot) {
    if (slot.index >= high || m.hot[slot.index].depth == 0 ||
        PageTable::Tag(PageTable::Mix(m.hot[slot.index].hash)) != slot.tag) {
      table_ok = false;
    }
  });
  if (!table_ok) return fail("table slot names a free entry or has a wrong tag");
  if (states != m.live_states) return fail("live state count");
  if (spilled != m.spilled.size()) return fail("spilled slot map has stray keys");
  if (locked != m.locked_entries) return fail("locked entry count");
  for (uint32_t i : by_depth) {
    const HotEntry& e = m.hot[i];
    const ColdEntry& ec = m.cold[i];
    if (ec.children != children[i]) return fail(Describe(e.hash) + ": child count");
    for (int t = 0; t < kNumTiers; ++t) {
      if (ec.tier_children[t] != tier_children[i][t]) {
        return fail(Describe(e.hash) + ": child count in " + std::string(TierName(Tier(t))));
      }
    }
  }
  for (int k = 0; k < kNumKinds; ++k) {
    for (int t = 0; t < kNumTiers; ++t) {
      const std::string what =
          std::string(KindName(Kind(k))) + " in " + std::string(TierName(Tier(t)));
      if (located[k][t] != m.located[k][t]) return fail("located count of " + what);
      if (evictable[k][t] != m.evictable[k][t]) return fail("evictable count of " + what);
    }
  }
  // kv_locks == sum of state_locks over the subtree: accumulate from the deepest entries up.
  std::sort(by_depth.begin(), by_depth.end(),
            [&](uint32_t a, uint32_t b) { return m.hot[a].depth > m.hot[b].depth; });
  std::vector<uint64_t> subtree(high, 0);
  for (uint32_t i : by_depth) {
    const HotEntry& e = m.hot[i];
    const ColdEntry& ec = m.cold[i];
    subtree[i] += ec.state_locks;
    if (subtree[i] != ec.kv_locks) {
      return fail(Describe(e.hash) + ": kv_locks " + std::to_string(ec.kv_locks) +
                  " but the subtree holds " + std::to_string(subtree[i]) + " locks");
    }
    if (e.parent != kNone) subtree[e.parent] += subtree[i];
  }
  // Every evictable entry has a queue item no more recent than the entry.
  for (int k = 0; k < kNumKinds; ++k) {
    for (int t = 0; t < kNumTiers; ++t) {
      std::unordered_map<uint32_t, uint64_t> oldest;
      for (const VictimItem& item : m.queues[k][t].items()) {
        if (!m.SameIdentity(item)) continue;
        auto [it, fresh] = oldest.emplace(item.index, item.last_use);
        if (!fresh) it->second = std::min(it->second, item.last_use);
      }
      for (uint32_t i : by_depth) {
        const HotEntry& e = m.hot[i];
        const bool ev = k == kKv ? m.KvEvictable(i, t) : m.StateEvictable(i, t);
        if (!ev) continue;
        const uint64_t now =
            (k == kKv ? e.last_use : m.states[e.state].last_use).load(std::memory_order_relaxed);
        auto it = oldest.find(i);
        if (it == oldest.end() || it->second > now) {
          return fail(Describe(e.hash) + ": evictable " + std::string(KindName(Kind(k))) + " in " +
                      std::string(TierName(Tier(t))) + " has no queue item");
        }
      }
    }
  }
  return Status::OK();
}

}  // namespace cachepawl
