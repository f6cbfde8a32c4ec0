// The order in which a full tier (host or disk) gives up entries, by StoreOptions::
// eviction_policy (docs/DESIGN.md, "Eviction and admission"). Used by HostSpace for host
// victims and by the disk cascade for disk victims.
#pragma once

#include <span>

#include "index/index_types.h"
#include "vocab/store_options.h"
#include "vocab/types.h"

namespace cachepawl {

// One step of the order: victims of `kind` among `cls`.
struct EvictionStage {
  Kind kind;
  VictimClass cls;
};

// LRU: per kind, states first (large, and only one depth of each is useful), then windowed KV,
// then KV. Hybrid: bytes no cached state can use (windowed KV, then KV), then states by score
// (which frees their KV for the first stages), then the KV a state needs, where another tier
// holds it too (windowed, then full).
inline std::span<const EvictionStage> EvictionOrder(EvictionPolicy policy) {
  static constexpr EvictionStage kLruOrder[] = {{Kind::kMamba, VictimClass::kAny},
                                                {Kind::kWindowKV, VictimClass::kAny},
                                                {Kind::kKV, VictimClass::kAny}};
  static constexpr EvictionStage kHybridOrder[] = {{Kind::kWindowKV, VictimClass::kNotNeeded},
                                                   {Kind::kKV, VictimClass::kNotNeeded},
                                                   {Kind::kMamba, VictimClass::kAny},
                                                   {Kind::kWindowKV, VictimClass::kNeeded},
                                                   {Kind::kKV, VictimClass::kNeeded}};
  if (policy == EvictionPolicy::kHybrid) return kHybridOrder;
  return kLruOrder;
}

}  // namespace cachepawl
