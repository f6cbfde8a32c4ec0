// DevicePoolArena: store-owned device memory holding KV pages and Mamba states under one VRAM
// budget, for engines that delegate their L1 to the store, and for tools and tests. In CPU mode
// (no GPU, or options.use_gpu == kOff) the "device" memory is ordinary host memory, so every
// code path above it runs in CI.
//
// Layout: the budget is cut into units of one KV page record (rounded up to 256 bytes); a Mamba
// state takes a group of k consecutive units (k = ceil(state record / unit)), aligned to k. KV
// page index p is unit p; Mamba slot index j is group j. description() is a block-contiguous
// DevicePoolDescription (every page and state is one record in the layout's page-first order),
// so the device mover moves them with copy engines alone. KV pages fill partly used groups
// first, then free groups from the low end; Mamba states take free groups from the high end;
// fragmentation is the free bytes in partly used groups.
//
// Errors: Allocate returns NoSpace when nothing fits; Free returns InvalidArgument for a slot
// that is not allocated (or of the other kind).
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "cuda/cuda_resources.h"
#include "cuda/gpu_runtime.h"
#include "vocab/device_pool.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {

// How a budget is cut into units and groups (the cut described above). Create uses it;
// `cachepawl info` reports what a budget holds with it.
struct DevicePoolGeometry {
  uint64_t kv_bytes = 0;     // a KV page record rounded up to 256 B; 0 without attention layers
  uint64_t state_bytes = 0;  // a Mamba state record rounded up to 256 B; 0 without SSM layers
  uint64_t unit_bytes = 0;   // kv_bytes (state_bytes when no KV)
  uint64_t group_units = 1;  // units a Mamba state takes
  uint64_t num_units = 0;    // = the most KV pages the budget holds
  uint64_t num_groups = 0;   // = the most Mamba states the budget holds
};
// Assumes layout.Validate() is OK.
DevicePoolGeometry DevicePoolGeometryFor(const ModelLayout& layout, uint64_t budget_bytes);

struct DevicePoolArenaOptions {
  uint64_t budget_bytes = 0;  // > 0; must hold at least one slot of each kind the layout has
  int device = 0;             // GPU index (ignored in CPU mode)
  // kAuto: device memory when a GPU is usable, host memory (CPU mode) otherwise; kOn: Create
  // fails with Unavailable without a GPU; kOff: host memory.
  using UseGpu = cuda::GpuMode;
  UseGpu use_gpu = UseGpu::kAuto;
  Status Validate() const;
};

struct DevicePoolArenaStats {
  uint64_t capacity_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t slots[kNumKinds] = {0, 0};
  uint64_t fragmented_bytes = 0;  // free bytes that cannot hold a Mamba state
  uint64_t allocate_no_space = 0;
  uint64_t bad_frees = 0;
};

class DevicePoolArena {
 public:
  static StatusOr<std::unique_ptr<DevicePoolArena>> Create(const ModelLayout& layout,
                                                           const DevicePoolArenaOptions& options);
  ~DevicePoolArena();
  DevicePoolArena(const DevicePoolArena&) = delete;
  DevicePoolArena& operator=(const DevicePoolArena&) = delete;

  // A free KV page index or Mamba state slot index (the device slot of a CacheTransferUnit).
  StatusOr<uint64_t> Allocate(Kind kind);
  Status Free(Kind kind, uint64_t slot);
  // OK when `slot` of `kind` is allocated.
  Status CheckSlot(Kind kind, uint64_t slot) const;

  const DevicePoolDescription& description() const { return description_; }
  bool on_gpu() const { return on_gpu_; }
  // Address of a slot's record (device memory, or host memory in CPU mode).
  std::byte* SlotRecord(Kind kind, uint64_t slot) const;
  DevicePoolArenaStats stats() const;

 private:
  DevicePoolArena() = default;
  // Moves group g between the free and partly-used sets after its use count changed.
  void Reclassify(uint64_t g);  // requires mu_
  // True when `slot` of `kind` is in range and allocated.
  bool IsAllocated(Kind kind, uint64_t slot) const;  // requires mu_

  ModelLayout layout_;
  bool on_gpu_ = false;
  int device_ = -1;
  cuda::DeviceBuffer device_memory_;  // GPU mode
  std::byte* base_ = nullptr;         // device_memory_, or an anonymous mapping in CPU mode
  uint64_t bytes_ = 0;
  uint64_t unit_bytes_ = 0;   // one KV page (or one state when the layout has no attention)
  uint64_t group_units_ = 1;  // units per Mamba state
  uint64_t num_units_ = 0;
  uint64_t num_groups_ = 0;  // full groups; units past num_groups_ * group_units_ are the tail
  DevicePoolDescription description_;

  mutable std::mutex mu_;
  std::vector<uint8_t> unit_used_;      // guarded by mu_: 1 when a KV page holds the unit
  std::vector<uint32_t> group_used_;    // guarded by mu_: KV units used per group (+ tail)
  std::vector<uint8_t> group_mamba_;    // guarded by mu_: 1 when a Mamba state holds it
  std::set<uint64_t> free_groups_;      // guarded by mu_
  std::set<uint64_t> partial_groups_;   // guarded by mu_ (the tail is always here)
  uint64_t slots_[kNumKinds] = {0, 0};  // guarded by mu_
  uint64_t allocate_no_space_ = 0;      // guarded by mu_
  uint64_t bad_frees_ = 0;              // guarded by mu_
};

}  // namespace cachepawl
