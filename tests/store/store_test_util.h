// Shared by the Store's tests and its child-process writer (tests/store/store_writer_main.cc).
#pragma once

#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "vocab/model_layout.h"
#include "vocab/page_hash.h"
#include "vocab/store_options.h"

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

// A Kimi-Linear-like layout: layer 0 MLA (one latent of 24 values per token, no V), layer 1
// Kimi Delta Attention (conv [3 * 2 * 4, 3], state [2, 4, 4]), layer 2 usual attention.
inline ModelLayout TinyMla() {
  ModelLayout l;
  l.model = "test/tiny-mla";
  l.num_layers = 3;
  l.page_size_tokens = 4;
  l.attention_layers = {{0, 1, 24, DType::kBf16, 0}, {2, 2, 16, DType::kBf16, 0}};
  l.attention_layers[0].mla = true;
  l.ssm_layers = {{1, "kda", {24, 3}, DType::kBf16, {2, 4, 4}, DType::kFp32}};
  return l;
}

// MiniMax-like: layer 0 attention, layer 1 lightning attention (a state [2, 4, 4] bf16, no
// conv), layer 2 Mamba-2 (both tensors), so a state record has an empty conv segment first.
inline ModelLayout TinyLightning() {
  ModelLayout l;
  l.model = "test/tiny-lightning";
  l.num_layers = 3;
  l.page_size_tokens = 4;
  l.attention_layers = {{0, 2, 16, DType::kBf16, 0}};
  l.ssm_layers = {{1, "lightning", {}, DType::kBf16, {2, 4, 4}, DType::kBf16},
                  {2, "mamba2", {8, 3}, DType::kBf16, {2, 4, 8}, DType::kFp32}};
  return l;
}

inline ModelLayout TinyAttentionOnly() {
  ModelLayout l = TinyHybrid();
  l.model = "test/tiny-attention";
  l.ssm_layers.clear();
  return l;
}

// A small pure SSM layout (as Mamba-2): 2 SSM layers, no attention layers, 4-token pages. A
// state record is 608 bytes (8 KiB host slots).
inline ModelLayout TinyPureSsm() {
  return testing::WithoutAttention(TinyHybrid(), "test/tiny-ssm");
}

// A test store's options: CPU mode (also on a machine with a GPU), a store-owned device pool and,
// when disk_bytes > 0, a disk tier in `disk_dir`.
inline StoreOptions CpuStoreOptions(const ModelLayout& layout, uint64_t host_bytes,
                                    uint64_t device_pool_bytes, uint64_t disk_bytes,
                                    const std::string& disk_dir) {
  StoreOptions o;
  o.layout = layout;
  o.host_bytes = host_bytes;
  o.cuda_device = -1;
  o.device_pool_bytes = device_pool_bytes;
  if (disk_bytes > 0) {
    o.disk_dir = disk_dir;
    o.disk_bytes = disk_bytes;
    o.disk_queue_depth = 8;
  }
  return o;
}

// The Save of a whole prompt: its pages from device slots `pages` and its state, at the prompt's
// end, from state slot `state_slot`. The request points into `tokens` and `pages`.
inline SaveRequest WholePromptSave(std::span<const uint32_t> tokens,
                                   std::span<const uint64_t> pages, uint64_t state_slot) {
  SaveRequest req;
  req.tokens = tokens;
  req.device_pages = pages;
  req.device_state_slot = state_slot;
  req.state_depth_tokens = tokens.size();
  return req;
}

// Deterministic content of a KV page or a state, defined by its hash (and kind).
inline std::vector<std::byte> Content(const ModelLayout& layout, const PageHash& h, Kind kind) {
  std::vector<std::byte> bytes(layout.RecordBytes(kind));
  uint64_t seed;
  std::memcpy(&seed, h.bytes.data(), sizeof(seed));
  // (A tensor-parallel rank's share differs from every other rank's.)
  testing::FillRandom(bytes, seed ^ (kind == Kind::kMamba ? 0x5a5a5a5aull : 0) ^
                                 (uint64_t{layout.tp_rank} * 0x9e3779b97f4a7c15ull));
  return bytes;
}

inline std::vector<uint32_t> Tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

}  // namespace cachepawl
