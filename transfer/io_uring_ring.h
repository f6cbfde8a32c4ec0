// IoUringRing: the BlockIo of production: one io_uring, a bounded number of requests in flight
// (the queue depth), batched submission (one io_uring_enter per Submit call and per completion
// round), one completion thread. Buffers inside registered memory (RegisterBuffers: the host
// arena's regions) go out as read_fixed / write_fixed, others as plain read / write.
//
// Thread safety: Submit may be called from any thread, concurrently, and from the completion
// handler. Shutdown must not be called from the completion handler.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "transfer/block_io.h"

namespace cachepawl {

// The deepest queue a ring takes (StoreOptions::disk_queue_depth obeys it too).
inline constexpr uint32_t kMaxIoUringQueueDepth = 4096;

struct IoUringOptions {
  // Requests in flight at most (1..kMaxIoUringQueueDepth). Deeper queues get more from NVMe, up to
  // a point.
  uint32_t queue_depth = 32;
  // OK, or InvalidArgument naming the field.
  Status Validate() const;
};

class IoUringRing final : public BlockIo {
 public:
  // Errors: InvalidArgument (options), Unavailable (io_uring disabled or not supported by the
  // kernel, with the errno).
  static StatusOr<std::unique_ptr<IoUringRing>> Open(const IoUringOptions& options);
  ~IoUringRing() override;
  IoUringRing(const IoUringRing&) = delete;
  IoUringRing& operator=(const IoUringRing&) = delete;

  void SetCompletionHandler(CompletionHandler handler) override;
  // Splits regions into chunks of at most 1 GiB (the kernel's limit per fixed buffer). Errors:
  // FailedPrecondition (called twice), IOError (the kernel refused, e.g. RLIMIT_MEMLOCK);
  // after an error every request uses plain read/write.
  Status RegisterBuffers(std::span<const std::span<std::byte>> regions) override;
  void Submit(std::span<const BlockIoRequest> requests) override;
  void Shutdown() override;
  size_t pending() const override;

  uint32_t queue_depth() const { return options_.queue_depth; }
  // Requests that went out as read_fixed/write_fixed, and as plain read/write.
  uint64_t fixed_requests() const { return fixed_requests_.load(); }
  uint64_t plain_requests() const { return plain_requests_.load(); }

 private:
  explicit IoUringRing(IoUringOptions options);
  void FillAndSubmitLocked();
  void CompletionLoop();
  int FixedBufferIndex(const std::byte* buf, uint32_t len) const;

  struct Ring;  // liburing's ring (io_uring_ring.cc): no liburing type leaves transfer/
  const IoUringOptions options_;
  const std::unique_ptr<Ring> ring_;
  CompletionHandler handler_;  // set before the first Submit
  std::thread thread_;

  struct Chunk {
    const std::byte* base;
    uint64_t bytes;
  };
  std::vector<Chunk> chunks_;  // guarded by mu_: registered fixed buffers, index = buffer id

  mutable std::mutex mu_;
  std::condition_variable drained_;
  std::deque<BlockIoRequest> queued_;  // guarded by mu_
  uint32_t in_flight_ = 0;             // guarded by mu_
  uint32_t in_handler_ = 0;            // guarded by mu_: completion batches being handled
  bool shutting_down_ = false;         // guarded by mu_
  std::thread::id completion_thread_;  // guarded by mu_
  bool stopped_ = false;               // guarded by mu_
  bool buffers_registered_ = false;    // guarded by mu_

  std::atomic<uint64_t> fixed_requests_{0};
  std::atomic<uint64_t> plain_requests_{0};
};

}  // namespace cachepawl
