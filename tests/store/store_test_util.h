// Shared by the Store's tests and its child-process writer (tests/store/store_writer_main.cc).
#pragma once

#include <cstring>
#include <numeric>
#include <vector>

#include "index/page_hash.h"
#include "store/model_layout.h"
#include "tests/common/test_util.h"

namespace cachepawl {

// A small hybrid layout: 2 attention layers and 2 SSM layers, 4-token pages.
inline ModelLayout TinyHybrid() {
  ModelLayout l;
  l.model = "test/tiny-hybrid";
  l.num_layers = 4;
  l.page_size_tokens = 4;
  l.attention_layers = {{0, 2, 16, DType::kBf16, 0}, {2, 2, 16, DType::kBf16, 0}};
  l.ssm_layers = {{1, "mamba2", {8, 3}, DType::kBf16, {2, 4, 8}, DType::kFp32},
                  {3, "mamba2", {8, 3}, DType::kBf16, {2, 4, 8}, DType::kFp32}};
  return l;
}

// TinyHybrid with its second SSM layer a shortconv layer (LFM2): a conv state, no SSM state,
// so the state record is conv 1, ssm 1, conv 3 (48 + 256 + 48 bytes).
inline ModelLayout TinyShortConv() {
  ModelLayout l = TinyHybrid();
  l.model = "test/tiny-shortconv";
  l.ssm_layers[1] = {3, "shortconv", {8, 3}, DType::kBf16, {}, DType::kFp32};
  return l;
}

inline ModelLayout TinyAttentionOnly() {
  ModelLayout l = TinyHybrid();
  l.model = "test/tiny-attention";
  l.ssm_layers.clear();
  return l;
}

// Deterministic content of a KV page or a state, defined by its hash (and kind).
inline std::vector<std::byte> Content(const ModelLayout& layout, const PageHash& h, Kind kind) {
  std::vector<std::byte> bytes(layout.RecordBytes(kind));
  uint64_t seed;
  std::memcpy(&seed, h.bytes.data(), sizeof(seed));
  testing::FillRandom(bytes, seed ^ (kind == Kind::kMamba ? 0x5a5a5a5aull : 0));
  return bytes;
}

inline std::vector<uint32_t> Tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

}  // namespace cachepawl
