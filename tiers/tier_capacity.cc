#include "tiers/tier_capacity.h"

#include <algorithm>

#include "tiers/device_pool_arena.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

// n groups of (pages_per_state pages + `window_per_group` window records + 1 state) within
// `units`, each page `page` units, each window record `window` units and each state `state`
// units (any may be 0: that kind is absent).
void Mix(uint64_t units, uint64_t page, uint64_t window, uint64_t window_per_group, uint64_t state,
         TierCapacity* c) {
  const uint64_t group = page * c->pages_per_state + window * window_per_group + state;
  if (group == 0) return;
  const uint64_t n = units / group;
  c->mixed_pages = page != 0 ? n * c->pages_per_state : 0;
  c->mixed_window = window != 0 ? n * window_per_group : 0;
  c->mixed_states = state != 0 ? n : 0;
}

}  // namespace

TierCapacity RecordTierCapacity(const ModelLayout& layout, uint64_t bytes,
                                uint32_t pages_per_state) {
  TierCapacity c;
  c.bytes = bytes;
  c.pages_per_state = std::max<uint32_t>(pages_per_state, 1);
  c.page_slot_bytes = StoredRecordSlotBytes(layout, Kind::kKV);
  c.state_slot_bytes = StoredRecordSlotBytes(layout, Kind::kMamba);
  c.window_slot_bytes = StoredRecordSlotBytes(layout, Kind::kWindowKV);
  c.pages_only = c.page_slot_bytes ? bytes / c.page_slot_bytes : 0;
  c.states_only = c.state_slot_bytes ? bytes / c.state_slot_bytes : 0;
  c.window_only = c.window_slot_bytes ? bytes / c.window_slot_bytes : 0;
  c.window_pages = layout.WindowPages();
  // Window records a group keeps: those before its state, or every page's without states.
  const uint64_t window_per_group =
      layout.has_ssm() ? std::min(c.pages_per_state, c.window_pages) : c.pages_per_state;
  Mix(bytes, c.page_slot_bytes, c.window_slot_bytes, window_per_group, c.state_slot_bytes, &c);
  return c;
}

TierCapacity DevicePoolCapacity(const ModelLayout& layout, uint64_t bytes,
                                uint32_t pages_per_state) {
  TierCapacity c;
  c.bytes = bytes;
  c.pages_per_state = std::max<uint32_t>(pages_per_state, 1);
  const DevicePoolGeometry g = DevicePoolGeometryFor(layout, bytes);
  if (layout.has_attention()) {
    c.page_slot_bytes = g.unit_bytes;
    c.pages_only = g.num_units;
  }
  if (layout.has_ssm()) {
    c.state_slot_bytes = g.group_units * g.unit_bytes;
    c.states_only = g.num_groups;
  }
  c.window_pages = layout.WindowPages();
  Mix(g.num_units, layout.has_attention() ? 1 : 0, 0, 0, layout.has_ssm() ? g.group_units : 0, &c);
  return c;
}

}  // namespace cachepawl
