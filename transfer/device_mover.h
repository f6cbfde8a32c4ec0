// DeviceMover: runs Operations of CacheTransferUnits between the device tier (a device pool)
// and the host tier (a HostArena), in both directions at once, and reports each through a Fence.
//
//   Save: units {kind, src = {Device, page or state index}, dst = {Host, HostSlotId}}
//   Load: units {kind, src = {Host, HostSlotId}, dst = {Device, page or state index}}
// (Host<->Disk units belong to the disk tier; this mover refuses them.)
//
// Data path (GPU mode). The PCIe link is crossed by copy engines in large contiguous records;
// SMs only move bytes within HBM. Save: a gather kernel copies each unit's scattered
// layer-first pieces into a page-first record in a device staging buffer, then copy engines move
// the records to the host slots' payloads (runs of adjacent slots as one 2-D copy). Load: the
// reverse, with a scatter kernel. The staging buffer of each direction is bounded
// (options.staging_bytes) and cut into a ring of options.staging_chunks chunks (two by default:
// double buffering), so the kernel of one chunk overlaps the copies of another and operations of
// any size stream through it. While the model runs long kernels (a persistent matrix product
// holds every SM until it ends), a gather or scatter launch gets SMs only at a kernel boundary
// and covers one chunk, so the chunk size sets the rate moved meanwhile (docs/PERFORMANCE.md,
// Transfer, has the rates per chunk size). Pools whose records are contiguous on the device
// (block-contiguous, DevicePoolArena) skip staging: copy engines move whole records. Each direction
// has its own two non-blocking streams (copy, kernel) at options' priority; operations of one
// direction run in submission order; the two directions overlap. An operation's kernels and
// copies are enqueued by its direction's dispatcher thread, or by the submitting thread itself
// when nothing of that direction is queued (options.inline_dispatch); a completion thread per
// direction sees each operation's end (polling it first: options.completion_spin_us) and fires
// its fence.
//
// CPU mode (no GPU, options.mode == kOff): the same planning and staging, with memcpy on one
// worker thread per direction; the device pool is host memory (DevicePoolDescription::device
// == -1). Every behaviour but the CUDA calls is the same, so CI tests it.
//
// Fences (vocab/fence.h): Submit returns one per operation; it always fires. Success means
// every byte of every unit landed. Errors (a unit that names a tier pair other than
// Device<->Host, a device slot out of range, a host slot that is not allocated or holds the other
// kind, a destination named twice, a CUDA error) complete it with a non-OK status; a failed
// operation may have written any subset of its destinations. Load with per_layer_fences: the
// fence has one sub-fence per attention layer, fired once that layer's pages and every Mamba unit
// of the operation have landed. Fence::StreamWait(stream) makes a CUDA stream wait for the
// operation on the GPU (a 32-bit counter in pinned memory, written by the direction's last
// stream with cuStreamWriteValue32 and awaited with cuStreamWaitValue32). It never waits for the
// transfer on the CPU; called before the mover's dispatcher has enqueued the operation, it
// blocks until that enqueue (microseconds: the dispatcher never waits on the GPU), because a
// stream wait enqueued ahead of its producer can deadlock in a shared hardware queue. The waiting
// stream is released on error too: check the fence's status before trusting the bytes.
//
// Ownership: the mover borrows the host memory (a HostArena, or a HostArenaView) and the device
// pool memory; both must outlive it. The caller must keep every host and device slot named by an
// operation allocated, and must not read or write its destination bytes, until the operation's
// fence fires (the store's locks). A stream that StreamWait()ed must be synchronized before the
// mover and the last copy of that fence are destroyed.
//
// Thread safety: Submit(), stats() and every Fence method may be called concurrently from any
// number of threads. Operations of one direction run in the order in which their Submit calls
// entered the direction's queue (for calls from one thread: call order). The destructor waits until
// every submitted operation's fence has fired; no Submit may run concurrently with it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "cuda/gpu_runtime.h"
#include "tiers/host_arena.h"
#include "transfer/transfer_queue.h"
#include "transfer/transfer_unit.h"
#include "vocab/device_pool.h"
#include "vocab/fence.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl {

namespace internal {
struct PlannedOperation;
struct RecordMap;
class TransferBackend;
}  // namespace internal

// Tests only: the CUDA call sites of the GPU backend where DeviceMoverOptions::cuda_fault can
// make a call fail.
enum class CudaFaultSite : uint8_t {
  kStagingAlloc,  // cudaMalloc of a direction's staging ring (when the mover is created)
  kCopy,          // a copy-engine call (cudaMemcpyAsync, cudaMemcpy2DAsync, cudaMemcpyBatchAsync)
  kKernelLaunch,  // a gather/scatter kernel launch
  kCompletion,    // the wait for an operation's last event: an error the GPU raised meanwhile
};

struct DeviceMoverOptions {
  // kAuto: GPU mode when the pool is on a GPU (description.device >= 0), CPU mode otherwise;
  // kOn: GPU mode, Unavailable without a GPU, and the pool must be on a GPU; kOff: CPU mode,
  // which requires a host-memory pool (description.device == -1).
  using Mode = cuda::GpuMode;
  Mode mode = Mode::kAuto;
  // CUDA stream priorities of the Save and Load streams (lower numbers run first; the
  // device's range is typically [-5, 0]; values outside it are clamped). 0 = lowest priority.
  int save_priority = 0;
  int load_priority = 0;
  // Device staging bytes per direction, a ring of `staging_chunks` chunks of staging_bytes /
  // staging_chunks bytes (rounded down to 4 KiB, at least tile_bytes). The mover allocates it
  // once per direction (VRAM in GPU mode; one chunk of host memory in CPU mode). Smaller chunks
  // start an operation sooner; larger ones move more per kernel boundary while the model runs
  // (see the data path above).
  uint64_t staging_bytes = uint64_t{256} << 20;
  uint32_t staging_chunks = 2;
  // Gather/scatter work unit: the largest piece one warp copies at once; a record is split at
  // tile boundaries when it does not fit in a staging chunk. A multiple of 4 KiB.
  uint64_t tile_bytes = uint64_t{64} << 10;
  // CTAs of each gather/scatter kernel launch (fewer CTAs leave more SMs to the serving engine's
  // model).
  uint32_t kernel_ctas = 16;
  // Merge copies of adjacent records into one copy-engine call (2-D copies for records at a
  // constant pitch); false: one call per record piece (batched with cudaMemcpyBatchAsync).
  bool coalesce_copies = true;
  // GPU mode, the fixed cost of an operation: a sleeping thread's wake-up costs tens of
  // microseconds (more on a virtual machine), a noticeable part of a 1 ms operation. Each
  // direction's completion thread polls the end of the operation it waits for up to
  // completion_spin_us before it sleeps on it, and Fence::Wait on an operation's fence polls up to
  // wait_spin_us before it sleeps; each costs a core while it polls. 0: sleep at once. At most
  // 1 s each. CPU mode ignores both.
  uint32_t completion_spin_us = 20000;
  uint32_t wait_spin_us = 2000;
  // GPU mode: Submit enqueues an operation's copies and kernels on the calling thread when its
  // direction has nothing queued nor being enqueued and the thread already has the mover's GPU
  // current with no CUDA error pending, instead of waking the direction's dispatcher thread (the
  // caller pays the enqueue: tens of microseconds; its current device is never changed). Order is
  // kept either way. false: always the dispatcher. CPU mode always hands operations to the
  // dispatcher (there the dispatch is the memcpy itself), and so does a mover with a
  // fault_injection seam.
  bool inline_dispatch = true;
  // Tests only: called on the dispatcher thread before each operation runs (it may block there
  // while the submitting thread goes on: no operation is dispatched inline); a non-OK status
  // fails the operation as a CUDA error would (after the operations before it completed).
  std::function<Status(const Operation&)> fault_injection;
  // Tests only (GPU mode): called before each CUDA call of `site`; a non-zero return, a
  // cudaError_t value, makes the backend act as if that call had returned it (kCompletion: as if
  // the operation's done event had reported it). The operation's fence then fires with that
  // error, as a real failure of the call would make it.
  std::function<int(CudaFaultSite)> cuda_fault;

  // OK, or InvalidArgument naming the field and value at fault.
  Status Validate() const;
  // Bytes of one staging chunk.
  uint64_t staging_chunk_bytes() const {
    return staging_bytes / (staging_chunks == 0 ? 1 : staging_chunks) / 4096 * 4096;
  }
};

struct DeviceMoverStats {
  uint64_t submitted[2] = {0, 0};  // per Direction
  uint64_t completed_ok[2] = {0, 0};
  uint64_t failed[2] = {0, 0};
  uint64_t units[2] = {0, 0};
  uint64_t bytes[2] = {0, 0};       // record bytes moved by successful operations
  uint64_t invalid_operations = 0;  // refused at Submit
  uint64_t execution_errors = 0;    // CUDA errors and injected faults
  uint64_t staged_chunks = 0;       // staging chunks filled
  uint64_t kernel_launches = 0;
  uint64_t copy_calls = 0;  // copy-engine calls (a 2-D run counts once)
};

class DeviceMover final : public TransferQueue {
 public:
  // Errors: InvalidArgument (options, layout, a pool description that fails Validate, a pool on
  // another GPU than the mode allows), Unavailable (kOn without a GPU), Internal (CUDA setup).
  static StatusOr<std::unique_ptr<DeviceMover>> Create(const ModelLayout& layout,
                                                       const DevicePoolDescription& pool,
                                                       HostSlotMemory* host,
                                                       const DeviceMoverOptions& options);
  ~DeviceMover();
  DeviceMover(const DeviceMover&) = delete;
  DeviceMover& operator=(const DeviceMover&) = delete;

  // Queues `op` and returns its fence at once (it never waits for the transfer). An operation
  // that fails validation returns a fence that has already fired with InvalidArgument naming
  // the unit (e.g. "units[4].src.slot: 9000 (the pool has 4096 pages)"). An empty operation
  // returns a fence that has fired with OK.
  Fence Submit(Operation op) override;

  bool gpu_mode() const override { return gpu_; }
  const ModelLayout& layout() const { return layout_; }
  DeviceMoverStats stats() const;

 private:
  struct DirectionQueue;
  DeviceMover(const ModelLayout& layout, const DevicePoolDescription& pool, HostSlotMemory* host,
              const DeviceMoverOptions& options);
  Status Validate(const Operation& op) const;
  std::unique_ptr<internal::PlannedOperation> Plan(Operation op) const;
  void DispatchLoop(int direction);
  // Runs `op` through the fault seam and the backend; the caller holds the direction's turn.
  void DispatchOne(std::unique_ptr<internal::PlannedOperation> op);

  const ModelLayout layout_;
  const DevicePoolDescription pool_;
  HostSlotMemory* const host_;
  const DeviceMoverOptions options_;
  bool gpu_ = false;
  bool inline_dispatch_ = false;  // GPU mode with an enqueue-only backend and the option on
  std::unique_ptr<internal::RecordMap> maps_[kNumKinds];
  std::unique_ptr<internal::TransferBackend> backend_;
  std::unique_ptr<DirectionQueue> queues_[2];
  std::atomic<uint64_t> invalid_operations_{0};
  std::atomic<uint64_t> staged_chunks_{0};
};

}  // namespace cachepawl
