#include "store/store_counters.h"

namespace cachepawl {

void StoreCounters::CountLookup(uint64_t pages, uint64_t reusable, uint64_t kv_only) {
  lookups_.fetch_add(1, std::memory_order_relaxed);
  lookup_pages_.fetch_add(pages, std::memory_order_relaxed);
  hit_pages_.fetch_add(reusable, std::memory_order_relaxed);
  kv_only_pages_.fetch_add(kv_only, std::memory_order_relaxed);
}

void StoreCounters::CountLoadedLocked(Tier tier, Kind kind) {
  if (!IsLocalTier(tier)) return;  // remote loads are CountRemoteLoadLocked's
  ++loaded_[static_cast<int>(tier)][static_cast<int>(kind)];
}

void StoreCounters::CountReadErrorLocked(const Status& s) {
  if (s.IsCorruption()) ++checksum_failures_;
  if (s.IsIOError()) ++io_errors_;
}

void StoreCounters::SetOpenedWith(uint64_t disk_records, uint64_t unreachable_reclaimed) {
  disk_records_recovered_ = disk_records;
  disk_unreachable_at_open_ = unreachable_reclaimed;
}

void StoreCounters::FillLocked(const ModelLayout& layout, StoreStats* st) const {
  st->lookups = lookups_.load(std::memory_order_relaxed);
  st->lookup_pages = lookup_pages_.load(std::memory_order_relaxed);
  st->hit_pages = hit_pages_.load(std::memory_order_relaxed);
  st->kv_only_hit_pages = kv_only_pages_.load(std::memory_order_relaxed);
  st->lookup_latency = lookup_latency_.Summary();
  st->load_latency = load_latency_.Summary();
  st->save_latency = save_latency_.Summary();
  st->loaded_entries = loaded_;
  for (int t = 0; t < kNumLocalTiers; ++t) {
    for (int k = 0; k < kNumKinds; ++k) {
      st->loaded_bytes[t][k] = loaded_[t][k] * layout.RecordBytes(static_cast<Kind>(k));
    }
  }
  st->saves = saves_;
  st->saved_pages = saved_[static_cast<int>(Kind::kKV)];
  st->saved_states = saved_[static_cast<int>(Kind::kMamba)];
  st->saved_window_pages = saved_[static_cast<int>(Kind::kWindowKV)];
  st->refreshed_pages = refreshed_;
  st->tp_partials_dropped = partials_dropped_;
  st->loads = loads_;
  st->prefetches = prefetches_;
  st->failed_operations = failed_;
  st->checksum_failures = checksum_failures_;
  st->io_errors = io_errors_;
  st->disk_records_recovered = disk_records_recovered_;
  st->disk_unreachable_at_open = disk_unreachable_at_open_;
}

void StoreCounters::AddRemoteLocked(RemoteStats* r) const {
  r->loaded += remote_loaded_;
  r->load_failures += remote_load_failures_;
  r->lookup_pages += remote_lookup_pages_.load(std::memory_order_relaxed);
}

}  // namespace cachepawl
