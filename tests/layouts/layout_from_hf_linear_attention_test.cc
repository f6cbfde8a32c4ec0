// LayoutFromHfConfig for linear-attention hybrids. MiniMax (minimax): softmax attention layers
// beside lightning attention layers, whose cache is a linear-attention state [heads, head_dim,
// head_dim] with no conv (block "lightning", in the model dtype as transformers and vLLM keep
// it). OLMo Hybrid (olmo_hybrid): full attention beside Gated DeltaNet layers with their own
// derived dims. Zamba (zamba, v1): multi-head Mamba-1 in every layer, a shared attention block's
// K/V in the hybrid ones.
#include <gtest/gtest.h>

#include "layouts/layout_from_hf.h"
#include "tests/layouts/layout_from_hf_test_util.h"

namespace cachepawl::hf_test {
namespace {

SsmLayerSpec Lightning(uint32_t index, uint64_t heads, uint64_t head_dim) {
  return {index, "lightning", {}, DType::kBf16, {heads, head_dim, head_dim}, DType::kBf16};
}

// MiniMaxConfig's defaults: 32 layers, full attention on the even ones (8 KV heads of 4096 / 32
// = 128), lightning attention on the odd ones (32 heads of 128).
TEST(LayoutFromHfMiniMaxTest, TheClassDefaults) {
  const ModelLayout l = Convert(R"json({"model_type": "minimax"})json");
  ExpectLayers(l, 16, {{0, Kv(0, 8, 128)}, {15, Kv(30, 8, 128)}}, 16,
               {{0, Lightning(1, 32, 128)}, {15, Lightning(31, 32, 128)}});
  // A lightning state: 32 * 128 * 128 bf16 = 1 MiB, no conv bytes.
  EXPECT_EQ(l.ConvStateBytes(0), 0u);
  EXPECT_EQ(l.SsmStateBytes(0), 32u * 128 * 128 * 2);
}

constexpr char kMiniMaxTypes[] = R"json({"model_type": "minimax", "_name_or_path": "test/minimax",
  "num_hidden_layers": 3, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
  "head_dim": 32, "sliding_window": 64,
  "layer_types": ["linear_attention", "linear_attention", "full_attention"]})json";

TEST(LayoutFromHfMiniMaxTest, LayerTypesHeadDimAndTheWindow) {
  ExpectLayout(Convert(kMiniMaxTypes), Expected("test/minimax", 3, {Kv(2, 2, 32, 64)},
                                                {Lightning(0, 8, 32), Lightning(1, 8, 32)}));
}

// The hub checkpoints' form (model_type minimax_m1): attn_type_list, 1 softmax attention and 0
// lightning, one per layer.
TEST(LayoutFromHfMiniMaxTest, TheHubsAttnTypeListPlacesTheLayers) {
  const ModelLayout l = Convert(R"json({"model_type": "minimax_m1", "_name_or_path": "test/m1",
    "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 64, "attn_type_list": [0, 1, 0, 1]})json");
  ExpectLayout(l, Expected("test/m1", 4, {Kv(1, 2, 64), Kv(3, 2, 64)},
                           {Lightning(0, 8, 64), Lightning(2, 8, 64)}));
  ExpectInvalid(R"json({"model_type": "minimax_m1", "num_hidden_layers": 3,
    "attn_type_list": [0, 1]})json",
                {"attn_type_list: 2 entries", "num_hidden_layers 3"});
  ExpectInvalid(R"json({"model_type": "minimax_m1", "num_hidden_layers": 2,
    "attn_type_list": [0, 2]})json",
                {"attn_type_list[1]: 2", "1 (softmax attention) or 0 (lightning)"});
  ExpectInvalid(R"json({"model_type": "minimax_m1", "num_hidden_layers": 2,
    "attn_type_list": "0,1"})json",
                {"attn_type_list"});
}

TEST(LayoutFromHfMiniMaxTest, TheStateTakesTheCacheDtypeAndSplitsByHeads) {
  HfLayoutOptions o = Options();
  o.cache_dtype = DType::kFp16;
  o.state_dtype = DType::kFp32;  // not the lightning state's: it is kept in the model dtype
  const ModelLayout l = Convert(kMiniMaxTypes, o);
  EXPECT_EQ(l.ssm_layers[0].ssm_dtype, DType::kFp16);
  o.tp_size = 4;
  o.tp_rank = 1;
  const ModelLayout rank = Convert(kMiniMaxTypes, o);
  EXPECT_EQ(rank.ssm_layers[0].ssm_shape, (std::vector<uint64_t>{2, 32, 32}));
  EXPECT_TRUE(rank.ssm_layers[0].conv_shape.empty());
  EXPECT_EQ(rank.attention_layers[0].num_kv_heads, 1u);  // 2 KV heads over 4 ranks: replicated
  EXPECT_EQ(rank.attention_layers[0].tp_replicas, 2u);
  o.tp_size = 3;
  o.tp_rank = 0;
  auto three = LayoutFromHfConfig(R"json({"model_type": "minimax", "num_hidden_layers": 1,
    "hidden_size": 512, "num_attention_heads": 8, "layer_types": ["linear_attention"]})json",
                                  o);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("ssm_layers[0].ssm_shape[0] (heads): 8"),
            std::string::npos)
      << three.status().ToString();
}

TEST(LayoutFromHfMiniMaxTest, ImpossibleFieldsAreNamed) {
  ExpectInvalid(R"json({"model_type": "minimax", "num_hidden_layers": 2,
    "layer_types": ["full_attention", "mamba"]})json",
                {"layer_types[1]: 'mamba'"});
  ExpectInvalid(R"json({"model_type": "minimax", "num_hidden_layers": 2,
    "layer_types": ["full_attention"]})json",
                {"layer_types", "1 entries"});
  ExpectInvalid(R"json({"model_type": "minimax", "sliding_window": 0})json", {"sliding_window: 0"});
  ExpectInvalid(R"json({"model_type": "minimax", "num_key_value_heads": 5})json",
                {"num_key_value_heads: 5"});
}

// OlmoHybridConfig's defaults: 32 layers, full attention where i % 4 == 3 (30 KV heads of
// 3840 / 30 = 128), Gated DeltaNet elsewhere: 30 key and value heads, key dim int(0.75 * 3840 /
// 30) = 96, value dim 192, conv over 2 * 30 * 96 + 30 * 192 = 11520 channels of kernel 4.
TEST(LayoutFromHfOlmoHybridTest, TheClassDefaults) {
  const ModelLayout l = Convert(R"json({"model_type": "olmo_hybrid"})json");
  ExpectLayers(l, 8, {{0, Kv(3, 30, 128)}, {7, Kv(31, 30, 128)}}, 24,
               {{0, Ssm(0, "gdn", {11520, 4}, {30, 96, 192})},
                {23, Ssm(30, "gdn", {11520, 4}, {30, 96, 192})}});
}

constexpr char kOlmoSmall[] = R"json({"model_type": "olmo_hybrid", "_name_or_path": "test/olmo",
  "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
  "num_key_value_heads": 2, "linear_num_key_heads": 2, "linear_value_head_dim": 64})json";

TEST(LayoutFromHfOlmoHybridTest, TooFewLayersForTheIntervalEndOnFullAttention) {
  // Layer 1 is full attention (no i % 4 == 3 below 2); key dim int(0.75 * 256 / 2) = 96, value
  // heads 4 (the heads), value dim 64: conv 2 * 2 * 96 + 4 * 64 = 640.
  ExpectLayout(Convert(kOlmoSmall),
               Expected("test/olmo", 2, {Kv(1, 2, 64)}, {Ssm(0, "gdn", {640, 4}, {4, 96, 64})}));
}

TEST(LayoutFromHfOlmoHybridTest, LayerTypesNeedBothKinds) {
  ExpectInvalid(R"json({"model_type": "olmo_hybrid", "num_hidden_layers": 2,
    "layer_types": ["linear_attention", "linear_attention"]})json",
                {"layer_types: no 'full_attention' layer"});
  ExpectInvalid(R"json({"model_type": "olmo_hybrid", "num_hidden_layers": 2,
    "layer_types": ["attention", "full_attention"]})json",
                {"layer_types: no 'linear_attention' layer"});
  ExpectInvalid(R"json({"model_type": "olmo_hybrid", "hidden_size": 8,
    "num_attention_heads": 8, "linear_num_key_heads": 8})json",
                {"linear_key_head_dim: null", "is 0"});
}

// ZambaConfig's defaults (Zamba v1): 76 layers, Mamba at 0 and 1, a hybrid at 2, then hybrids
// where (i - 3) % 6 == 4; every layer multi-head Mamba-1 (2 heads of 2 * 3712 / 2 = 3712, d_state
// 16, conv kernel 4), every hybrid K/V of 16 heads of 2 * 3712 / 16 = 464.
TEST(LayoutFromHfZambaTest, TheClassDefaults) {
  const ModelLayout l = Convert(R"json({"model_type": "zamba"})json");
  ExpectLayers(l, 13, {{0, Kv(2, 16, 464)}, {1, Kv(7, 16, 464)}, {12, Kv(73, 16, 464)}}, 76,
               {{0, Ssm(0, "mamba1", {7424, 4}, {2, 3712, 16})},
                {75, Ssm(75, "mamba1", {7424, 4}, {2, 3712, 16})}});
}

constexpr char kZambaSmall[] = R"json({"model_type": "zamba", "_name_or_path": "test/zamba",
  "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 96, "n_mamba_heads": 4, "mamba_d_state": 8,
  "layer_types": ["linear_attention", "hybrid", "linear_attention", "hybrid"]})json";

TEST(LayoutFromHfZambaTest, LayerTypesTheHeadDimAliasAndTheSplit) {
  // d_inner 2 * 256 = 512 over 4 Mamba heads of 128.
  const auto mamba = [](uint32_t i) { return Ssm(i, "mamba1", {512, 4}, {4, 128, 8}); };
  ExpectLayout(Convert(kZambaSmall), Expected("test/zamba", 4, {Kv(1, 2, 96), Kv(3, 2, 96)},
                                              {mamba(0), mamba(1), mamba(2), mamba(3)}));
  HfLayoutOptions o = Options();
  o.tp_size = 2;
  o.tp_rank = 1;
  const ModelLayout rank = Convert(kZambaSmall, o);
  EXPECT_EQ(rank.ssm_layers[0].ssm_shape, (std::vector<uint64_t>{2, 128, 8}));
  EXPECT_EQ(rank.ssm_layers[0].conv_shape, (std::vector<uint64_t>{256, 4}));
  EXPECT_EQ(rank.attention_layers[0].num_kv_heads, 1u);
}

TEST(LayoutFromHfZambaTest, ImpossibleFieldsAreNamed) {
  ExpectInvalid(R"json({"model_type": "zamba", "n_mamba_heads": 3})json",
                {"n_mamba_heads: 3", "does not divide"});
  ExpectInvalid(R"json({"model_type": "zamba", "num_hidden_layers": 2})json",
                {"num_hidden_layers: 2", "at least 3 entries"});
  ExpectInvalid(R"json({"model_type": "zamba", "num_hidden_layers": 2,
    "layers_block_type": ["hybrid", "attention"]})json",
                {"layers_block_type[1]"});
}

}  // namespace
}  // namespace cachepawl::hf_test
