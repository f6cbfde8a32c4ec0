// LayoutFromHfConfig for the newer families. Qwen3.5 (qwen3_5, qwen3_5_moe: multimodal configs
// whose decoder is the nested text_config; qwen3_5_text, qwen3_5_moe_text: the decoder alone):
// their text configuration classes (transformers Qwen3_5TextConfig, Qwen3_5MoeTextConfig) reuse
// Qwen3-Next's decoder layers (Gated DeltaNet and gated full attention) with their own defaults.
// FalconMamba (falcon_mamba): Mamba-1 layers, its configuration class MambaConfig's keys.
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

}  // namespace
}  // namespace cachepawl::hf_test
