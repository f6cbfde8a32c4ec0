// HostMemory: the seam between the host tier (which owns pinned memory and its slots) and the
// code that reads and writes those slots (copy engines, the disk tier's io_uring).
//
// Every host slot holds one record in the on-disk form, so a disk read or write of a record is
// one contiguous, 4 KiB-aligned O_DIRECT I/O straight into or out of the slot:
//
//   [ record header block: kRecordHeaderBytes ][ payload: layout.RecordBytes(kind), padded ]
//
// The header block is owned by the disk tier (it writes it before a disk write and checks it
// after a disk read); device copies touch only the payload, at SlotPayload(slot).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {

inline constexpr uint64_t kDirectIoAlignment = 4096;
inline constexpr uint64_t kRecordHeaderBytes = 4096;

constexpr uint64_t RoundUpToAlignment(uint64_t n, uint64_t a = kDirectIoAlignment) {
  return (n + a - 1) / a * a;
}

// Bytes of one host slot (and of one disk record) of `kind` for `layout`.
inline uint64_t RecordSlotBytes(const ModelLayout& layout, Kind kind) {
  return kRecordHeaderBytes + RoundUpToAlignment(layout.RecordBytes(kind));
}
// RecordSlotBytes, or 0 when `layout` stores no records of `kind` (ModelLayout::Stores).
inline uint64_t StoredRecordSlotBytes(const ModelLayout& layout, Kind kind) {
  return layout.Stores(kind) ? RecordSlotBytes(layout, kind) : 0;
}

// Host slot ids are opaque 64-bit values handed out by the host tier.
using HostSlotId = uint64_t;

class HostMemory {
 public:
  virtual ~HostMemory() = default;

  // First byte of the slot (its header block). Valid while the slot is allocated.
  virtual std::byte* SlotData(HostSlotId slot) = 0;
  std::byte* SlotPayload(HostSlotId slot) { return SlotData(slot) + kRecordHeaderBytes; }
  // Bytes of the slot (RecordSlotBytes of its kind).
  virtual uint64_t SlotBytes(HostSlotId slot) const = 0;

  // The memory regions that hold all slots, each 4 KiB-aligned, for io_uring buffer
  // registration; a slot never straddles two regions. Stable for the object's lifetime.
  virtual std::vector<std::span<std::byte>> Regions() const = 0;
  // Index into Regions() of the region holding `slot`.
  virtual int RegionOf(HostSlotId slot) const = 0;
};

// Host memory whose slots a transfer may name (transfer/device_mover.h): the arena that
// allocates them (HostArena), or another process's mapping of it (HostArenaView).
class HostSlotMemory : public HostMemory {
 public:
  // OK when `slot` may hold a record of `kind` (InvalidArgument naming the slot otherwise): the
  // arena checks that it is allocated as that kind; a view, that it lies within the mapping.
  virtual Status CheckSlot(HostSlotId slot, Kind kind) const = 0;
  // The layout whose records the slots hold.
  virtual const ModelLayout& layout() const = 0;
  // True when the memory is (or is being) registered with CUDA (a GPU may copy to and from it).
  virtual bool pinning() const = 0;
};

}  // namespace cachepawl
