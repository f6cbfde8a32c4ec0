// LayoutFromHfConfig's readers of the attention families (layout_from_hf_internal.h): Llama,
// Mistral, Qwen2, Qwen3 and Gemma 3 (full and sliding-window attention), RecurrentGemma
// (RG-LRU and local attention), Qwen3-Next (Gated DeltaNet) and LFM2 (short convolutions).
// Each default below is the transformers 5.17 configuration class's; the attention layers are
// what DynamicCache(config) builds (cache_utils.get_layer_types_and_kwargs).
#include <algorithm>
#include <string>
#include <vector>

#include "layouts/internal/layout_from_hf_internal.h"

namespace cachepawl::hf_internal {
namespace {

constexpr char kNumLayersKey[] = "num_hidden_layers";

struct AttentionDims {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

// num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads and the head dim
// with the class's defaults (`kv_default` nullopt: num_attention_heads; `head_dim_default`
// nullopt: hidden_size // num_attention_heads). `divisible`: the class's validate_architecture
// refuses a hidden_size that num_attention_heads does not divide.
Status ReadDims(const ConfigReader& c, AttentionDims defaults, std::optional<int64_t> kv_default,
                std::optional<int64_t> head_dim_default, bool divisible, AttentionDims* out) {
  CACHEPAWL_RETURN_IF_ERROR(ReadNumLayers(c, defaults.layers, &out->layers));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("hidden_size", defaults.hidden, &out->hidden));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("num_attention_heads", defaults.heads, &out->heads));
  if (divisible && out->hidden % out->heads != 0) {
    return Bad(c.Path("hidden_size"), std::to_string(out->hidden),
               "not a multiple of num_attention_heads " + std::to_string(out->heads) +
                   ": the configuration class refuses it");
  }
  CACHEPAWL_RETURN_IF_ERROR(ReadKvHeads(c, out->heads, kv_default, &out->kv_heads));
  return ReadHeadDim(c, out->hidden, out->heads, head_dim_default, &out->head_dim);
}

// The attention layers DynamicCache builds for `types` (full_attention, sliding_attention), or,
// without types, for every layer: sliding when `window` is set, full otherwise
// (get_layer_types_and_kwargs). Sliding layers keep `window` tokens (`window_key` names it).
Status AddAttentionLayers(const ConfigReader& c, const AttentionDims& d,
                          const std::optional<std::vector<std::string>>& types,
                          std::optional<int64_t> window, std::string_view window_key,
                          std::string_view types_key, LayoutBuilder* out) {
  if (!types && !window && !c.IsAbsentOrNull("attention_chunk_size")) {
    return Bad(c.Path("attention_chunk_size"), "present",
               "chunked attention is not mapped to a layout");
  }
  out->SetNumLayers(d.layers);
  for (int64_t i = 0; i < d.layers; ++i) {
    const bool sliding = types ? (*types)[static_cast<size_t>(i)] == "sliding_attention" : !!window;
    if (sliding && !window) {
      return Bad(c.Path(types_key) + "[" + std::to_string(i) + "]", "'sliding_attention'",
                 std::string(window_key) + " is null: no window to keep");
    }
    out->Attention(i, d.kv_heads, d.head_dim, sliding ? *window : 0);
  }
  return Status::OK();
}

// The optional `layer_types` list of an attention-only config (full or sliding layers).
Status ReadAttentionTypes(const ConfigReader& c, int64_t layers,
                          std::optional<std::vector<std::string>>* types) {
  types->reset();
  if (c.IsAbsentOrNull("layer_types")) return Status::OK();
  std::vector<std::string> list;
  CACHEPAWL_RETURN_IF_ERROR(ReadLayerTypes(c, "layer_types",
                                           {"full_attention", "sliding_attention"},
                                           /*remap_legacy=*/false, layers, kNumLayersKey, &list));
  *types = std::move(list);
  return Status::OK();
}

// Llama and Mistral: layer_types and sliding_window are not fields of their classes, but a
// config.json that has them sets them (PreTrainedConfig keeps unknown keys) and the cache reads
// them. `window_default`: the class's sliding_window default (nullopt: none).
Status ReadLlamaLike(const ConfigReader& c, const AttentionDims& defaults,
                     std::optional<int64_t> kv_default, bool divisible,
                     std::optional<int64_t> window_default, LayoutBuilder* out) {
  AttentionDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadDims(c, defaults, kv_default, std::nullopt, divisible, &d));
  std::optional<std::vector<std::string>> types;
  CACHEPAWL_RETURN_IF_ERROR(ReadAttentionTypes(c, d.layers, &types));
  std::optional<int64_t> window = window_default;
  if (c.Has("sliding_window")) {  // null: no window
    CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("sliding_window", &window));
  }
  return AddAttentionLayers(c, d, types, window, "sliding_window", "layer_types", out);
}

// Qwen2 and Qwen3: sliding_window applies only with use_sliding_window, to the layers from
// max_window_layers on.
Status ReadQwen(const ConfigReader& c, const AttentionDims& defaults,
                std::optional<int64_t> head_dim_default, LayoutBuilder* out) {
  AttentionDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadDims(c, defaults, 32, head_dim_default, false, &d));
  bool use_sliding_window = false;
  int64_t max_window_layers = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Bool("use_sliding_window", false, &use_sliding_window));
  CACHEPAWL_RETURN_IF_ERROR(c.Int("max_window_layers", 28, &max_window_layers));
  std::optional<int64_t> window = 4096;
  if (c.Has("sliding_window")) {
    CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("sliding_window", &window));
  }
  if (!use_sliding_window) window.reset();
  std::optional<std::vector<std::string>> types;
  CACHEPAWL_RETURN_IF_ERROR(ReadAttentionTypes(c, d.layers, &types));
  if (!types) {
    types.emplace();
    for (int64_t i = 0; i < d.layers; ++i) {
      types->push_back(window && i >= max_window_layers ? "sliding_attention" : "full_attention");
    }
  }
  return AddAttentionLayers(c, d, types, window, "sliding_window (with use_sliding_window)",
                            "layer_types", out);
}

}  // namespace

// LlamaConfig (models/llama/configuration_llama.py).
Status ReadLlama(const ConfigReader& c, LayoutBuilder* out) {
  return ReadLlamaLike(c, {32, 4096, 32, 0, 0}, std::nullopt, /*divisible=*/true, std::nullopt,
                       out);
}

// MistralConfig: num_key_value_heads 8, sliding_window 4096 (every layer) unless null.
Status ReadMistral(const ConfigReader& c, LayoutBuilder* out) {
  return ReadLlamaLike(c, {32, 4096, 32, 0, 0}, 8, /*divisible=*/false, 4096, out);
}

// Qwen2Config: no head_dim field (getattr: hidden_size // num_attention_heads).
Status ReadQwen2(const ConfigReader& c, LayoutBuilder* out) {
  return ReadQwen(c, {32, 4096, 32, 0, 0}, std::nullopt, out);
}

// Qwen3Config: head_dim 128.
Status ReadQwen3(const ConfigReader& c, LayoutBuilder* out) {
  return ReadQwen(c, {32, 4096, 32, 0, 0}, 128, out);
}

// Gemma3TextConfig: layer_types, else sliding except every sliding_window_pattern-th layer;
// use_bidirectional_attention halves the window (sliding_window // 2 + 1).
Status ReadGemma3Text(const ConfigReader& c, LayoutBuilder* out) {
  AttentionDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadDims(c, {26, 2304, 8, 0, 0}, 4, 256, /*divisible=*/true, &d));
  std::optional<int64_t> window = 4096;
  if (c.Has("sliding_window")) {
    CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("sliding_window", &window));
  }
  bool bidirectional = false;
  CACHEPAWL_RETURN_IF_ERROR(c.Bool("use_bidirectional_attention", false, &bidirectional));
  if (bidirectional && !window) {
    return Bad(c.Path("sliding_window"), "null",
               "use_bidirectional_attention halves the sliding window: it needs one");
  }
  if (bidirectional) window = *window / 2 + 1;
  std::optional<std::vector<std::string>> types;
  CACHEPAWL_RETURN_IF_ERROR(ReadAttentionTypes(c, d.layers, &types));
  if (!types) {
    int64_t pattern = 0;
    CACHEPAWL_RETURN_IF_ERROR(c.Positive("sliding_window_pattern", 6, &pattern));
    types.emplace();
    for (int64_t i = 0; i < d.layers; ++i) {
      types->push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
    }
  }
  return AddAttentionLayers(c, d, types, window, "sliding_window", "layer_types", out);
}

// RecurrentGemmaConfig: block_types repeated over the layers; "recurrent" layers keep the
// RG-LRU's conv1d_state [lru_width, conv1d_width - 1] (model dtype) and recurrent_states
// [lru_width] (fp32) inside their modules (modeling_recurrent_gemma.py, RecurrentBlock), in both
// conventions; "attention" layers keep a window of attention_window_size tokens (the config's
// sliding_window makes DynamicCache slide every layer).
Status ReadRecurrentGemma(const ConfigReader& c, LayoutBuilder* out) {
  CACHEPAWL_RETURN_IF_ERROR(
      RefuseLayerTypeKeys(c, {"layers_block_type", "layer_types"}, "block_types"));
  AttentionDims d;
  CACHEPAWL_RETURN_IF_ERROR(
      ReadDims(c, {26, 2560, 10, 0, 0}, std::nullopt, std::nullopt, false, &d));
  int64_t conv1d_width = 0, window = 0;
  std::optional<int64_t> lru_width;  // None: hidden_size
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("lru_width", &lru_width));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("conv1d_width", 4, &conv1d_width));
  if (conv1d_width < 2) {
    return Bad(c.Path("conv1d_width"), std::to_string(conv1d_width),
               "RecurrentGemma keeps conv1d_width - 1 columns: must be >= 2");
  }
  // sliding_window is attention_window_size's attribute_map alias; set last, it wins.
  const char* window_key =
      c.IsAbsentOrNull("sliding_window") ? "attention_window_size" : "sliding_window";
  CACHEPAWL_RETURN_IF_ERROR(c.Positive(window_key, 2048, &window));
  std::optional<std::vector<std::string>> blocks;
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalStrings("block_types", &blocks));
  if (!blocks) blocks = std::vector<std::string>{"recurrent", "recurrent", "attention"};
  if (blocks->empty()) return Bad(c.Path("block_types"), "[]", "needs at least one block");
  for (size_t i = 0; i < blocks->size(); ++i) {
    if ((*blocks)[i] != "recurrent" && (*blocks)[i] != "attention") {
      return Bad(c.Path("block_types") + "[" + std::to_string(i) + "]", "'" + (*blocks)[i] + "'",
                 "expected recurrent or attention");
    }
  }
  const int64_t most = 100 * static_cast<int64_t>(blocks->size());
  if (d.layers > most) {
    return Bad(c.Path(kNumLayersKey), std::to_string(d.layers),
               "layers_block_type repeats block_types 100 times: at most " + std::to_string(most));
  }
  out->SetNumLayers(d.layers);
  for (int64_t i = 0; i < d.layers; ++i) {
    if ((*blocks)[static_cast<size_t>(i) % blocks->size()] == "attention") {
      out->Attention(i, d.kv_heads, d.head_dim, window);
    } else {
      out->RgLru(i, lru_width.value_or(d.hidden), static_cast<uint64_t>(conv1d_width - 1));
    }
  }
  return Status::OK();
}

namespace {

// A Gated DeltaNet layer's dims.
struct GdnDims {
  int64_t k_heads = 0;
  int64_t k_dim = 0;
  int64_t v_heads = 0;
  int64_t v_dim = 0;
};

// The layer_types list of a linear_attention / full_attention hybrid (legacy names remapped), or
// empty when the config has none.
Status ReadLinearOrFullTypes(const ConfigReader& c, int64_t layers,
                             std::vector<std::string>* types) {
  types->clear();
  if (c.IsAbsentOrNull("layer_types")) return Status::OK();
  return ReadLayerTypes(c, "layer_types", {"linear_attention", "full_attention"},
                        /*remap_legacy=*/true, layers, kNumLayersKey, types);
}

// The layers of a Gated DeltaNet hybrid: full attention where `types` says so, Gated DeltaNet
// (conv kernel linear_conv_kernel_dim, default 4) elsewhere.
Status AddGdnHybridLayers(const ConfigReader& c, const AttentionDims& d,
                          const std::vector<std::string>& types, const GdnDims& g,
                          LayoutBuilder* out) {
  int64_t kernel = 0;
  uint64_t width = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("linear_conv_kernel_dim", 4, &kernel));
  CACHEPAWL_RETURN_IF_ERROR(out->ConvWidth(c, "linear_conv_kernel_dim", kernel, &width));
  out->SetNumLayers(d.layers);
  for (int64_t i = 0; i < d.layers; ++i) {
    if (types[static_cast<size_t>(i)] == "full_attention") {
      out->Attention(i, d.kv_heads, d.head_dim);
    } else {
      out->GatedDeltaNet(i, g.k_heads, g.k_dim, g.v_heads, g.v_dim, width);
    }
  }
  return Status::OK();
}

// Qwen3-Next's decoder and the Qwen3.5 text decoders that reuse its layers (their configuration
// classes differ only in defaults): layer_types, else full attention every
// full_attention_interval-th layer and Gated DeltaNet elsewhere.
Status ReadGatedDeltaNetHybrid(const ConfigReader& c, AttentionDims defaults, int64_t kv_default,
                               LayoutBuilder* out) {
  AttentionDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadDims(c, defaults, kv_default, 256, false, &d));
  std::vector<std::string> types;
  CACHEPAWL_RETURN_IF_ERROR(ReadLinearOrFullTypes(c, d.layers, &types));
  if (types.empty()) {
    int64_t interval = 0;
    CACHEPAWL_RETURN_IF_ERROR(c.Positive("full_attention_interval", 4, &interval));
    for (int64_t i = 0; i < d.layers; ++i) {
      types.push_back((i + 1) % interval != 0 ? "linear_attention" : "full_attention");
    }
  }
  GdnDims g;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("linear_key_head_dim", 128, &g.k_dim));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("linear_value_head_dim", 128, &g.v_dim));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("linear_num_key_heads", 16, &g.k_heads));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("linear_num_value_heads", 32, &g.v_heads));
  return AddGdnHybridLayers(c, d, types, g, out);
}

}  // namespace

// Qwen3NextConfig (48 layers, hidden 2048, 16 heads, 2 KV heads of 256 by default).
Status ReadQwen3Next(const ConfigReader& c, LayoutBuilder* out) {
  return ReadGatedDeltaNetHybrid(c, {48, 2048, 16, 0, 0}, 2, out);
}

// Qwen3_5TextConfig (32 layers, hidden 4096, 16 heads, 4 KV heads of 256 by default).
Status ReadQwen35Text(const ConfigReader& c, LayoutBuilder* out) {
  return ReadGatedDeltaNetHybrid(c, {32, 4096, 16, 0, 0}, 4, out);
}

// Qwen3_5MoeTextConfig (40 layers, hidden 2048, 16 heads, 2 KV heads of 256 by default).
Status ReadQwen35MoeText(const ConfigReader& c, LayoutBuilder* out) {
  return ReadGatedDeltaNetHybrid(c, {40, 2048, 16, 0, 0}, 2, out);
}

// Gpt-oss (GptOssConfig): 36 layers of 8 KV heads of 64 (head_dim null: hidden_size //
// num_attention_heads); layer_types, else sliding (sliding_window, 128) on even layers and full
// on odd ones. Its learned attention sinks are weights: the cache holds K and V only.
Status ReadGptOss(const ConfigReader& c, LayoutBuilder* out) {
  AttentionDims d;
  const std::optional<int64_t> head_dim = c.Has("head_dim") ? std::nullopt : std::optional(64);
  CACHEPAWL_RETURN_IF_ERROR(ReadDims(c, {36, 2880, 64, 0, 0}, 8, head_dim, false, &d));
  std::optional<int64_t> window = 128;
  if (c.Has("sliding_window")) {  // null: no window
    CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("sliding_window", &window));
  }
  std::optional<std::vector<std::string>> types;
  CACHEPAWL_RETURN_IF_ERROR(ReadAttentionTypes(c, d.layers, &types));
  if (!types) {
    types.emplace();
    for (int64_t i = 0; i < d.layers; ++i) {
      types->push_back((i + 1) % 2 != 0 ? "sliding_attention" : "full_attention");
    }
  }
  return AddAttentionLayers(c, d, types, window, "sliding_window", "layer_types", out);
}

namespace {
// Lfm2's and Lfm2-MoE's layers: full attention and short convolutions, each conv layer keeping
// [hidden_size, conv_L_cache] (transformers) and no other state. `d`: the attention dims read.
Status AddLfm2Layers(const ConfigReader& c, const AttentionDims& d,
                     const std::vector<bool>& attention, LayoutBuilder* out) {
  int64_t kernel = 0;
  uint64_t width = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("conv_L_cache", 3, &kernel));
  CACHEPAWL_RETURN_IF_ERROR(out->ConvWidth(c, "conv_L_cache", kernel, &width));
  out->SetNumLayers(d.layers);
  for (int64_t i = 0; i < d.layers; ++i) {
    if (attention[static_cast<size_t>(i)]) {
      out->Attention(i, d.kv_heads, d.head_dim);
    } else {
      out->ShortConv(i, d.hidden, width);
    }
  }
  return Status::OK();
}

// layer_types of Lfm2 and Lfm2-MoE: true where a layer is full attention.
Status ReadLfm2Types(const ConfigReader& c, int64_t layers, std::vector<bool>* attention) {
  std::vector<std::string> types;
  CACHEPAWL_RETURN_IF_ERROR(ReadLayerTypes(c, "layer_types",
                                           {"full_attention", "conv", "linear_attention"},
                                           /*remap_legacy=*/false, layers, kNumLayersKey, &types));
  attention->resize(types.size());
  for (size_t i = 0; i < types.size(); ++i) (*attention)[i] = types[i] == "full_attention";
  return Status::OK();
}
}  // namespace

// Lfm2MoeConfig: Lfm2's cache (its MoE blocks hold none) with its own defaults (32 layers,
// hidden 2048, 32 heads, 8 KV heads); its decoder layers read their kind from layer_types
// alone, so a config without it builds no model.
Status ReadLfm2Moe(const ConfigReader& c, LayoutBuilder* out) {
  AttentionDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadDims(c, {32, 2048, 32, 0, 0}, 8, std::nullopt, false, &d));
  if (c.IsAbsentOrNull("layer_types")) {
    return Bad(c.Path("layer_types"), c.Has("layer_types") ? "null" : "absent",
               "Lfm2-MoE's layers read their kind (conv or full_attention) from it");
  }
  std::vector<bool> attention;
  CACHEPAWL_RETURN_IF_ERROR(ReadLfm2Types(c, d.layers, &attention));
  return AddLfm2Layers(c, d, attention, out);
}

// Lfm2Config: layer_types ("conv" short convolutions, "full_attention"), else full attention at
// full_attn_idxs (every layer when absent) and short convolutions elsewhere.
Status ReadLfm2(const ConfigReader& c, LayoutBuilder* out) {
  AttentionDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadDims(c, {32, 2560, 32, 0, 0}, 8, std::nullopt, false, &d));
  std::vector<bool> attention(static_cast<size_t>(d.layers), true);
  if (!c.IsAbsentOrNull("layer_types")) {
    CACHEPAWL_RETURN_IF_ERROR(ReadLfm2Types(c, d.layers, &attention));
  } else {
    std::optional<std::vector<int64_t>> full;
    CACHEPAWL_RETURN_IF_ERROR(c.OptionalInts("full_attn_idxs", &full));
    if (full) {
      attention.assign(attention.size(), false);
      for (size_t k = 0; k < full->size(); ++k) {
        if ((*full)[k] >= d.layers) {
          return Bad(c.Path("full_attn_idxs") + "[" + std::to_string(k) + "]",
                     std::to_string((*full)[k]),
                     "must be < num_hidden_layers " + std::to_string(d.layers));
        }
        attention[static_cast<size_t>((*full)[k])] = true;
      }
    }
  }
  return AddLfm2Layers(c, d, attention, out);
}

// OlmoHybridConfig: 32 layers, hidden 3840, 30 heads, kv heads = heads, head_dim key else
// hidden // heads; layer_types (legacy names remapped), else Gated DeltaNet everywhere but full
// attention where i % 4 == 3 (the last layer when that leaves none); at least one layer of each
// kind (the class's validate_architecture). Its Gated DeltaNet: linear_num_key_heads and
// linear_num_value_heads default to the heads, linear_key_head_dim to int(0.75 * hidden /
// key heads), linear_value_head_dim to twice that, linear_conv_kernel_dim 4.
Status ReadOlmoHybrid(const ConfigReader& c, LayoutBuilder* out) {
  AttentionDims d;
  CACHEPAWL_RETURN_IF_ERROR(
      ReadDims(c, {32, 3840, 30, 0, 0}, std::nullopt, std::nullopt, false, &d));
  std::vector<std::string> types;
  CACHEPAWL_RETURN_IF_ERROR(ReadLinearOrFullTypes(c, d.layers, &types));
  if (types.empty()) {
    for (int64_t i = 0; i < d.layers; ++i) {
      types.push_back(i % 4 == 3 ? "full_attention" : "linear_attention");
    }
    if (std::find(types.begin(), types.end(), "full_attention") == types.end()) {
      types.back() = "full_attention";
    }
  }
  for (const char* kind : {"linear_attention", "full_attention"}) {
    if (std::find(types.begin(), types.end(), kind) == types.end()) {
      return Bad(c.Path("layer_types"), std::string("no '") + kind + "' layer",
                 "OLMo Hybrid needs at least one linear_attention and one full_attention layer "
                 "(the configuration class refuses it)");
    }
  }
  std::optional<int64_t> k_heads, v_heads, k_dim, v_dim;
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("linear_num_key_heads", &k_heads));
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("linear_num_value_heads", &v_heads));
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("linear_key_head_dim", &k_dim));
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("linear_value_head_dim", &v_dim));
  GdnDims g;
  g.k_heads = k_heads.value_or(d.heads);
  g.v_heads = v_heads.value_or(d.heads);
  // int(0.75 * hidden / key heads), exactly: 0.75 * hidden is exact in binary.
  g.k_dim = k_dim.value_or(3 * d.hidden / (4 * g.k_heads));
  if (g.k_dim <= 0) {
    return Bad(c.Path("linear_key_head_dim"), "null",
               "int(0.75 * hidden_size " + std::to_string(d.hidden) + " / linear_num_key_heads " +
                   std::to_string(g.k_heads) + ") is 0");
  }
  g.v_dim = v_dim.value_or(2 * g.k_dim);
  return AddGdnHybridLayers(c, d, types, g, out);
}

// MiniMaxConfig (32 layers, hidden 4096, 32 heads, 8 KV heads, head_dim null: hidden // heads):
// layer_types, else attn_type_list (the hub checkpoints' form, model_type minimax_m1, which
// vLLM's MiniMaxText01 model reads: 1 softmax attention, 0 lightning), else full attention on
// the even layers ((i + 1) % 2 != 0) and lightning attention on the odd ones. A full layer keeps
// K/V (a sliding-window mask when sliding_window is set); a lightning layer the K^T V state [heads,
// head_dim, head_dim] in the model dtype (MiniMaxLightningAttention's attn_weights_inter; vLLM's
// linear_attention_state_shape likewise), no conv.
Status ReadMiniMax(const ConfigReader& c, LayoutBuilder* out) {
  AttentionDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadDims(c, {32, 4096, 32, 0, 0}, 8, std::nullopt, false, &d));
  std::vector<std::string> types;
  if (!c.IsAbsentOrNull("layer_types")) {
    CACHEPAWL_RETURN_IF_ERROR(
        ReadLayerTypes(c, "layer_types", {"full_attention", "linear_attention"},
                       /*remap_legacy=*/false, d.layers, kNumLayersKey, &types));
  } else if (!c.IsAbsentOrNull("attn_type_list")) {
    std::optional<std::vector<int64_t>> list;
    CACHEPAWL_RETURN_IF_ERROR(c.OptionalInts("attn_type_list", &list));
    if (list->size() != static_cast<size_t>(d.layers)) {
      return Bad(c.Path("attn_type_list"), std::to_string(list->size()) + " entries",
                 "one per layer: num_hidden_layers " + std::to_string(d.layers));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      if ((*list)[i] > 1) {
        return Bad(c.Path("attn_type_list") + "[" + std::to_string(i) + "]",
                   std::to_string((*list)[i]), "1 (softmax attention) or 0 (lightning)");
      }
      types.push_back((*list)[i] == 1 ? "full_attention" : "linear_attention");
    }
  } else {
    for (int64_t i = 0; i < d.layers; ++i) {
      types.push_back((i + 1) % 2 != 0 ? "full_attention" : "linear_attention");
    }
  }
  std::optional<int64_t> window;
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("sliding_window", &window));
  out->SetNumLayers(d.layers);
  for (int64_t i = 0; i < d.layers; ++i) {
    if (types[static_cast<size_t>(i)] == "full_attention") {
      out->Attention(i, d.kv_heads, d.head_dim, window.value_or(0));
    } else {
      out->Lightning(i, d.heads, d.head_dim);
    }
  }
  return Status::OK();
}

}  // namespace cachepawl::hf_internal
