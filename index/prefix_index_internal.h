// PrefixIndex's internals (index/prefix_index.h), shared by its implementation files:
//   prefix_index_entries.h      the entries' records and constants (and how they are laid out)
//   prefix_index.cc             construction, Match (its walk of a query's chain)
//   chain_finder.h              ChainFinder: Match's pipeline that finds the chain's entries
//   prefix_index_mutation.cc    inserting and removing pages, setting and clearing locations
//   prefix_index_locks.cc       engine locks, transfer pins
//   prefix_index_eviction.cc    picking victims, hybrid eviction's scores and subtree counts
//   prefix_index_window.cc      windowed KV: its locations, anchors and eviction
//   prefix_index_inspect.cc     Lookup, Ancestors, DumpEntries, Stats
//   prefix_index_invariants.cc  CheckInvariants
// Nothing outside index/ includes it, except the index's unit tests (tests/index/).
//
// Windowed KV and the rule. An *anchor* is an entry whose Mamba state some tier holds
// (require_mamba layouts only). Per entry, `window_anchors` counts the anchors among the entry
// and its descendants at most W-1 levels below it, and `window_locks` the engine locks
// (state_locks) there: attaching or detaching a state, and Lock/Unlock, update the node and its
// W-1 nearest ancestors (O(W)). Windowed KV is *needed* while window_anchors > 0; needed
// windowed KV in a tier is evictable only while another tier holds it too.
//
// Hybrid eviction (IndexOptions::hybrid_eviction, require_mamba layouts). KV: per entry,
// `subtree_states` (a fourth array, allocated only then) counts the entries with a state in
// some tier in its subtree (attaching or
// detaching a state updates every ancestor: O(depth), as Lock); a KV page is *needed* while it
// is > 0, and needed KV in a tier is evictable only while another tier holds it too (as needed
// windowed KV). States: each has a GreedyDual-Size-Frequency score, inflation + min(hits + 1,
// kMaxScoredHits) * value per byte at its depth, set when attached and at each Match hit;
// `inflation` rises to the score of each state picked, so states not used for a while fall
// below new ones. The score (a non-negative double's bits) is the state's queue key instead of
// its recency.
//
// Eviction bookkeeping. Per (queue, tier) a VictimQueue holds at least one item for every
// evictable entry of that queue (see victim_queue.h for why items may be stale). The queues are
// one per kind, KV and windowed KV having two: kKv / kWindowQ for evictable KV / windowed KV
// that is not needed (every evictable KV page without hybrid eviction), kNeededKvQ /
// kNeededWindowQ for the needed ones (held in another tier too), which PickVictims takes only
// after the first is empty. A `queued` bit per entry (per state or windowed record)
// and (queue, tier) says an item is already there, so an entry that becomes evictable again is
// queued at most once per queue; an entry whose windowed KV changes between needed and not
// needed is queued in the other queue, and its item in the first is dropped as stale. Queues are
// rebuilt when they hold more than twice the evictable count (plus slack), which bounds their
// memory and amortizes to O(1) per push. Every change to something evictability depends on
// (presence, child presence, locks, pins, for windowed KV also window locks, anchors and the other
// tiers' copies) goes through Before/After helpers that keep the evictable counters exact and queue
// entries that became evictable.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "index/chunked_array.h"
#include "index/entry_allocator.h"
#include "index/index_allocator.h"
#include "index/index_types.h"
#include "index/page_table.h"
#include "index/prefix_index.h"
#include "index/prefix_index_entries.h"
#include "index/rw_lock.h"
#include "index/victim_queue.h"
#include "vocab/page_hash.h"
#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {
namespace prefix_index_internal {

// The index's state and the helpers its methods share (PrefixIndex::Impl is this).
struct Core {
  explicit Core(const IndexOptions& o) : options(o) {
    if (options.expected_pages > 0) {
      hot.Reserve(options.expected_pages);
      cold.Reserve(options.expected_pages);
      if (windowed()) win.Reserve(options.expected_pages);
      if (hybrid_kv()) subtree_states.Reserve(options.expected_pages);
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
    for (int t = 0; t < kNumLocalTiers; ++t) {
      if (loc.mask & Bit(t)) loc.slot[t] = KvSlot(i, t);
    }
    return loc;
  }
  static TierLocations RecordLocations(const State& s) {
    TierLocations loc;
    loc.mask = s.mask;
    for (int t = 0; t < kNumLocalTiers; ++t) {
      if (loc.mask & Bit(t)) loc.slot[t] = s.slot[t];
    }
    return loc;
  }
  TierLocations StateLocations(uint32_t i) const {
    return hot[i].state == kNone ? TierLocations{} : RecordLocations(states[hot[i].state]);
  }
  // ----- windowed KV and hybrid-eviction options -------------------------------------------
  bool windowed() const { return options.window_pages > 0; }
  // KV pages are classed needed / not needed (subtree_states is kept).
  bool hybrid_kv() const {
    return options.hybrid_eviction && options.require_mamba && options.kv_payload;
  }
  bool hybrid_states() const { return options.hybrid_eviction && options.require_mamba; }
  // Entry i's windowed KV record (kNone without one, always without windowed layers).
  uint32_t WindowRecord(uint32_t i) const { return windowed() ? win[i].record : kNone; }
  TierLocations WindowLocations(uint32_t i) const {
    const uint32_t w = WindowRecord(i);
    return w == kNone ? TierLocations{} : RecordLocations(windows[w]);
  }
  // The record of queue q's kind for entry i (a state or windowed KV); nullptr when none.
  const State* Record(int q, uint32_t i) const {
    if (q == kMamba) return hot[i].state == kNone ? nullptr : &states[hot[i].state];
    const uint32_t w = WindowRecord(i);
    return w == kNone ? nullptr : &windows[w];
  }
  State* Record(int q, uint32_t i) { return const_cast<State*>(std::as_const(*this).Record(q, i)); }

  // ----- evictability -----------------------------------------------------------------------
  // KV page of entry i in tier t: held there, no child held there, unlocked, unpinned; with
  // hybrid eviction also not needed by a cached state or held by another tier too.
  // `picked_children`: children of this entry already picked in the running PickVictims.
  EvictClass KvEvictability(uint32_t i, int t, uint32_t picked_children = 0) const {
    const ColdEntry& ec = cold[i];
    const uint8_t mask = hot[i].kv_mask;
    if (!(mask & Bit(t)) || ec.tier_children[t] != picked_children || ec.kv_locks != 0 ||
        ec.kv_pins[t] != 0) {
      return kNotEvictable;
    }
    if (!hybrid_kv() || subtree_states[i] == 0) return kUnneeded;
    return (mask & ~Bit(t)) != 0 ? kNeededCopied : kNotEvictable;
  }
  bool KvEvictable(uint32_t i, int t) const { return KvEvictability(i, t) != kNotEvictable; }
  bool StateEvictable(uint32_t i, int t) const {
    if (hot[i].state == kNone || cold[i].state_locks != 0) return false;
    const State& s = states[hot[i].state];
    return (s.mask & Bit(t)) && s.pins[t] == 0;
  }
  // Windowed KV of entry i in tier t: held there, no window lock or pin, and not needed or
  // held by another tier too.
  EvictClass WindowEvictability(uint32_t i, int t) const {
    if (!windowed()) return kNotEvictable;
    const WindowEntry& we = win[i];
    if (we.record == kNone || we.locks != 0) return kNotEvictable;
    const State& w = windows[we.record];
    if (!(w.mask & Bit(t)) || w.pins[t] != 0) return kNotEvictable;
    if (we.anchors == 0) return kUnneeded;
    return (w.mask & ~Bit(t)) != 0 ? kNeededCopied : kNotEvictable;
  }
  // Whether entry i is evictable in queue q's sense.
  bool EvictableIn(int q, uint32_t i, int t) const {
    if (q == kMamba) return StateEvictable(i, t);
    const bool needed = q == kNeededKvQ || q == kNeededWindowQ;
    const EvictClass c = KindOfQueue(q) == kKv ? KvEvictability(i, t) : WindowEvictability(i, t);
    return c == (needed ? kNeededCopied : kUnneeded);
  }
  struct Before {
    EvictClass kv[kNumLocalTiers];
    bool state[kNumLocalTiers];
    EvictClass window[kNumLocalTiers];
  };
  Before Snapshot(uint32_t i) const {
    Before b;
    const bool has_window = windowed();  // (WindowEvictability is kNotEvictable otherwise)
    for (int t = 0; t < kNumLocalTiers; ++t) {
      b.kv[t] = KvEvictability(i, t);
      b.state[t] = StateEvictable(i, t);
      b.window[t] = has_window ? WindowEvictability(i, t) : kNotEvictable;
    }
    return b;
  }
  // Call after changing entry i when Snapshot(i) was taken before the change.
  void After(uint32_t i, const Before& b) {
    const bool has_window = windowed();
    for (int t = 0; t < kNumLocalTiers; ++t) {
      const EvictClass kv = KvEvictability(i, t);
      if ((kv != kNotEvictable) != (b.kv[t] != kNotEvictable)) {
        evictable[kKv][t] += kv != kNotEvictable ? 1 : uint64_t(-1);
      }
      if (kv != kNotEvictable) QueueKv(QueueOf(kKv, kv == kNeededCopied), i, t, true);
      const bool st = StateEvictable(i, t);
      if (st != b.state[t]) evictable[kMamba][t] += st ? 1 : uint64_t(-1);
      if (st) QueueRecord(kMamba, i, t, /*may_rebuild=*/true);
      if (!has_window) continue;
      const EvictClass w = WindowEvictability(i, t);
      if ((w != kNotEvictable) != (b.window[t] != kNotEvictable)) {
        evictable[kWindow][t] += w != kNotEvictable ? 1 : uint64_t(-1);
      }
      if (w != kNotEvictable) {
        QueueRecord(w == kUnneeded ? kWindowQ : kNeededWindowQ, i, t, /*may_rebuild=*/true);
      }
    }
  }
  // Runs change() on entry i between a Snapshot and After.
  template <typename Fn>
  void Tracked(uint32_t i, Fn&& change) {
    const Before before = Snapshot(i);
    change(cold[i]);
    After(i, before);
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
  // KV queue q (kKv or kNeededKvQ) of entry i.
  void QueueKv(int q, uint32_t i, int t, bool may_rebuild) {
    HotEntry& e = hot[i];
    ColdEntry& ec = cold[i];
    if (ec.flags & QueuedBit(q, t)) return;
    ec.flags |= QueuedBit(q, t);
    queues[q][t].Push(ItemFor(i, e.last_use.load(std::memory_order_relaxed)));
    if (may_rebuild) MaybeRebuild(q, t);
  }
  // The order key of a record in its queue: its recency, or (hybrid eviction of states) its
  // score.
  uint64_t RecordKey(int q, const State& s) const {
    const std::atomic<uint64_t>& u = q == kMamba && hybrid_states() ? s.priority : s.last_use;
    return u.load(std::memory_order_relaxed);
  }
  // Queue q (kMamba, kWindowQ or kNeededWindowQ) of entry i's record: a state or windowed KV.
  void QueueRecord(int q, uint32_t i, int t, bool may_rebuild) {
    State& s = *Record(q, i);
    if (s.flags & QueuedBit(q, t)) return;
    s.flags |= QueuedBit(q, t);
    queues[q][t].Push(ItemFor(i, RecordKey(q, s)));
    if (may_rebuild) MaybeRebuild(q, t);
  }
  uint8_t* QueuedFlags(int q, uint32_t i) {
    if (KindOfQueue(q) == kKv) return &cold[i].flags;
    State* s = Record(q, i);
    return s == nullptr ? nullptr : &s->flags;
  }
  uint64_t LastUse(int q, uint32_t i) const {
    if (KindOfQueue(q) == kKv) return hot[i].last_use.load(std::memory_order_relaxed);
    return RecordKey(q, *Record(q, i));
  }
  // Each kind's queues are bounded by the count of all its evictable entries.
  void MaybeRebuild(int q, int t) {
    const uint64_t count = evictable[KindOfQueue(q)][t];
    if (queues[q][t].size() > 2 * count + kQueueSlack) Rebuild(q, t);
  }
  // Drops stale and duplicate items, refreshing recency: one item per evictable entry.
  void Rebuild(int qi, int t) {
    VictimQueue& q = queues[qi][t];
    const uint8_t bit = QueuedBit(qi, t);
    for (const VictimItem& item : q.items()) {
      if (!SameIdentity(item)) continue;
      if (uint8_t* f = QueuedFlags(qi, item.index)) *f &= static_cast<uint8_t>(~bit);
    }
    q.Rebuild([&](VictimItem& item) {
      if (!SameIdentity(item)) return false;
      if (!EvictableIn(qi, item.index, t)) return false;
      uint8_t* f = QueuedFlags(qi, item.index);
      if (*f & bit) return false;
      *f |= bit;
      item.last_use = LastUse(qi, item.index);
      return true;
    });
  }

  // The pick loop every kind shares: pops queue qi of tier t until *out holds max_count victims
  // or the queue is empty. Items of removed or reused entries, and duplicates of this call's
  // victims, are dropped; an entry `eligible(i)` refuses is left to its other queue; one used
  // since it was queued is queued again at its new recency. The rest are marked picked, their
  // entries appended to *picked, and `take(item)` appends the victim.
  template <typename Eligible, typename Take>
  void PopVictims(int qi, int t, size_t max_count, std::vector<Victim>* out,
                  std::vector<uint32_t>* picked, Eligible eligible, Take take) {
    VictimQueue& q = queues[qi][t];
    const uint8_t bit = QueuedBit(qi, t);
    while (out->size() < max_count && !q.empty()) {
      const VictimItem item = q.top();
      q.Pop();
      if (!SameIdentity(item)) continue;  // removed, or its index reused
      uint8_t* flags = QueuedFlags(qi, item.index);
      if (flags == nullptr) continue;  // its record is gone
      *flags &= static_cast<uint8_t>(~bit);
      if (*flags & kPickedBit) continue;  // a duplicate item of a victim of this call
      if (!eligible(item.index)) continue;
      const uint64_t last_use = LastUse(qi, item.index);
      if (last_use != item.last_use) {  // used since it was queued: queue it where it belongs
        *flags |= bit;
        q.Push(ItemFor(item.index, last_use));
        continue;
      }
      *flags |= kPickedBit;
      picked->push_back(item.index);
      take(item);
    }
  }
  // (Picking: prefix_index_eviction.cc; PickWindows: prefix_index_window.cc.)
  // KV victims of the KV queues in `queues` (in that order), appended to *out up to max_count.
  void PickKv(int t, size_t max_count, std::span<const int> queues, std::vector<Victim>* out);
  // Victims of queue q (kMamba, kWindowQ, kNeededWindowQ) appended to *out up to max_count,
  // marked picked; *picked gets their entries (the caller re-queues them with EndPick).
  void PickRecords(int q, int t, size_t max_count, std::vector<Victim>* out,
                   std::vector<uint32_t>* picked);
  void EndPick(int q, int t, const std::vector<uint32_t>& picked);
  std::vector<Victim> PickStates(int t, size_t max_count);
  std::vector<Victim> PickWindows(int t, size_t max_count, VictimClass cls);
  std::vector<Victim> Pick(Kind kind, int t, size_t max_count, VictimClass cls);

  // ----- hybrid eviction of states (prefix_index_eviction.cc) ---------------------------------
  // The score of a state at depth d with `hits` hits: inflation + min(hits + 1, kMaxScoredHits)
  // * value per byte (times kOffTrackWeight off the track), as the bits of the double.
  uint64_t StatePriority(uint32_t depth, uint32_t hits, bool off_track) const;
  // A hit of the state of entry i (Match, shared lock: `inflation` cannot change meanwhile).
  void ScoreStateHit(uint32_t i, State& s) const;
  // A state attached to entry i: hits 0, and off the track (kOffTrackBit) when its depth is not
  // a multiple of track_interval_pages (> 1) and the entry has children (not a prompt's end).
  void ScoreNewState(uint32_t i, State& s);
  // A state of entry i attached (+1) or detached (-1): subtree_states of it and its ancestors.
  void SubtreeStatesChanged(uint32_t i, int delta);
  // Bytes of one entry of kind k in any tier (IndexOptions; 0 = unknown).
  uint64_t UnitBytes(int k) const {
    const uint64_t units[kNumKinds] = {options.kv_page_bytes, options.mamba_state_bytes,
                                       options.window_page_bytes};
    return units[k];
  }

  // ----- windowed KV (prefix_index_window.cc) ------------------------------------------------
  // Runs change(win[a]) on entry i and its W-1 nearest ancestors a (those whose window range
  // covers i) between a Snapshot and After.
  template <typename Fn>
  void ForWindowRange(uint32_t i, Fn&& change) {
    for (uint32_t k = 0; k < options.window_pages && i != kNone; ++k, i = hot[i].parent) {
      Tracked(i, [&](ColdEntry&) { change(win[i]); });
    }
  }
  // A state of entry i attached (+1) or detached (-1): window_anchors of its range.
  void AnchorChanged(uint32_t i, int delta) {
    if (!options.require_mamba) return;
    ForWindowRange(i, [&](WindowEntry& we) { we.anchors += static_cast<uint32_t>(delta); });
  }
  Status RefuseWithoutWindow(const PageHash& hash, Kind kind) {
    if (kind != Kind::kWindowKV || options.window_pages != 0) return Status::OK();
    ++errors.err_no_window;
    return Status::InvalidArgument("kind: window (" + Describe(hash) +
                                   ": the layout has no sliding-window layers, index."
                                   "window_pages is 0)");
  }
  Status SetWindow(uint32_t i, int t, uint64_t slot);
  // Unlocked and unpinned (checked by the caller).
  uint64_t ClearWindow(uint32_t i, int t);

  // ----- checks shared by the methods (each counts its error) ----------------------------------
  Status CheckEnums(Kind kind, Tier tier) {
    Status s = CheckKindTier(kind, tier);
    if (!s.ok()) ++errors.err_bad_enum;
    return s;
  }
  Status CheckClass(VictimClass cls) {
    if (static_cast<uint8_t>(cls) <= static_cast<uint8_t>(VictimClass::kNeeded)) {
      return Status::OK();
    }
    ++errors.err_bad_enum;
    return Status::InvalidArgument("victim class: " + std::to_string(static_cast<int>(cls)) +
                                   " (expected 0..2)");
  }
  // The arguments of PickVictims and PickVictimsForBytes.
  Status CheckPick(Kind kind, Tier tier, VictimClass cls) {
    CACHEPAWL_RETURN_IF_ERROR(CheckEnums(kind, tier));
    return CheckClass(cls);
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

  // Match's walk (mu held shared); kWindowed when options.window_pages > 0.
  template <bool kWindowed>
  void MatchChain(std::span<const PageHash> hashes, MatchResult* out);

  // ----- mutations (mu held exclusively; prefix_index_mutation.cc) --------------------------
  // A new record (a state or windowed KV) of entry i in `slab`, held by no tier yet, its
  // recency the clock.
  uint32_t NewRecord(ChunkedArray<State, 10>* slab, IndexAllocator* ids, uint32_t entry) {
    const uint32_t r = ids->Allocate();
    slab->Reserve(uint64_t{r} + 1);
    State& s = (*slab)[r];
    s.last_use.store(clock, std::memory_order_relaxed);
    for (int u = 0; u < kNumLocalTiers; ++u) {
      s.slot[u] = 0;
      s.pins[u] = 0;
    }
    s.entry = entry;
    s.mask = 0;
    s.flags = 0;
    s.hits.store(0, std::memory_order_relaxed);
    s.priority.store(0, std::memory_order_relaxed);
    return r;
  }
  // Inserts `hash` under `parent`; `parent_index` is its index when the caller knows it (else
  // kUnresolved, and `parent_mixed` is Mix(*parent) when there is one). `mixed` is Mix(hash).
  // *index: the entry, new or already there; *added: whether it is new.
  static constexpr uint32_t kUnresolved = kNone - 1;
  Status InsertOne(const std::optional<PageHash>& parent, uint32_t parent_index,
                   uint64_t parent_mixed, const PageHash& hash, uint64_t mixed, uint32_t* index,
                   bool* added);
  void RemoveUnlinked(uint32_t i);
  Status PinOne(const PageHash& hash, int k, int t, bool pin);  // (prefix_index_locks.cc)

  EntryInfo Info(uint32_t i) const;                                   // (prefix_index_inspect.cc)
  Status CheckWindowCounts(const std::vector<uint32_t>& live) const;  // (..._invariants.cc)

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
  uint64_t clock = 0;                 // guarded by mu
  ChunkedArray<HotEntry, 16> hot;     // guarded by mu (last_use: atomic)
  ChunkedArray<ColdEntry, 16> cold;   // guarded by mu
  ChunkedArray<WindowEntry, 16> win;  // guarded by mu; only when windowed()
  // Hybrid eviction of KV: per entry, the entries with a state among it and its descendants.
  ChunkedArray<uint32_t, 16> subtree_states;           // guarded by mu; only when hybrid_kv()
  EntryAllocator entry_ids;                            // guarded by mu
  uint64_t entries_reserved = 0;                       // guarded by mu: hot, cold hold this many
  ChunkedArray<State, 10> states;                      // guarded by mu (last_use: atomic)
  IndexAllocator state_ids;                            // guarded by mu
  ChunkedArray<State, 10> windows;                     // guarded by mu (last_use: atomic)
  IndexAllocator window_ids;                           // guarded by mu
  PageTable table;                                     // guarded by mu
  std::unordered_map<uint64_t, uint64_t> spilled;      // guarded by mu: SpillKey -> slot
  VictimQueue queues[kNumQueues][kNumLocalTiers];      // guarded by mu
  uint64_t located[kNumKinds][kNumLocalTiers] = {};    // guarded by mu
  uint64_t evictable[kNumKinds][kNumLocalTiers] = {};  // guarded by mu
  uint64_t locked_entries = 0;                         // guarded by mu
  uint64_t live_states = 0;                            // guarded by mu
  uint64_t live_windows = 0;                           // guarded by mu
  // Hybrid eviction of states: the GreedyDual inflation, the largest score of a state picked
  // as a victim so far. Written under mu exclusively; read by Match under the shared lock.
  double inflation = 0;        // guarded by mu
  IndexStats errors;           // guarded by mu: only the err_* fields
  std::vector<uint32_t> path;  // guarded by mu: scratch for Lock/Unlock
  std::atomic<uint64_t> matches{0};
  std::atomic<uint64_t> match_pages{0};
};

}  // namespace prefix_index_internal

struct PrefixIndex::Impl final : prefix_index_internal::Core {
  using Core::Core;
};

}  // namespace cachepawl
