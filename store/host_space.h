// HostSpace: the room of the host tier (L2) for the Store. It allocates host slots as runs (one
// operation's slots adjacent where the arena allows, so the device mover moves them as few large
// copies), evicts unlocked entries in the eviction order when the arena is full, waits for room
// while what could free some is in flight, and evicts ahead on a thread of its own to keep a
// free target, so that Save and Load rarely evict on the engine's thread.
//
// It picks host victims through the prefix index and frees those that may go. What becomes of a
// victim before it may go (written to disk or to the remote tier first, or kept because a Save
// still publishes it) is the store's decision, asked through HostSpace::Victims: HostSpace knows
// nothing of disks, remote tiers or write policies.
//
// Locking: HostSpace's state is guarded by the store's mutex (given at construction). Every
// method requires it, except the constructor, StopEvictor and the destructor; the evict-ahead
// thread takes it. AllocateLocked releases it (through `lock`) while it waits, never while it
// holds a slot of the call's.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "index/prefix_index.h"
#include "store/entry_key.h"
#include "store/eviction_order.h"
#include "store/task_queue.h"
#include "tiers/host_arena.h"

namespace cachepawl {

class HostSpace {
 public:
  // What the store does with one host victim.
  enum class Verdict {
    kDrop,          // free its host copy now (Victims::DropLocked)
    kWriteToDisk,   // keep it; write it to disk first (batched: Victims::StartEvictWritesLocked)
    kKeepForWrite,  // keep it; its write elsewhere (the remote tier) was started or is under way
    kSkip,          // keep it for now (being published), with no effect on the other victims
  };
  // The store's side of eviction. Every method is called with the store's mutex held.
  class Victims {
   public:
    virtual ~Victims() = default;
    // What becomes of victim `key`, whose index entry is `e`. *writes_started counts the writes
    // the decision itself started (remote write-on-evict).
    virtual Verdict DecideLocked(const EntryKey& key, const EntryInfo& e,
                                 size_t* writes_started) = 0;
    // Starts the disk writes of the kWriteToDisk victims of one eviction pass (they leave host
    // memory once written); returns how many started.
    virtual size_t StartEvictWritesLocked(const std::vector<EntryKey>& keys) = 0;
    // Write-on-evict disk writes not finished yet (HostSpace keeps at most kMaxEvictWrites).
    virtual uint64_t EvictWritesInFlightLocked() const = 0;
    // Frees the host copy of `key` (location and slot) and forgets what no tier holds.
    virtual void DropLocked(const EntryKey& key) = 0;
    // Whether something in flight may free or clean host entries (writes of victims, loads
    // holding host pins): an allocation that found nothing to evict waits for it.
    virtual bool SpaceMayComeLocked() const = 0;
    // Frees host slots the index does not hold (a tensor-parallel group's partial entries, no
    // hit yet) when nothing can be evicted: at least `bytes` where there are enough; returns
    // the bytes freed.
    virtual uint64_t ReclaimLocked(uint64_t bytes) = 0;
  };

  struct Options {
    EvictionPolicy policy = EvictionPolicy::kHybrid;
    // Evict ahead until this many bytes are free (0: only on demand).
    uint64_t free_target_bytes = 0;
    std::chrono::milliseconds space_wait{30000};    // StoreOptions::host_space_wait_ms
    std::chrono::milliseconds pinning_wait{60000};  // StoreOptions::host_pinning_wait_ms
  };

  // Write-on-evict writes in flight at most: enough to keep the disk's queue deep, few enough
  // that one burst of allocations does not write the whole tier.
  static constexpr uint64_t kMaxEvictWrites = 256;
  // Victims per batch of an allocation that found the tier full, and of the evict-ahead thread
  // (which releases the mutex between its batches, so that no call waits long behind it).
  static constexpr size_t kMaxEvictBatch = 256;
  static constexpr size_t kEvictAheadBatch = 64;

  // `host`, `index`, `mu` and `victims` must outlive this object (StopEvictor first).
  HostSpace(HostArena* host, PrefixIndex* index, std::mutex* mu, Victims* victims,
            const Options& options);
  ~HostSpace() { StopEvictor(); }
  HostSpace(const HostSpace&) = delete;
  HostSpace& operator=(const HostSpace&) = delete;

  // Allocates `count` host slots of `kind` as runs (HostArena::AllocateRun), appended to
  // `*slots`, evicting when the arena is full. While only chunks still being pinned could hold
  // them, waits for the pinning (at most options.pinning_wait); while nothing can be evicted at
  // once but Victims::SpaceMayComeLocked, waits for NotifyLocked (at most options.space_wait).
  // Both waits release the mutex through `lock`; `*released` (when given) is set then (the
  // caller's view of the index may be stale). Errors (the slots this call allocated are freed):
  // NoSpace naming the kind and count, and host_space_wait_ms when the wait ran out;
  // the pinning's error or TimedOut; FailedPrecondition once stopped. Afterwards, posts an
  // evict-ahead pass when the tier is below its free target.
  Status AllocateLocked(Kind kind, size_t count, std::unique_lock<std::mutex>& lock,
                        std::vector<HostSlotId>* slots, bool* released = nullptr);
  // Something may have freed, unpinned or cleaned host entries: wakes the waiting allocations.
  void NotifyLocked() { space_cv_.notify_all(); }
  // The store is closing: waits end (NoSpace / FailedPrecondition), no evict-ahead pass starts,
  // a running one stops at its next batch.
  void StopLocked();
  // Runs the evict-ahead pass posted (if any) to its end and joins its thread. Call without the
  // mutex, after StopLocked. Idempotent.
  void StopEvictor() { evictor_.reset(); }

  // Counters (require the mutex).
  uint64_t evictions(Kind kind) const { return evictions_[static_cast<int>(kind)]; }
  uint64_t evicted_ahead() const { return evicted_ahead_; }
  uint64_t no_space() const { return no_space_; }

 private:
  Status AllocateOnDemandLocked(Kind kind, size_t count, std::unique_lock<std::mutex>& lock,
                                std::vector<HostSlotId>* slots, bool* released);
  void MaybeEvictAheadLocked();
  void EvictAhead();  // on evictor_; takes the mutex
  // Evicts in the eviction order, enough victims to cover `missing_bytes` (at least one, at
  // most `max_victims`), stopping at the first stage that freed something. Returns the slots
  // freed at once; *writes counts the writes started.
  size_t EvictForBytesLocked(uint64_t missing_bytes, size_t max_victims, size_t* writes);
  // One stage: drops or starts the writes of up to `wanted` victims, picking past the ones that
  // stay (being published, waiting for a write elsewhere) until the queue is exhausted.
  size_t EvictStageLocked(const EvictionStage& stage, size_t wanted, size_t* writes_started);

  HostArena* const host_;
  PrefixIndex* const index_;
  std::mutex* const mu_;
  Victims* const victims_;
  const Options options_;
  std::unique_ptr<TaskQueue> evictor_;           // only with a free target
  std::condition_variable space_cv_;             // with *mu_: host entries may be evictable
  bool stopped_ = false;                         // guarded by *mu_
  bool evict_ahead_pending_ = false;             // a pass is posted or running; guarded by *mu_
  uint64_t evicted_ahead_ = 0;                   // guarded by *mu_
  uint64_t no_space_ = 0;                        // guarded by *mu_
  std::array<uint64_t, kNumKinds> evictions_{};  // host victims freed, per kind; *mu_
};

}  // namespace cachepawl
