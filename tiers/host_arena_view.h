// HostArenaView: another process's mapping of an owner's shared HostArena (HostArenaOptions::
// shared), so that an attached client's device mover copies straight between its GPU and the
// owner's host slots (ipc/attached_store.h). The view maps the memfd the owner passed, and in GPU
// mode registers it with CUDA chunk by chunk (as the arena does) before Open returns.
//
// Slots: the owner allocates them and names them by id (the 4 KiB unit of their first byte, as
// HostArena does); the view only computes addresses. CheckSlot accepts a slot whose record of the
// kind lies within one chunk of the mapping: the owner's bookkeeping (which slots a transfer may
// name, and until when) is the owner's, and it names only slots it holds for that transfer.
//
// Errors: Open returns InvalidArgument (geometry that does not fit the layout), IOError (mmap,
// fstat), or the registration's error. Thread safety: every method may be called concurrently.
#pragma once

#include <memory>
#include <vector>

#include "cuda/cuda_resources.h"
#include "tiers/host_memory.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl {

struct HostArenaGeometry {
  uint64_t capacity_bytes = 0;  // the arena's bytes (the memfd's size)
  uint64_t chunk_bytes = 0;     // its chunks (a slot never straddles two)
};

class HostArenaView final : public HostSlotMemory {
 public:
  // Maps `fd` (the view keeps its own duplicate; the caller keeps `fd`). `pin`: register the
  // mapping with CUDA on `device` (GPU mode).
  static StatusOr<std::unique_ptr<HostArenaView>> Open(const ModelLayout& layout, int fd,
                                                       const HostArenaGeometry& geometry, bool pin,
                                                       int device);
  ~HostArenaView() override;
  HostArenaView(const HostArenaView&) = delete;
  HostArenaView& operator=(const HostArenaView&) = delete;

  std::byte* SlotData(HostSlotId slot) override { return base_ + slot * kDirectIoAlignment; }
  uint64_t SlotBytes(HostSlotId slot) const override;
  std::vector<std::span<std::byte>> Regions() const override;
  int RegionOf(HostSlotId slot) const override {
    return static_cast<int>(slot * kDirectIoAlignment / geometry_.chunk_bytes);
  }
  Status CheckSlot(HostSlotId slot, Kind kind) const override;
  const ModelLayout& layout() const override { return layout_; }
  bool pinning() const override { return !registrations_.empty(); }

 private:
  HostArenaView(const ModelLayout& layout, const HostArenaGeometry& geometry)
      : layout_(layout), geometry_(geometry) {}
  const ModelLayout layout_;
  const HostArenaGeometry geometry_;
  std::byte* base_ = nullptr;
  std::vector<cuda::HostRegistration> registrations_;  // per chunk, in GPU mode
};

}  // namespace cachepawl
