#include "tiers/host_arena_view.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "cuda/gpu_runtime.h"

namespace cachepawl {

StatusOr<std::unique_ptr<HostArenaView>> HostArenaView::Open(const ModelLayout& layout, int fd,
                                                             const HostArenaGeometry& geometry,
                                                             bool pin, int device) {
  const uint64_t cap = geometry.capacity_bytes, chunk = geometry.chunk_bytes;
  if (cap == 0 || cap % kDirectIoAlignment != 0 || chunk == 0 || chunk % kDirectIoAlignment != 0 ||
      chunk > (uint64_t{1} << 30)) {
    return Status::InvalidArgument(
        "host arena geometry: capacity " + std::to_string(cap) + " bytes, chunks of " +
        std::to_string(chunk) + " (both must be non-zero multiples of 4096, chunks at most 1 GiB)");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status::FromErrno("host arena view: fstat", errno);
  if (static_cast<uint64_t>(st.st_size) != cap) {
    return Status::InvalidArgument("host arena view: the shared memory holds " +
                                   std::to_string(st.st_size) + " bytes, the owner said " +
                                   std::to_string(cap));
  }
  std::unique_ptr<HostArenaView> view(new HostArenaView(layout, geometry));
  void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    return Status::FromErrno("host arena view: mmap of " + std::to_string(cap) + " bytes", errno);
  }
  view->base_ = static_cast<std::byte*>(p);
  // Transparent huge pages for the pages this process faults in first (registration faults them
  // in): with shmem THP allowed (transparent_hugepage/shmem_enabled advise, within_size or
  // always), fewer, larger pages for the copy engines to translate.
  (void)madvise(p, cap, MADV_HUGEPAGE);
  if (pin) {
    CACHEPAWL_RETURN_IF_ERROR(cuda::SetDevice(device));
    for (uint64_t off = 0; off < cap; off += chunk) {
      auto reg = cuda::HostRegistration::Register(view->base_ + off, std::min(chunk, cap - off));
      if (!reg.ok()) return reg.status().WithContext("host arena view: pinning the mapping");
      view->registrations_.push_back(std::move(reg).value());
    }
  }
  return view;
}

HostArenaView::~HostArenaView() {
  registrations_.clear();  // cudaHostUnregister before the unmap
  if (base_ != nullptr) munmap(base_, geometry_.capacity_bytes);
}

uint64_t HostArenaView::SlotBytes(HostSlotId slot) const {
  // A view does not know a slot's kind; the disk tier (which asks) runs in the owner only.
  (void)slot;
  return 0;
}

std::vector<std::span<std::byte>> HostArenaView::Regions() const {
  std::vector<std::span<std::byte>> out;
  for (uint64_t off = 0; off < geometry_.capacity_bytes; off += geometry_.chunk_bytes) {
    out.emplace_back(base_ + off, std::min(geometry_.chunk_bytes, geometry_.capacity_bytes - off));
  }
  return out;
}

Status HostArenaView::CheckSlot(HostSlotId slot, Kind kind) const {
  if (!layout_.Stores(kind)) {
    return Status::InvalidArgument("host slot " + std::to_string(slot) + ": the layout has no " +
                                   std::string(KindName(kind)) + " records");
  }
  const uint64_t bytes = RecordSlotBytes(layout_, kind);
  const uint64_t units = geometry_.capacity_bytes / kDirectIoAlignment;
  if (slot >= units || bytes > geometry_.capacity_bytes - slot * kDirectIoAlignment ||
      (slot * kDirectIoAlignment) / geometry_.chunk_bytes !=
          (slot * kDirectIoAlignment + bytes - 1) / geometry_.chunk_bytes) {
    return Status::InvalidArgument("host slot " + std::to_string(slot) + ": a " +
                                   std::string(KindName(kind)) + " record there does not lie " +
                                   "within one chunk of the shared host arena");
  }
  return Status::OK();
}

}  // namespace cachepawl
