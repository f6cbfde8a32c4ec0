#include "vocab/attach_options.h"

#include <string>

namespace cachepawl {

namespace {
constexpr size_t kMaxSocketPath = 107;  // sun_path less its terminating NUL

Status CheckSocketPath(const char* field, const std::string& path) {
  if (path.empty()) return Status::InvalidArgument(std::string(field) + ": empty");
  if (path.size() > kMaxSocketPath) {
    return Status::InvalidArgument(std::string(field) + ": '" + path + "' is " +
                                   std::to_string(path.size()) +
                                   " bytes (a Unix socket path holds at most 107)");
  }
  if (path.find('\0') != std::string::npos) {
    return Status::InvalidArgument(std::string(field) + ": contains a NUL byte");
  }
  return Status::OK();
}

Status CheckRange(const char* field, uint64_t v, uint64_t lo, uint64_t hi) {
  if (v >= lo && v <= hi) return Status::OK();
  return Status::InvalidArgument(std::string(field) + ": " + std::to_string(v) + " (must be in [" +
                                 std::to_string(lo) + ", " + std::to_string(hi) + "])");
}
}  // namespace

Status ServeOptions::Validate() const {
  CACHEPAWL_RETURN_IF_ERROR(CheckSocketPath("ServeOptions.socket_path", socket_path));
  CACHEPAWL_RETURN_IF_ERROR(CheckRange("ServeOptions.max_clients", max_clients, 1, 4096));
  CACHEPAWL_RETURN_IF_ERROR(CheckRange("ServeOptions.handler_threads", handler_threads, 1, 256));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("ServeOptions.dead_client_grace_ms", dead_client_grace_ms, 0, 86400000));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("ServeOptions.send_timeout_ms", send_timeout_ms, 1, 86400000));
  CACHEPAWL_RETURN_IF_ERROR(CheckRange("ServeOptions.poll_spin_us", poll_spin_us, 0, 100000));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("ServeOptions.inflight_spin_us", inflight_spin_us, 0, 100000));
  return Status::OK();
}

Status AttachOptions::Validate() const {
  CACHEPAWL_RETURN_IF_ERROR(CheckSocketPath("AttachOptions.socket_path", socket_path));
  if (cuda_device < -1) {
    return Status::InvalidArgument("AttachOptions.cuda_device: " + std::to_string(cuda_device) +
                                   " (must be -1 for CPU mode, or a device index)");
  }
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("AttachOptions.call_timeout_ms", call_timeout_ms, 1, 86400000));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("AttachOptions.owner_timeout_ms", owner_timeout_ms, 2, 86400000));
  CACHEPAWL_RETURN_IF_ERROR(CheckRange("AttachOptions.poll_spin_us", poll_spin_us, 0, 100000));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("AttachOptions.inflight_spin_us", inflight_spin_us, 0, 100000));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("AttachOptions.stream_wait_ms", stream_wait_ms, 0, 86400000));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("AttachOptions.page_size_tokens", page_size_tokens, 1, 1u << 20));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("AttachOptions.load_split_pages", load_split_pages, 0, 1u << 20));
  CACHEPAWL_RETURN_IF_ERROR(
      CheckRange("AttachOptions.completion_spin_us", completion_spin_us, 0, 1000000));
  CACHEPAWL_RETURN_IF_ERROR(CheckRange("AttachOptions.wait_spin_us", wait_spin_us, 0, 1000000));
  if (staging_bytes < (uint64_t{1} << 20)) {
    return Status::InvalidArgument("AttachOptions.staging_bytes: " + std::to_string(staging_bytes) +
                                   " (must be >= 1 MiB)");
  }
  return Status::OK();
}

}  // namespace cachepawl
