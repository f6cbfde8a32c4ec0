#include "tiers/tier_capacity.h"

#include <algorithm>

#include "tiers/device_pool_arena.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

// n groups of (pages_per_state pages + 1 state) within `units`, each page `page` units and each
// state `state` units (either may be 0: that kind is absent).
void Mix(uint64_t units, uint64_t page, uint64_t state, TierCapacity* c) {
  const uint64_t group = page * c->pages_per_state + state;
  if (group == 0) return;
  const uint64_t n = units / group;
  c->mixed_pages = page != 0 ? n * c->pages_per_state : 0;
  c->mixed_states = state != 0 ? n : 0;
}

}  // namespace

TierCapacity RecordTierCapacity(const ModelLayout& layout, uint64_t bytes,
                                uint32_t pages_per_state) {
  TierCapacity c;
  c.bytes = bytes;
  c.pages_per_state = std::max<uint32_t>(pages_per_state, 1);
  c.page_slot_bytes = layout.has_attention() ? RecordSlotBytes(layout, Kind::kKV) : 0;
  c.state_slot_bytes = layout.has_ssm() ? RecordSlotBytes(layout, Kind::kMamba) : 0;
  c.pages_only = c.page_slot_bytes ? bytes / c.page_slot_bytes : 0;
  c.states_only = c.state_slot_bytes ? bytes / c.state_slot_bytes : 0;
  Mix(bytes, c.page_slot_bytes, c.state_slot_bytes, &c);
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
  Mix(g.num_units, layout.has_attention() ? 1 : 0, layout.has_ssm() ? g.group_units : 0, &c);
  return c;
}

}  // namespace cachepawl
