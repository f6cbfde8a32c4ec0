// LayoutFromHfConfig's errors: each kind names the key and the value (InvalidArgument), files
// are prefixed with their path, options are checked, and no input crashes or throws: every
// key of the tests' configs replaced by values of every JSON type gives a layout or an
// InvalidArgument.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layouts/layout_from_hf.h"
#include "tests/common/test_util.h"
#include "tests/layouts/layout_from_hf_test_util.h"

namespace cachepawl::hf_test {
namespace {

constexpr char kTinyMamba2[] = R"json({"model_type": "mamba2", "hidden_size": 256,
  "num_hidden_layers": 2, "num_heads": 8, "head_dim": 64, "state_size": 16, "n_groups": 1,
  "conv_kernel": 4, "expand": 2})json";
constexpr char kTinyZamba2[] = R"json({"model_type": "zamba2", "hidden_size": 256,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"], "n_mamba_heads": 8,
  "mamba_d_state": 16})json";

// Each kind of error names the key (with its path) and the value.
TEST(LayoutFromHfErrorsTest, EveryKindOfErrorNamesTheKeyAndTheValue) {
  struct ErrorCase {
    const char* config;
    std::vector<std::string> parts;
  };
  const ErrorCase cases[] = {
      // The family must be named and mapped; the text must be a JSON object.
      {R"({"hidden_size": 4096})", {"model_type: missing"}},
      {R"({"model_type": 7})", {"model_type: 7 (expected a string)"}},
      {R"({"model_type": "gpt2"})",
       {"model_type: 'gpt2' (not a family this converter maps; supported: bamba, "
        "deepseek_v3, falcon_h1, falcon_mamba, gemma3, ",
        "recurrent_gemma, zamba, zamba2)"}},
      {"[1, 2]", {"config: expected a JSON object, got array"}},
      {"{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 4096,,\n}", {"line 3, column 23"}},
      // Grouped-query attention: KV heads at most the query heads and dividing them, in every
      // family with attention (jamba's and llama's used to map to a layout no model runs).
      {R"({"model_type": "jamba", "num_attention_heads": 32, "num_key_value_heads": 64})",
       {"num_key_value_heads: 64 (must be <= num_attention_heads 32)"}},
      {R"({"model_type": "jamba", "num_attention_heads": 32, "num_key_value_heads": 5})",
       {"num_key_value_heads: 5 (must divide num_attention_heads 32"}},
      {R"({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 12})",
       {"num_key_value_heads: 12 (must divide num_attention_heads 32"}},
      {R"({"model_type": "zamba2", "num_attention_heads": 32, "num_key_value_heads": 33})",
       {"num_key_value_heads: 33 (must be <= num_attention_heads 32)"}},
      {R"({"model_type": "recurrent_gemma", "num_attention_heads": 10,
           "num_key_value_heads": 11})",
       {"num_key_value_heads: 11 (must be <= num_attention_heads 10)"}},
      // Wrong JSON types show the value as written.
      {R"({"model_type": "llama", "num_hidden_layers": "32"})",
       {"num_hidden_layers: \"32\" (expected an integer)"}},
      {R"({"model_type": "llama", "num_hidden_layers": 32.0})",
       {"num_hidden_layers: 32.0 (expected an integer)"}},
      {R"({"model_type": "llama", "num_hidden_layers": true})",
       {"num_hidden_layers: true (expected an integer)"}},
      {R"({"model_type": "llama", "hidden_size": null})",
       {"hidden_size: null (expected an integer)"}},
      {R"({"model_type": "bamba", "attn_layer_indices": [1, "2"]})",
       {"attn_layer_indices[1]: \"2\" (expected an integer)"}},
      {R"({"model_type": "bamba", "attn_layer_indices": 3})",
       {"attn_layer_indices: 3 (expected a list of integers)"}},
      {R"({"model_type": "bamba", "mamba_d_head": "big"})",
       {"mamba_d_head: 'big' (expected an integer or 'auto')"}},
      {R"({"model_type": "gemma3_text", "use_bidirectional_attention": "yes"})",
       {"use_bidirectional_attention: \"yes\" (expected true or false)"}},
      {R"({"model_type": "zamba2", "layers_block_type": "hybrid"})",
       {"layers_block_type: \"hybrid\" (expected a list of strings)"}},
      {R"({"model_type": "gemma3", "text_config": []})", {"text_config: [] (expected an object)"}},
      {R"({"model_type": "llama", "_name_or_path": 3})", {"_name_or_path: 3 (expected a string)"}},
      // Values out of range.
      {R"({"model_type": "llama", "num_key_value_heads": 0})",
       {"num_key_value_heads: 0 (must be > 0)"}},
      {R"({"model_type": "llama", "num_hidden_layers": -4})",
       {"num_hidden_layers: -4 (must be > 0)"}},
      {R"({"model_type": "jamba", "attn_layer_offset": -1})",
       {"attn_layer_offset: -1 (must be >= 0)"}},
      {R"({"model_type": "mamba2", "num_hidden_layers": 4097})",
       {"num_hidden_layers: 4097 (at most 4096 decoder layers)"}},
      {R"({"model_type": "llama", "hidden_size": 3000000000})",
       {"hidden_size: 3000000000 (must be at most 2147483647)"}},
      {R"({"model_type": "llama", "hidden_size": 18446744073709551615})",
       {"hidden_size: 18446744073709551615 (must be at most 2147483647)"}},
      {R"({"model_type": "gemma3", "text_config": {"head_dim": 0}})",
       {"text_config.head_dim: 0 (must be > 0)"}},
      {R"({"model_type": "bamba", "num_hidden_layers": 4, "attn_layer_indices": [1, 4]})",
       {"attn_layer_indices[1]: 4 (must be < num_hidden_layers 4)"}},
      {R"({"model_type": "lfm2", "num_hidden_layers": 4, "full_attn_idxs": [9]})",
       {"full_attn_idxs[0]: 9 (must be < num_hidden_layers 4)"}},
      {R"({"model_type": "recurrent_gemma", "num_key_value_heads": 11})",
       {"num_key_value_heads: 11 (must be <= num_attention_heads 10)"}},
      {R"({"model_type": "recurrent_gemma", "num_hidden_layers": 301})",
       {"num_hidden_layers: 301", "at most 300"}},
      {R"({"model_type": "qwen3_next", "full_attention_interval": 0})",
       {"full_attention_interval: 0 (must be > 0)"}},
      {R"({"model_type": "llama", "hidden_size": 4, "num_attention_heads": 8,
                    "head_dim": null})",
       {"hidden_size: 4", "not a multiple of num_attention_heads 8"}},
      // Layer type lists, entry by entry; two names of one attribute must agree.
      {R"({"model_type": "zamba2", "num_hidden_layers": 4,
                    "layers_block_type": ["mamba", "hybrid", "mamba", "foo"]})",
       {"layers_block_type[3]: 'foo' (expected linear_attention or hybrid)"}},
      {R"({"model_type": "granitemoehybrid", "num_hidden_layers": 4,
                    "layer_types": ["mamba", "attention", "mamba"]})",
       {"layer_types: 3 entries (expected one per decoder layer: num_hidden_layers is 4)"}},
      {R"({"model_type": "nemotron_h", "hybrid_override_pattern": "M*MX"})",
       {"hybrid_override_pattern[3]: 'X' (expected M, *, E or -)"}},
      {R"({"model_type": "nemotron_h", "layers_block_type": []})", {"layers_block_type: empty"}},
      {R"({"model_type": "recurrent_gemma", "block_types": ["recurrent", "mlp"]})",
       {"block_types[1]: 'mlp' (expected recurrent or attention)"}},
      {R"({"model_type": "recurrent_gemma", "block_types": []})",
       {"block_types: [] (needs at least one block)"}},
      {R"({"model_type": "qwen2", "num_hidden_layers": 2,
                    "layer_types": ["full_attention", "chunked_attention"]})",
       {"layer_types[1]: 'chunked_attention' (expected full_attention or "
        "sliding_attention)"}},
      {R"({"model_type": "granitemoehybrid", "num_hidden_layers": 1,
                    "layer_types": ["mamba"], "layers_block_type": ["attention"]})",
       {"layers_block_type: present (differs from layer_types"}},
      // Classes that derive the list in a read-only property: transformers refuses to set it.
      {R"({"model_type": "jamba", "layer_types": ["full_attention"]})",
       {"layer_types: present", "attn_layer_period and attn_layer_offset",
        "transformers 5.17 refuses"}},
      {R"({"model_type": "bamba", "layers_block_type": ["full_attention"]})",
       {"layers_block_type: present", "attn_layer_indices"}},
      {R"({"model_type": "falcon_h1", "layer_types": ["hybrid"]})", {"layer_types: present"}},
      {R"({"model_type": "mamba2", "layer_types": ["linear_attention"]})",
       {"layer_types: present"}},
      {R"({"model_type": "recurrent_gemma", "layers_block_type": ["attention"]})",
       {"layers_block_type: present", "block_types"}},
      // Inconsistencies the configuration classes refuse.
      {R"({"model_type": "zamba2", "hidden_size": 2560, "n_mamba_heads": 7})",
       {"mamba_expand * hidden_size 5120 is not divisible by n_mamba_heads 7"}},
      {R"({"model_type": "zamba2", "n_mamba_heads": 80, "mamba_headdim": 32})",
       {"mamba_headdim * n_mamba_heads 32 * 80 = 2560 does not match mamba_expand * "
        "hidden_size 5120"}},
      {R"({"model_type": "bamba", "hidden_size": 4096, "mamba_n_heads": 100})",
       {"mamba_expand * hidden_size 8192 is not divisible by mamba_n_heads 100"}},
      {R"({"model_type": "bamba", "mamba_d_head": 32})",
       {"mamba_d_head * mamba_n_heads 32 * 128 = 4096 does not match mamba_expand * "
        "hidden_size 8192"}},
      {R"({"model_type": "falcon_h1", "mamba_n_heads": 24})",
       {"mamba_d_ssm (default) 1024 is not divisible by mamba_n_heads 24"}},
      {R"({"model_type": "mamba2", "num_heads": 100})",
       {"hidden_size * expand 8192 must equal num_heads * head_dim 6400"}},
      {R"({"model_type": "jamba", "attn_layer_period": 4, "attn_layer_offset": 4})",
       {"attn_layer_offset: 4 (must be < attn_layer_period 4)"}},
      {R"({"model_type": "zamba2", "num_hidden_layers": 6})",
       {"layers_block_type: missing", "54 entries, num_hidden_layers is 6"}},
      {R"({"model_type": "zamba2", "num_hidden_layers": 4,
                    "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
                    "hybrid_layer_ids": [1, 2]})",
       {"hybrid_layer_ids: present", "the hybrid layers of the layer types, [1, 3]"}},
      {R"({"model_type": "nemotron_h", "attention_head_dim": 96})",
       {"attention_head_dim: 96", "reads head_dim, 128 here"}},
      {R"({"model_type": "zamba2", "attention_head_dim": 160, "head_dim": 80})",
       {"head_dim: present (differs from attention_head_dim"}},
  };
  for (const ErrorCase& c : cases) ExpectInvalid(c.config, c.parts);
}

TEST(LayoutFromHfErrorsTest, WhatTheLayoutCannotHold) {
  ExpectInvalid(R"({"model_type": "llama", "attention_chunk_size": 8192})",
                {"attention_chunk_size: present (chunked attention is not mapped"});
  ExpectInvalid(
      R"({"model_type": "qwen2", "num_hidden_layers": 2,
                    "layer_types": ["full_attention", "sliding_attention"]})",
      {"layer_types[1]: 'sliding_attention'", "sliding_window (with use_sliding_window) is null"});
  ExpectInvalid(R"({"model_type": "gemma3_text", "sliding_window": null,
                    "use_bidirectional_attention": true})",
                {"sliding_window: null", "use_bidirectional_attention"});
  std::string kernel1 = kTinyMamba2;
  kernel1.replace(kernel1.find("\"conv_kernel\": 4"), 16, "\"conv_kernel\": 1");
  EXPECT_TRUE(LayoutFromHfConfig(kernel1, Options()).ok());  // 1 column in transformers
  ExpectInvalid(kernel1,
                {"conv_kernel: 1 (the sglang convention keeps conv_kernel - 1 columns: must be "
                 ">= 2)"},
                Options(StateConvention::kSglang));
  ExpectInvalid(R"({"model_type": "recurrent_gemma", "conv1d_width": 1})",
                {"conv1d_width: 1 (RecurrentGemma keeps conv1d_width - 1 columns"});
  // The result is validated: packed fp4 needs multiples of 16 elements.
  HfLayoutOptions fp4;
  fp4.cache_dtype = DType::kFp4E2M1;
  fp4.page_size_tokens = 1;  // 1 * 1 * 9 values
  ExpectInvalid(R"({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 9,
                    "num_attention_heads": 1, "num_key_value_heads": 1})",
                {"attention_layers[0].dtype: fp4_e2m1", "multiple of 16"}, fp4);
}

TEST(LayoutFromHfErrorsTest, OptionsAreChecked) {
  HfLayoutOptions o;
  o.page_size_tokens = 0;
  ExpectInvalid(kTinyMamba2, {"page_size_tokens: 0 (must be > 0)"}, o);
  o = HfLayoutOptions{};
  o.cache_dtype = static_cast<DType>(40);
  ExpectInvalid(kTinyMamba2, {"cache_dtype: 40 (unknown dtype)"}, o);
  o = HfLayoutOptions{};
  o.state_dtype = static_cast<DType>(41);
  ExpectInvalid(kTinyMamba2, {"state_dtype: 41 (unknown dtype)"}, o);
  o = HfLayoutOptions{};
  o.convention = static_cast<StateConvention>(9);
  ExpectInvalid(kTinyMamba2, {"convention: 9 (expected transformers or sglang)"}, o);
  EXPECT_EQ(ParseStateConvention("sglang"), StateConvention::kSglang);
  EXPECT_EQ(ParseStateConvention("transformers"), StateConvention::kTransformers);
  EXPECT_FALSE(ParseStateConvention("vllm").has_value());
  EXPECT_EQ(StateConventionName(StateConvention::kSglang), "sglang");
}

TEST(LayoutFromHfErrorsTest, JsonIsReadAsPythonReadsIt) {
  // The last of two equal keys wins; NaN and Infinity are accepted outside strings and left
  // alone inside them.
  constexpr char kPythonJson[] = R"json({"model_type": "mamba2", "num_hidden_layers": 5,
    "num_hidden_layers": 2, "time_step_limit": [-Infinity, Infinity, NaN],
    "_name_or_path": "org/NaN-Infinity \"x\"", "hidden_size": 256, "num_heads": 8,
    "n_groups": 1})json";
  const ModelLayout l = Convert(kPythonJson);
  EXPECT_EQ(l.num_layers, 2u);
  EXPECT_EQ(l.model, "org/NaN-Infinity \"x\"");
  // A syntax error after a replaced token is still placed right.
  ExpectInvalid("{\"a\": [Infinity, NaN],\n \"b\": Infinity x}", {"line 2, column 16"});
}

// A config nested 100,000 levels used to crash every reader (the error message rendered it
// recursively); nesting past 64 levels is refused before parsing.
TEST(LayoutFromHfErrorsTest, DeepNestingIsRefused) {
  ExpectInvalid(std::string(100000, '[') + std::string(100000, ']'),
                {"line 1, column 65", "nested deeper than 64 levels"});
  std::string nested = R"({"model_type": "mamba2", "extra": )";
  for (int i = 0; i < 100000; ++i) nested += R"({"a": )";
  ExpectInvalid(nested + "1" + std::string(100001, '}'), {"nested deeper than 64 levels"});
}

TEST(LayoutFromHfErrorsTest, FilesNameTheirPath) {
  testing::TempDir dir;
  const std::string good = dir.str() + "/config.json";
  std::ofstream(good) << kTinyMamba2;
  auto l = LayoutFromHfConfigFile(good, Options());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_TRUE(*l == Convert(kTinyMamba2));
  const std::string bad = dir.str() + "/bad.json";
  std::ofstream(bad) << R"({"model_type": "mamba2", "num_heads": 0})";
  auto b = LayoutFromHfConfigFile(bad, Options());
  ASSERT_TRUE(b.status().IsInvalidArgument());
  EXPECT_EQ(b.status().message(), "hf config " + bad + ": num_heads: 0 (must be > 0)");
  auto missing = LayoutFromHfConfigFile(dir.str() + "/none.json", Options());
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("hf config " + dir.str() + "/none.json"),
            std::string::npos);
  auto folder = LayoutFromHfConfigFile(dir.str(), Options());
  EXPECT_FALSE(folder.ok());
  EXPECT_NE(folder.status().message().find("hf config " + dir.str()), std::string::npos);
}

// Every top-level key of each config replaced by a value of each JSON type: a layout or an
// InvalidArgument, never a crash, an exception or another code.
TEST(LayoutFromHfErrorsTest, NoValueOfAnyTypeCrashes) {
  const std::vector<nlohmann::json> values = {nullptr,
                                              true,
                                              0,
                                              -1,
                                              1,
                                              3,
                                              2147483647,
                                              4294967296.0,
                                              "auto",
                                              "x",
                                              nlohmann::json::array(),
                                              nlohmann::json::array({"mamba", "attention"}),
                                              nlohmann::json::array({1, 2}),
                                              nlohmann::json::object()};
  const std::vector<std::string> families = HfConfigModelTypes();
  const char* bases[] = {kTinyMamba2, kTinyZamba2};
  for (const std::string& family : families) {
    std::vector<nlohmann::json> configs = {nlohmann::json::parse(bases[0]),
                                           nlohmann::json::parse(bases[1])};
    for (nlohmann::json& base : configs) {
      base["model_type"] = family;
      base["text_config"] = base;  // gemma3 reads it
      for (const auto& [key, original] : base.items()) {
        if (key == "model_type") continue;
        for (const nlohmann::json& v : values) {
          nlohmann::json c = base;
          c[key] = v;
          auto l = LayoutFromHfConfig(c.dump(), Options(StateConvention::kSglang));
          EXPECT_TRUE(l.ok() || l.status().IsInvalidArgument())
              << family << " " << key << "=" << v.dump() << ": " << l.status().ToString();
        }
      }
    }
  }
}

}  // namespace
}  // namespace cachepawl::hf_test
