#include "store/store_option_rules.h"

#include <string>

#include "transfer/io_uring_ring.h"
#include "vocab/store_options.h"

namespace cachepawl {
namespace {

constexpr uint64_t kMinStagingBytes = 1ull << 20;
constexpr int64_t kStreamPriorityLimit = 1000;
constexpr uint32_t kMaxLookupDeadlineMs = 10000;

// OK when `value` is in [0, last], else the error naming `field`.
template <typename Enum>
Status CheckEnum(std::string_view field, int64_t value, Enum last, std::string_view expected) {
  if (value >= 0 && value <= static_cast<int64_t>(last)) return Status::OK();
  return InvalidStoreOption(field, std::to_string(value), expected);
}

Status CheckPositive(std::string_view field, uint64_t value, std::string_view why) {
  return value > 0 ? Status::OK() : InvalidStoreOption(field, "0", why);
}

}  // namespace

Status InvalidStoreOption(std::string_view field, std::string_view value, std::string_view why) {
  std::string message = "StoreOptions.";
  message.append(field).append(": ").append(value).append(" (").append(why).append(")");
  return Status::InvalidArgument(message);
}

Status CheckPageSizeTokens(uint32_t tokens) {
  return CheckPositive("page_size_tokens", tokens, "must be > 0");
}

Status CheckHostBytes(uint64_t bytes) {
  if (bytes != 0 && bytes % 4096 == 0) return Status::OK();
  return InvalidStoreOption("host_bytes", std::to_string(bytes),
                            "must be a non-zero multiple of 4096");
}

Status CheckMaxPromptTokens(uint64_t tokens) {
  return CheckPositive("max_prompt_tokens", tokens, "must be > 0");
}

Status CheckMaxPromptTokensHoldAPage(uint64_t tokens, uint32_t page_size_tokens) {
  if (tokens >= page_size_tokens) return Status::OK();
  return InvalidStoreOption(
      "max_prompt_tokens", std::to_string(tokens),
      "must be at least one page of " + std::to_string(page_size_tokens) + " tokens");
}

Status CheckSaveChunkEntries(uint32_t entries) {
  return CheckPositive("save_chunk_entries", entries, "must be >= 1");
}

Status CheckDiskQueueDepth(uint32_t depth) {
  if (depth >= 1 && depth <= kMaxIoUringQueueDepth) return Status::OK();
  return InvalidStoreOption("disk_queue_depth", std::to_string(depth),
                            "must be in [1, " + std::to_string(kMaxIoUringQueueDepth) + "]");
}

Status CheckWritePolicy(int64_t policy) {
  return CheckEnum("write_policy", policy, WritePolicy::kWriteBack,
                   "expected CACHEPAWL_WRITE_THROUGH (0), CACHEPAWL_WRITE_THROUGH_SELECTIVE (1) "
                   "or CACHEPAWL_WRITE_BACK (2)");
}

Status CheckEvictionPolicy(int64_t policy) {
  return CheckEnum("eviction_policy", policy, EvictionPolicy::kHybrid,
                   "expected CACHEPAWL_EVICTION_LRU (0) or CACHEPAWL_EVICTION_HYBRID (1)");
}

Status CheckSelectiveMinHits(uint32_t hits) {
  return CheckPositive("selective_min_hits", hits, "must be > 0");
}

Status CheckCudaDevice(int64_t device) {
  if (device >= -1) return Status::OK();
  return InvalidStoreOption("cuda_device", std::to_string(device), "must be -1 (CPU mode) or >= 0");
}

Status CheckStagingBytes(uint64_t bytes) {
  if (bytes >= kMinStagingBytes) return Status::OK();
  return InvalidStoreOption("staging_bytes", std::to_string(bytes), "must be at least 1 MiB");
}

Status CheckSpinUs(std::string_view field, uint64_t microseconds) {
  if (microseconds <= 1000000) return Status::OK();
  return InvalidStoreOption(field, std::to_string(microseconds), "must be at most 1000000 (1 s)");
}

Status CheckStreamPriority(std::string_view field, int64_t priority) {
  if (priority >= -kStreamPriorityLimit && priority <= kStreamPriorityLimit) return Status::OK();
  return InvalidStoreOption(field, std::to_string(priority),
                            "must be in [-1000, 1000]; CUDA clamps it to the device's range");
}

Status CheckRemoteWritePolicy(int64_t policy) {
  return CheckEnum("remote.write_policy", policy, RemoteWritePolicy::kOnEvict,
                   "expected CACHEPAWL_REMOTE_WRITE_NONE (0), CACHEPAWL_REMOTE_WRITE_THROUGH (1), "
                   "CACHEPAWL_REMOTE_WRITE_SELECTIVE (2) or CACHEPAWL_REMOTE_WRITE_ON_EVICT (3)");
}

Status CheckRemoteSelectiveMinHits(uint32_t hits) {
  return CheckPositive("remote.selective_min_hits", hits, "must be > 0");
}

Status CheckRemoteLookupDeadlineMs(uint32_t ms) {
  if (ms >= 1 && ms <= kMaxLookupDeadlineMs) return Status::OK();
  return InvalidStoreOption("remote.lookup_deadline_ms", std::to_string(ms),
                            "must be in [1, " + std::to_string(kMaxLookupDeadlineMs) + "]");
}

Status CheckRemoteMaxQueuedWrites(uint32_t writes) {
  return CheckPositive("remote.max_queued_writes", writes, "must be > 0");
}

Status CheckRemoteReaderThreads(uint32_t threads) {
  if (threads >= 1 && threads <= 64) return Status::OK();
  return InvalidStoreOption("remote.reader_threads", std::to_string(threads), "must be in [1, 64]");
}

Status CheckWaitMs(std::string_view field, uint32_t ms) {
  constexpr uint32_t kDayMs = 86'400'000;
  if (ms <= kDayMs) return Status::OK();
  return InvalidStoreOption(field, std::to_string(ms),
                            "must be at most " + std::to_string(kDayMs) + " ms (a day)");
}

}  // namespace cachepawl
