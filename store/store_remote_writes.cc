// StoreImpl and the remote tier, the writes (see store_impl.h): entries go to the remote tier
// by policy (RemoteWritePolicy): write-through after a Save, selective at their N-th hit, or
// on eviction from the last local tier: a host victim with no disk copy stays in host memory
// until the writer has it; a disk victim whose only copy is the disk's is read whole (and
// verified) by the disk submitter before its removal, and queued with its bytes. One writer
// thread sends batches outside mu_, retries transient failures with back-off, and counts every
// outcome in StoreStats::remote. Nothing here blocks Save, Load or Lookup on the cluster.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "store/store_impl.h"

namespace cachepawl {
namespace {

constexpr size_t kRemoteBatchEntries = 64;
constexpr uint64_t kRemoteBatchBytes = 64ull << 20;
constexpr int kRemoteWriteAttempts = 3;
constexpr auto kRemoteFirstBackoff = std::chrono::milliseconds(100);
constexpr auto kRemoteMaxBackoff = std::chrono::milliseconds(5000);
// Disk records copied for write-on-evict wait in memory for the writer: at most this many bytes.
constexpr uint64_t kMaxRemoteCopyBytes = 256ull << 20;

bool Transient(const Status& s) { return s.IsUnavailable() || s.IsTimedOut() || s.IsIOError(); }

}  // namespace

void StoreImpl::StartRemoteWritesLocked(const std::vector<EntryKey>& keys) {
  if (!remote_writer_.joinable() || remote_stop_) return;
  if (keys.empty()) return;
  for (const EntryKey& key : keys) {
    if (remote_written_.count(key)) continue;  // this store wrote it already
    if (remote_queue_.size() >= options_.remote.max_queued_writes) {
      ++remote_counters_.writes_dropped;
      continue;
    }
    remote_queue_.push_back({key, 0, false});
    ++remote_counters_.writes_queued;
  }
  remote_cv_.notify_one();
}

bool StoreImpl::RemoteWriteOnEvictLocked(const EntryKey& key, const TierLocations& loc,
                                         bool useless, size_t* writes_started) {
  if (!remote_policy_ || !remote_policy_->OnEvict() || remote_stop_ || useless) return false;
  if (loc.Has(Tier::kDisk) || remote_written_.count(key) || remote_unwritten_.count(key)) {
    return false;  // clean (a copy elsewhere), or its write failed: it may go
  }
  if (remote_evicting_.count(key)) return true;  // its write is under way: it stays meanwhile
  if (remote_queue_.size() >= options_.remote.max_queued_writes) {
    ++remote_counters_.writes_dropped;
    return false;
  }
  remote_evicting_.insert(key);
  remote_queue_.push_back({key, 0, true});
  ++remote_counters_.writes_queued;
  ++*writes_started;
  remote_cv_.notify_one();
  return true;
}

bool StoreImpl::RemoteWantsDiskVictimLocked(const EntryKey& key, const TierLocations& loc) {
  if (!remote_policy_ || !remote_policy_->OnEvict() || remote_stop_) return false;
  if (loc.Has(Tier::kHost) || remote_written_.count(key) || remote_unwritten_.count(key) ||
      remote_evicting_.count(key)) {
    return false;  // a copy stays here (its host eviction decides), written, failed, or queued
  }
  const uint64_t bytes = RecordSlotBytes(layout_, key.kind);
  if (remote_queue_.size() >= options_.remote.max_queued_writes ||
      remote_copy_bytes_ + bytes > kMaxRemoteCopyBytes) {
    ++remote_counters_.writes_dropped;
    return false;
  }
  remote_evicting_.insert(key);
  remote_copy_bytes_ += bytes;
  return true;
}

void StoreImpl::CopyDiskVictimsToRemote(const std::vector<DiskKey>& keys) {
  std::vector<std::shared_ptr<const DiskRecordCopy>> copies(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto copy = CopyDiskRecord(disk_->tier(), keys[i]);
    if (copy.ok()) {
      copies[i] = std::make_shared<const DiskRecordCopy>(std::move(copy).value());
    } else {
      spdlog::debug("cachepawl: copying disk victim {} for the remote tier failed: {}",
                    keys[i].ToString(), copy.status().ToString());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    const EntryKey key{keys[i].hash, keys[i].kind};
    if (copies[i] == nullptr || remote_stop_) {
      ++remote_counters_.write_failures;
      ++remote_counters_.disk_copy_failures;
      remote_evicting_.erase(key);
      remote_copy_bytes_ -= RecordSlotBytes(layout_, key.kind);
      continue;
    }
    remote_queue_.push_back({key, 0, true, std::move(copies[i])});
    ++remote_counters_.writes_queued;
    ++remote_counters_.disk_copies;
  }
  remote_cv_.notify_one();
}

void StoreImpl::RemoteWriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::chrono::milliseconds backoff{0};
  for (;;) {
    remote_cv_.wait(lock, [&] { return remote_stop_ || !remote_queue_.empty(); });
    // Closing: what is queued goes out until the drain deadline, the rest is dropped.
    if (remote_stop_ && (remote_queue_.empty() || SteadyClock::now() >= remote_drain_until_)) {
      remote_counters_.writes_dropped += remote_queue_.size();
      remote_queue_.clear();
      remote_copy_bytes_ = 0;
      return;
    }
    if (backoff.count() > 0) {  // the last batch failed for the cluster's sake
      remote_cv_.wait_for(lock, backoff, [&] { return remote_stop_; });
      if (remote_stop_) continue;
    }
    // A batch of entries still in host memory, pinned there while their bytes are read, and
    // of disk victims' copies.
    struct Job {
      EntryKey key;
      HostSlotId slot;
      uint64_t depth_tokens;
      PageHash parent;
      int attempt;
      bool evict_after;
      std::shared_ptr<const DiskRecordCopy> record;
    };
    std::vector<Job> jobs;
    uint64_t bytes = 0;
    while (!remote_queue_.empty() && jobs.size() < kRemoteBatchEntries &&
           bytes < kRemoteBatchBytes) {
      QueuedRemoteWrite q = std::move(remote_queue_.front());
      remote_queue_.pop_front();
      if (q.record != nullptr) {
        const DiskRecordInfo& info = q.record->info();
        jobs.push_back({q.key, HostSlotId{}, info.key.depth, info.parent, q.attempt, true,
                        std::move(q.record)});
        bytes += layout_.RecordBytes(q.key.kind);
        continue;
      }
      auto e = index_->Lookup(q.key.hash);
      const TierLocations* loc = e ? &LocationsOf(*e, q.key.kind) : nullptr;
      if (loc == nullptr || !loc->Has(Tier::kHost) ||
          !index_->PinForTransfer(q.key.hash, q.key.kind, Tier::kHost).ok()) {
        ++remote_counters_.writes_skipped;  // it left host memory before its turn
        if (q.evict_after) remote_evicting_.erase(q.key);
        continue;
      }
      jobs.push_back({q.key, *loc->Slot(Tier::kHost),
                      uint64_t{e->depth_pages} * layout_.page_size_tokens,
                      e->parent.value_or(PageHash{}), q.attempt, q.evict_after, nullptr});
      bytes += layout_.RecordBytes(q.key.kind);
    }
    if (jobs.empty()) continue;
    lock.unlock();
    std::vector<RemotePut> puts;
    puts.reserve(jobs.size());
    for (const Job& j : jobs) {
      const uint64_t payload_bytes = layout_.RecordBytes(j.key.kind);
      puts.push_back({DiskKey{j.key.kind, j.key.hash, j.depth_tokens}, j.parent,
                      j.record != nullptr
                          ? j.record->payload(payload_bytes)
                          : std::span<const std::byte>(host_->SlotPayload(j.slot), payload_bytes)});
    }
    const std::vector<Status> results = remote_->Put(puts);
    lock.lock();
    bool transient = false;
    for (size_t i = 0; i < jobs.size(); ++i) {
      Job& job = jobs[i];
      const EntryKey& key = job.key;
      const bool copied = job.record != nullptr;
      if (!copied) (void)index_->Unpin(key.hash, key.kind, Tier::kHost);
      // What the index no longer names is not remembered (PruneLocked forgets it otherwise).
      const bool indexed = !copied || index_->Lookup(key.hash).has_value();
      if (results[i].ok()) {
        ++remote_counters_.writes;
        if (indexed) remote_written_.insert(key);  // clean now: the next eviction may drop it
      } else if (Transient(results[i]) && job.attempt + 1 < kRemoteWriteAttempts) {
        transient = true;
        remote_queue_.push_back({key, job.attempt + 1, job.evict_after, std::move(job.record)});
        continue;
      } else {
        ++remote_counters_.write_failures;
        if (job.evict_after && indexed) remote_unwritten_.insert(key);  // dropped unwritten
      }
      if (job.evict_after) remote_evicting_.erase(key);
      if (copied) remote_copy_bytes_ -= RecordSlotBytes(layout_, key.kind);
    }
    backoff = !transient             ? std::chrono::milliseconds(0)
              : backoff.count() == 0 ? kRemoteFirstBackoff
                                     : std::min(backoff * 2, kRemoteMaxBackoff);
    host_space_->NotifyLocked();
  }
}

}  // namespace cachepawl
