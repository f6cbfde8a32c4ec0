// Fence: the completion handle of one operation (a batch of CacheTransferUnits).
//
// A Fence is a cheap, copyable, thread-safe handle to shared state. The side that runs the
// operation holds a FenceCompleter and calls Complete(status) exactly once; every Fence copy
// then sees Ready() == true and the same status. Invariant 5: every operation's fence
// completes, with success or an error, whatever a tier does; a FenceCompleter destroyed
// without Complete() completes its fence with Aborted, so no waiter can hang.
//
// Per-layer fences: an operation may carry `layers` sub-fences (Load: attention layer i
// may start when its pages have landed). CompleteLayer(i) fires one; Complete() fires all
// that are still pending with the operation's status.
//
// GPU: StreamWait(stream) makes a CUDA stream wait for the fence without blocking the calling
// CPU thread (the mechanism is in transfer/cuda_backend.cc: cuStreamWaitValue32 on a counter). In
// CPU mode (no GPU) `stream` must be nullptr and StreamWait blocks until the fence fires.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "vocab/status.h"

namespace cachepawl {

namespace internal {
struct FenceState;  // shared by a FenceCompleter and its Fences (defined in fence.cc)
class FenceAccess;  // what the library attaches to a fence (vocab/internal/fence_access.h)
}  // namespace internal

class Fence {
 public:
  Fence() = default;  // an empty fence: Ready() is true, status() is OK (nothing to wait for)

  // Already completed with `status`.
  static Fence Completed(Status status);

  bool Ready() const;
  // Blocks until ready or `timeout` passes; returns the operation's status, or TimedOut. A GPU
  // operation's fence polls for a bounded time before it sleeps (DeviceMoverOptions::
  // wait_spin_us): the calling thread keeps its core meanwhile.
  Status Wait(std::chrono::milliseconds timeout = std::chrono::hours(24)) const;
  // The operation's status once Ready(); FailedPrecondition before.
  Status status() const;

  // Number of per-layer sub-fences (0 when the operation has none).
  size_t num_layers() const;
  bool LayerReady(size_t layer) const;
  Status WaitLayer(size_t layer, std::chrono::milliseconds timeout = std::chrono::hours(24)) const;

  // Runs `fn(status)` once the fence fires (at once, on this thread, if it already has);
  // otherwise on the completing thread. `fn` must not block.
  void OnComplete(std::function<void(const Status&)> fn) const;
  // Runs `fn(status)` once sub-fence `layer` fires (at once, on this thread, if it already has;
  // otherwise on the thread that fires it). `fn` must not block. InvalidArgument (and `fn` is
  // not run) when the fence has no such layer.
  Status OnLayerComplete(size_t layer, std::function<void(const Status&)> fn) const;

  // Makes `cuda_stream` (a cudaStream_t) wait for this fence without blocking the CPU.
  // nullptr: waits on the CPU (CPU mode). Errors: Unavailable when the build or host has no
  // GPU and a non-null stream is given.
  Status StreamWait(void* cuda_stream) const;

 private:
  friend class FenceCompleter;
  friend class internal::FenceAccess;
  explicit Fence(std::shared_ptr<internal::FenceState> s) : state_(std::move(s)) {}
  std::shared_ptr<internal::FenceState> state_;
};

// The producing side. Movable, not copyable.
class FenceCompleter {
 public:
  explicit FenceCompleter(size_t num_layers = 0);
  FenceCompleter(FenceCompleter&&) noexcept = default;
  FenceCompleter& operator=(FenceCompleter&&) noexcept;
  FenceCompleter(const FenceCompleter&) = delete;
  FenceCompleter& operator=(const FenceCompleter&) = delete;
  ~FenceCompleter();  // completes with Aborted if Complete() was never called

  Fence fence() const { return Fence(state_); }
  // Fires one layer's sub-fence with `status` (ignored when it already fired).
  void CompleteLayer(size_t layer, Status status = Status::OK());
  // Fires the fence and every pending layer; the first call wins, later calls are ignored.
  void Complete(Status status);
  bool completed() const;

 private:
  std::shared_ptr<internal::FenceState> state_;
};

}  // namespace cachepawl
