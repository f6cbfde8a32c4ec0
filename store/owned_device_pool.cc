#include "store/owned_device_pool.h"

#include <cstring>
#include <string>

#include "cuda/gpu_runtime.h"

namespace cachepawl {

namespace {
Status CheckKind(Kind kind, const ModelLayout& layout) {
  if (!IsValidKind(static_cast<uint8_t>(kind))) {
    return Status::InvalidArgument("kind: " + std::to_string(static_cast<int>(kind)) +
                                   " (expected kv or mamba)");
  }
  if (kind == Kind::kMamba && !layout.has_ssm()) {
    return Status::InvalidArgument("kind: mamba (layout '" + layout.model + "' has no SSM layers)");
  }
  if (kind == Kind::kKV && !layout.has_attention()) {
    return Status::InvalidArgument("kind: kv (layout '" + layout.model +
                                   "' has no attention layers)");
  }
  if (kind == Kind::kWindowKV) {
    return Status::InvalidArgument(
        "kind: window (a device pool has KV pages of every attention layer, windowed ones "
        "included: use kind kv)");
  }
  return Status::OK();
}

Status CheckPool(DevicePoolArena* arena, const ModelLayout& layout, Kind kind) {
  CACHEPAWL_RETURN_IF_ERROR(CheckKind(kind, layout));
  if (arena == nullptr)
    return Status::FailedPrecondition("the store has no store-owned device pool");
  return Status::OK();
}

// OK when `slot` of `kind` is allocated in the pool and `bytes` is its record size.
Status CheckRecord(DevicePoolArena* arena, const ModelLayout& layout, Kind kind, uint64_t slot,
                   size_t bytes) {
  CACHEPAWL_RETURN_IF_ERROR(CheckPool(arena, layout, kind));
  CACHEPAWL_RETURN_IF_ERROR(arena->CheckSlot(kind, slot));
  // A device slot of kind kv is a whole KV page (every attention layer).
  const uint64_t want = kind == Kind::kKV ? layout.KvPageBytes() : layout.RecordBytes(kind);
  if (bytes != want) {
    return Status::InvalidArgument("record: " + std::to_string(bytes) + " bytes (a " +
                                   std::string(KindName(kind)) + " device record has " +
                                   std::to_string(want) + ")");
  }
  return Status::OK();
}
}  // namespace

StatusOr<uint64_t> AllocateOwnedDeviceSlot(DevicePoolArena* arena, const ModelLayout& layout,
                                           Kind kind) {
  CACHEPAWL_RETURN_IF_ERROR(CheckPool(arena, layout, kind));
  return arena->Allocate(kind);
}

Status FreeOwnedDeviceSlot(DevicePoolArena* arena, const ModelLayout& layout, Kind kind,
                           uint64_t slot) {
  CACHEPAWL_RETURN_IF_ERROR(CheckPool(arena, layout, kind));
  return arena->Free(kind, slot);
}

Status WriteOwnedDeviceRecord(DevicePoolArena* arena, const ModelLayout& layout, Kind kind,
                              uint64_t slot, std::span<const std::byte> record) {
  CACHEPAWL_RETURN_IF_ERROR(CheckRecord(arena, layout, kind, slot, record.size()));
  std::byte* dst = arena->SlotRecord(kind, slot);
  if (!arena->on_gpu()) {
    std::memcpy(dst, record.data(), record.size());
    return Status::OK();
  }
  return cuda::CopyStaged(dst, record.data(), record.size(), /*to_device=*/true);
}

Status ReadOwnedDeviceRecord(DevicePoolArena* arena, const ModelLayout& layout, Kind kind,
                             uint64_t slot, std::span<std::byte> record) {
  CACHEPAWL_RETURN_IF_ERROR(CheckRecord(arena, layout, kind, slot, record.size()));
  const std::byte* src = arena->SlotRecord(kind, slot);
  if (!arena->on_gpu()) {
    std::memcpy(record.data(), src, record.size());
    return Status::OK();
  }
  return cuda::CopyStaged(record.data(), src, record.size(), /*to_device=*/false);
}

}  // namespace cachepawl
