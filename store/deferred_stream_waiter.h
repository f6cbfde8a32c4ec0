// DeferredStreamWaiter: the GPU-side wait of a Load whose pages come from disk first. The
// host->device operation (whose device mover fence carries the real GPU signal) is submitted
// only once the disk reads are done; a stream wait must not be enqueued ahead of its producer (a
// semaphore wait queued before the copies it waits for can deadlock a shared hardware queue), so
// StreamWait on such a fence blocks the calling thread until the host->device copies are
// enqueued, at most the bound it was made with (StoreOptions::stream_wait_ms): then it returns
// TimedOut and enqueues nothing. An engine that must never block calls StartPrefetch first and
// Loads from host afterwards.
//
// Thread safety: Resolve and Wait may be called from any threads; Resolve once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "vocab/status.h"

namespace cachepawl {

class DeferredStreamWaiter {
 public:
  explicit DeferredStreamWaiter(std::chrono::milliseconds bound) : bound_(bound) {}

  // `waiter` empty: there is no GPU work to wait for (the load failed; the fence says why).
  void Resolve(std::function<Status(void*)> waiter) {
    std::lock_guard<std::mutex> lock(mu_);
    waiter_ = std::move(waiter);
    resolved_ = true;
    cv_.notify_all();
  }
  Status Wait(void* stream) {
    std::function<Status(void*)> waiter;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, bound_, [&] { return resolved_; })) {
        return Status::TimedOut(
            "Fence::StreamWait: the Load's reads from disk or the remote tier did not finish "
            "within StoreOptions.stream_wait_ms " +
            std::to_string(bound_.count()) +
            " ms; nothing was enqueued on the stream (wait on the CPU: Fence::Wait)");
      }
      waiter = waiter_;
    }
    return waiter ? waiter(stream) : Status::OK();
  }

 private:
  const std::chrono::milliseconds bound_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool resolved_ = false;                // guarded by mu_
  std::function<Status(void*)> waiter_;  // guarded by mu_
};

}  // namespace cachepawl
