// ReplayL1: the replay engine's L1, shared by every request in flight: a map from key (a page
// hash, or a (page hash, depth) pair for Mamba states) to a device slot of the store-owned
// device pool (Store::AllocateDeviceSlot), with an LRU per kind and pin counts.
//
// An entry is either *filling* (one request owns it and is loading or writing its content;
// nobody else sees it as a hit or touches its slot) or *ready* (its slot holds its key's
// content; any request may pin it and read it, or hand it to Store::Save, which reads it).
// Pinned entries are never evicted, and a ready entry is only rewritten by a request that took
// it over while nobody held a pin (it is filling again from then on). When a request must fill
// a key whose entry another request is filling or reading, it gets a private entry: a slot
// that is not in the map and is freed when its last pin goes (two requests of one prefix in
// flight at once load or compute it side by side, as an engine without request coalescing
// does). An entry whose content turned out wrong is taken out of the map at once (Discard)
// and its slot freed when the last pin goes.
//
// When the pool is full, Acquire evicts the least recently used unpinned entry, then asks the
// request to collect its own pending saves, then waits for other requests to release pins.
// It returns NoSpace when the request is alone and nothing can be freed (the pool cannot hold
// one chunk), and Busy when every request in flight is waiting for space (each holds what the
// others need): the request then gives up what it was about to load or compute.
//
// With one request at a time, every decision (hits, evictions, LRU order) is the one the
// single-threaded engine made before ReplayL1 existed.
//
// Thread safety: every method may be called from several threads at once. A Ref stays valid
// while its caller holds a pin on it. Errors: Status from the store's device pool calls; a
// failed FreeDeviceSlot is counted in the caller's ReplayTotals.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/store.h"
#include "tools/replay/replay_report.h"
#include "vocab/status.h"

namespace cachepawl::tools {

class ReplayL1 {
 public:
  struct Entry {
    std::string key;
    Kind kind = Kind::kKV;
    uint64_t slot = 0;
    int pins = 0;         // guarded by the L1's mutex
    bool ready = false;   // guarded by the L1's mutex
    bool mapped = false;  // in the map and the LRU (else private or discarded); guarded
  };
  using Ref = std::list<Entry>::iterator;  // `key`, `kind` and `slot` never change

  // How an acquired entry will be used.
  enum class Fill : uint8_t {
    kLoad,     // Store::Load writes it: needs a slot nobody else reads
    kCompute,  // the request writes its content; an entry others are reading is used as is
  };
  struct Acquired {
    Ref ref;
    bool must_fill = true;  // false: a ready entry shared as is (kCompute only)
  };
  // What Acquire may do when the pool is full.
  struct SpaceHooks {
    ReplayTotals* totals = nullptr;     // gets evictions and failed frees
    std::function<bool()> collect_own;  // collects one pending save; false when none is left
    bool wait_for_others = true;        // false: NoSpace at once (the caller can do with less)
  };

  explicit ReplayL1(Store* store) : store_(*store) {}
  ReplayL1(const ReplayL1&) = delete;
  ReplayL1& operator=(const ReplayL1&) = delete;

  // Every request brackets its work with these (Acquire's waits count the requests in flight).
  void BeginRequest();
  void EndRequest();

  // The ready entry of `key`, pinned; nullopt when there is none. Does not touch the LRU.
  std::optional<Ref> PinReady(const std::string& key);
  // Pins the ready entries of `keys[0..)` up to the first that is absent (or filling).
  std::vector<Ref> PinReadyPrefix(const std::vector<std::string>& keys);
  // The entry of `key` pinned and most recent, allocated (filling) when absent; see above.
  StatusOr<Acquired> Acquire(Kind kind, const std::string& key, Fill fill, const SpaceHooks& hooks);

  // Filling -> ready: the slot now holds the key's content. No-op for private entries.
  void MarkReady(Ref ref);
  void Unpin(Ref ref, ReplayTotals& totals);
  // The slot's content is wrong or was never written: out of the map, then unpinned.
  void Discard(Ref ref, ReplayTotals& totals);
  // Gives back an entry acquired but not used: Discard when filling, Unpin when ready.
  void Release(Ref ref, ReplayTotals& totals);
  // Most recent use.
  void Touch(Ref ref);
  // Touches the entries of `keys` that are present, last key first (so the first key ends up
  // the most recent).
  void TouchTailFirst(const std::vector<std::string>& keys);

  uint64_t resident(Kind kind) const;  // mapped entries of `kind`

 private:
  std::list<Entry>& Lru(Kind kind) { return lru_[static_cast<int>(kind)]; }
  void TouchLocked(Ref ref);
  void UnpinLocked(Ref ref, ReplayTotals& totals);
  void DiscardLocked(Ref ref);
  void FreeLocked(Ref ref, std::list<Entry>& from, ReplayTotals& totals);
  bool EvictOneLocked(Kind kind, ReplayTotals& totals);
  void NotifyReleaseLocked();

  Store& store_;
  mutable std::mutex mu_;
  std::condition_variable released_;  // a slot may have become free or evictable
  uint64_t release_generation_ = 0;
  int in_flight_ = 0;  // requests between BeginRequest and EndRequest
  int waiting_ = 0;    // of which waiting in Acquire
  std::unordered_map<std::string, Ref> map_;
  std::list<Entry> lru_[kNumKinds];  // mapped entries; front = most recent
  std::list<Entry> unmapped_;        // private and discarded entries still pinned
};

}  // namespace cachepawl::tools
