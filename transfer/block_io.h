// BlockIo: the seam between the disk data path and the kernel (as LevelDB's Env). The
// production implementation is IoUringRing (transfer/io_uring_ring.h); tests wrap it to inject
// faults (EIO, ENOSPC, short and torn I/O, flipped bytes) without touching the code above.
//
// Requests are positional reads and writes of one contiguous buffer. Completion is reported
// once per request, in batches, on one completion thread, through the handler given to
// SetCompletionHandler: `result` is the number of bytes moved or -errno (never retried here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "vocab/status.h"

namespace cachepawl {

enum class BlockIoOp : uint8_t { kRead = 0, kWrite = 1 };

struct BlockIoRequest {
  BlockIoOp op = BlockIoOp::kRead;
  int fd = -1;
  uint64_t offset = 0;       // bytes; 4 KiB-aligned for O_DIRECT files
  std::byte* buf = nullptr;  // 4 KiB-aligned for O_DIRECT files
  uint32_t len = 0;          // bytes; at most kMaxBlockIoBytes
  uint64_t tag = 0;          // returned in the completion
};

// The largest single request (the kernel moves at most ~2 GiB per read/write call).
inline constexpr uint32_t kMaxBlockIoBytes = 1u << 30;

struct BlockIoCompletion {
  uint64_t tag = 0;
  int64_t result = 0;  // bytes moved, or -errno
};

class BlockIo {
 public:
  using CompletionHandler = std::function<void(std::span<const BlockIoCompletion>)>;

  virtual ~BlockIo() = default;

  // Must be called once, before the first Submit. The handler runs on the completion thread;
  // it may call Submit.
  virtual void SetCompletionHandler(CompletionHandler handler) = 0;

  // Registers memory that requests' buffers will lie in (io_uring fixed buffers), for faster
  // I/O. Optional: requests outside registered memory work too. May be called once.
  virtual Status RegisterBuffers(std::span<const std::span<std::byte>> regions) = 0;

  // Queues `requests` and returns without waiting for any I/O: at most the queue depth is in
  // flight, the rest waits in submission order. After Shutdown began, requests from threads
  // other than the completion handler's complete at once with -ECANCELED (the handler may
  // still submit: a chain of requests drains before Shutdown returns).
  virtual void Submit(std::span<const BlockIoRequest> requests) = 0;

  // Waits until every submitted request has completed (and its handler call returned), then
  // stops the completion thread. Idempotent.
  virtual void Shutdown() = 0;

  // Requests queued or in flight, plus completion batches still being handled (0: idle).
  virtual size_t pending() const = 0;
};

}  // namespace cachepawl
