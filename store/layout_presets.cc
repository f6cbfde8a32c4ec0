// Built-in layouts. Every number comes from the model's upstream config; docs/MODELS.md cites
// the source of each and shows the hand calculation of the derived sizes.
#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include "store/model_layout.h"

namespace cachepawl {
namespace {

using Builder = std::function<ModelLayout()>;

void AddAttention(ModelLayout* l, uint32_t index, uint32_t kv_heads, uint32_t head_dim,
                  DType dtype = DType::kBf16, uint32_t window = 0) {
  l->attention_layers.push_back({index, kv_heads, head_dim, dtype, window});
}

// meta-llama/Llama-3.1-8B: 32 layers, 8 KV heads, head_dim 128 (4096 / 32 heads).
ModelLayout Llama31_8B() {
  ModelLayout l;
  l.model = "meta-llama/Llama-3.1-8B";
  l.num_layers = 32;
  for (uint32_t i = 0; i < 32; ++i) AddAttention(&l, i, 8, 128);
  return l;
}

// ai21labs/Jamba-v0.1: 32 layers, attention every 8th from offset 4 (4, 12, 20, 28), 8 KV heads
// of dim 128 (4096 / 32); Mamba-1 elsewhere: d_inner = 2 * 4096, d_state 16, d_conv 4.
ModelLayout JambaV01() {
  ModelLayout l;
  l.model = "ai21labs/Jamba-v0.1";
  l.num_layers = 32;
  for (uint32_t i = 0; i < 32; ++i) {
    if (i % 8 == 4) {
      AddAttention(&l, i, 8, 128);
    } else {
      l.ssm_layers.push_back({i, "mamba1", {8192, 3}, DType::kBf16, {8192, 16}, DType::kFp32});
    }
  }
  return l;
}

const std::map<std::string, Builder>& Registry() {
  static const auto* registry = new std::map<std::string, Builder>{
      {"llama-3.1-8b", Llama31_8B},
      {"jamba-v0.1", JambaV01},
  };
  return *registry;
}

}  // namespace

std::vector<std::string> LayoutPresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, _] : Registry()) names.push_back(name);
  return names;
}

StatusOr<ModelLayout> LayoutPreset(std::string_view name, uint32_t page_size_tokens) {
  auto it = Registry().find(std::string(name));
  if (it == Registry().end()) {
    return Status::NotFound("layout preset '" + std::string(name) +
                            "' is not known (cachepawl layout --list shows the presets)");
  }
  ModelLayout l = it->second();
  l.page_size_tokens = page_size_tokens;
  CACHEPAWL_RETURN_IF_ERROR(l.Validate().WithContext("preset " + std::string(name)));
  return l;
}

}  // namespace cachepawl
