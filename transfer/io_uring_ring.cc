#include "transfer/io_uring_ring.h"

#include <liburing.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cachepawl {
namespace {

constexpr uint64_t kStopTag = ~uint64_t{0};
constexpr uint64_t kMaxFixedChunk = 1ull << 30;
constexpr unsigned kCqeBatch = 256;

}  // namespace

Status IoUringOptions::Validate() const {
  if (queue_depth == 0 || queue_depth > kMaxIoUringQueueDepth) {
    return Status::InvalidArgument("queue_depth: " + std::to_string(queue_depth) + " (must be 1.." +
                                   std::to_string(kMaxIoUringQueueDepth) + ")");
  }
  return Status::OK();
}

struct IoUringRing::Ring {
  io_uring ring{};
};

IoUringRing::IoUringRing(IoUringOptions options)
    : options_(options), ring_(std::make_unique<Ring>()) {}

StatusOr<std::unique_ptr<IoUringRing>> IoUringRing::Open(const IoUringOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<IoUringRing> ring(new IoUringRing(options));
  io_uring_params params;
  std::memset(&params, 0, sizeof(params));
  params.flags = IORING_SETUP_CQSIZE;
  params.cq_entries = 2 * options.queue_depth + 2;  // room for every request and the stop NOP
  const int rc = io_uring_queue_init_params(options.queue_depth + 1, &ring->ring_->ring, &params);
  if (rc < 0) {
    return Status::Unavailable("io_uring_queue_init(" + std::to_string(options.queue_depth) +
                               "): " + std::strerror(-rc) +
                               " (io_uring disabled by /proc/sys/kernel/io_uring_disabled, "
                               "seccomp, or an old kernel?)");
  }
  ring->thread_ = std::thread([r = ring.get()] { r->CompletionLoop(); });
  return ring;
}

IoUringRing::~IoUringRing() {
  Shutdown();
  io_uring_queue_exit(&ring_->ring);
}

void IoUringRing::SetCompletionHandler(CompletionHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = std::move(handler);
}

Status IoUringRing::RegisterBuffers(std::span<const std::span<std::byte>> regions) {
  std::lock_guard<std::mutex> lock(mu_);
  if (buffers_registered_) return Status::FailedPrecondition("io_uring buffers already registered");
  buffers_registered_ = true;
  std::vector<iovec> iovs;
  std::vector<Chunk> chunks;
  for (const auto& region : regions) {
    for (uint64_t off = 0; off < region.size(); off += kMaxFixedChunk) {
      const uint64_t n = std::min<uint64_t>(kMaxFixedChunk, region.size() - off);
      iovs.push_back(iovec{region.data() + off, n});
      chunks.push_back(Chunk{region.data() + off, n});
    }
  }
  if (iovs.empty()) return Status::OK();
  const int rc =
      io_uring_register_buffers(&ring_->ring, iovs.data(), static_cast<unsigned>(iovs.size()));
  if (rc < 0) {
    return Status::FromErrno(
        "io_uring_register_buffers(" + std::to_string(iovs.size()) + " buffers)", -rc);
  }
  chunks_ = std::move(chunks);
  return Status::OK();
}

int IoUringRing::FixedBufferIndex(const std::byte* buf, uint32_t len) const {
  // chunks_ is small (one per GiB of registered memory): a linear scan costs nothing next to
  // the I/O, and keeps the index equal to the registration order.
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i];
    if (buf >= c.base && buf + len <= c.base + c.bytes) return static_cast<int>(i);
  }
  return -1;
}

void IoUringRing::Submit(std::span<const BlockIoRequest> requests) {
  if (requests.empty()) return;
  std::vector<BlockIoCompletion> cancelled;
  CompletionHandler handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Once Shutdown began, only the completion handler may still add work (a chain of
    // requests drains); other threads' requests are cancelled.
    if (shutting_down_ && std::this_thread::get_id() != completion_thread_) {
      for (const auto& r : requests) cancelled.push_back({r.tag, -ECANCELED});
      handler = handler_;
    } else {
      queued_.insert(queued_.end(), requests.begin(), requests.end());
      FillAndSubmitLocked();
    }
  }
  if (!cancelled.empty() && handler) handler(cancelled);
}

void IoUringRing::FillAndSubmitLocked() {
  unsigned prepared = 0;
  while (in_flight_ < options_.queue_depth && !queued_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    if (sqe == nullptr) break;
    const BlockIoRequest r = queued_.front();
    queued_.pop_front();
    const int index = FixedBufferIndex(r.buf, r.len);
    if (r.op == BlockIoOp::kRead) {
      if (index >= 0) {
        io_uring_prep_read_fixed(sqe, r.fd, r.buf, r.len, r.offset, index);
      } else {
        io_uring_prep_read(sqe, r.fd, r.buf, r.len, r.offset);
      }
    } else {
      if (index >= 0) {
        io_uring_prep_write_fixed(sqe, r.fd, r.buf, r.len, r.offset, index);
      } else {
        io_uring_prep_write(sqe, r.fd, r.buf, r.len, r.offset);
      }
    }
    (index >= 0 ? fixed_requests_ : plain_requests_).fetch_add(1, std::memory_order_relaxed);
    io_uring_sqe_set_data64(sqe, r.tag);
    ++in_flight_;
    ++prepared;
  }
  if (prepared == 0) return;
  for (int attempt = 0;; ++attempt) {
    const int rc = io_uring_submit(&ring_->ring);
    if (rc >= 0) return;
    if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && attempt < 1000) {
      std::this_thread::yield();
      continue;
    }
    // The SQEs stay in the ring; the next submit (from the completion loop) retries them.
    spdlog::error("io_uring_submit: {}", std::strerror(-rc));
    return;
  }
}

void IoUringRing::CompletionLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    completion_thread_ = std::this_thread::get_id();
  }
  std::vector<BlockIoCompletion> batch;
  batch.reserve(kCqeBatch);
  io_uring_cqe* cqes[kCqeBatch];
  bool stop = false;
  while (!stop) {
    io_uring_cqe* first = nullptr;
    const int rc = io_uring_wait_cqe(&ring_->ring, &first);
    if (rc < 0) {
      if (rc == -EINTR || rc == -EAGAIN) continue;
      spdlog::error("io_uring_wait_cqe: {}", std::strerror(-rc));
      std::this_thread::yield();
      continue;
    }
    batch.clear();
    const unsigned n = io_uring_peek_batch_cqe(&ring_->ring, cqes, kCqeBatch);
    for (unsigned i = 0; i < n; ++i) {
      const uint64_t tag = io_uring_cqe_get_data64(cqes[i]);
      if (tag == kStopTag) {
        stop = true;
      } else {
        batch.push_back({tag, cqes[i]->res});
      }
    }
    io_uring_cq_advance(&ring_->ring, n);
    CompletionHandler handler;
    {
      // Refill the queue before running the handler (which may verify checksums), so the
      // drive is not idle meanwhile.
      std::lock_guard<std::mutex> lock(mu_);
      handler = handler_;
      in_flight_ -= static_cast<uint32_t>(batch.size());
      ++in_handler_;
      FillAndSubmitLocked();
    }
    if (!batch.empty() && handler) handler(batch);
    std::lock_guard<std::mutex> lock(mu_);
    --in_handler_;
    if (in_flight_ == 0 && queued_.empty() && in_handler_ == 0) drained_.notify_all();
  }
}

void IoUringRing::Shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopped_) return;
  shutting_down_ = true;
  drained_.wait(lock, [&] { return in_flight_ == 0 && queued_.empty() && in_handler_ == 0; });
  stopped_ = true;
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  while (sqe == nullptr) {
    io_uring_submit(&ring_->ring);
    sqe = io_uring_get_sqe(&ring_->ring);
  }
  io_uring_prep_nop(sqe);
  io_uring_sqe_set_data64(sqe, kStopTag);
  io_uring_submit(&ring_->ring);
  lock.unlock();
  if (thread_.joinable()) thread_.join();
}

size_t IoUringRing::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_.size() + in_flight_ + in_handler_;
}

}  // namespace cachepawl
