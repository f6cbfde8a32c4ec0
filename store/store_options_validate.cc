// StoreOptions::Validate: each field's own rule (store/store_option_rules.h, shared with the C
// ABI's setters), then the rules that weigh several fields together.
#include <string>

#include "store/store_option_rules.h"
#include "tiers/remote_tier.h"
#include "vocab/store_options.h"

namespace cachepawl {

Status StoreOptions::Validate() const {
  if (!layout && layout_name.empty()) {
    return InvalidStoreOption("layout_name", "''",
                              "set a preset name, a JSON file path, or `layout`");
  }
  if (layout) CACHEPAWL_RETURN_IF_ERROR(layout->Validate().WithContext("StoreOptions.layout"));
  CACHEPAWL_RETURN_IF_ERROR(CheckPageSizeTokens(page_size_tokens));
  CACHEPAWL_RETURN_IF_ERROR(CheckHostBytes(host_bytes));
  if (host_free_target_bytes && *host_free_target_bytes > host_bytes / 2) {
    return InvalidStoreOption("host_free_target_bytes", std::to_string(*host_free_target_bytes),
                              "must be at most host_bytes / 2 = " + std::to_string(host_bytes / 2));
  }
  if (disk_bytes > 0) {
    if (disk_dir.empty())
      return InvalidStoreOption("disk_dir", "''", "required when disk_bytes > 0");
    CACHEPAWL_RETURN_IF_ERROR(CheckDiskQueueDepth(disk_queue_depth));
  } else if (!disk_data_paths.empty()) {
    return InvalidStoreOption("disk_bytes", "0",
                              "disk_data_paths are set but the disk tier has no budget");
  }
  CACHEPAWL_RETURN_IF_ERROR(CheckWritePolicy(static_cast<int64_t>(write_policy)));
  CACHEPAWL_RETURN_IF_ERROR(CheckEvictionPolicy(static_cast<int64_t>(eviction_policy)));
  if (write_policy == WritePolicy::kWriteThroughSelective) {
    CACHEPAWL_RETURN_IF_ERROR(CheckSelectiveMinHits(selective_min_hits));
  }
  if (remote.enabled()) {
    CACHEPAWL_RETURN_IF_ERROR(ToRemoteTierOptions(remote).Validate().WithContext("StoreOptions"));
    CACHEPAWL_RETURN_IF_ERROR(CheckRemoteWritePolicy(static_cast<int64_t>(remote.write_policy)));
    if (remote.write_policy == RemoteWritePolicy::kSelective) {
      CACHEPAWL_RETURN_IF_ERROR(CheckRemoteSelectiveMinHits(remote.selective_min_hits));
    }
    CACHEPAWL_RETURN_IF_ERROR(CheckRemoteLookupDeadlineMs(remote.lookup_deadline_ms));
    CACHEPAWL_RETURN_IF_ERROR(CheckRemoteMaxQueuedWrites(remote.max_queued_writes));
    CACHEPAWL_RETURN_IF_ERROR(CheckRemoteReaderThreads(remote.reader_threads));
  }
  CACHEPAWL_RETURN_IF_ERROR(CheckWaitMs("host_space_wait_ms", host_space_wait_ms));
  CACHEPAWL_RETURN_IF_ERROR(CheckWaitMs("host_pinning_wait_ms", host_pinning_wait_ms));
  CACHEPAWL_RETURN_IF_ERROR(CheckWaitMs("stream_wait_ms", stream_wait_ms));
  CACHEPAWL_RETURN_IF_ERROR(CheckWaitMs("tp_partial_timeout_ms", tp_partial_timeout_ms));
  if (tp_partial_timeout_ms == 0) {
    // Expired before the next rank's Save could join it, no entry would ever complete.
    return InvalidStoreOption("tp_partial_timeout_ms", "0", "must be > 0");
  }
  CACHEPAWL_RETURN_IF_ERROR(CheckCudaDevice(cuda_device));
  CACHEPAWL_RETURN_IF_ERROR(CheckStreamPriority("load_stream_priority", load_stream_priority));
  CACHEPAWL_RETURN_IF_ERROR(CheckStreamPriority("write_stream_priority", write_stream_priority));
  CACHEPAWL_RETURN_IF_ERROR(CheckSpinUs("completion_spin_us", completion_spin_us));
  CACHEPAWL_RETURN_IF_ERROR(CheckSpinUs("wait_spin_us", wait_spin_us));
  CACHEPAWL_RETURN_IF_ERROR(CheckSaveChunkEntries(save_chunk_entries));
  CACHEPAWL_RETURN_IF_ERROR(CheckMaxPromptTokens(max_prompt_tokens));
  const uint32_t page = layout ? layout->page_size_tokens : page_size_tokens;
  CACHEPAWL_RETURN_IF_ERROR(CheckMaxPromptTokensHoldAPage(max_prompt_tokens, page));
  return CheckStagingBytes(staging_bytes);
}

}  // namespace cachepawl
