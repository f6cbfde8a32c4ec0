// LayoutFromHfConfig for the newer families. Qwen3.5 (qwen3_5, qwen3_5_moe: multimodal configs
// whose decoder is the nested text_config; qwen3_5_text, qwen3_5_moe_text: the decoder alone):
// their text configuration classes (transformers Qwen3_5TextConfig, Qwen3_5MoeTextConfig) reuse
// Qwen3-Next's decoder layers (Gated DeltaNet and gated full attention) with their own defaults.
// FalconMamba (falcon_mamba): Mamba-1 layers, its configuration class MambaConfig's keys.
// Lfm2-MoE (lfm2_moe): Lfm2's short convolutions and attention, layer_types required. Gpt-oss
// (gpt_oss): sliding and full attention layers in turn.
#include <gtest/gtest.h>

#include "layouts/layout_from_hf.h"
#include "tests/layouts/layout_from_hf_test_util.h"

namespace cachepawl::hf_test {
namespace {

// Qwen3_5TextConfig's defaults: 32 layers, full attention at every 4th (4 KV heads of 256),
// Gated DeltaNet elsewhere (16 key heads and 32 value heads of 128, conv kernel 4).
TEST(LayoutFromHfQwen35Test, TheTextClassDefaults) {
  const ModelLayout l = Convert(R"json({"model_type": "qwen3_5_text"})json");
  ExpectLayers(l, 8, {{0, Kv(3, 4, 256)}, {7, Kv(31, 4, 256)}}, 24,
               {{0, Ssm(0, "gdn", {8192, 4}, {32, 128, 128})},
                {23, Ssm(30, "gdn", {8192, 4}, {32, 128, 128})}});
  EXPECT_EQ(l.num_layers, 32u);
  // The multimodal config without a text_config takes the same defaults.
  const ModelLayout wrapped = Convert(R"json({"model_type": "qwen3_5"})json");
  EXPECT_EQ(wrapped.attention_layers, l.attention_layers);
  EXPECT_EQ(wrapped.ssm_layers, l.ssm_layers);
}

// Qwen3_5MoeTextConfig's defaults: 40 layers, 2 KV heads of 256.
TEST(LayoutFromHfQwen35Test, TheMoeTextClassDefaults) {
  const ModelLayout l = Convert(R"json({"model_type": "qwen3_5_moe_text"})json");
  ExpectLayers(l, 10, {{0, Kv(3, 2, 256)}, {9, Kv(39, 2, 256)}}, 30,
               {{29, Ssm(38, "gdn", {8192, 4}, {32, 128, 128})}});
  const ModelLayout wrapped = Convert(R"json({"model_type": "qwen3_5_moe"})json");
  EXPECT_EQ(wrapped.attention_layers, l.attention_layers);
  EXPECT_EQ(wrapped.ssm_layers, l.ssm_layers);
}

// A hub-style multimodal file: the decoder's keys in text_config (layer_types listed, the
// legacy names remapped), a vision_config beside it that the layout ignores, the name at the top.
constexpr char kHubStyle[] = R"json({
  "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
  "_name_or_path": "test/qwen3.5-hub-style", "image_token_id": 248056,
  "text_config": {"model_type": "qwen3_5_text", "hidden_size": 1024, "num_hidden_layers": 6,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 64, "linear_value_head_dim": 32,
    "linear_num_key_heads": 4, "linear_num_value_heads": 8,
    "layer_types": ["linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "attention"],
    "partial_rotary_factor": 0.25, "rope_parameters": {"rope_theta": 10000000,
    "mrope_section": [11, 11, 10]}},
  "vision_config": {"depth": 27, "hidden_size": 1152, "num_heads": 16}})json";

TEST(LayoutFromHfQwen35Test, AHubStyleFileReadsItsTextConfig) {
  // GDN conv channels: 2 * 4 * 64 + 8 * 32 = 768; state [8 value heads, 64, 32].
  ExpectLayout(
      Convert(kHubStyle),
      Expected("test/qwen3.5-hub-style", 6, {Kv(2, 2, 128), Kv(5, 2, 128)},
               {Ssm(0, "gdn", {768, 4}, {8, 64, 32}), Ssm(1, "gdn", {768, 4}, {8, 64, 32}),
                Ssm(3, "gdn", {768, 4}, {8, 64, 32}), Ssm(4, "gdn", {768, 4}, {8, 64, 32})}));
  // SGLang's and vLLM's conv state keeps kernel - 1 columns.
  const ModelLayout sglang = Convert(kHubStyle, Options(StateConvention::kSglang));
  EXPECT_EQ(sglang.ssm_layers[0].conv_shape, (std::vector<uint64_t>{768, 3}));
}

TEST(LayoutFromHfQwen35Test, ErrorsNameTheNestedKey) {
  ExpectInvalid(R"json({"model_type": "qwen3_5", "text_config": {"num_key_value_heads": 0}})json",
                {"text_config.num_key_value_heads: 0"});
  ExpectInvalid(R"json({"model_type": "qwen3_5_moe", "text_config": 7})json", {"text_config: 7"});
  ExpectInvalid(
      R"json({"model_type": "qwen3_5_text", "num_hidden_layers": 2,
              "layer_types": ["full_attention", "mamba2"]})json",
      {"layer_types[1]: 'mamba2'"});
  ExpectInvalid(R"json({"model_type": "qwen3_5_moe_text", "full_attention_interval": 0})json",
                {"full_attention_interval: 0"});
}

// tiiuae/falcon-mamba-7b style: every layer Mamba-1, d_inner = expand * hidden_size.
constexpr char kFalconMamba7B[] = R"json({"architectures": ["FalconMambaForCausalLM"],
  "conv_kernel": 4, "expand": 16, "hidden_size": 4096, "intermediate_size": 8192,
  "model_type": "falcon_mamba", "num_hidden_layers": 64, "state_size": 16,
  "time_step_rank": 256, "use_mambapy": false, "vocab_size": 65024})json";

TEST(LayoutFromHfFalconMambaTest, EveryLayerIsMambaOne) {
  // intermediate_size is kept as given (it is set again after __post_init__ derives it).
  ExpectLayers(Convert(kFalconMamba7B), 0, {}, 64,
               {{0, Ssm(0, "mamba1", {8192, 4}, {8192, 16})},
                {63, Ssm(63, "mamba1", {8192, 4}, {8192, 16})}});
  // The class's defaults: 32 layers, hidden 768, expand 2, state 16, kernel 4.
  ExpectLayers(Convert(R"json({"model_type": "falcon_mamba"})json"), 0, {}, 32,
               {{31, Ssm(31, "mamba1", {1536, 4}, {1536, 16})}});
  // Its layer_types is a read-only property: a file cannot set it.
  ExpectInvalid(R"json({"model_type": "falcon_mamba", "layer_types": ["mamba"]})json",
                {"layer_types"});
}

// LiquidAI/LFM2-8B-A1B style: 24 layers, 6 of them full attention (8 KV heads of 2048 / 32).
constexpr char kLfm2Moe[] = R"json({"architectures": ["Lfm2MoeForCausalLM"],
  "model_type": "lfm2_moe", "hidden_size": 2048, "num_hidden_layers": 24,
  "num_attention_heads": 32, "num_key_value_heads": 8, "conv_L_cache": 3, "num_experts": 32,
  "num_experts_per_tok": 4, "num_dense_layers": 2, "moe_intermediate_size": 1792,
  "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention",
    "conv", "conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv",
    "conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv"]})json";

TEST(LayoutFromHfLfm2MoeTest, ConvAndAttentionLayersFromLayerTypes) {
  ExpectLayers(
      Convert(kLfm2Moe), 6, {{0, Kv(2, 8, 64)}, {5, Kv(21, 8, 64)}}, 18,
      {{0, Ssm(0, "shortconv", {2048, 3}, {})}, {17, Ssm(23, "shortconv", {2048, 3}, {})}});
  // Its layers read their kind from layer_types alone: a config without it builds no model.
  ExpectInvalid(R"json({"model_type": "lfm2_moe"})json", {"layer_types: absent"});
  ExpectInvalid(R"json({"model_type": "lfm2_moe", "layer_types": null})json",
                {"layer_types: null"});
  ExpectInvalid(R"json({"model_type": "lfm2_moe", "num_hidden_layers": 2,
                        "layer_types": ["conv", "mamba"]})json",
                {"layer_types[1]: 'mamba'"});
}

TEST(LayoutFromHfGptOssTest, SlidingAndFullLayersInTurn) {
  // GptOssConfig's defaults (gpt-oss-20b): 36 layers, 8 KV heads of 64, a window of 128 on the
  // even layers.
  const ModelLayout l = Convert(R"json({"model_type": "gpt_oss"})json");
  ExpectLayers(l, 36, {{0, Kv(0, 8, 64, 128)}, {1, Kv(1, 8, 64)}, {35, Kv(35, 8, 64)}}, 0, {});
  // openai/gpt-oss-120b style: its layer_types listed, head_dim null (hidden // heads).
  const ModelLayout big = Convert(R"json({"model_type": "gpt_oss", "num_hidden_layers": 4,
      "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
      "head_dim": null, "sliding_window": 256,
      "layer_types": ["full_attention", "sliding_attention", "sliding_attention",
                      "full_attention"]})json");
  ExpectLayers(big, 4, {{0, Kv(0, 8, 45)}, {1, Kv(1, 8, 45, 256)}, {3, Kv(3, 8, 45)}}, 0, {});
  ExpectInvalid(R"json({"model_type": "gpt_oss", "sliding_window": null})json",
                {"layer_types[0]: 'sliding_attention'", "sliding_window is null"});
  ExpectInvalid(R"json({"model_type": "gpt_oss", "num_key_value_heads": 7})json",
                {"num_key_value_heads: 7"});
}

}  // namespace
}  // namespace cachepawl::hf_test
