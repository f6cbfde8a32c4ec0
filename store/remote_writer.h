// RemoteWriter: the Store's writes to the remote tier (tiers/remote_tier.h). Entries are queued
// by the store's policy (write-through after a Save, selective at their N-th hit) or on eviction
// from the last local tier: a host victim with no disk copy stays in host memory until the
// writer has it (WriteOnEvictLocked); a disk victim whose only copy is the disk's is reserved
// (WantsDiskVictimLocked), read whole and verified before its removal (CopyDiskVictims), and
// queued with its bytes. One writer thread sends batches without the mutex, retries transient
// failures with back-off, and counts every outcome. Nothing here blocks Save, Load or Lookup on
// the cluster: a full queue drops writes, counted.
//
// Locking: the writer's state is guarded by the store's mutex (given at construction); methods
// named ...Locked require it; CopyDiskVictims and Stop take it. The writer thread takes it, and
// releases it around every cluster call and while it backs off.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "index/prefix_index.h"
#include "store/entry_key.h"
#include "tiers/disk_record_copy.h"
#include "tiers/disk_tier.h"
#include "tiers/host_arena.h"
#include "tiers/remote_tier.h"
#include "vocab/model_layout.h"
#include "vocab/store_stats.h"

namespace cachepawl {

class RemoteWriter {
 public:
  struct Options {
    uint32_t max_queued_writes = 4096;  // RemoteOptions::max_queued_writes
    bool on_evict = false;              // RemoteWritePolicy::kOnEvict
    // Disk records copied for write-on-evict wait in memory for the writer: at most this many.
    uint64_t max_copy_bytes = 256ull << 20;
    int attempts = 3;  // tries of one entry when the cluster fails transiently
    std::chrono::milliseconds first_backoff{100}, max_backoff{5000};
  };
  // Every pointer must outlive this object (Stop first). `space_changed` is called with the
  // mutex held when host entries may have become evictable (a write finished or gave up).
  RemoteWriter(RemoteTier* remote, PrefixIndex* index, HostArena* host, const ModelLayout* layout,
               std::mutex* mu, std::function<void()> space_changed, const Options& options);
  ~RemoteWriter() { Stop(std::chrono::milliseconds(0)); }
  RemoteWriter(const RemoteWriter&) = delete;
  RemoteWriter& operator=(const RemoteWriter&) = delete;

  // Queues writes of host-resident entries (the writer pins each while it reads it); entries
  // this writer wrote already are skipped; beyond max_queued_writes they are dropped, counted.
  void StartWritesLocked(const std::vector<EntryKey>& keys);
  // Write-on-evict of host victim `key` (its locations `loc`) with no disk copy: true when it
  // must stay in host memory for now (its write was queued, counted in *writes_started, or is
  // under way); false when it may go (a copy is elsewhere, this store wrote it, its write
  // failed, `useless`, the queue is full, stopped, or the policy is another).
  bool WriteOnEvictLocked(const EntryKey& key, const TierLocations& loc, bool useless,
                          size_t* writes_started);
  // Write-on-evict of a disk victim (the disk is the last local tier): true when its record
  // should be copied before its removal (no host copy, not written, not failed, not queued, the
  // queue and the copy budget have room); it is then reserved until CopyDiskVictims.
  bool WantsDiskVictimLocked(const EntryKey& key, const TierLocations& loc);
  // Reads the reserved disk victims' records from `disk` (without the mutex; before they are
  // removed) and queues them; what cannot be read is counted and released. Takes the mutex.
  void CopyDiskVictims(DiskTier& disk, const std::vector<DiskKey>& keys);
  // The entry left host memory (its failed write no longer matters) / left the index (what this
  // writer wrote of it is forgotten).
  void ForgetHostCopyLocked(const EntryKey& key) { unwritten_.erase(key); }
  void ForgetEntryLocked(const EntryKey& key) { written_.erase(key); }
  // Write-on-evict writes queued or under way (host memory they keep may free up).
  bool EvictingLocked() const { return !evicting_.empty(); }
  // The counters this writer keeps: writes_queued, writes, write_failures, writes_dropped,
  // writes_skipped, disk_copies, disk_copy_failures, and queued_now.
  void AddStatsLocked(RemoteStats* stats) const;

  // Stops the writer: what is queued still goes out for up to `drain` (a dead cluster cannot
  // hold this much longer than twice the tier's deadline), the rest is dropped, counted. Joins
  // the thread; later writes are not queued. Call without the mutex. Idempotent.
  void Stop(std::chrono::milliseconds drain);

 private:
  struct Queued {
    EntryKey key;
    int attempt = 0;
    bool evict_after = false;  // write-on-evict: the host copy waits for it
    // Write-on-evict from the disk: the record's verified bytes (the disk copy is gone).
    std::shared_ptr<const DiskRecordCopy> record;
  };
  void Loop();

  RemoteTier* const remote_;
  PrefixIndex* const index_;
  HostArena* const host_;
  const ModelLayout* const layout_;
  std::mutex* const mu_;
  const std::function<void()> space_changed_;
  const Options options_;

  std::deque<Queued> queue_;    // guarded by *mu_
  std::condition_variable cv_;  // with *mu_: the queue or stop_ changed
  // Entries this writer wrote (clean for write-on-evict; not written again), write-on-evict
  // entries whose write is queued or under way, and those whose write failed (the next
  // eviction drops them). All guarded by *mu_.
  std::unordered_set<EntryKey, EntryKeyHasher> written_, evicting_, unwritten_;
  uint64_t copy_bytes_ = 0;  // bytes of queued disk copies; guarded by *mu_
  bool stop_ = false;        // guarded by *mu_
  std::chrono::steady_clock::time_point drain_until_;  // set with stop_; guarded by *mu_
  RemoteStats counters_;                               // the write counters; guarded by *mu_
  std::thread thread_;
};

}  // namespace cachepawl
