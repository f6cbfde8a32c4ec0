// TierCapacity: how many KV pages and Mamba states a tier of a given size holds for a layout,
// with the tiers' own record sizes: RecordSlotBytes (tiers/host_memory.h: a 4 KiB header plus
// the record padded to 4 KiB) for host memory and disk, DevicePoolGeometryFor for a store-owned
// device pool. These are upper bounds: the host arena's registration chunks and the disk's
// extent files may leave a record's worth unused at their ends.
//
// Layouts with sliding-window layers (ModelLayout::has_window) keep a page as two records on the
// host and disk tiers: the full-attention K/V (Kind::kKV, "pages" below) and the windowed K/V
// (Kind::kWindowKV, "window records"). A load at a depth needs the last WindowPages() window
// records before it, so the mix keeps min(pages_per_state, WindowPages()) window records per
// state (every page's, for a layout without SSM layers, where every page is a depth). A device
// page always holds every attention layer: the device pool has no window records.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "vocab/model_layout.h"

namespace cachepawl {

struct TierCapacity {
  uint64_t bytes = 0;              // the tier's size asked about
  uint64_t page_slot_bytes = 0;    // what one KV page takes there (for layouts with windowed
                                   // layers on host and disk: the full-attention record; 0: the
                                   // layout stores no such record)
  uint64_t state_slot_bytes = 0;   // what one Mamba state takes there (0: no SSM layers)
  uint64_t window_slot_bytes = 0;  // what one window record takes there (0: none)
  uint64_t pages_only = 0;         // the tier full of KV pages (page_slot_bytes each)
  uint64_t states_only = 0;        // the tier full of states
  uint64_t window_only = 0;        // the tier full of window records
  uint32_t window_pages = 0;       // window records a state's depth needs (WindowPages())
  uint32_t pages_per_state = 0;    // the mix below: one state every this many pages
  uint64_t mixed_pages = 0;        // pages of that mix the tier holds...
  uint64_t mixed_states = 0;       // ...and states...
  uint64_t mixed_window = 0;       // ...and window records
};

// Host memory and disk. `pages_per_state` >= 1 (the engine's track interval).
TierCapacity RecordTierCapacity(const ModelLayout& layout, uint64_t bytes,
                                uint32_t pages_per_state);
// A store-owned device pool of `bytes` (StoreOptions::device_pool_bytes).
TierCapacity DevicePoolCapacity(const ModelLayout& layout, uint64_t bytes,
                                uint32_t pages_per_state);

}  // namespace cachepawl
