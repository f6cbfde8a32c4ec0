// PrefixIndex: mutations of the tree and its locations: inserting pages (InsertKv, InsertChain),
// removing them, and setting and clearing where a tier holds an entry's KV, Mamba state or
// windowed KV (see index/prefix_index_internal.h for the layout).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "index/prefix_index.h"
#include "index/prefix_index_internal.h"

namespace cachepawl {

using namespace prefix_index_internal;  // NOLINT(google-build-using-namespace): its internals

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
  for (int t = 0; t < kNumLocalTiers; ++t) {
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
