// DiskCascade: host -> disk for the Store. Entries reach the disk tier by the write policy
// (store/tier_write_policy.h): right after a Save (write-through), at their N-th hit
// (selective), or when they are about to leave host memory (write-on-evict, with hybrid
// eviction's admission: no KV that no cached state can use, no state scored below the level the
// tiers evict at). Every write is asynchronous: under the store's mutex the cascade only pins
// the host slot and records the job; its submitter thread fills the record headers and
// checksums and submits to the disk mover; the store's completion worker publishes the Disk
// location after the bytes landed (invariant 4), unpins, and wakes allocations waiting for host
// room. A batch that found the disk full is retried once after disk victims were picked through
// the index, in the eviction order (so that locked prefixes stay), and removed from the disk tier
// in one catalog batch on the submitter thread, outside the mutex.
//
// The index's Disk locations follow one rule (store/store_impl.h): set only from a write the tier
// committed (here), cleared before the tier removes the record (TakeVictimsLocked; until the
// removal ran, the key is in removing_ and no write of it starts).
//
// Locking: the cascade's state is guarded by the store's mutex (given at construction); methods
// named ...Locked require it. The submitter thread never holds it while it checksums, submits
// or removes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "index/prefix_index.h"
#include "store/entry_key.h"
#include "store/eviction_order.h"
#include "store/task_queue.h"
#include "store/tier_write_policy.h"
#include "transfer/disk_mover.h"
#include "vocab/model_layout.h"
#include "vocab/store_stats.h"

namespace cachepawl {

class DiskCascade {
 public:
  // What the cascade needs of the store.
  class Hooks {
   public:
    virtual ~Hooks() = default;
    // Runs `fn(status)` on the store's completion worker once `fence` fires (fn takes the
    // mutex itself). Called without the mutex.
    virtual void WhenDone(const Fence& fence, std::function<void(const Status&)> fn) = 0;
    // An operation started / finished (the store's Close waits for them). Any thread.
    virtual void OperationStarted() = 0;
    virtual void OperationFinished() = 0;
    // The index forgets `key`'s Disk location and prunes what no tier holds. Requires the mutex.
    virtual void ForgetDiskLocked(const EntryKey& key) = 0;
    // Remote write-on-evict of a disk victim (RemoteWriter::WantsDiskVictimLocked); requires the
    // mutex. The copies of those it wanted, made before their removal; without the mutex.
    virtual bool RemoteWantsDiskVictimLocked(const EntryKey& key, const TierLocations& loc) = 0;
    virtual void CopyDiskVictimsToRemote(const std::vector<DiskKey>& keys) = 0;
    // Host entries may have become evictable (written, unpinned). Requires the mutex.
    virtual void SpaceChangedLocked() = 0;
    // The store is closing: no retry starts. Requires the mutex.
    virtual bool ClosedLocked() const = 0;
  };

  struct Options {
    WritePolicy write_policy = WritePolicy::kWriteThrough;
    uint32_t selective_min_hits = 2;
    EvictionPolicy eviction_policy = EvictionPolicy::kHybrid;
  };

  // Every pointer must outlive this object (StopSubmitter first).
  DiskCascade(DiskMover* disk, PrefixIndex* index, const ModelLayout* layout, std::mutex* mu,
              Hooks* hooks, const Options& options);
  ~DiskCascade() { StopSubmitter(); }
  DiskCascade(const DiskCascade&) = delete;
  DiskCascade& operator=(const DiskCascade&) = delete;

  // The write policy's moments: entries a Save just published (written now under
  // write-through), an entry hit by a Load (written at its N-th hit under selective), an entry
  // the index forgot (its hit count goes). Require the mutex.
  void SavedLocked(const std::vector<EntryKey>& keys);
  void HitLocked(const EntryKey& key);
  void ForgetLocked(const EntryKey& key) { policy_->Forget(key); }

  // Whether host victim `key` (index entry `e`, its locations `loc`) is written to disk before
  // it leaves host memory: the policy writes on eviction, it has no disk copy, its earlier
  // write did not fail, no removal of it is pending, it is not `useless`, and hybrid eviction
  // admits it (refusals counted). Requires the mutex.
  bool WritesOnEvictLocked(const EntryKey& key, const EntryInfo& e, const TierLocations& loc,
                           bool useless);
  // Starts disk writes of host-resident entries: pins their host slots until the writes finish
  // and hands the batch to the submitter (never submits under the mutex). A state's windowed KV
  // goes with it (its page and the WindowPages() - 1 before it, where host holds it and the disk
  // does not) and, under hybrid eviction, the KV of its prefix held by host and not by the disk.
  // Entries on disk, being written or being removed are skipped. `evict_after`: write-on-evict
  // (they leave host memory once written). Returns how many writes started. Requires the mutex.
  size_t StartWritesLocked(const std::vector<EntryKey>& keys, bool evict_after);

  // Write-on-evict writes not finished; any write in flight (their host copies stay pinned).
  uint64_t EvictWritesInFlightLocked() const { return evict_writes_in_flight_; }
  bool WritingLocked() const { return !writing_.empty(); }
  // `key` left host memory: a failed write of it no longer matters.
  void ForgetHostCopyLocked(const EntryKey& key) { evict_unwritten_.erase(key); }
  // Adds the cascade's counters: disk evictions, write I/O errors, writes refused for lack of
  // room after their retry, write-on-evict failures, admission refusals. Requires the mutex.
  void AddStatsLocked(StoreStats* stats) const;

  // Runs what the submitter has queued to its end and joins it. Call without the mutex, after
  // the store's operations drained. Idempotent.
  void StopSubmitter() { submitter_.reset(); }

 private:
  struct Job {
    EntryKey key;
    HostSlotId slot = 0;
    bool evict_after = false;  // write-on-evict: leave host memory once written
  };
  std::vector<EntryKey> WithPrefixLocked(const std::vector<EntryKey>& keys) const;
  bool AdmitLocked(const EntryInfo& e, Kind kind);
  void Submit(std::vector<Job> jobs, std::vector<DiskWrite> writes, int attempt);  // submitter
  void Finish(std::vector<Job> jobs, DiskOp op, int attempt);  // completion worker
  std::vector<DiskKey> TakeVictimsLocked(const std::vector<Job>& jobs,
                                         std::vector<DiskKey>* to_remote);

  DiskMover* const disk_;
  PrefixIndex* const index_;
  const ModelLayout* const layout_;
  std::mutex* const mu_;
  Hooks* const hooks_;
  const Options options_;
  std::unique_ptr<TierWritePolicy> policy_;  // guarded by *mu_
  std::unique_ptr<TaskQueue> submitter_;

  std::unordered_set<EntryKey, EntryKeyHasher> writing_;  // guarded by *mu_
  // Disk victims the index forgot whose removal from the disk tier has not run yet (it runs
  // outside the mutex). No write of them starts meanwhile: the tier still holds the old record,
  // the write would find it and publish a Disk location that the pending removal then voids.
  std::unordered_set<EntryKey, EntryKeyHasher> removing_;  // guarded by *mu_
  uint64_t evict_writes_in_flight_ = 0;                    // guarded by *mu_
  // Write-on-evict victims whose disk write failed: the next eviction drops them unwritten.
  std::unordered_set<EntryKey, EntryKeyHasher> evict_unwritten_;      // guarded by *mu_
  std::array<uint64_t, kNumKinds> evictions_{};                       // guarded by *mu_
  uint64_t io_errors_ = 0, no_space_ = 0, evict_write_failures_ = 0;  // guarded by *mu_
  uint64_t admission_refused_ = 0;                                    // guarded by *mu_
};

}  // namespace cachepawl
