// TierCapacity: how many KV pages and Mamba states a tier of a given size holds for a layout,
// with the tiers' own record sizes: RecordSlotBytes (tiers/host_memory.h: a 4 KiB header plus
// the record padded to 4 KiB) for host memory and disk, DevicePoolGeometryFor for a store-owned
// device pool. These are upper bounds: the host arena's registration chunks and the disk's
// extent files may leave a record's worth unused at their ends.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "store/model_layout.h"

namespace cachepawl {

struct TierCapacity {
  uint64_t bytes = 0;             // the tier's size asked about
  uint64_t page_slot_bytes = 0;   // what one KV page takes there (0: the layout has no KV)
  uint64_t state_slot_bytes = 0;  // what one Mamba state takes there (0: no SSM layers)
  uint64_t pages_only = 0;        // the tier full of KV pages
  uint64_t states_only = 0;       // the tier full of states
  uint32_t pages_per_state = 0;   // the mix below: one state every this many pages
  uint64_t mixed_pages = 0;       // pages of that mix the tier holds...
  uint64_t mixed_states = 0;      // ...and states
};

// Host memory and disk. `pages_per_state` >= 1 (the engine's track interval).
TierCapacity RecordTierCapacity(const ModelLayout& layout, uint64_t bytes,
                                uint32_t pages_per_state);
// A store-owned device pool of `bytes` (StoreOptions::device_pool_bytes).
TierCapacity DevicePoolCapacity(const ModelLayout& layout, uint64_t bytes,
                                uint32_t pages_per_state);

}  // namespace cachepawl
