// Layouts as JSON files: the schema is in docs/MODELS.md ("Layout files").
//
// Parsing is strict: syntax errors name the line and column; unknown keys, duplicate keys,
// missing required keys, wrong types and out-of-range numbers name the key path
// ("ssm_layers[2].ssm_dtype"); the result is validated, whose messages use the same paths.
// nlohmann::json throws; every exception is caught here and becomes a Status.
#include <algorithm>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vocab/internal/json_text.h"
#include "vocab/model_layout.h"

namespace cachepawl {
namespace {

using Json = nlohmann::json;
using json_text::Render;

constexpr uint32_t kDefaultPageSizeTokens = 16;
// A layout file is a few KiB; anything this large is the wrong file.
constexpr uint64_t kMaxLayoutFileBytes = 16ull << 20;

constexpr const char* kDTypeChoices = "fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8 or fp4_e2m1";

std::string Join(std::initializer_list<std::string_view> words) {
  std::string s;
  for (std::string_view w : words) {
    if (!s.empty()) s += ", ";
    s += w;
  }
  return s;
}

Status Bad(const std::string& path, const std::string& value, const std::string& why) {
  return Status::InvalidArgument(path + ": " + value + " (" + why + ")");
}

// Reads the keys of one JSON object, each error naming `path.key`.
class ObjectReader {
 public:
  ObjectReader(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

  // Every key of the object must be one of `allowed`.
  Status CheckKeys(std::initializer_list<std::string_view> allowed) const {
    for (const auto& [key, value] : object_.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return Bad(PathOf(key), "unknown key", "expected " + Join(allowed));
      }
    }
    return Status::OK();
  }

  // Leaves *out untouched when the key is absent and not required.
  Status U32(std::string_view key, bool required, uint32_t* out) const {
    const Json* v = nullptr;
    CACHEPAWL_RETURN_IF_ERROR(Find(key, required, &v));
    if (v == nullptr) return Status::OK();
    uint64_t n = 0;
    if (!AsU64(*v, &n) || n > std::numeric_limits<uint32_t>::max()) {
      return Bad(PathOf(key), Render(*v), "expected an unsigned 32-bit integer");
    }
    *out = static_cast<uint32_t>(n);
    return Status::OK();
  }

  Status Bool(std::string_view key, bool required, bool* out) const {
    const Json* v = nullptr;
    CACHEPAWL_RETURN_IF_ERROR(Find(key, required, &v));
    if (v == nullptr) return Status::OK();
    if (!v->is_boolean()) return Bad(PathOf(key), Render(*v), "expected true or false");
    *out = v->get<bool>();
    return Status::OK();
  }

  Status String(std::string_view key, bool required, std::string* out) const {
    const Json* v = nullptr;
    CACHEPAWL_RETURN_IF_ERROR(Find(key, required, &v));
    if (v == nullptr) return Status::OK();
    if (!v->is_string()) return Bad(PathOf(key), Render(*v), "expected a string");
    *out = v->get<std::string>();
    return Status::OK();
  }

  Status DTypeValue(std::string_view key, bool required, DType* out) const {
    std::string name;
    CACHEPAWL_RETURN_IF_ERROR(String(key, required, &name));
    if (name.empty() && !object_.contains(key)) return Status::OK();
    auto dtype = ParseDType(name);
    if (!dtype)
      return Bad(PathOf(key), "'" + name + "'",
                 std::string("unknown dtype; expected ") + kDTypeChoices);
    *out = *dtype;
    return Status::OK();
  }

  Status Shape(std::string_view key, std::vector<uint64_t>* out) const {
    const Json* v = nullptr;
    CACHEPAWL_RETURN_IF_ERROR(Find(key, /*required=*/true, &v));
    if (!v->is_array()) {
      return Bad(PathOf(key), Render(*v), "expected an array of unsigned 64-bit integers");
    }
    out->clear();
    for (size_t i = 0; i < v->size(); ++i) {
      uint64_t d = 0;
      if (!AsU64((*v)[i], &d)) {
        return Bad(PathOf(key) + "[" + std::to_string(i) + "]", Render((*v)[i]),
                   "expected an unsigned 64-bit integer");
      }
      out->push_back(d);
    }
    return Status::OK();
  }

  // The array under `key`, or nullptr when the key is absent.
  Status Array(std::string_view key, const Json** out) const {
    CACHEPAWL_RETURN_IF_ERROR(Find(key, /*required=*/false, out));
    if (*out != nullptr && !(*out)->is_array()) {
      return Bad(PathOf(key), Render(**out), "expected an array");
    }
    return Status::OK();
  }

  std::string PathOf(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

 private:
  Status Find(std::string_view key, bool required, const Json** out) const {
    auto it = object_.find(key);
    if (it == object_.end()) {
      *out = nullptr;
      return required ? Bad(PathOf(key), "missing", "required") : Status::OK();
    }
    *out = &*it;
    return Status::OK();
  }

  static bool AsU64(const Json& v, uint64_t* out) {
    if (v.is_number_unsigned()) {
      *out = v.get<uint64_t>();
      return true;
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) {
      *out = static_cast<uint64_t>(v.get<int64_t>());
      return true;
    }
    return false;
  }

  const Json& object_;
  std::string path_;
};

Status ReadAttentionLayer(const Json& j, const std::string& path, AttentionLayerSpec* out) {
  if (!j.is_object()) return Bad(path, Render(j), "expected an object");
  ObjectReader r(j, path);
  CACHEPAWL_RETURN_IF_ERROR(r.CheckKeys({"layer_index", "num_kv_heads", "head_dim", "dtype",
                                         "sliding_window", "mla", "tp_replicas"}));
  CACHEPAWL_RETURN_IF_ERROR(r.U32("layer_index", true, &out->layer_index));
  CACHEPAWL_RETURN_IF_ERROR(r.U32("num_kv_heads", true, &out->num_kv_heads));
  CACHEPAWL_RETURN_IF_ERROR(r.U32("head_dim", true, &out->head_dim));
  CACHEPAWL_RETURN_IF_ERROR(r.DTypeValue("dtype", false, &out->dtype));
  CACHEPAWL_RETURN_IF_ERROR(r.Bool("mla", false, &out->mla));
  out->tp_replicas = 1;
  CACHEPAWL_RETURN_IF_ERROR(r.U32("tp_replicas", false, &out->tp_replicas));
  return r.U32("sliding_window", false, &out->sliding_window);
}

Status ReadSsmLayer(const Json& j, const std::string& path, SsmLayerSpec* out) {
  if (!j.is_object()) return Bad(path, Render(j), "expected an object");
  ObjectReader r(j, path);
  CACHEPAWL_RETURN_IF_ERROR(
      r.CheckKeys({"layer_index", "block", "conv_shape", "conv_dtype", "ssm_shape", "ssm_dtype"}));
  CACHEPAWL_RETURN_IF_ERROR(r.U32("layer_index", true, &out->layer_index));
  CACHEPAWL_RETURN_IF_ERROR(r.String("block", true, &out->block));
  CACHEPAWL_RETURN_IF_ERROR(r.Shape("conv_shape", &out->conv_shape));
  CACHEPAWL_RETURN_IF_ERROR(r.DTypeValue("conv_dtype", false, &out->conv_dtype));
  CACHEPAWL_RETURN_IF_ERROR(r.Shape("ssm_shape", &out->ssm_shape));
  return r.DTypeValue("ssm_dtype", false, &out->ssm_dtype);
}

StatusOr<ModelLayout> LayoutFromJson(const Json& doc, uint32_t default_page_size_tokens) {
  if (!doc.is_object()) {
    return Status::InvalidArgument(std::string("layout: expected a JSON object, got ") +
                                   doc.type_name());
  }
  ObjectReader r(doc, "");
  CACHEPAWL_RETURN_IF_ERROR(r.CheckKeys({"model", "num_layers", "page_size_tokens", "tp_rank",
                                         "tp_size", "attention_layers", "ssm_layers"}));
  ModelLayout l;
  l.page_size_tokens = default_page_size_tokens;
  CACHEPAWL_RETURN_IF_ERROR(r.String("model", true, &l.model));
  CACHEPAWL_RETURN_IF_ERROR(r.U32("num_layers", true, &l.num_layers));
  CACHEPAWL_RETURN_IF_ERROR(r.U32("page_size_tokens", false, &l.page_size_tokens));
  CACHEPAWL_RETURN_IF_ERROR(r.U32("tp_rank", false, &l.tp_rank));
  CACHEPAWL_RETURN_IF_ERROR(r.U32("tp_size", false, &l.tp_size));
  const Json* attention = nullptr;
  CACHEPAWL_RETURN_IF_ERROR(r.Array("attention_layers", &attention));
  if (attention != nullptr) {
    for (size_t i = 0; i < attention->size(); ++i) {
      AttentionLayerSpec a;
      CACHEPAWL_RETURN_IF_ERROR(
          ReadAttentionLayer((*attention)[i], "attention_layers[" + std::to_string(i) + "]", &a));
      l.attention_layers.push_back(a);
    }
  }
  const Json* ssm = nullptr;
  CACHEPAWL_RETURN_IF_ERROR(r.Array("ssm_layers", &ssm));
  if (ssm != nullptr) {
    for (size_t i = 0; i < ssm->size(); ++i) {
      SsmLayerSpec s;
      CACHEPAWL_RETURN_IF_ERROR(
          ReadSsmLayer((*ssm)[i], "ssm_layers[" + std::to_string(i) + "]", &s));
      l.ssm_layers.push_back(std::move(s));
    }
  }
  CACHEPAWL_RETURN_IF_ERROR(l.Validate());
  return l;
}

StatusOr<ModelLayout> ParseLayoutText(std::string_view text, uint32_t default_page_size_tokens) {
  CACHEPAWL_ASSIGN_OR_RETURN(Json doc, json_text::ParseJson(text, /*reject_duplicate_keys=*/true));
  return LayoutFromJson(doc, default_page_size_tokens);
}

StatusOr<ModelLayout> LoadLayoutFileWithDefault(const std::string& path,
                                                uint32_t default_page_size_tokens) {
  const std::string context = "layout file " + path;
  std::string text;
  CACHEPAWL_RETURN_IF_ERROR(
      json_text::ReadSmallFile(path, kMaxLayoutFileBytes, "a layout file", &text)
          .WithContext(context));
  auto layout = ParseLayoutText(text, default_page_size_tokens);
  if (!layout.ok()) return layout.status().WithContext(context);
  return layout;
}

}  // namespace

StatusOr<ModelLayout> ParseLayoutJson(std::string_view json_text) {
  return ParseLayoutText(json_text, kDefaultPageSizeTokens);
}

std::string LayoutToJson(const ModelLayout& layout) {
  // One top-level key per line and one layer per line: diffs and hand edits stay readable.
  std::vector<nlohmann::ordered_json> attention;
  for (const auto& a : layout.attention_layers) {
    nlohmann::ordered_json j;
    j["layer_index"] = a.layer_index;
    j["num_kv_heads"] = a.num_kv_heads;
    j["head_dim"] = a.head_dim;
    j["dtype"] = std::string(DTypeName(a.dtype));
    j["sliding_window"] = a.sliding_window;
    if (a.mla) j["mla"] = true;
    if (a.tp_replicas != 1) j["tp_replicas"] = a.tp_replicas;
    attention.push_back(std::move(j));
  }
  std::vector<nlohmann::ordered_json> ssm;
  for (const auto& l : layout.ssm_layers) {
    nlohmann::ordered_json j;
    j["layer_index"] = l.layer_index;
    j["block"] = l.block;
    j["conv_shape"] = l.conv_shape;
    j["conv_dtype"] = std::string(DTypeName(l.conv_dtype));
    j["ssm_shape"] = l.ssm_shape;
    j["ssm_dtype"] = std::string(DTypeName(l.ssm_dtype));
    ssm.push_back(std::move(j));
  }
  auto lines = [](const std::vector<nlohmann::ordered_json>& items) {
    if (items.empty()) return std::string("[]");
    std::string s = "[";
    for (size_t i = 0; i < items.size(); ++i) s += (i ? ",\n    " : "\n    ") + items[i].dump();
    return s + "\n  ]";
  };
  return "{\n  \"model\": " + Json(layout.model).dump() +
         ",\n  \"num_layers\": " + std::to_string(layout.num_layers) +
         ",\n  \"page_size_tokens\": " + std::to_string(layout.page_size_tokens) +
         ",\n  \"tp_rank\": " + std::to_string(layout.tp_rank) +
         ",\n  \"tp_size\": " + std::to_string(layout.tp_size) +
         ",\n  \"attention_layers\": " + lines(attention) + ",\n  \"ssm_layers\": " + lines(ssm) +
         "\n}\n";
}

StatusOr<ModelLayout> LoadLayoutFile(const std::string& path) {
  return LoadLayoutFileWithDefault(path, kDefaultPageSizeTokens);
}

StatusOr<ModelLayout> LoadLayoutFile(const std::string& path, uint32_t default_page_size_tokens) {
  return LoadLayoutFileWithDefault(path, default_page_size_tokens);
}

}  // namespace cachepawl
