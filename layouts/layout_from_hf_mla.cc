// The families with multi-head latent attention (layouts/layout_from_hf.h): DeepSeek V3 (every
// layer MLA) and Kimi Linear (MLA beside Kimi Delta Attention). transformers 5.17 caches an MLA
// layer's compressed KV (kv_lora_rank values, after kv_a_layernorm) and its rotary key part
// (qk_rope_head_dim values) per token, before any expansion to heads: the layout keeps both as
// one latent of kv_lora_rank + qk_rope_head_dim values per token (mla: true), the latent first,
// as vLLM and SGLang store it. A Kimi Delta Attention layer keeps a conv state over q, k and v
// ([3 * num_heads * head_dim, W]) and a recurrent state [num_heads, head_dim, head_dim].
#include <string>
#include <vector>

#include "layouts/internal/layout_from_hf_internal.h"

namespace cachepawl::hf_internal {
namespace {

// kv_lora_rank + qk_rope_head_dim, with the class's defaults (512 and 64 in both families).
Status ReadLatentWidth(const ConfigReader& c, int64_t* out) {
  int64_t rank = 0, rope = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("kv_lora_rank", 512, &rank));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("qk_rope_head_dim", 64, &rope));
  *out = rank + rope;
  return Status::OK();
}

// Kimi Linear's 1-based layer lists under linear_attn_config (the checkpoint's form):
// every listed layer in [1, layers], listed once.
Status ReadOneBasedLayers(const ConfigReader& lin, std::string_view key, int64_t layers,
                          const char* type, std::vector<std::string>* types) {
  std::optional<std::vector<int64_t>> listed;
  CACHEPAWL_RETURN_IF_ERROR(lin.OptionalInts(key, &listed));
  for (size_t i = 0; i < listed->size(); ++i) {
    const int64_t layer = (*listed)[i];
    const std::string path = lin.Path(key) + "[" + std::to_string(i) + "]";
    if (layer < 1 || layer > layers) {
      return Bad(path, std::to_string(layer),
                 "layers are numbered 1 to num_hidden_layers " + std::to_string(layers));
    }
    std::string& t = (*types)[static_cast<size_t>(layer - 1)];
    if (!t.empty()) return Bad(path, std::to_string(layer), "listed twice");
    t = type;
  }
  return Status::OK();
}

}  // namespace

// DeepseekV3Config: 61 layers, every one MLA (kv_lora_rank 512 + qk_rope_head_dim 64). The
// multi-token-prediction layers (num_mtp_layers) are not part of transformers' decoder.
Status ReadDeepseekV3(const ConfigReader& c, LayoutBuilder* out) {
  int64_t layers = 0, latent = 0;
  CACHEPAWL_RETURN_IF_ERROR(ReadNumLayers(c, 61, &layers));
  CACHEPAWL_RETURN_IF_ERROR(ReadLatentWidth(c, &latent));
  out->SetNumLayers(layers);
  for (int64_t i = 0; i < layers; ++i) out->Mla(i, latent);
  return Status::OK();
}

// KimiLinearConfig: 27 layers; layer_types, else linear_attn_config's 1-based full_attn_layers
// and kda_layers (both present), else full attention on every fourth layer from layer 4 (i > 0
// and i % 4 == 0). KDA dims: linear_attn_config's head_dim, num_heads and
// short_conv_kernel_size win over linear_head_dim (128), linear_num_heads (32) and
// linear_conv_kernel_dim (4).
Status ReadKimiLinear(const ConfigReader& c, LayoutBuilder* out) {
  int64_t layers = 0, latent = 0;
  CACHEPAWL_RETURN_IF_ERROR(ReadNumLayers(c, 27, &layers));
  CACHEPAWL_RETURN_IF_ERROR(ReadLatentWidth(c, &latent));
  static const Json kEmpty = Json::object();
  const Json* lin_json = c.Find("linear_attn_config");
  if (lin_json != nullptr && !lin_json->is_null() && !lin_json->is_object()) {
    return Bad(c.Path("linear_attn_config"), lin_json->dump(), "expected an object");
  }
  const ConfigReader lin(lin_json != nullptr && lin_json->is_object() ? *lin_json : kEmpty,
                         c.Path("linear_attn_config."));
  int64_t head_dim = 0, heads = 0, kernel = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("linear_head_dim", 128, &head_dim));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("linear_num_heads", 32, &heads));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("linear_conv_kernel_dim", 4, &kernel));
  CACHEPAWL_RETURN_IF_ERROR(lin.Positive("head_dim", head_dim, &head_dim));
  CACHEPAWL_RETURN_IF_ERROR(lin.Positive("num_heads", heads, &heads));
  CACHEPAWL_RETURN_IF_ERROR(lin.Positive("short_conv_kernel_size", kernel, &kernel));
  uint64_t width = 0;
  CACHEPAWL_RETURN_IF_ERROR(lin.Has("short_conv_kernel_size")
                                ? out->ConvWidth(lin, "short_conv_kernel_size", kernel, &width)
                                : out->ConvWidth(c, "linear_conv_kernel_dim", kernel, &width));

  std::vector<std::string> types;
  if (!c.IsAbsentOrNull("layer_types")) {
    CACHEPAWL_RETURN_IF_ERROR(
        ReadLayerTypes(c, "layer_types", {"linear_attention", "full_attention"},
                       /*remap_legacy=*/false, layers, "num_hidden_layers", &types));
  } else if (!lin.IsAbsentOrNull("full_attn_layers") && !lin.IsAbsentOrNull("kda_layers")) {
    types.assign(static_cast<size_t>(layers), "");
    CACHEPAWL_RETURN_IF_ERROR(
        ReadOneBasedLayers(lin, "full_attn_layers", layers, "full_attention", &types));
    CACHEPAWL_RETURN_IF_ERROR(
        ReadOneBasedLayers(lin, "kda_layers", layers, "linear_attention", &types));
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i].empty()) {
        return Bad(lin.Path("kda_layers"), "(layer " + std::to_string(i + 1) + " missing)",
                   "every layer must be in full_attn_layers or kda_layers");
      }
    }
  } else {
    for (int64_t i = 0; i < layers; ++i) {
      types.push_back(i > 0 && i % 4 == 0 ? "full_attention" : "linear_attention");
    }
  }
  out->SetNumLayers(layers);
  for (int64_t i = 0; i < layers; ++i) {
    if (types[static_cast<size_t>(i)] == "full_attention") {
      out->Mla(i, latent);
    } else {
      out->KimiDelta(i, heads, head_dim, width);
    }
  }
  return Status::OK();
}

}  // namespace cachepawl::hf_internal
