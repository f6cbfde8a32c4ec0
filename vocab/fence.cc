#include "vocab/fence.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "vocab/internal/fence_access.h"

namespace cachepawl {
namespace internal {

struct FenceState {
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;                      // guarded by mu
  std::atomic<bool> fired{false};         // `done`, readable without mu (Wait's polling)
  std::atomic<uint32_t> wait_spin_us{0};  // FenceAccess::SetWaitSpin
  Status status;                          // guarded by mu
  std::vector<char> layer_done;           // guarded by mu
  std::vector<Status> layer_status;       // guarded by mu
  std::vector<std::function<void(const Status&)>> callbacks;  // guarded by mu
  // Per layer: callbacks waiting for that sub-fence. Guarded by mu.
  std::vector<std::vector<std::function<void(const Status&)>>> layer_callbacks;
  // GPU-side signal (FenceAccess::SetStreamWaiter): makes a given stream wait for the
  // operation's device work. Guarded by mu.
  std::function<Status(void* stream)> gpu_stream_waiter;
};

bool FenceAccess::Empty(const Fence& fence) { return fence.state_ == nullptr; }

std::function<Status(void*)> FenceAccess::StreamWaiter(const Fence& fence) {
  if (!fence.state_) return {};
  std::lock_guard<std::mutex> lock(fence.state_->mu);
  return fence.state_->gpu_stream_waiter;
}

void FenceAccess::SetStreamWaiter(const Fence& fence, std::function<Status(void*)> waiter) {
  if (!fence.state_) return;
  std::lock_guard<std::mutex> lock(fence.state_->mu);
  fence.state_->gpu_stream_waiter = std::move(waiter);
}

void FenceAccess::SetWaitSpin(const Fence& fence, uint32_t microseconds) {
  if (fence.state_) fence.state_->wait_spin_us.store(microseconds, std::memory_order_relaxed);
}

uint32_t FenceAccess::WaitSpin(const Fence& fence) {
  return fence.state_ ? fence.state_->wait_spin_us.load(std::memory_order_relaxed) : 0;
}

}  // namespace internal

using internal::FenceState;

Fence Fence::Completed(Status status) {
  FenceCompleter c;
  Fence f = c.fence();
  c.Complete(std::move(status));
  return f;
}

bool Fence::Ready() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

Status Fence::Wait(std::chrono::milliseconds timeout) const {
  if (!state_) return Status::OK();
  // Polls first when the producer asked for it (a GPU operation of a millisecond or two: a
  // sleeping waiter's wake-up would add tens of microseconds to it), then sleeps; the whole wait,
  // polling included, is bounded by `timeout`.
  std::chrono::milliseconds left = timeout;
  const uint32_t spin_us = state_->wait_spin_us.load(std::memory_order_relaxed);
  if (spin_us > 0 && !state_->fired.load(std::memory_order_acquire)) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    const Clock::time_point until =
        start + std::min<std::chrono::microseconds>(std::chrono::microseconds(spin_us), timeout);
    while (!state_->fired.load(std::memory_order_acquire) && Clock::now() < until) {
      std::this_thread::yield();
    }
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    left = spent < timeout ? timeout - spent : std::chrono::milliseconds(0);
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, left, [&] { return state_->done; })) {
    return Status::TimedOut("fence did not fire within " + std::to_string(timeout.count()) + " ms");
  }
  return state_->status;
}

Status Fence::status() const {
  if (!state_) return Status::OK();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done) return Status::FailedPrecondition("fence has not fired yet");
  return state_->status;
}

size_t Fence::num_layers() const {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->layer_done.size();
}

bool Fence::LayerReady(size_t layer) const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (layer >= state_->layer_done.size()) return state_->done;
  return state_->layer_done[layer] != 0;
}

Status Fence::WaitLayer(size_t layer, std::chrono::milliseconds timeout) const {
  if (!state_) return Status::OK();
  std::unique_lock<std::mutex> lock(state_->mu);
  if (layer >= state_->layer_done.size()) {
    return Status::InvalidArgument("layer: " + std::to_string(layer) + " (fence has " +
                                   std::to_string(state_->layer_done.size()) + " layers)");
  }
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->layer_done[layer] != 0; })) {
    return Status::TimedOut("layer fence " + std::to_string(layer) + " did not fire within " +
                            std::to_string(timeout.count()) + " ms");
  }
  return state_->layer_status[layer];
}

void Fence::OnComplete(std::function<void(const Status&)> fn) const {
  if (!state_) {
    fn(Status::OK());
    return;
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  if (state_->done) {
    Status s = state_->status;
    lock.unlock();
    fn(s);
    return;
  }
  state_->callbacks.push_back(std::move(fn));
}

Status Fence::OnLayerComplete(size_t layer, std::function<void(const Status&)> fn) const {
  if (!state_) {
    return Status::InvalidArgument("layer: " + std::to_string(layer) + " (fence has 0 layers)");
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  if (layer >= state_->layer_done.size()) {
    return Status::InvalidArgument("layer: " + std::to_string(layer) + " (fence has " +
                                   std::to_string(state_->layer_done.size()) + " layers)");
  }
  if (state_->layer_done[layer]) {
    Status s = state_->layer_status[layer];
    lock.unlock();
    fn(s);
    return Status::OK();
  }
  state_->layer_callbacks[layer].push_back(std::move(fn));
  return Status::OK();
}

Status Fence::StreamWait(void* cuda_stream) const {
  if (cuda_stream == nullptr) return Wait();
  if (!state_) return Status::OK();
  std::function<Status(void*)> waiter;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    // A fired fence needs no GPU wait: its operation's device work has finished.
    if (state_->done) return state_->status;
    waiter = state_->gpu_stream_waiter;
  }
  if (!waiter) {
    return Status::Unavailable(
        "Fence::StreamWait: this fence has no GPU-side signal (CPU-mode operation); pass a "
        "null stream to wait on the CPU");
  }
  return waiter(cuda_stream);
}

FenceCompleter::FenceCompleter(size_t num_layers) : state_(std::make_shared<FenceState>()) {
  state_->layer_done.assign(num_layers, 0);
  state_->layer_status.assign(num_layers, Status::OK());
  state_->layer_callbacks.resize(num_layers);
}

FenceCompleter& FenceCompleter::operator=(FenceCompleter&& other) noexcept {
  if (this != &other) {
    if (state_) Complete(Status::Aborted("fence completer replaced before completion"));
    state_ = std::move(other.state_);
  }
  return *this;
}

FenceCompleter::~FenceCompleter() {
  if (state_) Complete(Status::Aborted("operation abandoned before its fence fired"));
}

void FenceCompleter::CompleteLayer(size_t layer, Status status) {
  if (!state_) return;
  std::vector<std::function<void(const Status&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (layer >= state_->layer_done.size() || state_->layer_done[layer]) return;
    state_->layer_done[layer] = 1;
    state_->layer_status[layer] = status;
    callbacks.swap(state_->layer_callbacks[layer]);
  }
  state_->cv.notify_all();
  for (auto& cb : callbacks) cb(status);
}

void FenceCompleter::Complete(Status status) {
  if (!state_) return;
  std::vector<std::function<void(const Status&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->done) return;
    state_->done = true;
    state_->status = status;
    state_->fired.store(true, std::memory_order_release);
    for (size_t i = 0; i < state_->layer_done.size(); ++i) {
      if (!state_->layer_done[i]) {
        state_->layer_done[i] = 1;
        state_->layer_status[i] = status;
        // Layers fire before the whole fence: their callbacks run first.
        for (auto& cb : state_->layer_callbacks[i]) callbacks.push_back(std::move(cb));
        state_->layer_callbacks[i].clear();
      }
    }
    for (auto& cb : state_->callbacks) callbacks.push_back(std::move(cb));
    state_->callbacks.clear();
  }
  state_->cv.notify_all();
  for (auto& cb : callbacks) cb(status);
}

bool FenceCompleter::completed() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

}  // namespace cachepawl
