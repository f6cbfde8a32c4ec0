// CacheTransferUnit and Operation: what the transfer paths move.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vocab/types.h"

namespace cachepawl {

// A place inside one tier. `slot` means, per tier:
//   Device: for KV, a page index in the device pool; for Mamba, a state slot index.
//   Host:   a HostSlotId (tiers/host_memory.h).
//   Disk:   an extent id of the disk tier.
// `offset` (host slots only): where in the slot's payload the moved record starts, 0 but for a
// tensor-parallel rank's share of a group record (layouts/layout_tp.h, GroupLayout).
struct TierSlot {
  Tier tier = Tier::kHost;
  uint64_t slot = 0;
  uint64_t offset = 0;
  friend bool operator==(const TierSlot&, const TierSlot&) = default;
};

// One move of one page or one state between two tiers.
struct CacheTransferUnit {
  Kind kind = Kind::kKV;
  TierSlot src;
  TierSlot dst;
  friend bool operator==(const CacheTransferUnit&, const CacheTransferUnit&) = default;
};

// Save moves toward slower tiers (Device->Host, Host->Disk), Load toward faster ones.
enum class Direction : uint8_t { kSave = 0, kLoad = 1 };

inline const char* DirectionName(Direction d) { return d == Direction::kSave ? "Save" : "Load"; }

// A batch of units in one direction, any mix of kinds. Completion is reported by one Fence.
struct Operation {
  Direction direction = Direction::kLoad;
  std::vector<CacheTransferUnit> units;
  // Load to the device only: when true, the fence carries one sub-fence per attention
  // layer of the layout, fired as that layer's pages (and all Mamba units) have landed.
  bool per_layer_fences = false;
};

}  // namespace cachepawl
