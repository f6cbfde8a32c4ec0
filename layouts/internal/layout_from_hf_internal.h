// Internal to LayoutFromHfConfig (layouts/layout_from_hf.h): reading a config.json object the
// way transformers' configuration classes read it, and building the layout layer by layer. The
// family readers live in layout_from_hf_mamba.cc (Mamba-1/-2 and the hybrids built on them) and
// layout_from_hf_attention.cc (attention-only, Gemma 3, RecurrentGemma, Qwen3-Next, LFM2) and
// layout_from_hf_mla.cc (multi-head latent attention: DeepSeek V3, Kimi Linear).
//
// Every reader reports InvalidArgument "<path>: <value> (<why>)"; `path` is the key, prefixed
// for a nested config ("text_config.head_dim"), with an index for list entries
// ("layer_types[3]"). Wrong JSON types render the JSON text of the value ("\"32\""), bad string
// values are quoted with single quotes ('foo'). Nothing here throws: the reader only calls
// nlohmann::json accessors after checking the type.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "layouts/layout_from_hf.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl::hf_internal {

using Json = nlohmann::json;

// The largest integer taken from a config.json: every product and sum the readers form of a
// few such values stays far below 2^64.
inline constexpr int64_t kMaxConfigInteger = 2147483647;

// The most decoder layers a config may have (real models have a few hundred at most): a layout
// of a made-up num_hidden_layers of 2^31 would not fit in memory, and one of 50,000 layers took
// seconds to check and round-trip (a fuzzer timeout in CI).
inline constexpr int64_t kMaxDecoderLayers = 4096;

// "<path>: <value> (<why>)".
Status Bad(const std::string& path, const std::string& value, const std::string& why);
// "a, b or c".
std::string OneOf(std::initializer_list<std::string_view> words);

// Typed reads of one JSON object's keys with a default for absent keys.
class ConfigReader {
 public:
  // `object` must outlive the reader; `prefix` is prepended to key paths ("text_config.").
  ConfigReader(const Json& object, std::string prefix)
      : object_(object), prefix_(std::move(prefix)) {}

  std::string Path(std::string_view key) const { return prefix_ + std::string(key); }
  // The value under `key`, or nullptr when absent.
  const Json* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  // Absent, or present as null (what the classes' `X | None = None` fields read as None).
  bool IsAbsentOrNull(std::string_view key) const;

  // An integer in [0, kMaxConfigInteger]; `fallback` when absent. null is a type error.
  [[nodiscard]] Status Int(std::string_view key, int64_t fallback, int64_t* out) const;
  // The same, > 0 (a value of 0 or less: "must be > 0").
  [[nodiscard]] Status Positive(std::string_view key, int64_t fallback, int64_t* out) const;
  // A positive integer, or nullopt when absent or null.
  [[nodiscard]] Status OptionalPositive(std::string_view key, std::optional<int64_t>* out) const;
  // A positive integer, or nullopt for the string "auto", for null, or when absent.
  [[nodiscard]] Status PositiveOrAuto(std::string_view key, std::optional<int64_t>* out) const;
  // A bool; `fallback` when absent or null.
  [[nodiscard]] Status Bool(std::string_view key, bool fallback, bool* out) const;
  // A list of strings / of integers in [0, kMaxConfigInteger], or nullopt when absent or null.
  [[nodiscard]] Status OptionalStrings(std::string_view key,
                                       std::optional<std::vector<std::string>>* out) const;
  [[nodiscard]] Status OptionalInts(std::string_view key,
                                    std::optional<std::vector<int64_t>>* out) const;
  // A string, or nullopt when absent or null.
  [[nodiscard]] Status OptionalString(std::string_view key, std::optional<std::string>* out) const;

 private:
  const Json& object_;
  std::string prefix_;
};

// num_hidden_layers (`fallback` when absent): > 0 and at most kMaxDecoderLayers.
[[nodiscard]] Status ReadNumLayers(const ConfigReader& config, int64_t fallback, int64_t* out);

// The decoder's layer types from the list under `key`: each entry, after `remap_legacy`
// (transformers' remap_legacy_layer_types: mamba -> linear_attention, attention ->
// full_attention, conv -> linear_attention), must be one of `allowed`, and there must be
// `num_layers` entries (`num_layers_key` names where that number came from; a negative
// num_layers takes any length).
[[nodiscard]] Status ReadLayerTypes(const ConfigReader& config, std::string_view key,
                                    std::initializer_list<std::string_view> allowed,
                                    bool remap_legacy, int64_t num_layers,
                                    std::string_view num_layers_key, std::vector<std::string>* out);
// InvalidArgument when any of `keys` is present: the configuration class derives the layer
// types itself (a read-only property), and transformers refuses to set it from config.json.
[[nodiscard]] Status RefuseLayerTypeKeys(const ConfigReader& config,
                                         std::initializer_list<std::string_view> keys,
                                         std::string_view derived_from);

// num_key_value_heads: `fallback` when absent; null (or, with no fallback, absent) means
// num_attention_heads, the classes' backward-compatibility rule. A value the config sets must be
// > 0, <= num_attention_heads and divide it (grouped-query attention).
[[nodiscard]] Status ReadKvHeads(const ConfigReader& config, int64_t num_attention_heads,
                                 std::optional<int64_t> fallback, int64_t* out);
// The attention head dim as the modeling code reads it, getattr(config, "head_dim",
// hidden_size // num_attention_heads): the key's value when present (null counts as absent),
// else `field_default` when the class has a head_dim field with a default, else the floor
// division.
[[nodiscard]] Status ReadHeadDim(const ConfigReader& config, int64_t hidden_size,
                                 int64_t num_attention_heads, std::optional<int64_t> field_default,
                                 int64_t* out);

// Collects layers into a ModelLayout with the options' dtypes and conv convention. Indices are
// decoder positions; callers add layers in increasing index order per kind.
class LayoutBuilder {
 public:
  explicit LayoutBuilder(const HfLayoutOptions& options);

  // The decoder's layer count (> 0, at most kMaxConfigInteger), set by every family reader.
  void SetNumLayers(int64_t num_layers);

  // The width W of a conv state over a kernel of `kernel` columns (the value of `key`), in the
  // options' convention; InvalidArgument when W would be 0.
  [[nodiscard]] Status ConvWidth(const ConfigReader& config, std::string_view key, int64_t kernel,
                                 uint64_t* width) const;

  void Attention(int64_t index, int64_t kv_heads, int64_t head_dim, int64_t window = 0);
  // Mamba-2: conv over x, B and C ([d_inner + 2 * n_groups * d_state, W]), state
  // [n_heads, head_dim, d_state].
  void Mamba2(int64_t index, int64_t d_inner, int64_t n_groups, int64_t n_heads, int64_t head_dim,
              int64_t d_state, uint64_t conv_width);
  // Mamba-1: conv [d_inner, W], state [d_inner, d_state].
  void Mamba1(int64_t index, int64_t d_inner, int64_t d_state, uint64_t conv_width);
  // Zamba's multi-head Mamba-1: conv [heads * head_dim, W], state [heads, head_dim, d_state]
  // (the same bytes as Mamba1's with d_inner = heads * head_dim, kept per head).
  void MultiHeadMamba1(int64_t index, int64_t heads, int64_t head_dim, int64_t d_state,
                       uint64_t conv_width);
  // Gated DeltaNet: conv [2 * k_heads * k_dim + v_heads * v_dim, W], state [v_heads, k_dim,
  // v_dim].
  void GatedDeltaNet(int64_t index, int64_t k_heads, int64_t k_dim, int64_t v_heads, int64_t v_dim,
                     uint64_t conv_width);
  // RG-LRU: conv [lru_width, W], state [lru_width].
  void RgLru(int64_t index, int64_t lru_width, uint64_t conv_width);
  // LFM2 short convolution: conv [channels, W], no state.
  void ShortConv(int64_t index, int64_t channels, uint64_t conv_width);
  // Multi-head latent attention: one latent of `latent_dim` values per token (mla: true).
  void Mla(int64_t index, int64_t latent_dim);
  // Kimi Delta Attention: conv [3 * heads * head_dim, W], state [heads, head_dim, head_dim].
  void KimiDelta(int64_t index, int64_t heads, int64_t head_dim, uint64_t conv_width);
  // MiniMax lightning attention: no conv, state [heads, head_dim, head_dim] of cache_dtype (the
  // model dtype, which transformers and vLLM keep it in).
  void Lightning(int64_t index, int64_t heads, int64_t head_dim);

  // The validated layout named `model`.
  [[nodiscard]] StatusOr<ModelLayout> Finish(std::string model);

 private:
  void Ssm(int64_t index, const char* block, std::vector<uint64_t> conv_shape,
           std::vector<uint64_t> ssm_shape);

  HfLayoutOptions options_;
  ModelLayout layout_;
};

// One family's reader: the layout's layers from the family's config keys.
using FamilyReader = Status (*)(const ConfigReader& config, LayoutBuilder* out);

// layout_from_hf_mamba.cc
Status ReadMamba(const ConfigReader& config, LayoutBuilder* out);
Status ReadMamba2(const ConfigReader& config, LayoutBuilder* out);
Status ReadJamba(const ConfigReader& config, LayoutBuilder* out);
Status ReadBamba(const ConfigReader& config, LayoutBuilder* out);
Status ReadGraniteMoeHybrid(const ConfigReader& config, LayoutBuilder* out);
Status ReadFalconH1(const ConfigReader& config, LayoutBuilder* out);
Status ReadNemotronH(const ConfigReader& config, LayoutBuilder* out);
Status ReadZamba(const ConfigReader& config, LayoutBuilder* out);
Status ReadZamba2(const ConfigReader& config, LayoutBuilder* out);

// layout_from_hf_attention.cc
Status ReadLlama(const ConfigReader& config, LayoutBuilder* out);
Status ReadMistral(const ConfigReader& config, LayoutBuilder* out);
Status ReadQwen2(const ConfigReader& config, LayoutBuilder* out);
Status ReadQwen3(const ConfigReader& config, LayoutBuilder* out);
Status ReadGemma3Text(const ConfigReader& config, LayoutBuilder* out);
Status ReadRecurrentGemma(const ConfigReader& config, LayoutBuilder* out);
Status ReadQwen3Next(const ConfigReader& config, LayoutBuilder* out);
Status ReadQwen35Text(const ConfigReader& config, LayoutBuilder* out);
Status ReadQwen35MoeText(const ConfigReader& config, LayoutBuilder* out);
Status ReadLfm2(const ConfigReader& config, LayoutBuilder* out);
Status ReadLfm2Moe(const ConfigReader& config, LayoutBuilder* out);
Status ReadGptOss(const ConfigReader& config, LayoutBuilder* out);
Status ReadMiniMax(const ConfigReader& config, LayoutBuilder* out);
Status ReadOlmoHybrid(const ConfigReader& config, LayoutBuilder* out);

// layout_from_hf_mla.cc
Status ReadDeepseekV3(const ConfigReader& config, LayoutBuilder* out);
Status ReadKimiLinear(const ConfigReader& config, LayoutBuilder* out);

}  // namespace cachepawl::hf_internal
