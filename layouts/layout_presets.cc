// Built-in layouts. Every number comes from the model's upstream config (or, where the config
// leaves it out, the modeling code's default); docs/MODELS.md cites the file and key of each
// and shows the hand calculation of the derived sizes, which
// tests/layouts/layout_presets_test.cc asserts.
//
// What is stored follows what the engines keep (SGLang's defaults, see docs/MODELS.md):
//   KV:     K and V of every attention layer that owns a KV cache, bf16.
//   Mamba:  conv state [conv_dim, d_conv - 1] bf16; SSM state fp32,
//           [nheads, head_dim, d_state] for Mamba-2, [d_inner, d_state] for Mamba-1.
//   RG-LRU: conv state [lru_width, conv1d_width - 1] bf16; recurrent state [lru_width] fp32.
//   GDN:    conv state [2 * k_heads * k_dim + v_heads * v_dim, conv_kernel - 1] bf16;
//           recurrent state [v_heads, k_dim, v_dim] fp32.
//   MLA:    one latent [kv_lora_rank + qk_rope_head_dim] per token and layer, bf16, no V.
// Presets are for one tensor-parallel rank of a tp_size 1 deployment.
#include "layouts/layout_presets.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <utility>

namespace cachepawl {
namespace {

using Builder = std::function<ModelLayout()>;

void AddAttention(ModelLayout* l, uint32_t index, uint32_t kv_heads, uint32_t head_dim,
                  uint32_t sliding_window = 0) {
  l->attention_layers.push_back({index, kv_heads, head_dim, DType::kBf16, sliding_window});
}

// Mamba-1: one SSM state row per inner channel.
void AddMamba1(ModelLayout* l, uint32_t index, uint64_t d_inner, uint64_t d_conv,
               uint64_t d_state) {
  l->ssm_layers.push_back(
      {index, "mamba1", {d_inner, d_conv - 1}, DType::kBf16, {d_inner, d_state}, DType::kFp32});
}

// Mamba-2: the conv runs over x, B and C (d_ssm + 2 * ngroups * d_state channels).
void AddMamba2(ModelLayout* l, uint32_t index, uint64_t nheads, uint64_t head_dim, uint64_t d_state,
               uint64_t ngroups, uint64_t d_conv) {
  const uint64_t conv_dim = nheads * head_dim + 2 * ngroups * d_state;
  l->ssm_layers.push_back({index,
                           "mamba2",
                           {conv_dim, d_conv - 1},
                           DType::kBf16,
                           {nheads, head_dim, d_state},
                           DType::kFp32});
}

// RG-LRU (Griffin / RecurrentGemma): a short conv and a diagonal recurrence of width lru_width.
void AddRgLru(ModelLayout* l, uint32_t index, uint64_t lru_width, uint64_t conv1d_width) {
  l->ssm_layers.push_back(
      {index, "rglru", {lru_width, conv1d_width - 1}, DType::kBf16, {lru_width}, DType::kFp32});
}

// Gated DeltaNet (Qwen3-Next): the conv runs over q, k and v; the state is a k_dim x v_dim
// matrix per value head.
void AddGdn(ModelLayout* l, uint32_t index, uint64_t k_heads, uint64_t v_heads, uint64_t k_dim,
            uint64_t v_dim, uint64_t conv_kernel) {
  const uint64_t conv_dim = 2 * k_heads * k_dim + v_heads * v_dim;
  l->ssm_layers.push_back({index,
                           "gdn",
                           {conv_dim, conv_kernel - 1},
                           DType::kBf16,
                           {v_heads, k_dim, v_dim},
                           DType::kFp32});
}

// meta-llama/Llama-3.1-8B: 32 layers, 8 KV heads, head_dim 128.
ModelLayout Llama31_8B() {
  ModelLayout l;
  l.model = "meta-llama/Llama-3.1-8B";
  l.num_layers = 32;
  for (uint32_t i = 0; i < 32; ++i) AddAttention(&l, i, 8, 128);
  return l;
}

// state-spaces/mamba2-2.7b: d_model 2560, 64 layers, Mamba2 defaults (d_state 128, d_conv 4,
// expand 2, headdim 64, ngroups 1): d_inner 5120, nheads 80.
ModelLayout Mamba2_2_7B() {
  ModelLayout l;
  l.model = "state-spaces/mamba2-2.7b";
  l.num_layers = 64;
  for (uint32_t i = 0; i < 64; ++i) AddMamba2(&l, i, 80, 64, 128, 1, 4);
  return l;
}

// ai21labs/Jamba-v0.1: 32 layers; attention where i % 8 == 4 (4, 12, 20, 28), 8 KV heads of
// 4096 / 32 = 128; Mamba-1 elsewhere with d_inner 2 * 4096, d_state 16, d_conv 4.
ModelLayout JambaV01() {
  ModelLayout l;
  l.model = "ai21labs/Jamba-v0.1";
  l.num_layers = 32;
  for (uint32_t i = 0; i < 32; ++i) {
    if (i % 8 == 4) {
      AddAttention(&l, i, 8, 128);
    } else {
      AddMamba1(&l, i, 8192, 4, 16);
    }
  }
  return l;
}

// Zyphra/Zamba2-2.7B: 54 layers, each with a Mamba-2 block (80 heads of 64, d_state 64,
// ngroups 1, d_conv 4); the 9 "hybrid" layers also run a shared transformer block whose
// attention keeps its own KV per layer: 32 KV heads of 160 (attention_hidden_size 5120 / 32).
ModelLayout Zamba2_2_7B() {
  ModelLayout l;
  l.model = "Zyphra/Zamba2-2.7B";
  l.num_layers = 54;
  for (uint32_t i : {6u, 12u, 18u, 24u, 30u, 36u, 42u, 47u, 51u}) AddAttention(&l, i, 32, 160);
  for (uint32_t i = 0; i < 54; ++i) AddMamba2(&l, i, 80, 64, 64, 1, 4);
  return l;
}

// microsoft/Samba, lit_gpt/config.py "Samba_1.3B" (Samba-3.8B's config is not published):
// 18 layers, mb_per_layer 2: Mamba-1 on even layers (d_inner 2 * 2304, d_state 16, d_conv 4),
// sliding-window attention (window 2048) on odd layers, 18 KV heads of 2304 / 18 = 128.
ModelLayout Samba1_3B() {
  ModelLayout l;
  l.model = "microsoft/Samba:Samba_1.3B";
  l.num_layers = 18;
  for (uint32_t i = 0; i < 18; ++i) {
    if (i % 2 == 0) {
      AddMamba1(&l, i, 4608, 4, 16);
    } else {
      AddAttention(&l, i, 18, 128, 2048);
    }
  }
  return l;
}

// nvidia/Hymba-1.5B-Base: 32 layers, every one runs attention and Mamba-1 heads in parallel
// (d_inner = conv_dim 3200, d_state 16, d_conv 4). 5 KV heads of 1600 / 25 = 64. Layers 0, 15,
// 31 are global; the others use a 1024-token window. KV is shared within kv_reuse_group (the
// first layer of a group produces it, the others read it), so 17 layers own a KV cache.
ModelLayout Hymba1_5B() {
  ModelLayout l;
  l.model = "nvidia/Hymba-1.5B-Base";
  l.num_layers = 32;
  for (uint32_t i :
       {0u, 1u, 3u, 5u, 7u, 9u, 11u, 13u, 15u, 16u, 19u, 21u, 23u, 25u, 27u, 29u, 31u}) {
    const bool global = i == 0 || i == 15 || i == 31;
    AddAttention(&l, i, 5, 64, global ? 0 : 1024);
  }
  for (uint32_t i = 0; i < 32; ++i) AddMamba1(&l, i, 3200, 4, 16);
  return l;
}

// google/recurrentgemma-2b: 26 layers, block_types (recurrent, recurrent, attention) repeated:
// local attention (window 2048, 1 KV head of 256) where i % 3 == 2, RG-LRU (lru_width 2560,
// conv1d_width 4) elsewhere.
ModelLayout RecurrentGemma2B() {
  ModelLayout l;
  l.model = "google/recurrentgemma-2b";
  l.num_layers = 26;
  for (uint32_t i = 0; i < 26; ++i) {
    if (i % 3 == 2) {
      AddAttention(&l, i, 1, 256, 2048);
    } else {
      AddRgLru(&l, i, 2560, 4);
    }
  }
  return l;
}

// nvidia/Nemotron-H-8B-Base-8K: 52 layers from hybrid_override_pattern
// "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-" (M Mamba-2, * attention, - MLP).
// Mamba-2: 128 heads of 64, d_state 128, n_groups 8, d_conv 4. Attention: 8 KV heads of 128.
ModelLayout NemotronH8B() {
  static constexpr char kPattern[] = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
  ModelLayout l;
  l.model = "nvidia/Nemotron-H-8B-Base-8K";
  l.num_layers = sizeof(kPattern) - 1;
  for (uint32_t i = 0; i < l.num_layers; ++i) {
    if (kPattern[i] == 'M') AddMamba2(&l, i, 128, 64, 128, 8, 4);
    if (kPattern[i] == '*') AddAttention(&l, i, 8, 128);
  }
  return l;
}

// Qwen's Gated DeltaNet hybrids: `layers` layers, full attention every 4th ((i + 1) % 4 == 0; 2
// KV heads of 256), Gated DeltaNet elsewhere (16 key heads and `v_heads` value heads, both of
// dim 128, conv kernel 4).
ModelLayout QwenGdnHybrid(std::string model, uint32_t layers, uint64_t v_heads) {
  ModelLayout l;
  l.model = std::move(model);
  l.num_layers = layers;
  for (uint32_t i = 0; i < layers; ++i) {
    if ((i + 1) % 4 == 0) {
      AddAttention(&l, i, 2, 256);
    } else {
      AddGdn(&l, i, 16, v_heads, 128, 128, 4);
    }
  }
  return l;
}

// Qwen/Qwen3-Next-80B-A3B-Instruct: 48 layers, 32 value heads.
ModelLayout Qwen3Next80B() { return QwenGdnHybrid("Qwen/Qwen3-Next-80B-A3B-Instruct", 48, 32); }

// tiiuae/Falcon-H1-0.5B-Base: 36 layers, each runs attention (2 KV heads of 64) and Mamba-2
// (24 heads of 64 = mamba_d_ssm 1536, d_state 128, n_groups 1, d_conv 4) in parallel.
ModelLayout FalconH1_0_5B() {
  ModelLayout l;
  l.model = "tiiuae/Falcon-H1-0.5B-Base";
  l.num_layers = 36;
  for (uint32_t i = 0; i < 36; ++i) AddAttention(&l, i, 2, 64);
  for (uint32_t i = 0; i < 36; ++i) AddMamba2(&l, i, 24, 64, 128, 1, 4);
  return l;
}

// openai/gpt-oss-120b: 36 layers of 8 KV heads of 64; sliding-window attention (128 tokens) on
// the even layers and full attention on the odd ones (its config's layer_types). No recurrent
// state: an attention-only model that engines serving hybrids meet beside them.
ModelLayout GptOss120B() {
  ModelLayout l;
  l.model = "openai/gpt-oss-120b";
  l.num_layers = 36;
  for (uint32_t i = 0; i < 36; ++i) AddAttention(&l, i, 8, 64, i % 2 == 0 ? 128 : 0);
  return l;
}

// deepseek-ai/DeepSeek-V3: 61 layers of multi-head latent attention, each keeping one latent of
// kv_lora_rank 512 + qk_rope_head_dim 64 values per token (no V; docs/MODELS.md, "Multi-head
// latent attention"). Its multi-token-prediction layer (num_nextn_predict_layers 1) is not part
// of the decoder that serves prompts.
ModelLayout DeepseekV3() {
  ModelLayout l;
  l.model = "deepseek-ai/DeepSeek-V3";
  l.num_layers = 61;
  for (uint32_t i = 0; i < 61; ++i) {
    AddAttention(&l, i, 1, 512 + 64);
    l.attention_layers.back().mla = true;
  }
  return l;
}

// moonshotai/Kimi-Linear-48B-A3B-Instruct: 27 layers; MLA (kv_lora_rank 512 + qk_rope_head_dim
// 64) on linear_attn_config's full_attn_layers [4, 8, 12, 16, 20, 24, 27] (1-based), Kimi Delta
// Attention elsewhere (32 heads of 128, short_conv_kernel_size 4).
ModelLayout KimiLinear48B() {
  static constexpr uint32_t kFull[] = {3, 7, 11, 15, 19, 23, 26};  // 0-based
  ModelLayout l;
  l.model = "moonshotai/Kimi-Linear-48B-A3B-Instruct";
  l.num_layers = 27;
  for (uint32_t i = 0; i < 27; ++i) {
    if (std::find(std::begin(kFull), std::end(kFull), i) != std::end(kFull)) {
      AddAttention(&l, i, 1, 512 + 64);
      l.attention_layers.back().mla = true;
    } else {
      l.ssm_layers.push_back(
          {i, "kda", {3 * 32 * 128, 4 - 1}, DType::kBf16, {32, 128, 128}, DType::kFp32});
    }
  }
  return l;
}

// MiniMax-M1 (the config.json of github.com/MiniMax-AI/MiniMax-M1): 80 layers; softmax attention
// (8 KV heads of 128) where attn_type_list is 1 (every 8th layer, (i + 1) % 8 == 0), lightning
// attention elsewhere: a state [64 heads, 128, 128] in the model dtype (bf16), no conv.
ModelLayout MiniMaxM1() {
  ModelLayout l;
  l.model = "MiniMaxAI/MiniMax-M1";
  l.num_layers = 80;
  for (uint32_t i = 0; i < 80; ++i) {
    if ((i + 1) % 8 == 0) {
      AddAttention(&l, i, 8, 128);
    } else {
      l.ssm_layers.push_back({i, "lightning", {}, DType::kBf16, {64, 128, 128}, DType::kBf16});
    }
  }
  return l;
}

// Qwen/Qwen3.5-122B-A10B (its text_config): 48 layers, 64 value heads.
ModelLayout Qwen35_122B() { return QwenGdnHybrid("Qwen/Qwen3.5-122B-A10B", 48, 64); }

const std::map<std::string, Builder>& Registry() {
  static const auto* registry = new std::map<std::string, Builder>{
      {"deepseek-v3", DeepseekV3},
      {"falcon-h1-0.5b", FalconH1_0_5B},
      {"gpt-oss-120b", GptOss120B},
      {"hymba-1.5b", Hymba1_5B},
      {"jamba-v0.1", JambaV01},
      {"kimi-linear-48b-a3b", KimiLinear48B},
      {"llama-3.1-8b", Llama31_8B},
      {"mamba2-2.7b", Mamba2_2_7B},
      {"minimax-m1", MiniMaxM1},
      {"nemotron-h-8b", NemotronH8B},
      {"qwen3-next-80b-a3b", Qwen3Next80B},
      {"qwen3.5-122b-a10b", Qwen35_122B},
      {"recurrentgemma-2b", RecurrentGemma2B},
      {"samba-1.3b", Samba1_3B},
      {"zamba2-2.7b", Zamba2_2_7B},
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

StatusOr<ModelLayout> ResolveLayout(std::string_view preset_or_path, uint32_t page_size_tokens) {
  const auto names = LayoutPresetNames();
  if (std::find(names.begin(), names.end(), preset_or_path) != names.end()) {
    return LayoutPreset(preset_or_path, page_size_tokens);
  }
  const std::string path(preset_or_path);
  auto layout = LoadLayoutFile(path, page_size_tokens);
  if (!layout.ok() && layout.status().IsNotFound()) {
    return Status::NotFound("'" + path +
                            "' is neither a layout preset (cachepawl layout --list shows them) "
                            "nor a layout file (" +
                            layout.status().message() + ")");
  }
  return layout;
}

}  // namespace cachepawl
