// Layouts from a Hugging Face config.json: the ModelLayout of the cache that transformers 5.17
// builds for a model, read from the model's configuration the way its transformers
// configuration class reads it (checked against transformers 5.17 itself: docs/MODELS.md).
//
// What is read. `model_type` picks the family (HfConfigModelTypes() lists them): bamba,
// deepseek_v3, falcon_h1, falcon_mamba, gemma3 (its decoder under "text_config"), gemma3_text,
// gpt_oss, granitemoehybrid, jamba, kimi_linear, lfm2, lfm2_moe, llama, mamba, mamba2, minimax,
// mistral, nemotron_h, olmo_hybrid, qwen2, qwen3, qwen3_5 (its decoder under "text_config"),
// qwen3_5_moe (likewise), qwen3_5_moe_text, qwen3_5_text, qwen3_next, recurrent_gemma, zamba,
// zamba2. For each family exactly the keys its configuration class and modeling code use for the
// cache are read: the decoder layer types (an explicit `layer_types` / `layers_block_type` /
// `block_types` list, or the older keys the class derives them from: `attn_layer_period` and
// `attn_layer_offset`, `attn_layer_indices`, `hybrid_override_pattern`, `full_attention_interval`,
// `full_attn_idxs`, `sliding_window_pattern`, ...; legacy names "mamba", "attention", "conv" are
// mapped as `remap_legacy_layer_types` maps them), the attention K/V heads and head dims, and the
// recurrent blocks' dimensions. A key absent from config.json takes the configuration class's
// default, as in transformers; derived values
// (`head_dim` = hidden_size / num_attention_heads, Zamba2's `mamba_headdim`, Bamba's
// `mamba_d_head` "auto", ...) are derived the same way, and an explicit key that the class would
// take over a derivation (e.g. Falcon-H1's `head_dim`) is taken. Other keys are ignored.
// docs/MODELS.md ("Layouts from a Hugging Face config") lists every key per family.
//
// What comes out, per decoder layer i (layer_index i):
//   attention layers (full, sliding, hybrid): K/V [page, num_key_value_heads, head_dim] of
//     cache_dtype; sliding layers record the model's window (Gemma 3 `sliding_window`,
//     RecurrentGemma `attention_window_size`, ...; 0 = full attention);
//   Mamba-2 style (mamba2, bamba, falcon_h1, granitemoehybrid, nemotron_h, zamba2): block
//     "mamba2", conv [d_inner + 2 * n_groups * d_state, W] of cache_dtype, state
//     [n_heads, head_dim, d_state] of state_dtype;
//   Mamba-1 (mamba, falcon_mamba, jamba): "mamba1", conv [d_inner, W], state [d_inner, d_state];
//   Zamba (v1): multi-head Mamba-1, "mamba1", conv [d_inner, W], state [n_mamba_heads,
//     d_inner / n_mamba_heads, d_state]; its hybrid layers also K/V;
//   Gated DeltaNet (qwen3_next, the qwen3_5 families, olmo_hybrid): "gdn",
//     conv [2 * k_heads * k_dim + v_heads * v_dim, W], state [v_heads, k_dim, v_dim];
//   LFM2 short convolution: "shortconv", conv [hidden_size, W], no state;
//   multi-head latent attention (deepseek_v3, kimi_linear's full-attention layers): one latent
//     of kv_lora_rank + qk_rope_head_dim values per token (mla: true, num_kv_heads 1, no V);
//   Kimi Delta Attention (kimi_linear's linear layers): "kda", conv [3 * heads * head_dim, W],
//     state [heads, head_dim, head_dim];
//   MiniMax lightning attention: "lightning", no conv, state [heads, head_dim, head_dim] of
//     cache_dtype (the model dtype, as transformers and vLLM keep it);
//   RG-LRU (recurrent_gemma): "rglru", conv [lru_width, conv1d_width - 1], state [lru_width];
//   MLP / MoE layers (nemotron_h): nothing.
// Zamba2's hybrid layers and every Falcon-H1 layer hold both K/V and a Mamba-2 state.
//
// Conventions: W, the conv state's width, is the kernel width d_conv with kTransformers
// (transformers' LinearAttentionLayer keeps all d_conv columns) and d_conv - 1 with kSglang
// (SGLang's and vLLM's conv state; the built-in presets use it). RecurrentGemma keeps
// conv1d_width - 1 columns in both (its modeling code keeps its own state). Nothing else differs.
//
// Dtypes: cache_dtype is the model/cache dtype of K/V and conv states; state_dtype that of the
// recurrent states (transformers and SGLang keep them in fp32). config.json's own `dtype` /
// `torch_dtype` is not read: the cache dtype is the serving engine's choice.
//
// Tensor parallelism: with HfLayoutOptions::tp_size N > 1 the result is rank tp_rank's share,
// split as the engines split the heads and channels (ShardLayout, layouts/layout_tp.h; an
// impossible split names the layer's field). Multi-token-
// prediction layers (NemotronH `num_nextn_predict_layers`), chunked attention
// (`attention_chunk_size`) and Gemma 3's vision tower are not mapped.
//
// JSON: as Python's json module reads it: the last of two equal keys wins, and the non-standard
// NaN, Infinity and -Infinity (e.g. "time_step_limit": [0.0, Infinity]) are accepted (as null;
// no key read here holds a float).
//
// Errors: InvalidArgument naming the key (with its path for nested configs, e.g.
// "text_config.head_dim") and the value, never an exception: a missing key without a default
// ("model_type: missing"), a wrong JSON type ("num_hidden_layers: \"32\" (expected an
// integer)"), an out-of-range value ("num_key_value_heads: 0 (must be > 0)"), an unknown family
// or layer type ("layers_block_type[3]: 'foo' (expected ...)"), and the inconsistencies the
// configuration class refuses ("mamba_expand * hidden_size 5120 is not divisible by
// n_mamba_heads 7"). A few files transformers loads are refused too, where the model cannot run
// or the file contradicts itself (an index beyond the last layer, a Zamba2 hybrid_layer_ids
// that disagrees with its layer types, two names of one attribute with different values, ...;
// docs/MODELS.md lists them). Integers must be JSON integers in [0, 2^31 - 1], and a model has
// at most 65536 decoder layers. The result is validated (ModelLayout::Validate).
// LayoutFromHfConfigFile prefixes every error with "hf config PATH: " and returns NotFound when the
// file does not exist.
//
// Thread safety: the functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl {

// The width of a conv state: the kernel width (transformers) or one less (SGLang, vLLM).
enum class StateConvention : uint8_t { kTransformers, kSglang };

std::string_view StateConventionName(StateConvention convention);  // "transformers", "sglang"
std::optional<StateConvention> ParseStateConvention(std::string_view name);

struct HfLayoutOptions {
  DType cache_dtype = DType::kBf16;  // K/V and conv states (the model / cache dtype)
  DType state_dtype = DType::kFp32;  // recurrent states (SSM, RG-LRU, delta rule)
  StateConvention convention = StateConvention::kTransformers;
  uint32_t page_size_tokens = 16;
  std::string model;  // the layout's model name; empty: config's "_name_or_path", else model_type
  uint32_t tp_size = 1;  // tensor-parallel ranks; > 1: the layout of rank tp_rank (ShardLayout)
  uint32_t tp_rank = 0;

  // InvalidArgument naming the field: page_size_tokens 0, a dtype or convention out of range,
  // tp_size 0, tp_rank >= tp_size.
  [[nodiscard]] Status Validate() const;
};

// The layout of the model whose config.json text is `config_json`.
[[nodiscard]] StatusOr<ModelLayout> LayoutFromHfConfig(std::string_view config_json,
                                                       const HfLayoutOptions& options);
// The same from a file; errors start "hf config PATH: ".
[[nodiscard]] StatusOr<ModelLayout> LayoutFromHfConfigFile(const std::string& path,
                                                           const HfLayoutOptions& options);

// The model_type values LayoutFromHfConfig maps, sorted.
std::vector<std::string> HfConfigModelTypes();

}  // namespace cachepawl
