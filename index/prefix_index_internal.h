// PrefixIndex's internals (index/prefix_index.h), shared by its implementation files:
//   prefix_index.cc          construction, Match, inserting and removing, locations
//   prefix_index_locks.cc    locks, transfer pins, eviction
//   prefix_index_inspect.cc  Lookup, Ancestors, DumpEntries, Stats, CheckInvariants
// Nothing outside index/ includes it.
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
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "index/chunked_slab.h"
#include "index/index_types.h"
#include "index/page_hash.h"
#include "index/page_table.h"
#include "index/prefix_index.h"
#include "index/rw_lock.h"
#include "index/victim_queue.h"
#include "store/status.h"
#include "store/types.h"

namespace cachepawl {
namespace prefix_index_internal {

using index_internal::ChunkedArray;
using index_internal::EntryAllocator;
using index_internal::HashOrderKey;
using index_internal::IndexAllocator;
using index_internal::PageTable;
using index_internal::VictimItem;
using index_internal::VictimQueue;

inline constexpr uint32_t kNone = 0xFFFFFFFFu;
inline constexpr uint32_t kSpilledSlot = 0xFFFFFFFFu;  // the slot is in Impl::spilled
inline constexpr uint8_t kPickedBit = 1u << 3;         // scratch mark during one PickVictims
inline constexpr uint16_t kMaxPins = 0xFFFF;
inline constexpr uint32_t kMaxCount = 0xFFFFFFFFu;
inline constexpr uint32_t kMaxDepth = (1u << 24) - 1;  // HotEntry::depth is 24 bits
inline constexpr int kKv = static_cast<int>(Kind::kKV);
inline constexpr int kMamba = static_cast<int>(Kind::kMamba);
// Queues may hold this many items beyond twice the evictable count before a rebuild.
inline constexpr size_t kQueueSlack = 1024;

inline constexpr uint8_t Bit(int tier) { return static_cast<uint8_t>(1u << tier); }

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

inline std::string Describe(const PageHash& h) { return "page " + h.ToHex(); }

inline Status CheckKindTier(Kind kind, Tier tier) {
  if (!IsValidKind(static_cast<uint8_t>(kind))) {
    return Status::InvalidArgument("kind: " + std::to_string(static_cast<int>(kind)) +
                                   " (expected 0..1)");
  }
  if (!IsValidTier(static_cast<uint8_t>(tier))) {
    return Status::InvalidArgument("tier: " + std::to_string(static_cast<int>(tier)) +
                                   " (expected 0..1)");
  }
  return Status::OK();
}

inline std::string Where(Kind kind, Tier tier) {
  return std::string(KindName(kind)) + " in " + std::string(TierName(tier));
}

// The index's state and the helpers its methods share (PrefixIndex::Impl is this).
struct Core {
  explicit Core(const IndexOptions& o) : options(o) {
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
    explicit Exclusive(Core& m) : lock_(m.mu) { m.clock += 2; }

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

}  // namespace prefix_index_internal

struct PrefixIndex::Impl final : prefix_index_internal::Core {
  using Core::Core;
};

}  // namespace cachepawl
