// LayoutFromHfConfig's readers of the Mamba families (layout_from_hf_internal.h): Mamba-1 and
// Mamba-2, and the hybrids built on them: Jamba (Mamba-1), Bamba, GraniteMoeHybrid, Falcon-H1,
// NemotronH and Zamba2 (Mamba-2). Each default below is the transformers 5.17 configuration
// class's (models/<family>/configuration_<family>.py); each shape is what the modeling code's
// LinearAttentionLayer / DynamicLayer caches hold (modeling_<family>.py).
#include <algorithm>
#include <string>
#include <vector>

#include "layouts/internal/layout_from_hf_internal.h"

namespace cachepawl::hf_internal {
namespace {

constexpr char kNumLayersKey[] = "num_hidden_layers";

// The dims of a Mamba-2 mixer.
struct Mamba2Dims {
  int64_t d_inner = 0;  // the mixer's intermediate size (x's channels)
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_groups = 0;
  int64_t d_state = 0;
  uint64_t conv_width = 0;
};

// head_dim of a Mamba-2 mixer whose d_inner channels split into n_heads heads: `explicit_dim`
// (a config key) must be d_inner / n_heads; without one it is derived, which needs n_heads to
// divide d_inner. `d_inner_what` / `heads_key` / `dim_key` name the keys in the errors.
Status MambaHeadDim(int64_t d_inner, const std::string& d_inner_what, int64_t n_heads,
                    const std::string& heads_key, std::optional<int64_t> explicit_dim,
                    const std::string& dim_key, int64_t* head_dim) {
  if (explicit_dim) {
    if (*explicit_dim * n_heads != d_inner) {
      return Status::InvalidArgument(
          dim_key + " * " + heads_key + " " + std::to_string(*explicit_dim) + " * " +
          std::to_string(n_heads) + " = " + std::to_string(*explicit_dim * n_heads) +
          " does not match " + d_inner_what + " " + std::to_string(d_inner));
    }
    *head_dim = *explicit_dim;
    return Status::OK();
  }
  if (d_inner % n_heads != 0) {
    return Status::InvalidArgument(d_inner_what + " " + std::to_string(d_inner) +
                                   " is not divisible by " + heads_key + " " +
                                   std::to_string(n_heads));
  }
  *head_dim = d_inner / n_heads;
  return Status::OK();
}

// The mamba_* keys of Bamba, GraniteMoeHybrid and Falcon-H1, whose classes share the defaults
// (mamba_n_heads 128, mamba_n_groups 1, mamba_d_state 256, mamba_d_conv 4, mamba_expand 2,
// mamba_d_head "auto") and validate_architecture. With `read_d_ssm` (Falcon-H1), d_inner is
// mamba_d_ssm (default 1024; null: mamba_expand * hidden_size).
Status ReadMambaKeys(const ConfigReader& c, const LayoutBuilder& b, int64_t hidden_size,
                     bool read_d_ssm, Mamba2Dims* out) {
  int64_t expand = 0, d_conv = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_n_heads", 128, &out->n_heads));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_n_groups", 1, &out->n_groups));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_d_state", 256, &out->d_state));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_d_conv", 4, &d_conv));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_expand", 2, &expand));
  out->d_inner = expand * hidden_size;
  std::string d_inner_what = c.Path("mamba_expand") + " * " + c.Path("hidden_size");
  if (read_d_ssm && !c.IsAbsentOrNull("mamba_d_ssm")) {
    CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_d_ssm", 0, &out->d_inner));
    d_inner_what = c.Path("mamba_d_ssm");
  } else if (read_d_ssm && !c.Has("mamba_d_ssm")) {
    out->d_inner = 1024;
    d_inner_what = c.Path("mamba_d_ssm") + " (default)";
  }
  std::optional<int64_t> d_head;
  CACHEPAWL_RETURN_IF_ERROR(c.PositiveOrAuto("mamba_d_head", &d_head));
  if (d_head && out->d_inner % out->n_heads != 0) d_head.reset();  // the divisibility error first
  CACHEPAWL_RETURN_IF_ERROR(MambaHeadDim(out->d_inner, d_inner_what, out->n_heads,
                                         c.Path("mamba_n_heads"), d_head, c.Path("mamba_d_head"),
                                         &out->head_dim));
  return b.ConvWidth(c, "mamba_d_conv", d_conv, &out->conv_width);
}

// Attention heads: num_attention_heads (default `heads_default`), num_key_value_heads
// (`kv_default`; nullopt: num_attention_heads), head dim via ReadHeadDim.
struct AttentionDims {
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

Status ReadAttention(const ConfigReader& c, int64_t hidden_size, int64_t heads_default,
                     std::optional<int64_t> kv_default, std::optional<int64_t> head_dim_default,
                     AttentionDims* out) {
  int64_t heads = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("num_attention_heads", heads_default, &heads));
  CACHEPAWL_RETURN_IF_ERROR(ReadKvHeads(c, heads, kv_default, &out->kv_heads));
  return ReadHeadDim(c, hidden_size, heads, head_dim_default, &out->head_dim);
}

// Which of `key` and its attribute_map `alias` (two names of one config attribute) the config
// sets: `key_used` is empty when neither (or only null). Both, with different values, is an
// error.
Status PickAliasedKey(const ConfigReader& c, std::string_view key, std::string_view alias,
                      std::string* key_used) {
  key_used->clear();
  const bool has_key = !c.IsAbsentOrNull(key);
  const bool has_alias = !c.IsAbsentOrNull(alias);
  if (has_key && has_alias && *c.Find(key) != *c.Find(alias)) {
    return Bad(c.Path(alias), "present",
               "differs from " + std::string(key) + ", another name of the same attribute");
  }
  if (has_key || has_alias) *key_used = std::string(has_key ? key : alias);
  return Status::OK();
}

// What Bamba, GraniteMoeHybrid and Falcon-H1 read besides their layer types; their classes
// share the defaults (32 layers, hidden_size 4096, 32 attention heads) and the mamba_* keys.
struct HybridDims {
  int64_t layers = 0;
  AttentionDims attention;
  Mamba2Dims mamba;
};

Status ReadHybridDims(const ConfigReader& c, const LayoutBuilder& b,
                      std::optional<int64_t> kv_default, bool read_d_ssm, HybridDims* out) {
  int64_t hidden = 0;
  CACHEPAWL_RETURN_IF_ERROR(ReadNumLayers(c, 32, &out->layers));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("hidden_size", 4096, &hidden));
  CACHEPAWL_RETURN_IF_ERROR(
      ReadAttention(c, hidden, 32, kv_default, std::nullopt, &out->attention));
  return ReadMambaKeys(c, b, hidden, read_d_ssm, &out->mamba);
}

// Attention in the layers `attention` marks; Mamba-2 in the others, or in every layer with
// `mamba_everywhere`.
void AddHybridLayers(const HybridDims& d, const std::vector<bool>& attention, bool mamba_everywhere,
                     LayoutBuilder* out) {
  const Mamba2Dims& m = d.mamba;
  out->SetNumLayers(d.layers);
  for (int64_t i = 0; i < d.layers; ++i) {
    const bool attends = attention[static_cast<size_t>(i)];
    if (attends) out->Attention(i, d.attention.kv_heads, d.attention.head_dim);
    if (!attends || mamba_everywhere) {
      out->Mamba2(i, m.d_inner, m.n_groups, m.n_heads, m.head_dim, m.d_state, m.conv_width);
    }
  }
}

}  // namespace

// MambaConfig: every layer Mamba-1; intermediate_size = expand * hidden_size unless given.
Status ReadMamba(const ConfigReader& c, LayoutBuilder* out) {
  CACHEPAWL_RETURN_IF_ERROR(RefuseLayerTypeKeys(c, {"layer_types"}, "num_hidden_layers"));
  int64_t layers = 0, hidden = 0, d_state = 0, expand = 0, kernel = 0, d_inner = 0;
  uint64_t width = 0;
  CACHEPAWL_RETURN_IF_ERROR(ReadNumLayers(c, 32, &layers));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("hidden_size", 768, &hidden));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("state_size", 16, &d_state));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("expand", 2, &expand));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("conv_kernel", 4, &kernel));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("intermediate_size", expand * hidden, &d_inner));
  CACHEPAWL_RETURN_IF_ERROR(out->ConvWidth(c, "conv_kernel", kernel, &width));
  out->SetNumLayers(layers);
  for (int64_t i = 0; i < layers; ++i) out->Mamba1(i, d_inner, d_state, width);
  return Status::OK();
}

// Mamba2Config: every layer Mamba-2; hidden_size * expand must equal num_heads * head_dim.
Status ReadMamba2(const ConfigReader& c, LayoutBuilder* out) {
  CACHEPAWL_RETURN_IF_ERROR(RefuseLayerTypeKeys(c, {"layer_types"}, "num_hidden_layers"));
  int64_t layers = 0, hidden = 0, expand = 0, kernel = 0;
  Mamba2Dims m;
  CACHEPAWL_RETURN_IF_ERROR(ReadNumLayers(c, 64, &layers));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("num_heads", 128, &m.n_heads));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("head_dim", 64, &m.head_dim));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("hidden_size", 4096, &hidden));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("state_size", 128, &m.d_state));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("expand", 2, &expand));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("conv_kernel", 4, &kernel));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("n_groups", 8, &m.n_groups));
  m.d_inner = expand * hidden;
  if (m.d_inner != m.n_heads * m.head_dim) {
    return Status::InvalidArgument(
        "hidden_size * expand " + std::to_string(m.d_inner) + " must equal num_heads * head_dim " +
        std::to_string(m.n_heads * m.head_dim) + " (Mamba2Config.validate_architecture)");
  }
  CACHEPAWL_RETURN_IF_ERROR(out->ConvWidth(c, "conv_kernel", kernel, &m.conv_width));
  out->SetNumLayers(layers);
  for (int64_t i = 0; i < layers; ++i) {
    out->Mamba2(i, m.d_inner, m.n_groups, m.n_heads, m.head_dim, m.d_state, m.conv_width);
  }
  return Status::OK();
}

// JambaConfig: attention where i % attn_layer_period == attn_layer_offset, Mamba-1 elsewhere
// (d_inner = mamba_expand * hidden_size).
Status ReadJamba(const ConfigReader& c, LayoutBuilder* out) {
  CACHEPAWL_RETURN_IF_ERROR(RefuseLayerTypeKeys(c, {"layer_types", "layers_block_type"},
                                                "attn_layer_period and attn_layer_offset"));
  int64_t layers = 0, hidden = 0, period = 0, offset = 0, expert_period = 0, expert_offset = 0;
  int64_t d_state = 0, kernel = 0, expand = 0;
  uint64_t width = 0;
  AttentionDims a;
  CACHEPAWL_RETURN_IF_ERROR(ReadNumLayers(c, 32, &layers));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("hidden_size", 4096, &hidden));
  CACHEPAWL_RETURN_IF_ERROR(ReadAttention(c, hidden, 32, 8, std::nullopt, &a));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("attn_layer_period", 8, &period));
  CACHEPAWL_RETURN_IF_ERROR(c.Int("attn_layer_offset", 4, &offset));
  if (offset >= period) {
    return Bad(c.Path("attn_layer_offset"), std::to_string(offset),
               "must be < attn_layer_period " + std::to_string(period));
  }
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("expert_layer_period", 2, &expert_period));
  CACHEPAWL_RETURN_IF_ERROR(c.Int("expert_layer_offset", 1, &expert_offset));
  if (expert_offset >= expert_period) {
    return Bad(c.Path("expert_layer_offset"), std::to_string(expert_offset),
               "must be < expert_layer_period " + std::to_string(expert_period));
  }
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_d_state", 16, &d_state));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_d_conv", 4, &kernel));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_expand", 2, &expand));
  CACHEPAWL_RETURN_IF_ERROR(out->ConvWidth(c, "mamba_d_conv", kernel, &width));
  out->SetNumLayers(layers);
  for (int64_t i = 0; i < layers; ++i) {
    if (i % period == offset) {
      out->Attention(i, a.kv_heads, a.head_dim);
    } else {
      out->Mamba1(i, expand * hidden, d_state, width);
    }
  }
  return Status::OK();
}

// BambaConfig: attention at attn_layer_indices (none by default), Mamba-2 elsewhere.
Status ReadBamba(const ConfigReader& c, LayoutBuilder* out) {
  CACHEPAWL_RETURN_IF_ERROR(
      RefuseLayerTypeKeys(c, {"layer_types", "layers_block_type"}, "attn_layer_indices"));
  HybridDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadHybridDims(c, *out, 8, /*read_d_ssm=*/false, &d));
  std::optional<std::vector<int64_t>> indices;
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalInts("attn_layer_indices", &indices));
  std::vector<bool> attention(static_cast<size_t>(d.layers), false);
  for (size_t k = 0; indices && k < indices->size(); ++k) {
    const int64_t i = (*indices)[k];
    if (i >= d.layers) {
      return Bad(c.Path("attn_layer_indices") + "[" + std::to_string(k) + "]", std::to_string(i),
                 "must be < num_hidden_layers " + std::to_string(d.layers));
    }
    attention[static_cast<size_t>(i)] = true;
  }
  AddHybridLayers(d, attention, /*mamba_everywhere=*/false, out);
  return Status::OK();
}

// GraniteMoeHybridConfig: layer_types (alias layers_block_type; legacy names remapped), all
// Mamba-2 by default.
Status ReadGraniteMoeHybrid(const ConfigReader& c, LayoutBuilder* out) {
  HybridDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadHybridDims(c, *out, std::nullopt, /*read_d_ssm=*/false, &d));
  std::string key;
  CACHEPAWL_RETURN_IF_ERROR(PickAliasedKey(c, "layer_types", "layers_block_type", &key));
  std::vector<bool> attention(static_cast<size_t>(d.layers), false);
  if (!key.empty()) {
    std::vector<std::string> types;
    CACHEPAWL_RETURN_IF_ERROR(ReadLayerTypes(c, key, {"linear_attention", "full_attention"},
                                             /*remap_legacy=*/true, d.layers, kNumLayersKey,
                                             &types));
    for (size_t i = 0; i < types.size(); ++i) attention[i] = types[i] == "full_attention";
  }
  AddHybridLayers(d, attention, /*mamba_everywhere=*/false, out);
  return Status::OK();
}

// FalconH1Config: every layer "hybrid", attention and Mamba-2 side by side.
Status ReadFalconH1(const ConfigReader& c, LayoutBuilder* out) {
  CACHEPAWL_RETURN_IF_ERROR(RefuseLayerTypeKeys(c, {"layer_types", "layers_block_type"},
                                                "num_hidden_layers (every layer is hybrid)"));
  HybridDims d;
  CACHEPAWL_RETURN_IF_ERROR(ReadHybridDims(c, *out, 8, /*read_d_ssm=*/true, &d));
  AddHybridLayers(d, std::vector<bool>(static_cast<size_t>(d.layers), true),
                  /*mamba_everywhere=*/true, out);
  return Status::OK();
}

// NemotronHConfig: layers_block_type (alias layer_types), else hybrid_override_pattern (M
// Mamba-2, * attention, E MoE, - MLP), else its 4-layer default; num_hidden_layers is ignored
// (the list's length). Mamba d_inner = mamba_num_heads * mamba_head_dim.
Status ReadNemotronH(const ConfigReader& c, LayoutBuilder* out) {
  std::string key;
  CACHEPAWL_RETURN_IF_ERROR(PickAliasedKey(c, "layers_block_type", "layer_types", &key));
  std::vector<std::string> types;
  if (!key.empty()) {
    CACHEPAWL_RETURN_IF_ERROR(ReadLayerTypes(c, key,
                                             {"linear_attention", "full_attention", "moe", "mlp"},
                                             /*remap_legacy=*/true, /*num_layers=*/-1, "", &types));
  } else if (!c.IsAbsentOrNull("hybrid_override_pattern")) {
    std::optional<std::string> pattern;
    CACHEPAWL_RETURN_IF_ERROR(c.OptionalString("hybrid_override_pattern", &pattern));
    for (size_t i = 0; i < pattern->size() && i <= kMaxDecoderLayers; ++i) {
      switch ((*pattern)[i]) {
        case 'M':
          types.push_back("linear_attention");
          break;
        case '*':
          types.push_back("full_attention");
          break;
        case 'E':
          types.push_back("moe");
          break;
        case '-':
          types.push_back("mlp");
          break;
        default: {
          // Built by appends: GCC 12 at -O3 warns (-Wrestrict, a false positive) on
          // "'" + substr + "'" here.
          std::string value(1, '\'');
          value += (*pattern)[i];
          value += '\'';
          return Bad(c.Path("hybrid_override_pattern") + "[" + std::to_string(i) + "]", value,
                     "expected M, *, E or -");
        }
      }
    }
  } else {
    types = {"linear_attention", "moe", "full_attention", "mlp"};
  }
  const std::string list_key = key.empty() ? "hybrid_override_pattern" : key;
  if (types.empty()) {
    return Bad(c.Path(list_key), "empty",
               "the layer types give the decoder's layers: at least one");
  }
  if (static_cast<int64_t>(types.size()) > kMaxDecoderLayers) {
    return Bad(c.Path(list_key), std::to_string(types.size()) + " layers",
               "at most " + std::to_string(kMaxDecoderLayers) + " decoder layers");
  }
  int64_t kv_heads = 0, heads = 0, head_dim = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("num_attention_heads", 32, &heads));
  CACHEPAWL_RETURN_IF_ERROR(ReadKvHeads(c, heads, 8, &kv_heads));
  CACHEPAWL_RETURN_IF_ERROR(ReadHeadDim(c, 0, heads, 128, &head_dim));
  std::optional<int64_t> legacy_head_dim;
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("attention_head_dim", &legacy_head_dim));
  if (legacy_head_dim && *legacy_head_dim != head_dim) {
    return Bad(c.Path("attention_head_dim"), std::to_string(*legacy_head_dim),
               "transformers 5.17 reads head_dim, " + std::to_string(head_dim) +
                   " here; the two disagree");
  }
  Mamba2Dims m;
  int64_t kernel = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_num_heads", 128, &m.n_heads));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_head_dim", 64, &m.head_dim));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("ssm_state_size", 128, &m.d_state));
  // __post_init__ takes the older names over the new ones when both are there.
  const char* groups_key = c.Has("mamba_n_groups") ? "mamba_n_groups" : "n_groups";
  const char* kernel_key = c.Has("mamba_d_conv") ? "mamba_d_conv" : "conv_kernel";
  CACHEPAWL_RETURN_IF_ERROR(c.Positive(groups_key, 8, &m.n_groups));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive(kernel_key, 4, &kernel));
  CACHEPAWL_RETURN_IF_ERROR(out->ConvWidth(c, kernel_key, kernel, &m.conv_width));
  m.d_inner = m.n_heads * m.head_dim;
  out->SetNumLayers(static_cast<int64_t>(types.size()));
  for (size_t i = 0; i < types.size(); ++i) {
    const auto index = static_cast<int64_t>(i);
    if (types[i] == "full_attention") out->Attention(index, kv_heads, head_dim);
    if (types[i] == "linear_attention") {
      out->Mamba2(index, m.d_inner, m.n_groups, m.n_heads, m.head_dim, m.d_state, m.conv_width);
    }
  }
  return Status::OK();
}

// What Zamba and Zamba2 read alike: the decoder's size and attention heads (num_key_value_heads:
// `kv_default`, nullopt: the heads), the explicit layer types (layers_block_type, alias
// layer_types; empty when absent) and the attention head dim (attention_head_dim, alias
// head_dim; absent or null: 2 * hidden_size / num_attention_heads).
struct ZambaDims {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<std::string> types;
};

Status ReadZambaDims(const ConfigReader& c, int64_t layers_default, int64_t hidden_default,
                     int64_t heads_default, std::optional<int64_t> kv_default, ZambaDims* d) {
  CACHEPAWL_RETURN_IF_ERROR(ReadNumLayers(c, layers_default, &d->layers));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("hidden_size", hidden_default, &d->hidden));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("num_attention_heads", heads_default, &d->heads));
  CACHEPAWL_RETURN_IF_ERROR(ReadKvHeads(c, d->heads, kv_default, &d->kv_heads));
  std::string key;
  CACHEPAWL_RETURN_IF_ERROR(PickAliasedKey(c, "layers_block_type", "layer_types", &key));
  if (!key.empty()) {
    CACHEPAWL_RETURN_IF_ERROR(ReadLayerTypes(c, key, {"linear_attention", "hybrid"},
                                             /*remap_legacy=*/true, d->layers, kNumLayersKey,
                                             &d->types));
  }
  std::string head_dim_key;
  CACHEPAWL_RETURN_IF_ERROR(PickAliasedKey(c, "attention_head_dim", "head_dim", &head_dim_key));
  d->head_dim = 2 * d->hidden / d->heads;
  if (!head_dim_key.empty() && !c.IsAbsentOrNull(head_dim_key)) {
    CACHEPAWL_RETURN_IF_ERROR(c.Positive(head_dim_key, 0, &d->head_dim));
  } else if (d->head_dim == 0) {
    return Bad(c.Path("num_attention_heads"), std::to_string(d->heads),
               "2 * hidden_size / num_attention_heads is the head dim: it must be > 0");
  }
  return Status::OK();
}

// ZambaConfig (Zamba v1): layers_block_type (alias layer_types; legacy names remapped), else
// two Mamba layers, a hybrid, then hybrids where i % attn_layer_period (6) ==
// attn_layer_offset (4); every layer runs multi-head Mamba-1 (n_mamba_heads 2 splitting d_inner
// = mamba_expand * hidden_size; its state per head [d_inner / heads, mamba_d_state]) and each
// hybrid layer the shared transformer block, whose K/V (num_key_value_heads 16 of
// attention_head_dim, alias head_dim, default 2 * hidden_size // num_attention_heads) is cached
// per layer.
Status ReadZamba(const ConfigReader& c, LayoutBuilder* out) {
  ZambaDims z;
  CACHEPAWL_RETURN_IF_ERROR(ReadZambaDims(c, 76, 3712, 16, 16, &z));
  const int64_t layers = z.layers, hidden = z.hidden, kv_heads = z.kv_heads, head_dim = z.head_dim;
  std::vector<std::string>& types = z.types;
  if (types.empty()) {
    int64_t period = 0, offset = 0;
    CACHEPAWL_RETURN_IF_ERROR(c.Positive("attn_layer_period", 6, &period));
    CACHEPAWL_RETURN_IF_ERROR(c.Int("attn_layer_offset", 4, &offset));
    if (layers < 3) {
      return Bad(c.Path(kNumLayersKey), std::to_string(layers),
                 "ZambaConfig's default layers_block_type has at least 3 entries");
    }
    types = {"linear_attention", "linear_attention", "hybrid"};
    for (int64_t i = 0; i < layers - 3; ++i) {
      types.push_back(i % period == offset ? "hybrid" : "linear_attention");
    }
  }
  int64_t mamba_heads = 0, d_state = 0, kernel = 0, expand = 0;
  uint64_t width = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("n_mamba_heads", 2, &mamba_heads));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_d_state", 16, &d_state));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_d_conv", 4, &kernel));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_expand", 2, &expand));
  const int64_t d_inner = expand * hidden;
  if (d_inner % mamba_heads != 0) {
    return Bad(c.Path("n_mamba_heads"), std::to_string(mamba_heads),
               "does not divide mamba_expand * hidden_size " + std::to_string(d_inner) +
                   ": the configuration class refuses it");
  }
  CACHEPAWL_RETURN_IF_ERROR(out->ConvWidth(c, "mamba_d_conv", kernel, &width));
  out->SetNumLayers(layers);
  for (int64_t i = 0; i < layers; ++i) {
    if (types[static_cast<size_t>(i)] == "hybrid") out->Attention(i, kv_heads, head_dim);
  }
  for (int64_t i = 0; i < layers; ++i) {
    out->MultiHeadMamba1(i, mamba_heads, d_inner / mamba_heads, d_state, width);
  }
  return Status::OK();
}

// Zamba2Config: layers_block_type (alias layer_types; default: the 54-layer Zamba2-2.7B list),
// every layer Mamba-2, "hybrid" layers also a shared transformer block with their own K/V of
// attention_head_dim = 2 * hidden_size / num_attention_heads (a config key takes over, as do
// mamba_headdim and hybrid_layer_ids: PreTrainedConfig sets them after __post_init__).
Status ReadZamba2(const ConfigReader& c, LayoutBuilder* out) {
  ZambaDims z;
  CACHEPAWL_RETURN_IF_ERROR(ReadZambaDims(c, 54, 2560, 32, std::nullopt, &z));
  const int64_t layers = z.layers, hidden = z.hidden, kv_heads = z.kv_heads, head_dim = z.head_dim;
  std::vector<std::string>& types = z.types;
  if (types.empty()) {
    // Zamba2Config.__post_init__'s default, 54 layers with hybrids at 6, 12, ..., 42, 47, 51.
    constexpr int64_t kDefaultLayers = 54;
    if (layers != kDefaultLayers) {
      return Bad(c.Path("layers_block_type"), "missing",
                 "Zamba2Config's default list has 54 entries, num_hidden_layers is " +
                     std::to_string(layers));
    }
    for (int64_t i = 0; i < kDefaultLayers; ++i) {
      const bool hybrid = (i >= 6 && i <= 42 && i % 6 == 0) || i == 47 || i == 51;
      types.push_back(hybrid ? "hybrid" : "linear_attention");
    }
  }
  std::vector<int64_t> hybrid_ids;
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == "hybrid") hybrid_ids.push_back(static_cast<int64_t>(i));
  }
  std::optional<std::vector<int64_t>> given_ids;
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalInts("hybrid_layer_ids", &given_ids));
  if (given_ids && *given_ids != hybrid_ids) {
    std::string derived;
    for (int64_t i : hybrid_ids) derived += (derived.empty() ? "" : ", ") + std::to_string(i);
    return Bad(c.Path("hybrid_layer_ids"), "present",
               "disagrees with the hybrid layers of the layer types, [" + derived + "]");
  }
  Mamba2Dims m;
  int64_t expand = 0, kernel = 0;
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_d_state", 64, &m.d_state));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_d_conv", 4, &kernel));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_expand", 2, &expand));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("mamba_ngroups", 1, &m.n_groups));
  CACHEPAWL_RETURN_IF_ERROR(c.Positive("n_mamba_heads", 8, &m.n_heads));
  std::optional<int64_t> headdim;
  CACHEPAWL_RETURN_IF_ERROR(c.OptionalPositive("mamba_headdim", &headdim));
  m.d_inner = expand * hidden;
  CACHEPAWL_RETURN_IF_ERROR(
      MambaHeadDim(m.d_inner, c.Path("mamba_expand") + " * " + c.Path("hidden_size"), m.n_heads,
                   c.Path("n_mamba_heads"), headdim, c.Path("mamba_headdim"), &m.head_dim));
  CACHEPAWL_RETURN_IF_ERROR(out->ConvWidth(c, "mamba_d_conv", kernel, &m.conv_width));
  out->SetNumLayers(layers);
  for (int64_t i = 0; i < layers; ++i) {
    if (types[static_cast<size_t>(i)] == "hybrid") out->Attention(i, kv_heads, head_dim);
    out->Mamba2(i, m.d_inner, m.n_groups, m.n_heads, m.head_dim, m.d_state, m.conv_width);
  }
  return Status::OK();
}

}  // namespace cachepawl::hf_internal
