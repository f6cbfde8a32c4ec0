// The calls on a device pool that a store owns (StoreOptions::device_pool_bytes, or an attached
// client's AttachOptions::device_pool_bytes): slots handed out and taken back, records written
// and read in record form. `arena` null: FailedPrecondition (no store-owned pool). Errors name
// the argument at fault: a kind the layout lacks (or kind window: a device slot of kind kv holds
// every attention layer), a slot not allocated, a record of the wrong size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tiers/device_pool_arena.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl {

StatusOr<uint64_t> AllocateOwnedDeviceSlot(DevicePoolArena* arena, const ModelLayout& layout,
                                           Kind kind);
Status FreeOwnedDeviceSlot(DevicePoolArena* arena, const ModelLayout& layout, Kind kind,
                           uint64_t slot);
Status WriteOwnedDeviceRecord(DevicePoolArena* arena, const ModelLayout& layout, Kind kind,
                              uint64_t slot, std::span<const std::byte> record);
Status ReadOwnedDeviceRecord(DevicePoolArena* arena, const ModelLayout& layout, Kind kind,
                             uint64_t slot, std::span<std::byte> record);

}  // namespace cachepawl
