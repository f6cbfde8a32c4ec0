// DeferredStreamWaiter: the GPU-side wait of a Load whose pages come from disk first. The
// host->device operation (whose device mover fence carries the real GPU signal) is submitted
// only once the disk reads are done; a stream wait must not be enqueued ahead of its producer (a
// semaphore wait queued before the copies it waits for can deadlock a shared hardware queue), so
// StreamWait on such a fence blocks the calling thread until the host->device copies are
// enqueued. An engine that must never block calls StartPrefetch first and Loads from host
// afterwards.
//
// Thread safety: Resolve and Wait may be called from any threads; Resolve once.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

#include "store/vocab/status.h"

namespace cachepawl {

class DeferredStreamWaiter {
 public:
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
      cv_.wait(lock, [&] { return resolved_; });
      waiter = waiter_;
    }
    return waiter ? waiter(stream) : Status::OK();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool resolved_ = false;                // guarded by mu_
  std::function<Status(void*)> waiter_;  // guarded by mu_
};

}  // namespace cachepawl
