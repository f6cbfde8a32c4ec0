// PrefixIndex: the store's memory of which pages and Mamba states are cached, in which tier and
// slot (docs/DESIGN.md, "The life of a prefix", invariants 2 and 3).
//
// One entry per page hash. The chain of hashes makes the entries a forest: every entry but the
// first page of a chain names its parent, and its depth is its page count from the root
// (1 for the first page). For layouts without attention layers (IndexOptions::kv_payload false)
// an entry is only a link of the chain: no tier holds KV for it, and a page counts as present
// when the index has it. Per entry the index keeps
//   - the KV page's location in each tier (Device, Host, Disk): a 64-bit slot;
//   - the Mamba state *after* this page (depth exactly depth_pages * page_size tokens): its
//     location in each tier; at most one state per entry and tier;
//   - the page's windowed KV (Kind::kWindowKV: the K/V of the sliding-window attention layers,
//     kept apart from the full-attention layers' kKV), for layouts with windowed layers
//     (IndexOptions::window_pages W > 0): its location in each tier;
//   - lock counts: Lock(node) is the engine's lock on a prefix; it locks the KV of every page
//     from the root to `node`, the Mamba state of `node` and the windowed KV of `node` and its
//     W-1 nearest ancestors (the window a reuse of the prefix reads). Hence, per entry,
//     kv_locks == sum of state_locks over the entry's subtree >= state_locks, and
//     window_locks == sum of state_locks over the entry and its descendants at most W-1 levels
//     below it;
//   - window_anchors (require_mamba layouts): the entries holding a state in some tier among
//     the entry and its descendants at most W-1 levels below it. The windowed KV of an entry
//     is *needed* while window_anchors > 0: some cached state's prefix reads it;
//   - transfer pins per kind and tier (PinForTransfer): a location being read is kept;
//   - recency: the clock value of its last use, for the KV page, the state and the windowed
//     KV.
//
// The rule (Match). A prefix of n pages is reusable when the KV of pages 0..n-1, the windowed
// KV of pages max(0, n-W)..n-1 and (require_mamba) the state after page n-1 are each held by
// some tier.
//
// Recency. A clock advances by two at every call of a mutating method (every method that is
// not const, except Match), successful or not. InsertKv stamps new entries, and SetLocation a
// newly attached Mamba state or windowed KV, with the clock; Match stamps the clock plus one on
// the pages of the KV-only prefix it found, on the state it reports (the state after page
// reusable_pages-1) and on the windowed KV it reports (MatchResult::window). So a Match is later
// than every mutation before it and earlier than every one after it, and Matches between two
// mutations are simultaneous. Nothing else changes recency.
//
// Eviction. PickVictims(tier, kind) returns, without changing anything but recency order
// bookkeeping, the entries that should leave `tier` next, least recently used first among
//   - KV: entries held by `tier` with no child held by `tier` (tier leaves), kv_locks == 0
//     and no KV pin in `tier`. Picking a leaf makes its parent a leaf for the rest of the same
//     call, so clearing the victims in the order returned never evicts a page whose child is
//     still cached in that tier;
//   - Mamba: states held by `tier`, state_locks == 0 and no state pin in `tier`; inner nodes'
//     states too (the KV stays; the node keeps no state in that tier);
//   - windowed KV: held by `tier`, window_locks == 0, no window pin in `tier`, and either not
//     needed (window_anchors == 0) or held by another tier too: windowed KV that a cached
//     state needs is never dropped while it is its only copy (it may move: the caller copies
//     it to another tier first, then it becomes evictable). Any depth (no leaf rule). All
//     evictable ones that are not needed come first, then the needed ones (copied elsewhere).
// Order (within each group for windowed KV): smaller last use first; equal last use, the
// deeper entry first; then the smaller hash (bytewise). The caller then moves or drops the
// bytes and calls ClearLocation.
//
// Hybrid eviction (IndexOptions::hybrid_eviction; only for require_mamba layouts, else the
// rules above stand): eviction decides about reusable prefixes, not loose entries.
//   - KV (with KV payload): a page is *needed* while some entry of its subtree (itself or a
//     descendant) holds a state in some tier (EntryInfo::subtree_states > 0); KV pages that no
//     cached state can use come first (VictimClass::kNotNeeded), then needed pages held by
//     another tier too (kNeeded); a needed page's only copy is never picked, as for windowed
//     KV. Within each group, and the leaf rule, as above.
//   - Mamba: smallest score first (EntryInfo::state_priority; equal scores: the deeper entry,
//     then the smaller hash), the GreedyDual-Size-Frequency score
//         inflation + min(hits + 1, 32) * value(d) / bytes(d)
//     of a state at depth d (IndexOptions::state_value_per_page), set when the state is
//     attached (hits 0) and at each Match that reports it (hits + 1); a state attached at a
//     depth engines rarely resume from (not a multiple of track_interval_pages > 1, and not a
//     prompt's end: the entry already had children) counts a quarter of it; `inflation` starts at 0
//     and becomes the score of each state PickVictims returns when that is larger. So a state
//     is kept for what a hit saves per byte it occupies, times how often it was hit, and a
//     state not hit for a while falls below newer ones. Freeing a state's prefix thus goes:
//     the state leaves (by score), then its KV, no longer needed, leaves first.
// PickVictims(tier, kind, n, cls) picks only among `cls` (VictimClass), so that a caller can
// interleave kinds: the Store frees not-needed KV and windowed KV, then states, then needed
// KV and windowed KV copied elsewhere.
//
// Errors. Every method that can fail returns a Status and leaves the index unchanged on
// failure (only the recency clock advances). The order of checks is the order listed at each
// method; the first failing check decides the code.
//
// Thread safety. One reader-writer lock. Match, Lookup, Stats, DumpEntries and CheckInvariants
// take it shared; every other method takes it exclusively. Match writes recency with relaxed
// atomic stores of the current clock value, which cannot change while any shared holder runs,
// so concurrent Matches store the same value. InsertKv prefetches its table slots before it
// takes the lock, from relaxed atomic copies of the table's address and size (PageTable::
// PrefetchUnguarded): a copy made stale by a concurrent writer only wastes the prefetch. The
// index holds no pointers into itself that a Remove could leave dangling: entries refer to each
// other by 32-bit indices and eviction bookkeeping checks an entry's identity (depth and hash)
// before using an index.
// A writer waiting for the lock goes before Matches that arrive after it (index/rw_lock.h), so a
// steady stream of Matches cannot hold off location updates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "index/index_types.h"
#include "vocab/page_hash.h"
#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {

class PrefixIndex final {
 public:
  // InvalidArgument when options.Validate() fails.
  static StatusOr<std::unique_ptr<PrefixIndex>> Create(const IndexOptions& options);

  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;
  ~PrefixIndex();

  const IndexOptions& options() const;

  // ----- lookup ---------------------------------------------------------------------------

  // Walks `hashes` (a chain from its first page: hashes[i]'s parent is hashes[i-1]) and fills
  // `out` (see MatchResult). Page i counts only if the index has it with parent hashes[i-1]
  // (no parent for i == 0). Refreshes recency of the KV-only prefix, of the reported state and
  // of the reported windowed KV. Without windowed layers it reads only the entries' hot parts.
  // Never fails. `out` is reused (its vector keeps its capacity).
  void Match(std::span<const PageHash> hashes, MatchResult* out);
  MatchResult Match(std::span<const PageHash> hashes);

  // A copy of one entry; nullopt when the index does not have it. Does not change recency.
  std::optional<EntryInfo> Lookup(const PageHash& hash) const;
  // Where `kind` of `hash` is in the local tiers (empty when nowhere); nullopt when the index
  // does not have `hash`. Lookup's locations of that kind without the rest of the entry (the
  // per-page check of Loads and Saves). Does not change recency.
  std::optional<TierLocations> Locations(const PageHash& hash, Kind kind) const;
  // The chain that leads to `hash`: its ancestors' hashes, the chain's first page first and
  // `hash`'s parent last (empty for a first page); nullopt when the index does not have `hash`.
  // Does not change recency. O(depth) under the shared lock.
  std::optional<std::vector<PageHash>> Ancestors(const PageHash& hash) const;

  // ----- inserting ------------------------------------------------------------------------

  // Adds page `hash` under `parent` (nullopt or the zero hash: the first page of a chain).
  // Idempotent: a page already there under the same parent is OK and changes nothing.
  // Errors: InvalidArgument when `hash` is zero or equals `parent`; NotFound when `parent` is
  // not in the index; InvalidArgument when `hash` is there under another parent; NoSpace when
  // the index holds max_pages; FailedPrecondition when the parent's depth is at its limit
  // (chains are at most 16,777,215 pages) or its child count is.
  Status InsertKv(const std::optional<PageHash>& parent, const PageHash& hash);
  // InsertKv of hashes[0] under `parent`, hashes[i] under hashes[i-1]: all or nothing.
  Status InsertChain(const std::optional<PageHash>& parent, std::span<const PageHash> hashes);

  // ----- locations --------------------------------------------------------------------------

  // Records that `tier` holds `kind` (the KV page, the Mamba state after this page, or the
  // page's windowed KV) of `hash` at `slot`. Setting the first Mamba (windowed KV) location
  // attaches the state (the windowed KV), stamping its recency. Setting the same slot again is
  // OK and changes nothing.
  // Errors: InvalidArgument for an out-of-range kind or tier, for Kind::kKV in an index
  // without KV payload (IndexOptions::kv_payload) and for Kind::kWindowKV in an index without
  // windowed layers (window_pages 0); NotFound when `hash` is not in the index;
  // FailedPrecondition when the tier already holds it at another slot.
  Status SetLocation(const PageHash& hash, Kind kind, Tier tier, uint64_t slot);
  // Forgets that `tier` holds `kind` of `hash`; returns the slot it was at. Clearing the last
  // tier of a state detaches it.
  // Errors: InvalidArgument (kind, tier); NotFound when `hash` is unknown or the tier does not
  // hold it; Busy when the location is pinned, or when the entry is locked (kv_locks > 0 for
  // KV, state_locks > 0 for Mamba, window_locks > 0 for windowed KV). Windowed KV that is
  // needed may be cleared (the store may after a failed read): only PickVictims keeps it.
  StatusOr<uint64_t> ClearLocation(const PageHash& hash, Kind kind, Tier tier);

  // Deletes an entry. Errors: NotFound when unknown; FailedPrecondition when any tier still
  // holds its KV, state or windowed KV, or when it has children; Busy when locked. (Without KV
  // payload the caller removes, leaf first, the entries that hold no state, no windowed KV and
  // have no children.)
  Status Remove(const PageHash& hash);

  // ----- locks and pins ---------------------------------------------------------------------

  // The engine's lock on the prefix ending at `node`: kv_locks+1 on every page root..node,
  // state_locks+1 on `node` and window_locks+1 on `node` and its window_pages-1 nearest
  // ancestors. Locked KV, states and windowed KV are never picked and cannot be cleared.
  // Errors: NotFound when unknown; FailedPrecondition when a counter would overflow.
  Status Lock(const PageHash& node);
  // Undoes one Lock(node). Errors: NotFound when unknown; FailedPrecondition when `node` has
  // no lock of its own (state_locks == 0: a double unlock).
  Status Unlock(const PageHash& node);

  // Keeps `kind` of each hash in `tier` from being picked or cleared while a transfer reads
  // or writes it (counted: n pins need n Unpins). All or nothing; a hash may repeat.
  // Errors: InvalidArgument (kind, tier; Kind::kWindowKV with window_pages 0); NotFound when a
  // hash is unknown or the tier does not hold it; FailedPrecondition when a pin count would
  // overflow (65535).
  Status PinForTransfer(std::span<const PageHash> hashes, Kind kind, Tier tier);
  Status PinForTransfer(const PageHash& hash, Kind kind, Tier tier);
  // Errors: InvalidArgument (kind, tier); NotFound when a hash is unknown; FailedPrecondition
  // when it has no pin left there. All or nothing.
  Status Unpin(std::span<const PageHash> hashes, Kind kind, Tier tier);
  Status Unpin(const PageHash& hash, Kind kind, Tier tier);

  // ----- eviction ---------------------------------------------------------------------------

  // Up to `max_count` victims for `tier` and `kind`, in eviction order (see the top of this
  // file); fewer when fewer are evictable. Changes no location. InvalidArgument for an
  // out-of-range kind or tier.
  StatusOr<std::vector<Victim>> PickVictims(Tier tier, Kind kind, size_t max_count,
                                            VictimClass cls = VictimClass::kAny);
  // As many victims as free `bytes` at kv_page_bytes / mamba_state_bytes / window_page_bytes
  // each (rounded up).
  // InvalidArgument also when that size is 0 in the options.
  StatusOr<std::vector<Victim>> PickVictimsForBytes(Tier tier, Kind kind, uint64_t bytes,
                                                    VictimClass cls = VictimClass::kAny);

  // Hybrid eviction of states: the score below which a state is among the next victims (the
  // largest score of a state picked so far; 0 before any, and without hybrid eviction).
  double StateScoreFloor() const;

  // ----- inspection -------------------------------------------------------------------------

  IndexStats Stats() const;
  // Every entry, sorted by hash. O(entries); for tests and dump tools.
  std::vector<EntryInfo> DumpEntries() const;
  // Checks every structural invariant (table and entries agree, depths and parents, child and
  // per-tier child counts, kv_locks == subtree sum of state_locks, window_locks and
  // window_anchors recomputed, pins only on held locations, records point back to their entry,
  // counters, eviction bookkeeping covers every evictable entry). Internal naming
  // the first violation. O(entries).
  Status CheckInvariants() const;

 private:
  struct Impl;
  explicit PrefixIndex(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cachepawl
