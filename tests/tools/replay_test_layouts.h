// Small model layouts for the replay tests: real shapes, little data.
#pragma once

#include "store/model_layout.h"

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

}  // namespace cachepawl::tools::test_layouts
