// Small model layouts for the replay tests: real shapes, little data.
#pragma once

#include <string>

#include "store/store.h"
#include "store/vocab/model_layout.h"
#include "store/vocab/store_options.h"
#include "tests/common/test_util.h"

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
inline StoreOptions SmallStore(const std::string& dir) {
  StoreOptions o;
  o.layout = Small();
  o.host_bytes = 16 << 20;
  o.disk_dir = dir;
  o.disk_bytes = 64 << 20;
  o.device_pool_bytes = 512 << 10;
  o.track_interval_pages = 4;
  return o;
}

}  // namespace cachepawl::tools::test_layouts
