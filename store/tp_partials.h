// TpPartials: the entries of a tensor-parallel group's store whose ranks have not all saved yet
// (docs/DESIGN.md, "Tensor-parallel entries").
//
// A group store keeps one host record per entry holding every distinct share of it (GroupLayout,
// vocab/model_layout.h): one per rank, or fewer for a kind whose ranks hold equal bytes
// (ModelLayout::TpShares). A rank's Save copies its share into the entry's slot, at its share's
// place (ranks of one share write the same bytes to the same place); the entry is published (its
// host location set, visible to Lookup, evictable, written on) only once every rank's copy has
// landed, so that a page and the state of the same Save become visible together, as one rank's
// store publishes them. Until then it is a partial entry here: its slot, the ranks whose share
// landed, the ranks whose copy is in flight, and when a rank last did something to it. A rank's
// Save of a partial entry it already saved (or is saving) is a refresh.
//
// A rank that never saves (it died, or its engine skipped the page) would keep a partial entry
// forever: Expire hands back the ones untouched for longer than the timeout with no copy in
// flight, and the store frees their slots. A partial entry is never a hit.
//
// Thread safety: none; the store calls every method with its mutex held (the Locked names).
#pragma once

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

  // tp_size in [1, kMaxRanks].
  TpPartials(uint32_t tp_size, Clock::duration timeout) : tp_size_(tp_size), timeout_(timeout) {}

  bool ContainsLocked(const EntryKey& key) const { return entries_.count(key) > 0; }
  // Partial entries now.
  size_t SizeLocked() const { return entries_.size(); }
  // Whether `rank`'s share of partial entry `key` is neither there nor on its way (false for an
  // entry that is not partial).
  bool LacksLocked(const EntryKey& key, uint32_t rank) const;

  // `rank`'s Save of a partial entry: its slot with the rank's copy marked in flight (the caller
  // copies the share there), or nullopt when the rank's share is there or on its way (a
  // refresh). Requires ContainsLocked(key).
  std::optional<HostSlotId> JoinLocked(const EntryKey& key, uint32_t rank, Clock::time_point now);
  // A new partial entry in `slot` (allocated by the caller), `rank`'s copy in flight.
  void StartLocked(const EntryKey& key, HostSlotId slot, uint32_t rank, Clock::time_point now);

  // `rank`'s copy of `key` ended, landed or not (`ok`).
  struct Ended {
    bool complete = false;   // every rank's share is there: publish `slot` (the entry left)
    bool abandoned = false;  // nothing landed and nothing is in flight: free `slot` (it left)
    HostSlotId slot = 0;
  };
  Ended EndLocked(const EntryKey& key, uint32_t rank, bool ok, Clock::time_point now);

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
    uint64_t landed = 0;     // bit r: rank r's share is in the slot
    uint64_t in_flight = 0;  // bit r: rank r's copy is under way
    Clock::time_point touched;
  };
  uint64_t AllRanks() const {
    return tp_size_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << tp_size_) - 1;
  }

  const uint32_t tp_size_;
  const Clock::duration timeout_;
  std::unordered_map<EntryKey, Entry, EntryKeyHasher> entries_;
};

}  // namespace cachepawl
