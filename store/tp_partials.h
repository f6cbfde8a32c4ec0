// TpPartials: the entries of a tensor-parallel group's store whose ranks have not all saved yet
// (docs/DESIGN.md, "Tensor-parallel entries").
//
// A group store keeps one host record per entry holding every distinct share of it (GroupLayout,
// vocab/model_layout.h): one per rank, or fewer for a kind whose ranks hold equal bytes
// (ModelLayout::TpShares; rank r holds share r / replicas). The entry is published (its host
// location set, visible to Lookup, evictable, written on) only once every rank has saved it and
// every share has landed, so that a page and the state of the same Save become visible together,
// as one rank's store publishes them. Until then it is a partial entry here: its slot, the ranks
// that saved it, the ranks whose copy is in flight, the shares that landed, and when a rank last
// did something to it.
//
// A rank's Save of a partial entry:
//   - it saved it already, or its copy is in flight: a refresh;
//   - another rank of its share copied it (landed or in flight): the rank counts as saved without
//     a copy (its bytes are equal; the store keeps them once) - unless it is the last rank and the
//     entry would complete without any copy in flight to publish it, when it copies again;
//   - otherwise it copies its share into the slot, at its share's place.
// A share whose only copy failed is copied again by the next Save of a rank of that share that
// has not saved (the ranks that counted on the failed copy never copy it: the entry then waits for
// that rank, or expires); until every share has landed from a copy that succeeded, the entry is
// not published.
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

  // tp_size in [1, kMaxRanks]; replicas[k]: how many consecutive ranks hold the same share of
  // kind k (tp_size / ModelLayout::TpShares(k)), a divisor of tp_size.
  TpPartials(uint32_t tp_size, const std::array<uint32_t, kNumKinds>& replicas,
             Clock::duration timeout)
      : tp_size_(tp_size), replicas_(replicas), timeout_(timeout) {}

  bool ContainsLocked(const EntryKey& key) const { return entries_.count(key) > 0; }
  // Partial entries now.
  size_t SizeLocked() const { return entries_.size(); }
  // Whether `rank` has neither saved partial entry `key` nor a copy of it in flight (false for
  // an entry that is not partial).
  bool LacksLocked(const EntryKey& key, uint32_t rank) const;

  // `rank`'s Save of a partial entry: its slot with the rank's copy marked in flight (the caller
  // copies the share there), or nullopt when the rank needs no copy (it saved already, its copy
  // is in flight, or another rank of its share copied: see above). Requires ContainsLocked(key).
  std::optional<HostSlotId> JoinLocked(const EntryKey& key, uint32_t rank, Clock::time_point now);
  // A new partial entry in `slot` (allocated by the caller), `rank`'s copy in flight.
  void StartLocked(const EntryKey& key, HostSlotId slot, uint32_t rank, Clock::time_point now);

  // `rank`'s copy of `key` ended, landed or not (`ok`).
  struct Ended {
    bool complete = false;   // every rank saved, every share landed: publish `slot` (it left)
    bool abandoned = false;  // no rank saved and nothing is in flight: free `slot` (it left)
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
    uint64_t saved = 0;      // bit r: rank r saved it (its copy landed, or its share's did)
    uint64_t in_flight = 0;  // bit r: rank r's copy is under way
    uint64_t shares = 0;     // bit s: a copy of share s landed
    Clock::time_point touched;
  };
  static uint64_t Bits(uint32_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }
  uint32_t Replicas(Kind kind) const { return replicas_[static_cast<int>(kind)]; }
  // The ranks holding the share rank `rank` holds of `kind`.
  uint64_t ShareRanks(Kind kind, uint32_t rank) const {
    const uint32_t r = Replicas(kind);
    return Bits(r) << (rank / r * r);
  }
  bool CompleteLocked(const Entry& e, Kind kind) const {
    return e.in_flight == 0 && e.saved == Bits(tp_size_) &&
           e.shares == Bits(tp_size_ / Replicas(kind));
  }

  const uint32_t tp_size_;
  const std::array<uint32_t, kNumKinds> replicas_;
  const Clock::duration timeout_;
  std::unordered_map<EntryKey, Entry, EntryKeyHasher> entries_;
};

}  // namespace cachepawl
