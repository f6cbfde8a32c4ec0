// TpPartials: the entries of a tensor-parallel group's store whose shares have not all been saved
// yet (docs/DESIGN.md, "Tensor-parallel entries").
//
// A group store keeps one host record per entry holding every distinct share of it (GroupLayout,
// vocab/model_layout.h): one per rank, or fewer for a kind whose ranks hold equal bytes
// (ModelLayout::TpShares; rank r holds share TpShareOf(kind, r)). A rank's Save copies its share
// into the entry's slot; the entry is published (its host location set, visible to Lookup,
// evictable, written on) only once every share has landed. Until then it is a partial entry
// here: its slot, the shares that landed, the shares whose copy is in flight, and when a rank
// last did something to it. A Save of a share that landed (or is on its way, from this rank or
// another holding the same share) is a refresh.
//
// A rank that never saves (it died, or its engine skipped the page) would keep a partial entry
// forever: Expire hands back the ones untouched for longer than the timeout with no copy in
// flight, and the store frees their slots. A partial entry is never a hit.
//
// Thread safety: none; the store calls every method with its mutex held (the Locked names).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/entry_key.h"
#include "tiers/host_memory.h"

namespace cachepawl {

class TpPartials {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint32_t kMaxRanks = 64;

  // shares[k]: the distinct shares of kind k (ModelLayout::TpShares), each in [1, kMaxRanks].
  TpPartials(const std::array<uint32_t, kNumKinds>& shares, Clock::duration timeout)
      : shares_(shares), timeout_(timeout) {}

  bool ContainsLocked(const EntryKey& key) const { return entries_.count(key) > 0; }
  // Partial entries now.
  size_t SizeLocked() const { return entries_.size(); }
  // Whether share `share` of partial entry `key` is neither there nor on its way (false for an
  // entry that is not partial).
  bool LacksLocked(const EntryKey& key, uint32_t share) const;

  // A Save of share `share` of a partial entry: its slot with the share's copy marked in flight
  // (the caller copies the share there), or nullopt when the share is there or on its way (a
  // refresh). Requires ContainsLocked(key).
  std::optional<HostSlotId> JoinLocked(const EntryKey& key, uint32_t share, Clock::time_point now);
  // A new partial entry in `slot` (allocated by the caller), share `share`'s copy in flight. A
  // kind of one share completes with that copy's EndLocked.
  void StartLocked(const EntryKey& key, HostSlotId slot, uint32_t share, Clock::time_point now);

  // Share `share`'s copy of `key` ended, landed or not (`ok`).
  struct Ended {
    bool complete = false;   // every share is there: publish `slot` (the entry left)
    bool abandoned = false;  // nothing landed and nothing is in flight: free `slot` (it left)
    HostSlotId slot = 0;
  };
  Ended EndLocked(const EntryKey& key, uint32_t share, bool ok, Clock::time_point now);

  // Entries untouched since `now - timeout` with no copy in flight: removed; the caller frees
  // their slots and prunes their chains.
  std::vector<std::pair<EntryKey, HostSlotId>> ExpireLocked(Clock::time_point now);
  // Entries with no copy in flight, the longest untouched first, until `enough` says the ones
  // taken suffice (it is called with each): removed; the caller frees their slots.
  std::vector<std::pair<EntryKey, HostSlotId>> TakeOldestIdleLocked(
      const std::function<bool(HostSlotId)>& enough);

 private:
  struct Entry {
    HostSlotId slot = 0;
    uint64_t landed = 0;     // bit s: share s is in the slot
    uint64_t in_flight = 0;  // bit s: share s's copy is under way
    Clock::time_point touched;
  };
  uint64_t AllShares(Kind kind) const {
    const uint32_t n = shares_[static_cast<int>(kind)];
    return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  }

  const std::array<uint32_t, kNumKinds> shares_;
  const Clock::duration timeout_;
  std::unordered_map<EntryKey, Entry, EntryKeyHasher> entries_;
};

}  // namespace cachepawl
