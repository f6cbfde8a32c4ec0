// Small model layouts for the replay tests: real shapes, little data.
#pragma once

#include <cstdint>
#include <string>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tools/replay/replay_engine.h"
#include "vocab/model_layout.h"
#include "vocab/store_options.h"

namespace cachepawl::tools::test_layouts {

// 2 attention layers (a 4 KiB KV page at 16 tokens) and, when `hybrid`, one Mamba-2 layer
// (an ~8.4 KiB state).
inline ModelLayout Small(bool hybrid = true) {
  ModelLayout l;
  l.model = hybrid ? "test/small-hybrid" : "test/small-attention";
  l.num_layers = 3;
  l.page_size_tokens = 16;
  l.attention_layers = {{0, 2, 16, DType::kBf16, 0}, {2, 2, 16, DType::kBf16, 0}};
  if (hybrid) l.ssm_layers = {{1, "mamba2", {64, 3}, DType::kBf16, {4, 8, 64}, DType::kFp32}};
  return l;
}

// One Mamba-2 layer (an ~8.4 KiB state) and no attention layers: a pure SSM layout, as Mamba-2.
inline ModelLayout SmallPureSsm() { return testing::WithoutAttention(Small(), "test/small-ssm"); }

// A real store over Small(): host and disk tiers in `dir`, a store-owned device pool.
// ~2000 page slots: more than the longest prompt (the engine locks a whole prefix, and a locked
// prefix loaded from disk must fit in host memory), less than the workloads.
// Smaller `host_bytes` / `disk_bytes` force writes to disk and evictions from it.
inline StoreOptions SmallStore(const std::string& dir, const ModelLayout& layout = Small(),
                               uint64_t host_bytes = 16 << 20, uint64_t disk_bytes = 64 << 20) {
  StoreOptions o;
  o.layout = layout;
  o.host_bytes = host_bytes;
  o.disk_dir = dir;
  o.disk_bytes = disk_bytes;
  o.device_pool_bytes = 512 << 10;
  o.track_interval_pages = 4;
  return o;
}

// The replay engine of the replay tests: 64-token blocks, a state every 4 pages, 16-page loads.
inline ReplayEngineOptions Engine() {
  ReplayEngineOptions e;
  e.block_size_tokens = 64;
  e.track_interval_pages = 4;
  e.chunk_pages = 16;
  return e;
}

}  // namespace cachepawl::tools::test_layouts
