// LayoutFromHfConfig for the families with multi-head latent attention: DeepSeek V3 (every layer
// MLA) and Kimi Linear (MLA beside Kimi Delta Attention), and the MLA layout kind itself: one
// latent per token and layer (kv_lora_rank + qk_rope_head_dim), no V, never split across
// tensor-parallel ranks.
#include <gtest/gtest.h>

#include "layouts/layout_from_hf.h"
#include "layouts/layout_tp.h"
#include "tests/layouts/layout_from_hf_test_util.h"

namespace cachepawl::hf_test {
namespace {

AttentionLayerSpec Mla(uint32_t index, uint32_t latent) {
  AttentionLayerSpec a{index, 1, latent, DType::kBf16, 0};
  a.mla = true;
  return a;
}

// DeepseekV3Config's defaults: 61 layers, each one latent of 512 + 64 values per token.
TEST(LayoutFromHfMlaTest, DeepseekV3DefaultsAreSixtyOneLatentLayers) {
  const ModelLayout l = Convert(R"json({"model_type": "deepseek_v3"})json");
  ExpectLayers(l, 61, {{0, Mla(0, 576)}, {60, Mla(60, 576)}}, 0, {});
  EXPECT_EQ(l.num_layers, 61u);
  // One latent, no V: 16 tokens x 576 x 2 bytes per layer and page.
  EXPECT_EQ(l.KBytesPerPage(0), 16u * 576 * 2);
  EXPECT_EQ(l.VBytesPerPage(0), 0u);
  EXPECT_EQ(l.KvPageBytes(), 61u * 16 * 576 * 2);
}

constexpr char kSmallDeepseek[] = R"json({"model_type": "deepseek_v3",
  "_name_or_path": "test/deepseek-small", "num_hidden_layers": 3, "kv_lora_rank": 128,
  "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64, "num_attention_heads": 8,
  "num_key_value_heads": 8, "hidden_size": 512, "first_k_dense_replace": 1})json";

TEST(LayoutFromHfMlaTest, DeepseekV3TakesTheLatentWidthsOfItsConfig) {
  ExpectLayout(Convert(kSmallDeepseek),
               Expected("test/deepseek-small", 3, {Mla(0, 160), Mla(1, 160), Mla(2, 160)}, {}));
}

// KimiLinearConfig's defaults: 27 layers, MLA on layers 4, 8, ... 24 (i > 0, i % 4 == 0), Kimi
// Delta Attention elsewhere: 32 heads of 128, conv over q, k, v (3 * 32 * 128 = 12288 channels)
// of kernel 4 (transformers keeps all 4 columns), state [32, 128, 128] fp32.
TEST(LayoutFromHfMlaTest, KimiLinearDefaults) {
  const ModelLayout l = Convert(R"json({"model_type": "kimi_linear"})json");
  ExpectLayers(l, 6, {{0, Mla(4, 576)}, {5, Mla(24, 576)}}, 21,
               {{0, Ssm(0, "kda", {12288, 4}, {32, 128, 128})},
                {20, Ssm(26, "kda", {12288, 4}, {32, 128, 128})}});
  // SGLang's and vLLM's conv state keeps kernel - 1 columns.
  const ModelLayout sg =
      Convert(R"json({"model_type": "kimi_linear"})json", Options(StateConvention::kSglang));
  EXPECT_EQ(sg.ssm_layers[0].conv_shape, (std::vector<uint64_t>{12288, 3}));
}

// The checkpoint's form: linear_attn_config with 1-based layer lists and the KDA dims, which win
// over the linear_* keys.
constexpr char kKimiHubStyle[] = R"json({"model_type": "kimi_linear",
  "_name_or_path": "test/kimi-hub-style", "num_hidden_layers": 5, "kv_lora_rank": 256,
  "qk_rope_head_dim": 32, "linear_head_dim": 999, "linear_num_heads": 999,
  "linear_attn_config": {"head_dim": 64, "num_heads": 4, "short_conv_kernel_size": 3,
    "full_attn_layers": [2, 5], "kda_layers": [1, 3, 4]}})json";

TEST(LayoutFromHfMlaTest, KimiLinearReadsItsCheckpointsLinearAttnConfig) {
  const auto kda = [](uint32_t i) { return Ssm(i, "kda", {768, 3}, {4, 64, 64}); };
  ExpectLayout(
      Convert(kKimiHubStyle),
      Expected("test/kimi-hub-style", 5, {Mla(1, 288), Mla(4, 288)}, {kda(0), kda(2), kda(3)}));
}

constexpr char kKimiLayerTypes[] = R"json({"model_type": "kimi_linear", "num_hidden_layers": 3,
  "layer_types": ["full_attention", "linear_attention", "linear_attention"],
  "linear_head_dim": 32, "linear_num_heads": 2, "linear_conv_kernel_dim": 2,
  "linear_attn_config": {"full_attn_layers": [3], "kda_layers": [1, 2]}})json";

TEST(LayoutFromHfMlaTest, KimiLinearLayerTypesWinOverTheCheckpointLists) {
  const ModelLayout l = Convert(kKimiLayerTypes);
  ExpectLayers(
      l, 1, {{0, Mla(0, 576)}}, 2,
      {{0, Ssm(1, "kda", {192, 2}, {2, 32, 32})}, {1, Ssm(2, "kda", {192, 2}, {2, 32, 32})}});
}

TEST(LayoutFromHfMlaTest, ImpossibleFieldsAreNamed) {
  ExpectInvalid(R"json({"model_type": "deepseek_v3", "kv_lora_rank": 0})json",
                {"kv_lora_rank: 0", "must be > 0"});
  ExpectInvalid(R"json({"model_type": "kimi_linear", "qk_rope_head_dim": "64"})json",
                {"qk_rope_head_dim: \"64\""});
  ExpectInvalid(R"json({"model_type": "kimi_linear", "linear_attn_config": [1]})json",
                {"linear_attn_config: [1]", "expected an object"});
  ExpectInvalid(R"json({"model_type": "kimi_linear", "num_hidden_layers": 3,
    "linear_attn_config": {"full_attn_layers": [4], "kda_layers": [1, 2]}})json",
                {"linear_attn_config.full_attn_layers[0]: 4", "1 to num_hidden_layers 3"});
  ExpectInvalid(R"json({"model_type": "kimi_linear", "num_hidden_layers": 3,
    "linear_attn_config": {"full_attn_layers": [3], "kda_layers": [1, 3]}})json",
                {"linear_attn_config.kda_layers[1]: 3", "listed twice"});
  ExpectInvalid(R"json({"model_type": "kimi_linear", "num_hidden_layers": 3,
    "linear_attn_config": {"full_attn_layers": [3], "kda_layers": [1]}})json",
                {"linear_attn_config.kda_layers", "layer 2 missing"});
  ExpectInvalid(R"json({"model_type": "kimi_linear", "num_hidden_layers": 2,
    "layer_types": ["full_attention", "mamba"]})json",
                {"layer_types[1]: 'mamba'"});
  ExpectInvalid(R"json({"model_type": "kimi_linear",
    "linear_attn_config": {"short_conv_kernel_size": 1}})json",
                {"linear_attn_config.short_conv_kernel_size: 1"},
                Options(StateConvention::kSglang));
}

// Tensor parallelism: the latent is the same on every rank (not split, stored once), the KDA
// heads are split.
TEST(LayoutFromHfMlaTest, RanksHoldTheWholeLatentAndTheirShareOfTheKdaHeads) {
  HfLayoutOptions o = Options();
  o.tp_size = 4;
  o.tp_rank = 3;
  const ModelLayout l = Convert(kKimiHubStyle, o);
  ASSERT_EQ(l.attention_layers.size(), 2u);
  AttentionLayerSpec latent = Mla(1, 288);
  latent.tp_replicas = 4;  // the same bytes on every rank
  EXPECT_TRUE(l.attention_layers[0] == latent);
  EXPECT_TRUE(l.ssm_layers[0] == Ssm(0, "kda", {192, 3}, {1, 64, 64}));
  EXPECT_EQ(l.tp_size, 4u);
  // The group record holds the latent once, and every rank's KDA state.
  EXPECT_EQ(l.TpShares(Kind::kKV), 1u);
  EXPECT_EQ(l.TpShareOf(Kind::kKV, 3), 0u);
  EXPECT_EQ(l.TpShares(Kind::kMamba), 4u);
  EXPECT_EQ(l.TpShareOf(Kind::kMamba, 3), 3u);
  auto group = GroupLayout(l);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  EXPECT_EQ(group->RecordBytes(Kind::kKV), l.RecordBytes(Kind::kKV));
  EXPECT_EQ(group->RecordBytes(Kind::kMamba), 4 * l.RecordBytes(Kind::kMamba));
  o.tp_size = 3;
  o.tp_rank = 0;
  auto three = LayoutFromHfConfig(kKimiHubStyle, o);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("ssm_layers[0].ssm_shape[0] (heads): 4"),
            std::string::npos)
      << three.status().ToString();
}

}  // namespace
}  // namespace cachepawl::hf_test
