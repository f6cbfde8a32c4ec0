// HostArena: the host tier's memory. One pinned arena, sized in bytes, holding the slots of both
// kinds (KV pages and Mamba states) under one budget, neither statically partitioned.
//
// Memory: one mmap (anonymous; or, with options.shared, of a memfd that other processes map:
// tiers/host_arena_view.h), split into chunks of at most 1 GiB (the Regions() that io_uring
// registers as fixed buffers). Open() returns at once; a background thread first-touches each
// chunk with several threads and then pins it with cudaHostRegister, chunk by chunk (one huge
// registration stalls the driver). A chunk's slots become allocatable when the chunk is pinned;
// progress is readable (pinned_bytes(), WaitUntilPinned()). In CPU mode (no GPU, or
// options.pin == kOff) the arena is plain page-aligned memory and every chunk is usable at once.
// Close (the destructor) stops the pinning thread and unregisters every pinned chunk.
//
// Slots: a slot is RecordSlotBytes(layout, kind) bytes (tiers/host_memory.h: a 4 KiB header
// block, then the payload padded to 4 KiB), 4 KiB-aligned, never straddling two chunks.
// Allocation is best fit over free extents, so small KV slots fill holes and large extents stay
// whole for Mamba slots; fragmentation() says how many free bytes cannot hold a Mamba slot.
//
// Errors: Allocate() returns NoSpace when no pinned chunk has room (Busy when it would fit only
// in chunks that are still being pinned); Free() and CheckSlot() return InvalidArgument for a
// slot that is not allocated (or of the other kind). SlotData() of a slot that is not allocated
// is a bug of the caller (the pointer is computed, never dereferenced by the arena).
//
// Thread safety: every method may be called concurrently from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cuda/cuda_resources.h"
#include "cuda/gpu_runtime.h"
#include "tiers/host_memory.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {

struct HostArenaOptions {
  // Total bytes of the arena; rounded up to a multiple of 4 KiB. Must be > 0 and hold at least
  // one slot of the largest kind the layout has.
  uint64_t bytes = 0;
  // Bytes per chunk (pin unit and io_uring region): a multiple of 4 KiB in
  // [largest slot, 1 GiB]. 0 means min(1 GiB, bytes) rounded as needed.
  uint64_t chunk_bytes = 0;
  // Threads that first-touch each chunk before it is pinned (0: min(8, hardware threads)).
  uint32_t touch_threads = 0;
  // kAuto: pin when a GPU is usable, plain memory otherwise; kOn: Open fails with Unavailable
  // without a GPU; kOff: never pin (CPU mode).
  using Pin = cuda::GpuMode;
  Pin pin = Pin::kAuto;
  int device = 0;  // the GPU whose context pins the memory
  // Ask the kernel for transparent huge pages (faster touching and pinning).
  bool huge_pages = true;
  // Back the arena by a memfd (shared_fd()), so that attached processes map the same bytes
  // (an owner store: ipc/). Nothing is left on any file system when the last process goes.
  bool shared = false;

  // OK, or InvalidArgument naming the field and value at fault.
  Status Validate() const;
};

struct HostArenaStats {
  uint64_t capacity_bytes = 0;         // bytes of all chunks
  uint64_t pinned_bytes = 0;           // bytes of chunks usable for allocation
  uint64_t allocated_bytes = 0;        // bytes of allocated slots
  uint64_t free_bytes = 0;             // usable bytes not allocated
  uint64_t slots[kNumKinds] = {0, 0};  // allocated slots per kind
  // Free bytes in extents too small for one Mamba slot (0 for layouts without SSM layers).
  uint64_t fragmented_bytes = 0;
  // The largest free extent, in bytes.
  uint64_t largest_free_extent = 0;
  uint64_t allocate_no_space = 0;  // counters of error paths
  uint64_t allocate_busy = 0;
  uint64_t bad_frees = 0;
  uint64_t pin_failures = 0;
};

class HostArena final : public HostSlotMemory {
 public:
  // Maps the arena and starts pinning in the background; returns at once.
  // Errors: InvalidArgument (options, layout), IOError (mmap), Unavailable (Pin::kOn, no GPU).
  static StatusOr<std::unique_ptr<HostArena>> Open(const ModelLayout& layout,
                                                   const HostArenaOptions& options);
  ~HostArena() override;
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  // A slot of RecordSlotBytes(layout, kind). NoSpace when full, Busy when only chunks still
  // being pinned could hold it, InvalidArgument when the layout has no such kind.
  StatusOr<HostSlotId> Allocate(Kind kind);
  // Up to `count` slots of `kind` for one operation, appended to `out` in address order within
  // each run: adjacent slots where the free space allows (the smallest free extent that holds
  // all of them, else the largest extents first), so that the device mover moves them as few
  // large copies. OK when all `count` were allocated; otherwise the status Allocate() would
  // return (NoSpace, Busy, InvalidArgument), with the slots allocated so far in `out` (each
  // one is freed by Free() as usual).
  Status AllocateRun(Kind kind, size_t count, std::vector<HostSlotId>* out);
  // Returns the slot to the arena. InvalidArgument when `slot` is not allocated.
  Status Free(HostSlotId slot);
  // OK when `slot` is allocated and holds `kind`; InvalidArgument naming the slot otherwise.
  Status CheckSlot(HostSlotId slot, Kind kind) const override;

  // HostMemory.
  std::byte* SlotData(HostSlotId slot) override;
  uint64_t SlotBytes(HostSlotId slot) const override;
  std::vector<std::span<std::byte>> Regions() const override;
  int RegionOf(HostSlotId slot) const override;

  const ModelLayout& layout() const override { return layout_; }
  uint64_t slot_bytes(Kind kind) const { return slot_bytes_[static_cast<int>(kind)]; }
  // True when chunks are (or are being) registered with CUDA; false in CPU mode.
  bool pinning() const override { return pinning_; }
  uint64_t capacity_bytes() const { return capacity_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  // The memfd behind the arena (options.shared), owned by the arena; -1 otherwise.
  int shared_fd() const { return shared_fd_; }
  uint64_t pinned_bytes() const { return pinned_bytes_.load(std::memory_order_acquire); }
  // Blocks until every chunk is usable (or pinning failed). Returns the pinning status:
  // OK, an error of cudaHostRegister, or TimedOut.
  Status WaitUntilPinned(std::chrono::milliseconds timeout = std::chrono::minutes(10)) const;
  // Seconds from Open to the last chunk being pinned (0 while still pinning).
  double pin_seconds() const;
  HostArenaStats stats() const;
  // Usable (pinned) bytes not allocated: stats().free_bytes, without walking the free lists.
  uint64_t free_bytes() const;

 private:
  HostArena(const ModelLayout& layout, const HostArenaOptions& options);
  Status MapAndStart();
  void PinLoop();
  void MakeChunkUsable(size_t chunk);                         // requires mu_
  void InsertFree(uint64_t unit, uint64_t units);             // requires mu_
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);  // requires mu_
  // Takes `n` slots of `kind` from the front of the free extent at `start` of `len` units.
  void CarveLocked(Kind kind, uint64_t start, uint64_t len, uint64_t n,
                   std::vector<HostSlotId>* out);  // requires mu_
  Status NoRoomLocked(Kind kind);                  // requires mu_

  const ModelLayout layout_;
  const HostArenaOptions options_;
  uint64_t slot_bytes_[kNumKinds] = {0, 0};
  uint64_t slot_units_[kNumKinds] = {0, 0};  // in 4 KiB units; 0 when the layout lacks the kind
  uint64_t capacity_ = 0;
  uint64_t chunk_bytes_ = 0;
  size_t num_chunks_ = 0;
  std::byte* base_ = nullptr;
  int shared_fd_ = -1;
  bool pinning_ = false;

  mutable std::mutex mu_;
  mutable std::condition_variable pinned_cv_;
  // Free extents of usable chunks, in 4 KiB units: start -> length, and (length, start).
  std::map<uint64_t, uint64_t> free_by_start_;            // guarded by mu_
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // guarded by mu_
  // Per 4 KiB unit: 0 free or interior, 1 + kind at the first unit of an allocated slot.
  std::vector<uint8_t> unit_state_;     // guarded by mu_
  std::vector<char> chunk_usable_;      // guarded by mu_
  size_t chunks_done_ = 0;              // guarded by mu_ (usable or failed)
  Status pin_status_;                   // guarded by mu_
  uint64_t allocated_units_ = 0;        // guarded by mu_
  uint64_t slots_[kNumKinds] = {0, 0};  // guarded by mu_
  uint64_t allocate_no_space_ = 0;      // guarded by mu_
  uint64_t allocate_busy_ = 0;          // guarded by mu_
  mutable uint64_t bad_frees_ = 0;      // guarded by mu_
  uint64_t pin_failures_ = 0;           // guarded by mu_
  // Per chunk; empty until pinned. Written by the pin thread, cleared after it joined.
  std::vector<cuda::HostRegistration> chunk_registrations_;

  std::atomic<uint64_t> pinned_bytes_{0};
  std::atomic<bool> stop_{false};
  std::chrono::steady_clock::time_point open_time_;
  std::atomic<int64_t> pin_nanos_{0};
  std::thread pin_thread_;
};

}  // namespace cachepawl
