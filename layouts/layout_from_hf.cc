// LayoutFromHfConfig (layouts/layout_from_hf.h): options, the config reader and layout builder
// of layout_from_hf_internal.h, and the dispatch on model_type. The families' readers are in
// layout_from_hf_mamba.cc and layout_from_hf_attention.cc.
#include "layouts/layout_from_hf.h"

#include <algorithm>
#include <map>
#include <string>

#include "layouts/internal/layout_from_hf_internal.h"
#include "layouts/layout_tp.h"
#include "vocab/internal/json_text.h"

namespace cachepawl {
namespace hf_internal {
namespace {

constexpr size_t kMaxRenderedValue = 60;
// A config.json is a few KiB; anything this large is the wrong file.
constexpr uint64_t kMaxConfigFileBytes = 16ull << 20;

// A value as its JSON text (strings keep their double quotes: a wrong type shows as written).
std::string JsonText(const Json& value) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > kMaxRenderedValue) s = s.substr(0, kMaxRenderedValue) + "...";
  return s;
}

Status WrongType(const std::string& path, const Json& value, std::string_view expected) {
  return Bad(path, JsonText(value), "expected " + std::string(expected));
}

// An integer at `path`, at least `min` (0 or 1) and at most kMaxConfigInteger.
Status AsInt(const std::string& path, const Json& v, int64_t min, int64_t* out) {
  if (!v.is_number_integer()) return WrongType(path, v, "an integer");
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(kMaxConfigInteger)
                             : v.get<int64_t>() > kMaxConfigInteger) {
    return Bad(path, JsonText(v), "must be at most " + std::to_string(kMaxConfigInteger));
  }
  const int64_t n =
      v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
  if (n < min) return Bad(path, std::to_string(n), min > 0 ? "must be > 0" : "must be >= 0");
  *out = n;
  return Status::OK();
}

}  // namespace

Status Bad(const std::string& path, const std::string& value, const std::string& why) {
  return Status::InvalidArgument(path + ": " + value + " (" + why + ")");
}

std::string OneOf(std::initializer_list<std::string_view> words) {
  std::string s;
  size_t i = 0;
  for (std::string_view w : words) {
    if (i > 0) s += i + 1 == words.size() ? " or " : ", ";
    s += w;
    ++i;
  }
  return s;
}

const Json* ConfigReader::Find(std::string_view key) const {
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

bool ConfigReader::IsAbsentOrNull(std::string_view key) const {
  const Json* v = Find(key);
  return v == nullptr || v->is_null();
}

Status ConfigReader::Int(std::string_view key, int64_t fallback, int64_t* out) const {
  const Json* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return Status::OK();
  }
  return AsInt(Path(key), *v, 0, out);
}

Status ConfigReader::Positive(std::string_view key, int64_t fallback, int64_t* out) const {
  const Json* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return Status::OK();
  }
  return AsInt(Path(key), *v, 1, out);
}

Status ConfigReader::OptionalPositive(std::string_view key, std::optional<int64_t>* out) const {
  out->reset();
  if (IsAbsentOrNull(key)) return Status::OK();
  int64_t n = 0;
  CACHEPAWL_RETURN_IF_ERROR(AsInt(Path(key), *Find(key), 1, &n));
  *out = n;
  return Status::OK();
}

Status ConfigReader::PositiveOrAuto(std::string_view key, std::optional<int64_t>* out) const {
  const Json* v = Find(key);
  if (v != nullptr && v->is_string()) {
    out->reset();
    if (v->get<std::string>() == "auto") return Status::OK();
    return Bad(Path(key), json_text::Render(*v), "expected an integer or 'auto'");
  }
  return OptionalPositive(key, out);
}

Status ConfigReader::Bool(std::string_view key, bool fallback, bool* out) const {
  *out = fallback;
  if (IsAbsentOrNull(key)) return Status::OK();
  const Json& v = *Find(key);
  if (!v.is_boolean()) return WrongType(Path(key), v, "true or false");
  *out = v.get<bool>();
  return Status::OK();
}

Status ConfigReader::OptionalStrings(std::string_view key,
                                     std::optional<std::vector<std::string>>* out) const {
  out->reset();
  if (IsAbsentOrNull(key)) return Status::OK();
  const Json& v = *Find(key);
  if (!v.is_array()) return WrongType(Path(key), v, "a list of strings");
  std::vector<std::string> items;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      return WrongType(Path(key) + "[" + std::to_string(i) + "]", v[i], "a string");
    }
    items.push_back(v[i].get<std::string>());
  }
  *out = std::move(items);
  return Status::OK();
}

Status ConfigReader::OptionalInts(std::string_view key,
                                  std::optional<std::vector<int64_t>>* out) const {
  out->reset();
  if (IsAbsentOrNull(key)) return Status::OK();
  const Json& v = *Find(key);
  if (!v.is_array()) return WrongType(Path(key), v, "a list of integers");
  std::vector<int64_t> items(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    CACHEPAWL_RETURN_IF_ERROR(AsInt(Path(key) + "[" + std::to_string(i) + "]", v[i], 0, &items[i]));
  }
  *out = std::move(items);
  return Status::OK();
}

Status ConfigReader::OptionalString(std::string_view key, std::optional<std::string>* out) const {
  out->reset();
  if (IsAbsentOrNull(key)) return Status::OK();
  const Json& v = *Find(key);
  if (!v.is_string()) return WrongType(Path(key), v, "a string");
  *out = v.get<std::string>();
  return Status::OK();
}

Status ReadNumLayers(const ConfigReader& config, int64_t fallback, int64_t* out) {
  CACHEPAWL_RETURN_IF_ERROR(config.Positive("num_hidden_layers", fallback, out));
  if (*out > kMaxDecoderLayers) {
    return Bad(config.Path("num_hidden_layers"), std::to_string(*out),
               "at most " + std::to_string(kMaxDecoderLayers) + " decoder layers");
  }
  return Status::OK();
}

Status ReadLayerTypes(const ConfigReader& config, std::string_view key,
                      std::initializer_list<std::string_view> allowed, bool remap_legacy,
                      int64_t num_layers, std::string_view num_layers_key,
                      std::vector<std::string>* out) {
  std::optional<std::vector<std::string>> types;
  CACHEPAWL_RETURN_IF_ERROR(config.OptionalStrings(key, &types));
  if (!types) return Bad(config.Path(key), "missing", "expected a list of layer types");
  for (size_t i = 0; i < types->size(); ++i) {
    std::string& t = (*types)[i];
    if (remap_legacy) {  // configuration_utils.py: _LEGACY_LAYER_TYPE_REMAP
      if (t == "mamba" || t == "conv") t = "linear_attention";
      if (t == "attention") t = "full_attention";
    }
    if (std::find(allowed.begin(), allowed.end(), t) == allowed.end()) {
      return Bad(config.Path(key) + "[" + std::to_string(i) + "]", "'" + t + "'",
                 "expected " + OneOf(allowed));
    }
  }
  if (num_layers >= 0 && static_cast<int64_t>(types->size()) != num_layers) {
    return Bad(config.Path(key), std::to_string(types->size()) + " entries",
               "expected one per decoder layer: " + std::string(num_layers_key) + " is " +
                   std::to_string(num_layers));
  }
  *out = std::move(*types);
  return Status::OK();
}

Status RefuseLayerTypeKeys(const ConfigReader& config, std::initializer_list<std::string_view> keys,
                           std::string_view derived_from) {
  for (std::string_view key : keys) {
    if (config.Has(key)) {
      return Bad(config.Path(key), "present",
                 "this family derives the layer types from " + std::string(derived_from) +
                     " and transformers 5.17 refuses a config.json that sets them");
    }
  }
  return Status::OK();
}

Status ReadKvHeads(const ConfigReader& config, int64_t num_attention_heads,
                   std::optional<int64_t> fallback, int64_t* out) {
  if (config.IsAbsentOrNull("num_key_value_heads")) {
    *out = config.Has("num_key_value_heads") || !fallback ? num_attention_heads : *fallback;
    return Status::OK();
  }
  CACHEPAWL_RETURN_IF_ERROR(config.Positive("num_key_value_heads", 0, out));
  // Grouped-query attention repeats each KV head for num_attention_heads / num_key_value_heads
  // query heads (transformers' repeat_kv, the engines' kernels): no model runs otherwise, and a
  // config that says so of a model without attention layers contradicts itself.
  if (*out > num_attention_heads) {
    return Bad(config.Path("num_key_value_heads"), std::to_string(*out),
               "must be <= num_attention_heads " + std::to_string(num_attention_heads));
  }
  if (num_attention_heads % *out != 0) {
    return Bad(config.Path("num_key_value_heads"), std::to_string(*out),
               "must divide num_attention_heads " + std::to_string(num_attention_heads) +
                   ": each KV head serves a whole group of query heads");
  }
  return Status::OK();
}

Status ReadHeadDim(const ConfigReader& config, int64_t hidden_size, int64_t num_attention_heads,
                   std::optional<int64_t> field_default, int64_t* out) {
  if (!config.IsAbsentOrNull("head_dim")) return config.Positive("head_dim", 0, out);
  if (field_default) {
    *out = *field_default;
    return Status::OK();
  }
  *out = hidden_size / num_attention_heads;
  if (*out == 0) {
    return Bad(config.Path("hidden_size"), std::to_string(hidden_size),
               "hidden_size // num_attention_heads " + std::to_string(num_attention_heads) +
                   " is the head dim: it must be > 0");
  }
  return Status::OK();
}

LayoutBuilder::LayoutBuilder(const HfLayoutOptions& options) : options_(options) {
  layout_.page_size_tokens = options.page_size_tokens;
}

void LayoutBuilder::SetNumLayers(int64_t num_layers) {
  layout_.num_layers = static_cast<uint32_t>(num_layers);
}

Status LayoutBuilder::ConvWidth(const ConfigReader& config, std::string_view key, int64_t kernel,
                                uint64_t* width) const {
  const bool keep_all = options_.convention == StateConvention::kTransformers;
  *width = static_cast<uint64_t>(keep_all ? kernel : kernel - 1);
  if (*width == 0) {
    return Bad(config.Path(key), std::to_string(kernel),
               "the sglang convention keeps " + std::string(key) + " - 1 columns: must be >= 2");
  }
  return Status::OK();
}

void LayoutBuilder::Attention(int64_t index, int64_t kv_heads, int64_t head_dim, int64_t window) {
  layout_.attention_layers.push_back({static_cast<uint32_t>(index), static_cast<uint32_t>(kv_heads),
                                      static_cast<uint32_t>(head_dim), options_.cache_dtype,
                                      static_cast<uint32_t>(window)});
}

void LayoutBuilder::Ssm(int64_t index, const char* block, std::vector<uint64_t> conv_shape,
                        std::vector<uint64_t> ssm_shape) {
  SsmLayerSpec s;
  s.layer_index = static_cast<uint32_t>(index);
  s.block = block;
  s.conv_shape = std::move(conv_shape);
  s.conv_dtype = options_.cache_dtype;
  s.ssm_shape = std::move(ssm_shape);
  // A shortconv layer has no state: its ssm_dtype stays the default, so that the state dtype
  // option (which changes no byte of it) leaves its fingerprint alone.
  if (!s.ssm_shape.empty()) s.ssm_dtype = options_.state_dtype;
  layout_.ssm_layers.push_back(std::move(s));
}

void LayoutBuilder::Mamba2(int64_t index, int64_t d_inner, int64_t n_groups, int64_t n_heads,
                           int64_t head_dim, int64_t d_state, uint64_t conv_width) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  Ssm(index, "mamba2", {u(d_inner) + 2 * u(n_groups) * u(d_state), conv_width},
      {u(n_heads), u(head_dim), u(d_state)});
}

void LayoutBuilder::Mamba1(int64_t index, int64_t d_inner, int64_t d_state, uint64_t conv_width) {
  Ssm(index, "mamba1", {static_cast<uint64_t>(d_inner), conv_width},
      {static_cast<uint64_t>(d_inner), static_cast<uint64_t>(d_state)});
}

void LayoutBuilder::MultiHeadMamba1(int64_t index, int64_t heads, int64_t head_dim, int64_t d_state,
                                    uint64_t conv_width) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  Ssm(index, "mamba1", {u(heads) * u(head_dim), conv_width}, {u(heads), u(head_dim), u(d_state)});
}

void LayoutBuilder::GatedDeltaNet(int64_t index, int64_t k_heads, int64_t k_dim, int64_t v_heads,
                                  int64_t v_dim, uint64_t conv_width) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  Ssm(index, "gdn", {2 * u(k_heads) * u(k_dim) + u(v_heads) * u(v_dim), conv_width},
      {u(v_heads), u(k_dim), u(v_dim)});
}

void LayoutBuilder::RgLru(int64_t index, int64_t lru_width, uint64_t conv_width) {
  Ssm(index, "rglru", {static_cast<uint64_t>(lru_width), conv_width},
      {static_cast<uint64_t>(lru_width)});
}

void LayoutBuilder::ShortConv(int64_t index, int64_t channels, uint64_t conv_width) {
  Ssm(index, "shortconv", {static_cast<uint64_t>(channels), conv_width}, {});
}

void LayoutBuilder::Mla(int64_t index, int64_t latent_dim) {
  AttentionLayerSpec a;
  a.layer_index = static_cast<uint32_t>(index);
  a.num_kv_heads = 1;
  a.head_dim = static_cast<uint32_t>(latent_dim);
  a.dtype = options_.cache_dtype;
  a.mla = true;
  layout_.attention_layers.push_back(a);
}

void LayoutBuilder::Lightning(int64_t index, int64_t heads, int64_t head_dim) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  Ssm(index, "lightning", {}, {u(heads), u(head_dim), u(head_dim)});
  layout_.ssm_layers.back().ssm_dtype = options_.cache_dtype;
}

void LayoutBuilder::KimiDelta(int64_t index, int64_t heads, int64_t head_dim, uint64_t conv_width) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  Ssm(index, "kda", {3 * u(heads) * u(head_dim), conv_width}, {u(heads), u(head_dim), u(head_dim)});
}

StatusOr<ModelLayout> LayoutBuilder::Finish(std::string model) {
  layout_.model = std::move(model);
  CACHEPAWL_RETURN_IF_ERROR(layout_.Validate());
  return std::move(layout_);
}

namespace {

// A multimodal config whose decoder's config is the nested text_config (the configuration class
// builds its text class of it, with that class's defaults when absent): Gemma 3, Qwen3.5.
Status ReadTextConfig(const ConfigReader& config, FamilyReader text_reader, LayoutBuilder* out) {
  static const Json kEmpty = Json::object();
  const Json* text = config.Find("text_config");
  if (text != nullptr && !text->is_null() && !text->is_object()) {
    return WrongType(config.Path("text_config"), *text, "an object");
  }
  const bool given = text != nullptr && text->is_object();
  return text_reader(ConfigReader(given ? *text : kEmpty, config.Path("text_config.")), out);
}

Status ReadGemma3(const ConfigReader& config, LayoutBuilder* out) {
  return ReadTextConfig(config, ReadGemma3Text, out);
}
Status ReadQwen35(const ConfigReader& config, LayoutBuilder* out) {
  return ReadTextConfig(config, ReadQwen35Text, out);
}
Status ReadQwen35Moe(const ConfigReader& config, LayoutBuilder* out) {
  return ReadTextConfig(config, ReadQwen35MoeText, out);
}

const std::map<std::string, FamilyReader, std::less<>>& Families() {
  static const auto* families = new std::map<std::string, FamilyReader, std::less<>>{
      {"bamba", ReadBamba},
      {"deepseek_v3", ReadDeepseekV3},
      {"falcon_h1", ReadFalconH1},
      {"falcon_mamba", ReadMamba},
      {"gemma3", ReadGemma3},
      {"gemma3_text", ReadGemma3Text},
      {"gpt_oss", ReadGptOss},
      {"granitemoehybrid", ReadGraniteMoeHybrid},
      {"jamba", ReadJamba},
      {"kimi_linear", ReadKimiLinear},
      {"lfm2", ReadLfm2},
      {"lfm2_moe", ReadLfm2Moe},
      {"llama", ReadLlama},
      {"mamba", ReadMamba},
      {"mamba2", ReadMamba2},
      {"minimax", ReadMiniMax},
      {"minimax_m1", ReadMiniMax},
      {"mistral", ReadMistral},
      {"nemotron_h", ReadNemotronH},
      {"olmo_hybrid", ReadOlmoHybrid},
      {"qwen2", ReadQwen2},
      {"qwen3", ReadQwen3},
      {"qwen3_5", ReadQwen35},
      {"qwen3_5_moe", ReadQwen35Moe},
      {"qwen3_5_moe_text", ReadQwen35MoeText},
      {"qwen3_5_text", ReadQwen35Text},
      {"qwen3_next", ReadQwen3Next},
      {"recurrent_gemma", ReadRecurrentGemma},
      {"zamba", ReadZamba},
      {"zamba2", ReadZamba2},
  };
  return *families;
}

std::string SupportedTypes() {
  std::string s;
  for (const auto& [name, reader] : Families()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

// Python's json module writes (and reads) the non-standard tokens NaN, Infinity and -Infinity
// for non-finite floats: config.json files of the Mamba-2 families carry
// "time_step_limit": [0.0, Infinity]. Outside strings each becomes a token of the same length
// that JSON accepts (null, or 0 for NaN), so positions in syntax errors stay right. No key the
// readers use holds a float.
std::string WithoutPythonFloatTokens(std::string_view text) {
  std::string out(text);
  bool in_string = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const char ch = out[i];
    if (in_string) {
      if (ch == '\\') {
        ++i;  // the escaped character
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') {
      in_string = true;
      continue;
    }
    for (std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
      if (out.compare(i, token.size(), token) == 0) {
        const std::string_view replacement = token == "NaN" ? "0" : "null";
        out.replace(i, token.size(),
                    std::string(replacement) + std::string(token.size() - replacement.size(), ' '));
        i += token.size() - 1;
        break;
      }
    }
  }
  return out;
}

StatusOr<ModelLayout> LayoutFromConfigObject(const Json& doc, const HfLayoutOptions& options) {
  if (!doc.is_object()) {
    return Status::InvalidArgument(std::string("config: expected a JSON object, got ") +
                                   doc.type_name());
  }
  const ConfigReader config(doc, "");
  std::optional<std::string> model_type;
  CACHEPAWL_RETURN_IF_ERROR(config.OptionalString("model_type", &model_type));
  if (!model_type) {
    return Bad("model_type", "missing", "a transformers config.json names its family");
  }
  auto family = Families().find(*model_type);
  if (family == Families().end()) {
    return Bad("model_type", "'" + *model_type + "'",
               "not a family this converter maps; supported: " + SupportedTypes());
  }
  std::string model = options.model;
  if (model.empty()) {
    std::optional<std::string> name_or_path;
    CACHEPAWL_RETURN_IF_ERROR(config.OptionalString("_name_or_path", &name_or_path));
    model = name_or_path && !name_or_path->empty() ? *name_or_path : *model_type;
  }
  LayoutBuilder builder(options);
  CACHEPAWL_RETURN_IF_ERROR(family->second(config, &builder));
  return builder.Finish(std::move(model));
}

}  // namespace
}  // namespace hf_internal

std::string_view StateConventionName(StateConvention convention) {
  return convention == StateConvention::kSglang ? "sglang" : "transformers";
}

std::optional<StateConvention> ParseStateConvention(std::string_view name) {
  if (name == "transformers") return StateConvention::kTransformers;
  if (name == "sglang") return StateConvention::kSglang;
  return std::nullopt;
}

Status HfLayoutOptions::Validate() const {
  if (page_size_tokens == 0) return hf_internal::Bad("page_size_tokens", "0", "must be > 0");
  if (!IsValidDType(static_cast<uint8_t>(cache_dtype))) {
    return hf_internal::Bad("cache_dtype", std::to_string(static_cast<int>(cache_dtype)),
                            "unknown dtype");
  }
  if (!IsValidDType(static_cast<uint8_t>(state_dtype))) {
    return hf_internal::Bad("state_dtype", std::to_string(static_cast<int>(state_dtype)),
                            "unknown dtype");
  }
  if (convention != StateConvention::kTransformers && convention != StateConvention::kSglang) {
    return hf_internal::Bad("convention", std::to_string(static_cast<int>(convention)),
                            "expected transformers or sglang");
  }
  if (tp_size == 0) return hf_internal::Bad("tp_size", "0", "must be > 0");
  if (tp_rank >= tp_size) {
    return hf_internal::Bad("tp_rank", std::to_string(tp_rank),
                            "must be < tp_size " + std::to_string(tp_size));
  }
  return Status::OK();
}

StatusOr<ModelLayout> LayoutFromHfConfig(std::string_view config_json,
                                         const HfLayoutOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  // Python's json module, which transformers reads config.json with, keeps the last of two
  // equal keys: so does this.
  CACHEPAWL_ASSIGN_OR_RETURN(
      nlohmann::json doc, json_text::ParseJson(hf_internal::WithoutPythonFloatTokens(config_json),
                                               /*reject_duplicate_keys=*/false));
  CACHEPAWL_ASSIGN_OR_RETURN(ModelLayout whole, hf_internal::LayoutFromConfigObject(doc, options));
  if (options.tp_size == 1) return whole;
  return ShardLayout(whole, options.tp_size, options.tp_rank);
}

StatusOr<ModelLayout> LayoutFromHfConfigFile(const std::string& path,
                                             const HfLayoutOptions& options) {
  const std::string context = "hf config " + path;
  CACHEPAWL_RETURN_IF_ERROR(options.Validate().WithContext(context));
  std::string text;
  CACHEPAWL_RETURN_IF_ERROR(
      json_text::ReadSmallFile(path, hf_internal::kMaxConfigFileBytes, "a config.json file", &text)
          .WithContext(context));
  auto layout = LayoutFromHfConfig(text, options);
  if (!layout.ok()) return layout.status().WithContext(context);
  return layout;
}

std::vector<std::string> HfConfigModelTypes() {
  std::vector<std::string> types;
  for (const auto& [name, reader] : hf_internal::Families()) types.push_back(name);
  return types;
}

}  // namespace cachepawl
