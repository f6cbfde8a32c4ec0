#include "store/remote_writer.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

constexpr size_t kBatchEntries = 64;
constexpr uint64_t kBatchBytes = 64ull << 20;

bool Transient(const Status& s) { return s.IsUnavailable() || s.IsTimedOut() || s.IsIOError(); }

}  // namespace

RemoteWriter::RemoteWriter(RemoteTier* remote, PrefixIndex* index, HostArena* host,
                           const ModelLayout* layout, std::mutex* mu,
                           std::function<void()> space_changed, const Options& options)
    : remote_(remote),
      index_(index),
      host_(host),
      layout_(layout),
      mu_(mu),
      space_changed_(std::move(space_changed)),
      options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

void RemoteWriter::Stop(std::chrono::milliseconds drain) {
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (!stop_) {
      stop_ = true;
      drain_until_ = std::chrono::steady_clock::now() + drain;
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RemoteWriter::StartWritesLocked(const std::vector<EntryKey>& keys) {
  if (stop_ || keys.empty()) return;
  for (const EntryKey& key : keys) {
    if (written_.count(key)) continue;  // this store wrote it already
    if (queue_.size() >= options_.max_queued_writes) {
      ++counters_.writes_dropped;
      continue;
    }
    queue_.push_back({key, 0, false, nullptr});
    ++counters_.writes_queued;
  }
  cv_.notify_one();
}

bool RemoteWriter::WriteOnEvictLocked(const EntryKey& key, const TierLocations& loc, bool useless,
                                      size_t* writes_started) {
  if (!options_.on_evict || stop_ || useless) return false;
  if (loc.Has(Tier::kDisk) || written_.count(key) || unwritten_.count(key)) {
    return false;  // clean (a copy elsewhere), or its write failed: it may go
  }
  if (evicting_.count(key)) return true;  // its write is under way: it stays meanwhile
  if (queue_.size() >= options_.max_queued_writes) {
    ++counters_.writes_dropped;
    return false;
  }
  evicting_.insert(key);
  queue_.push_back({key, 0, true, nullptr});
  ++counters_.writes_queued;
  ++*writes_started;
  cv_.notify_one();
  return true;
}

bool RemoteWriter::WantsDiskVictimLocked(const EntryKey& key, const TierLocations& loc) {
  if (!options_.on_evict || stop_) return false;
  if (loc.Has(Tier::kHost) || written_.count(key) || unwritten_.count(key) ||
      evicting_.count(key)) {
    return false;  // a copy stays here (its host eviction decides), written, failed, or queued
  }
  const uint64_t bytes = RecordSlotBytes(*layout_, key.kind);
  if (queue_.size() >= options_.max_queued_writes ||
      copy_bytes_ + bytes > options_.max_copy_bytes) {
    ++counters_.writes_dropped;
    return false;
  }
  evicting_.insert(key);
  copy_bytes_ += bytes;
  return true;
}

void RemoteWriter::CopyDiskVictims(DiskTier& disk, const std::vector<DiskKey>& keys) {
  std::vector<std::shared_ptr<const DiskRecordCopy>> copies(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto copy = CopyDiskRecord(disk, keys[i]);
    if (copy.ok()) {
      copies[i] = std::make_shared<const DiskRecordCopy>(std::move(copy).value());
    } else {
      spdlog::debug("cachepawl: copying disk victim {} for the remote tier failed: {}",
                    keys[i].ToString(), copy.status().ToString());
    }
  }
  std::lock_guard<std::mutex> lock(*mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    const EntryKey key{keys[i].hash, keys[i].kind};
    if (copies[i] == nullptr || stop_) {
      ++counters_.write_failures;
      ++counters_.disk_copy_failures;
      evicting_.erase(key);
      copy_bytes_ -= RecordSlotBytes(*layout_, key.kind);
      continue;
    }
    queue_.push_back({key, 0, true, std::move(copies[i])});
    ++counters_.writes_queued;
    ++counters_.disk_copies;
  }
  cv_.notify_one();
}

void RemoteWriter::AddStatsLocked(RemoteStats* stats) const {
  stats->writes_queued += counters_.writes_queued;
  stats->writes += counters_.writes;
  stats->write_failures += counters_.write_failures;
  stats->writes_dropped += counters_.writes_dropped;
  stats->writes_skipped += counters_.writes_skipped;
  stats->disk_copies += counters_.disk_copies;
  stats->disk_copy_failures += counters_.disk_copy_failures;
  stats->queued_now = queue_.size();
}

void RemoteWriter::Loop() {
  std::unique_lock<std::mutex> lock(*mu_);
  std::chrono::milliseconds backoff{0};
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    // Stopping: what is queued goes out until the drain deadline, the rest is dropped.
    if (stop_ && (queue_.empty() || std::chrono::steady_clock::now() >= drain_until_)) {
      counters_.writes_dropped += queue_.size();
      for (const Queued& q : queue_) {
        if (q.evict_after) evicting_.erase(q.key);
      }
      queue_.clear();
      copy_bytes_ = 0;
      space_changed_();
      return;
    }
    if (backoff.count() > 0) {  // the last batch failed for the cluster's sake
      cv_.wait_for(lock, backoff, [&] { return stop_; });
      if (stop_) continue;
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
    while (!queue_.empty() && jobs.size() < kBatchEntries && bytes < kBatchBytes) {
      Queued q = std::move(queue_.front());
      queue_.pop_front();
      if (q.record != nullptr) {
        const DiskRecordInfo& info = q.record->info();
        jobs.push_back({q.key, HostSlotId{}, info.key.depth, info.parent, q.attempt, true,
                        std::move(q.record)});
        bytes += layout_->RecordBytes(q.key.kind);
        continue;
      }
      auto e = index_->Lookup(q.key.hash);
      const TierLocations* loc = e ? &LocationsOf(*e, q.key.kind) : nullptr;
      if (loc == nullptr || !loc->Has(Tier::kHost) ||
          !index_->PinForTransfer(q.key.hash, q.key.kind, Tier::kHost).ok()) {
        ++counters_.writes_skipped;  // it left host memory before its turn
        if (q.evict_after) evicting_.erase(q.key);
        continue;
      }
      jobs.push_back({q.key, *loc->Slot(Tier::kHost),
                      uint64_t{e->depth_pages} * layout_->page_size_tokens,
                      e->parent.value_or(PageHash{}), q.attempt, q.evict_after, nullptr});
      bytes += layout_->RecordBytes(q.key.kind);
    }
    if (jobs.empty()) continue;
    lock.unlock();
    std::vector<RemotePut> puts;
    puts.reserve(jobs.size());
    for (const Job& j : jobs) {
      const uint64_t payload_bytes = layout_->RecordBytes(j.key.kind);
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
      // What the index no longer names is not remembered (the store forgets it otherwise).
      const bool indexed = !copied || index_->Lookup(key.hash).has_value();
      if (results[i].ok()) {
        ++counters_.writes;
        if (indexed) written_.insert(key);  // clean now: the next eviction may drop it
      } else if (Transient(results[i]) && job.attempt + 1 < options_.attempts) {
        transient = true;
        queue_.push_back({key, job.attempt + 1, job.evict_after, std::move(job.record)});
        continue;
      } else {
        ++counters_.write_failures;
        if (job.evict_after && indexed) unwritten_.insert(key);  // dropped unwritten
      }
      if (job.evict_after) evicting_.erase(key);
      if (copied) copy_bytes_ -= RecordSlotBytes(*layout_, key.kind);
    }
    backoff = !transient             ? std::chrono::milliseconds(0)
              : backoff.count() == 0 ? options_.first_backoff
                                     : std::min(backoff * 2, options_.max_backoff);
    space_changed_();
  }
}

}  // namespace cachepawl
