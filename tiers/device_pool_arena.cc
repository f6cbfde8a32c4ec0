#include "tiers/device_pool_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "cuda/gpu_runtime.h"
#include "tiers/host_memory.h"

namespace cachepawl {

Status DevicePoolArenaOptions::Validate() const {
  if (budget_bytes == 0) {
    return Status::InvalidArgument("device_pool_arena.budget_bytes: 0 (must be > 0)");
  }
  if (device < 0) {
    return Status::InvalidArgument("device_pool_arena.device: " + std::to_string(device) +
                                   " (must be >= 0)");
  }
  CACHEPAWL_RETURN_IF_ERROR(cuda::ValidateGpuMode(use_gpu, "device_pool_arena.use_gpu"));
  return Status::OK();
}

DevicePoolGeometry DevicePoolGeometryFor(const ModelLayout& layout, uint64_t budget_bytes) {
  DevicePoolGeometry g;
  g.kv_bytes = layout.has_attention() ? RoundUpToAlignment(layout.KvPageBytes(), 256) : 0;
  g.state_bytes = layout.has_ssm() ? RoundUpToAlignment(layout.MambaSlotBytes(), 256) : 0;
  const uint64_t kv = g.kv_bytes;
  const uint64_t st = g.state_bytes;
  g.unit_bytes = kv != 0 ? kv : st;
  g.group_units = (kv != 0 && st != 0) ? (st + kv - 1) / kv : 1;
  g.num_units = g.unit_bytes != 0 ? budget_bytes / g.unit_bytes : 0;
  g.num_groups = g.num_units / g.group_units;
  return g;
}

StatusOr<std::unique_ptr<DevicePoolArena>> DevicePoolArena::Create(
    const ModelLayout& layout, const DevicePoolArenaOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  CACHEPAWL_RETURN_IF_ERROR(layout.Validate().WithContext("device pool arena layout"));
  CACHEPAWL_ASSIGN_OR_RETURN(
      const bool gpu,
      cuda::ResolveGpuMode(options.use_gpu, "device_pool_arena.use_gpu", options.device));
  std::unique_ptr<DevicePoolArena> a(new DevicePoolArena());
  a->layout_ = layout;
  const DevicePoolGeometry geometry = DevicePoolGeometryFor(layout, options.budget_bytes);
  const uint64_t kv = geometry.kv_bytes;
  const uint64_t st = geometry.state_bytes;
  a->unit_bytes_ = geometry.unit_bytes;
  a->group_units_ = geometry.group_units;
  a->num_units_ = geometry.num_units;
  a->num_groups_ = geometry.num_groups;
  const uint64_t need = std::max(kv, st == 0 ? 0 : a->group_units_ * a->unit_bytes_);
  if (options.budget_bytes < need || a->num_units_ == 0 || (st != 0 && a->num_groups_ == 0)) {
    return Status::InvalidArgument(
        "device_pool_arena.budget_bytes: " + std::to_string(options.budget_bytes) +
        " (smaller than one slot of " + std::to_string(need) + " bytes)");
  }
  a->bytes_ = a->num_units_ * a->unit_bytes_;
  a->on_gpu_ = gpu;
  if (gpu) {
    a->device_ = options.device;
    CACHEPAWL_ASSIGN_OR_RETURN(a->device_memory_,
                               cuda::DeviceBuffer::Allocate(options.device, a->bytes_));
    a->base_ = a->device_memory_.data();
  } else {
    a->device_ = -1;
    void* p = mmap(nullptr, a->bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return Status::FromErrno(
          "device pool arena (CPU mode): mmap of " + std::to_string(a->bytes_) + " bytes", errno);
    }
    a->base_ = static_cast<std::byte*>(p);
  }
  const uint64_t pages = kv != 0 ? a->num_units_ : 0;
  const uint64_t states = st != 0 ? a->num_groups_ : 0;
  a->description_ =
      DevicePoolDescription::BlockContiguous(layout, a->device_, a->base_, pages, a->unit_bytes_,
                                             a->base_, states, a->group_units_ * a->unit_bytes_);
  a->description_.kinds_share_memory = true;
  CACHEPAWL_RETURN_IF_ERROR(a->description_.Validate(layout).WithContext("device pool arena"));

  const bool tail = a->num_units_ % a->group_units_ != 0;
  a->unit_used_.assign(a->num_units_, 0);
  a->group_used_.assign(a->num_groups_ + (tail ? 1 : 0), 0);
  a->group_mamba_.assign(a->num_groups_ + (tail ? 1 : 0), 0);
  for (uint64_t g = 0; g < a->num_groups_; ++g) a->free_groups_.insert(a->free_groups_.end(), g);
  if (tail) a->partial_groups_.insert(a->num_groups_);
  return a;
}

DevicePoolArena::~DevicePoolArena() {
  if (base_ != nullptr && !on_gpu_) munmap(base_, bytes_);  // device_memory_ frees itself
}

void DevicePoolArena::Reclassify(uint64_t g) {
  free_groups_.erase(g);
  partial_groups_.erase(g);
  if (g == num_groups_) {  // the tail: KV only
    if (group_used_[g] < num_units_ - num_groups_ * group_units_) partial_groups_.insert(g);
    return;
  }
  if (group_mamba_[g]) return;
  if (group_used_[g] == 0) {
    free_groups_.insert(g);
  } else if (group_used_[g] < group_units_) {
    partial_groups_.insert(g);
  }
}

bool DevicePoolArena::IsAllocated(Kind kind, uint64_t slot) const {
  return kind == Kind::kKV ? (slot < num_units_ && unit_used_[slot])
                           : (slot < num_groups_ && group_mamba_[slot]);
}

StatusOr<uint64_t> DevicePoolArena::Allocate(Kind kind) {
  if (kind == Kind::kKV ? !layout_.has_attention() : !layout_.has_ssm()) {
    return Status::InvalidArgument("device pool arena: the layout has no " +
                                   std::string(KindName(kind)) + " slots");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (kind == Kind::kMamba) {
    if (free_groups_.empty()) {
      ++allocate_no_space_;
      return Status::NoSpace("device pool arena: no free group of " +
                             std::to_string(group_units_ * unit_bytes_) +
                             " bytes for a Mamba state");
    }
    const uint64_t g = *free_groups_.rbegin();
    group_mamba_[g] = 1;
    Reclassify(g);
    ++slots_[1];
    return g;
  }
  uint64_t g;
  if (!partial_groups_.empty()) {
    g = *partial_groups_.begin();
  } else if (!free_groups_.empty()) {
    g = *free_groups_.begin();
  } else {
    ++allocate_no_space_;
    return Status::NoSpace("device pool arena: no free KV page (" + std::to_string(slots_[0]) +
                           " pages, " + std::to_string(slots_[1]) + " states allocated)");
  }
  const uint64_t first = g * group_units_;
  const uint64_t last = std::min(num_units_, first + group_units_);
  for (uint64_t u = first; u < last; ++u) {
    if (!unit_used_[u]) {
      unit_used_[u] = 1;
      ++group_used_[g];
      Reclassify(g);
      ++slots_[0];
      return u;
    }
  }
  return Status::Internal("device pool arena: group " + std::to_string(g) +
                          " listed with room but full");
}

Status DevicePoolArena::CheckSlot(Kind kind, uint64_t slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!IsAllocated(kind, slot)) {
    return Status::InvalidArgument("device pool arena: " + std::string(KindName(kind)) + " slot " +
                                   std::to_string(slot) + " is not allocated");
  }
  return Status::OK();
}

Status DevicePoolArena::Free(Kind kind, uint64_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!IsAllocated(kind, slot)) {
    ++bad_frees_;
    return Status::InvalidArgument("device pool arena: Free of " + std::string(KindName(kind)) +
                                   " slot " + std::to_string(slot) + ", which is not allocated");
  }
  uint64_t g;
  if (kind == Kind::kKV) {
    unit_used_[slot] = 0;
    g = slot / group_units_;
    --group_used_[g];
  } else {
    g = slot;
    group_mamba_[g] = 0;
  }
  --slots_[static_cast<int>(kind)];
  Reclassify(g);
  return Status::OK();
}

std::byte* DevicePoolArena::SlotRecord(Kind kind, uint64_t slot) const {
  return base_ + slot * unit_bytes_ * (kind == Kind::kKV ? 1 : group_units_);
}

DevicePoolArenaStats DevicePoolArena::stats() const {
  DevicePoolArenaStats s;
  std::lock_guard<std::mutex> lock(mu_);
  s.capacity_bytes = bytes_;
  s.slots[0] = slots_[0];
  s.slots[1] = slots_[1];
  s.allocated_bytes = (slots_[0] + slots_[1] * group_units_) * unit_bytes_;
  if (layout_.has_ssm() && layout_.has_attention()) {
    for (uint64_t g : partial_groups_) {
      const uint64_t units =
          g == num_groups_ ? num_units_ - num_groups_ * group_units_ : group_units_;
      s.fragmented_bytes += (units - group_used_[g]) * unit_bytes_;
    }
  }
  s.allocate_no_space = allocate_no_space_;
  s.bad_frees = bad_frees_;
  return s;
}

}  // namespace cachepawl
