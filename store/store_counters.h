// StoreCounters: what the Store counts of its own calls, for StoreStats. The other parts count
// their own (HostSpace: host evictions, evicted ahead, host no-space; DiskCascade: disk
// evictions and the writes' errors; RemoteWriter: the remote writes; the tiers and movers their
// I/O); StoreImpl::Stats adds them up.
//
// Thread safety: the counters of calls that hold the store's mutex are guarded by it (methods
// named ...Locked require it); Lookup's counters are atomic (Lookup takes no store lock) and the
// latency histograms are wait-free: those methods may be called from any thread, no lock.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "store/latency_histogram.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/store_stats.h"
#include "vocab/types.h"

namespace cachepawl {

class StoreCounters {
 public:
  // ---- Any thread, no lock. ----
  // One Lookup of `pages` pages that found `reusable` reusable ones and `kv_only` more with KV
  // but no state.
  void CountLookup(uint64_t pages, uint64_t reusable, uint64_t kv_only);
  // Reusable pages a Lookup found past the local match, in the remote tier.
  void CountRemoteLookupPages(uint64_t pages) {
    remote_lookup_pages_.fetch_add(pages, std::memory_order_relaxed);
  }
  LatencyHistogram& lookup_latency() { return lookup_latency_; }
  LatencyHistogram& load_latency() { return load_latency_; }
  LatencyHistogram& save_latency() { return save_latency_; }

  // ---- Require the store's mutex. ----
  void CountLoadLocked() { ++loads_; }
  void CountPrefetchLocked() { ++prefetches_; }
  void CountSaveLocked() { ++saves_; }
  void CountRefreshedLocked() { ++refreshed_; }
  void CountPartialsDroppedLocked(uint64_t n) { partials_dropped_ += n; }
  void CountSavedLocked(Kind kind) { ++saved_[static_cast<int>(kind)]; }
  void CountFailedOperationLocked() { ++failed_; }
  // One entry a Load served from `tier` (device, host or disk).
  void CountLoadedLocked(Tier tier, Kind kind);
  // A read from disk or the remote tier that failed with `s`: Corruption counts as a checksum
  // failure, IOError as an I/O error, anything else as neither.
  void CountReadErrorLocked(const Status& s);
  // One entry fetched from the remote tier for a Load or a Prefetch: verified, or not gotten.
  void CountRemoteLoadLocked(bool ok) { ++(ok ? remote_loaded_ : remote_load_failures_); }
  // What the store opened with (called by Open before any other thread sees the store).
  void SetOpenedWith(uint64_t disk_records, uint64_t unreachable_reclaimed);

  // Fills StoreStats' lookup, load, save, failure and open counters and the latencies; loaded
  // bytes from `layout`'s record sizes. The other parts' counters are left as they are.
  void FillLocked(const ModelLayout& layout, StoreStats* st) const;
  // Adds the remote read counters (loaded, load_failures) and the lookup pages to `r`.
  void AddRemoteLocked(RemoteStats* r) const;

 private:
  std::atomic<uint64_t> lookups_{0}, lookup_pages_{0}, hit_pages_{0}, kv_only_pages_{0};
  std::atomic<uint64_t> remote_lookup_pages_{0};
  LatencyHistogram lookup_latency_, load_latency_, save_latency_;
  // Guarded by the store's mutex:
  std::array<std::array<uint64_t, kNumKinds>, kNumLocalTiers> loaded_{};
  std::array<uint64_t, kNumKinds> saved_{};
  uint64_t loads_ = 0, prefetches_ = 0, saves_ = 0, refreshed_ = 0, failed_ = 0;
  uint64_t partials_dropped_ = 0;
  uint64_t checksum_failures_ = 0, io_errors_ = 0;
  uint64_t remote_loaded_ = 0, remote_load_failures_ = 0;
  uint64_t disk_records_recovered_ = 0, disk_unreachable_at_open_ = 0;
};

}  // namespace cachepawl
