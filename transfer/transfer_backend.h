// Internal to the device mover: the backend that moves the bytes of planned operations.
// CPU backend: memcpy on the dispatcher thread. CUDA backend (transfer/cuda_backend.cc): kernels
// and copy engines on two streams per direction, completion on a thread per direction.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "transfer/transfer_plan.h"
#include "vocab/status.h"

namespace cachepawl {
struct DeviceMoverOptions;
}

namespace cachepawl::internal {

// The backend that moves the bytes: CPU (memcpy on the dispatcher thread) or CUDA.
class TransferBackend {
 public:
  virtual ~TransferBackend() = default;
  // Called for one direction at a time, in submission order: on the direction's dispatcher
  // thread, or (EnqueuesOnly backends) on a submitting thread that holds the direction's
  // dispatch turn. Runs or enqueues `op` and eventually completes op->completer (per layer, then
  // whole) exactly once, after the op's memory accesses ended, in submission order per direction.
  virtual void Dispatch(std::unique_ptr<PlannedOperation> op) = 0;
  // True when Dispatch only enqueues work (it never waits for the transfer), so a submitting
  // thread may call it itself, when CanDispatchHere() says so for that thread.
  virtual bool EnqueuesOnly() const { return false; }
  // Whether the calling (submitting) thread may call Dispatch itself now: CUDA: this mover's GPU
  // is already its current device and it has no CUDA error pending (the mover never changes an
  // engine thread's device, and an engine's error must not fail the mover's launch).
  virtual bool CanDispatchHere() const { return false; }
  // Called once on each direction's dispatcher thread before its first Dispatch (CUDA: makes
  // the mover's GPU current there).
  virtual void OnDispatcherThread() {}
  // Blocks until every dispatched operation has completed.
  virtual void Drain() = 0;
  // A function that makes a CUDA stream wait until operation `seq` of `direction` completed;
  // empty in CPU mode.
  virtual std::function<Status(void*)> StreamWaiter(Direction direction, uint64_t seq) = 0;
  // Counters.
  virtual uint64_t kernel_launches() const = 0;
  virtual uint64_t copy_calls() const = 0;
  virtual uint64_t execution_errors() const = 0;
};

// memcpy backend; one staging chunk of `chunk_bytes` host memory per direction.
std::unique_ptr<TransferBackend> MakeCpuBackend(const RecordMap* const maps[kNumKinds],
                                                uint64_t chunk_bytes);

// CUDA backend on GPU `device` (Unavailable in builds without CUDA).
StatusOr<std::unique_ptr<TransferBackend>> MakeCudaBackend(const RecordMap* const maps[kNumKinds],
                                                           const DeviceMoverOptions& options,
                                                           int device);

}  // namespace cachepawl::internal
