#include <string>

#include "store/vocab/store_options.h"
#include "tiers/remote_tier.h"

namespace cachepawl {

Status StoreOptions::Validate() const {
  auto bad = [](const std::string& field, const std::string& value, const std::string& why) {
    return Status::InvalidArgument("StoreOptions." + field + ": " + value + " (" + why + ")");
  };
  if (!layout && layout_name.empty()) {
    return bad("layout_name", "''", "set a preset name, a JSON file path, or `layout`");
  }
  if (layout) CACHEPAWL_RETURN_IF_ERROR(layout->Validate().WithContext("StoreOptions.layout"));
  if (page_size_tokens == 0) return bad("page_size_tokens", "0", "must be > 0");
  if (host_bytes == 0) return bad("host_bytes", "0", "the host tier needs memory");
  if (host_bytes % 4096 != 0) {
    return bad("host_bytes", std::to_string(host_bytes), "must be a multiple of 4096");
  }
  if (host_free_target_bytes && *host_free_target_bytes > host_bytes / 2) {
    return bad("host_free_target_bytes", std::to_string(*host_free_target_bytes),
               "must be at most host_bytes / 2 = " + std::to_string(host_bytes / 2));
  }
  if (disk_bytes > 0) {
    if (disk_dir.empty()) return bad("disk_dir", "''", "required when disk_bytes > 0");
    if (disk_queue_depth == 0 || disk_queue_depth > 4096) {
      return bad("disk_queue_depth", std::to_string(disk_queue_depth), "must be in [1, 4096]");
    }
  } else if (!disk_data_paths.empty()) {
    return bad("disk_bytes", "0", "disk_data_paths are set but the disk tier has no budget");
  }
  if (static_cast<uint8_t>(write_policy) > static_cast<uint8_t>(WritePolicy::kWriteBack)) {
    return bad("write_policy", std::to_string(static_cast<int>(write_policy)), "unknown policy");
  }
  if (static_cast<uint8_t>(eviction_policy) > static_cast<uint8_t>(EvictionPolicy::kHybrid)) {
    return bad("eviction_policy", std::to_string(static_cast<int>(eviction_policy)),
               "unknown policy: 0 (lru) or 1 (hybrid)");
  }
  if (write_policy == WritePolicy::kWriteThroughSelective && selective_min_hits == 0) {
    return bad("selective_min_hits", "0", "must be > 0 for write_through_selective");
  }
  if (remote.enabled()) {
    CACHEPAWL_RETURN_IF_ERROR(ToRemoteTierOptions(remote).Validate().WithContext("StoreOptions"));
    if (static_cast<uint8_t>(remote.write_policy) >
        static_cast<uint8_t>(RemoteWritePolicy::kOnEvict)) {
      return bad("remote.write_policy", std::to_string(static_cast<int>(remote.write_policy)),
                 "unknown policy: 0 (none), 1 (write_through), 2 (selective) or 3 (on_evict)");
    }
    if (remote.write_policy == RemoteWritePolicy::kSelective && remote.selective_min_hits == 0) {
      return bad("remote.selective_min_hits", "0", "must be > 0 for selective");
    }
    if (remote.lookup_deadline_ms == 0 || remote.lookup_deadline_ms > 10000) {
      return bad("remote.lookup_deadline_ms", std::to_string(remote.lookup_deadline_ms),
                 "must be in [1, 10000]");
    }
    if (remote.max_queued_writes == 0) return bad("remote.max_queued_writes", "0", "must be > 0");
  }
  if (cuda_device < -1) {
    return bad("cuda_device", std::to_string(cuda_device), "must be -1 (CPU mode) or >= 0");
  }
  for (const auto& [field, priority] :
       {std::pair{"load_stream_priority", load_stream_priority},
        std::pair{"write_stream_priority", write_stream_priority}}) {
    if (priority < -1000 || priority > 1000) {
      return bad(field, std::to_string(priority),
                 "must be in [-1000, 1000] (CUDA clamps it to the device's range)");
    }
  }
  if (save_chunk_entries == 0) return bad("save_chunk_entries", "0", "must be >= 1");
  if (staging_bytes < (1ull << 20)) {
    return bad("staging_bytes", std::to_string(staging_bytes), "must be at least 1 MiB");
  }
  return Status::OK();
}

}  // namespace cachepawl
