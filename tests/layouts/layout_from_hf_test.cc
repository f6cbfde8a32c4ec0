// LayoutFromHfConfig, family by family: the tiny configs of /work/notes/hf/probe2.py (the cache
// tensors transformers 5.17 produced for them on a GPU are asserted shape for shape, batch
// dimension dropped), then config.json files as the Hub has them (older keys: attention periods,
// index lists, override patterns, legacy layer names) and in the current layer_types style.
#include "layouts/layout_from_hf.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/layouts/layout_from_hf_test_util.h"

namespace cachepawl::hf_test {
namespace {

// ---- The probe configs (probe2.py's keyword arguments, as config.json) ----------------------

constexpr char kProbeLlama[] = R"json({"model_type": "llama", "vocab_size": 512,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 64})json";
constexpr char kProbeMamba2[] = R"json({"model_type": "mamba2", "vocab_size": 512,
  "hidden_size": 256, "num_hidden_layers": 4, "head_dim": 64, "num_heads": 8, "state_size": 16,
  "n_groups": 2, "conv_kernel": 4, "chunk_size": 32, "expand": 2})json";
constexpr char kProbeJamba[] = R"json({"model_type": "jamba", "vocab_size": 512,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
  "num_key_value_heads": 2, "use_mamba_kernels": false, "attn_layer_period": 2,
  "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1, "num_experts": 2,
  "num_experts_per_tok": 1, "mamba_d_state": 16, "mamba_expand": 2, "mamba_dt_rank": 16})json";
constexpr char kProbeZamba2[] = R"json({"model_type": "zamba2", "vocab_size": 512,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 6, "num_attention_heads": 4,
  "num_key_value_heads": 2, "use_mamba_kernels": false,
  "layers_block_type": ["mamba", "mamba", "hybrid", "mamba", "mamba", "hybrid"],
  "mamba_d_state": 16, "n_mamba_heads": 8, "num_mem_blocks": 1, "adapter_rank": 8,
  "mamba_ngroups": 1, "chunk_size": 32})json";
constexpr char kProbeBamba[] = R"json({"model_type": "bamba", "vocab_size": 512,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
  "num_key_value_heads": 2, "attn_layer_indices": [1, 3], "mamba_n_heads": 8, "mamba_d_head": 64,
  "mamba_n_groups": 1, "mamba_d_state": 16, "mamba_expand": 2, "mamba_d_conv": 4,
  "mamba_chunk_size": 32})json";
constexpr char kProbeFalconH1[] = R"json({"model_type": "falcon_h1", "vocab_size": 512,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
  "num_key_value_heads": 2, "mamba_n_heads": 8, "mamba_d_head": 64, "mamba_n_groups": 1,
  "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_d_ssm": 512, "mamba_chunk_size": 32})json";
constexpr char kProbeGraniteMoeHybrid[] = R"json({"model_type": "granitemoehybrid",
  "vocab_size": 512, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2,
  "layer_types": ["mamba", "attention", "mamba", "attention"], "mamba_n_heads": 8,
  "mamba_d_head": 64, "mamba_d_state": 16, "mamba_n_groups": 1, "num_local_experts": 2,
  "num_experts_per_tok": 1, "shared_intermediate_size": 256, "mamba_chunk_size": 32})json";
constexpr char kProbeNemotronH[] = R"json({"model_type": "nemotron_h", "vocab_size": 512,
  "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 64, "use_mamba_kernels": false,
  "hybrid_override_pattern": "M*M-", "mamba_num_heads": 8, "mamba_head_dim": 64,
  "ssm_state_size": 16, "n_groups": 1, "expand": 2, "conv_kernel": 4, "chunk_size": 32})json";
constexpr char kProbeQwen3Next[] = R"json({"model_type": "qwen3_next", "vocab_size": 512,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 64, "full_attention_interval": 2,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
  "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "num_experts": 2,
  "num_experts_per_tok": 1, "moe_intermediate_size": 128,
  "shared_expert_intermediate_size": 128})json";
constexpr char kProbeLfm2[] = R"json({"model_type": "lfm2", "vocab_size": 512,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
  "num_key_value_heads": 2, "layer_types": ["conv", "full_attention", "conv", "full_attention"],
  "conv_L_cache": 3, "block_dim": 256})json";
constexpr char kProbeRecurrentGemma[] = R"json({"model_type": "recurrent_gemma",
  "vocab_size": 512, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 6,
  "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
  "block_types": ["recurrent", "recurrent", "attention"], "lru_width": 256,
  "attention_window_size": 32, "conv1d_width": 4})json";
constexpr char kProbeGemma3Text[] = R"json({"model_type": "gemma3_text", "vocab_size": 512,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 6, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 64, "sliding_window": 32})json";

// probe2.txt: "layer i DynamicLayer {'k': '(1, 2, 64, 64) bfloat16'}" is Kv(i, 2, 64);
// "LinearAttentionLayer {'conv': '(1, 576, 4) bfloat16', 'rec': '(1, 8, 64, 16) float32'}" is
// a conv [576, 4] and a state [8, 64, 16].
TEST(LayoutFromHfTest, ProbeConfigsGiveTheTensorsTransformersKept) {
  ExpectLayout(Convert(kProbeLlama),
               Expected("llama", 4, {Kv(0, 2, 64), Kv(1, 2, 64), Kv(2, 2, 64), Kv(3, 2, 64)}, {}));
  std::vector<SsmLayerSpec> mamba2;
  for (uint32_t i = 0; i < 4; ++i) mamba2.push_back(Ssm(i, "mamba2", {576, 4}, {8, 64, 16}));
  ExpectLayout(Convert(kProbeMamba2), Expected("mamba2", 4, {}, mamba2));
  ExpectLayout(Convert(kProbeJamba), Expected("jamba", 4, {Kv(1, 2, 64), Kv(3, 2, 64)},
                                              {Ssm(0, "mamba1", {512, 4}, {512, 16}),
                                               Ssm(2, "mamba1", {512, 4}, {512, 16})}));
  std::vector<SsmLayerSpec> zamba2;
  for (uint32_t i = 0; i < 6; ++i) zamba2.push_back(Ssm(i, "mamba2", {544, 4}, {8, 64, 16}));
  ExpectLayout(Convert(kProbeZamba2),
               Expected("zamba2", 6, {Kv(2, 2, 128), Kv(5, 2, 128)}, zamba2));
  const std::vector<SsmLayerSpec> even = {Ssm(0, "mamba2", {544, 4}, {8, 64, 16}),
                                          Ssm(2, "mamba2", {544, 4}, {8, 64, 16})};
  ExpectLayout(Convert(kProbeBamba), Expected("bamba", 4, {Kv(1, 2, 64), Kv(3, 2, 64)}, even));
  std::vector<SsmLayerSpec> falcon;
  for (uint32_t i = 0; i < 4; ++i) falcon.push_back(Ssm(i, "mamba2", {544, 4}, {8, 64, 16}));
  ExpectLayout(
      Convert(kProbeFalconH1),
      Expected("falcon_h1", 4, {Kv(0, 2, 64), Kv(1, 2, 64), Kv(2, 2, 64), Kv(3, 2, 64)}, falcon));
  ExpectLayout(Convert(kProbeGraniteMoeHybrid),
               Expected("granitemoehybrid", 4, {Kv(1, 2, 64), Kv(3, 2, 64)}, even));
  // Layer 3 is an MLP: "LinearAttentionLayer {'conv': 'None', 'rec': 'None'}", nothing kept.
  ExpectLayout(Convert(kProbeNemotronH), Expected("nemotron_h", 4, {Kv(1, 2, 64)}, even));
  ExpectLayout(Convert(kProbeQwen3Next), Expected("qwen3_next", 4, {Kv(1, 2, 64), Kv(3, 2, 64)},
                                                  {Ssm(0, "gdn", {256, 4}, {4, 32, 32}),
                                                   Ssm(2, "gdn", {256, 4}, {4, 32, 32})}));
  // "LinearAttentionLayer {'conv': '(1, 256, 3) bfloat16', 'rec': 'None'}": no state.
  ExpectLayout(Convert(kProbeLfm2),
               Expected("lfm2", 4, {Kv(1, 2, 64), Kv(3, 2, 64)},
                        {Ssm(0, "shortconv", {256, 3}, {}), Ssm(2, "shortconv", {256, 3}, {})}));
  // Sliding layers: "DynamicSlidingWindowLayer {..., 'win': 32}" (the layer keeps window - 1
  // tokens; the layout records the model's window).
  ExpectLayout(Convert(kProbeGemma3Text),
               Expected("gemma3_text", 6,
                        {Kv(0, 2, 64, 32), Kv(1, 2, 64, 32), Kv(2, 2, 64, 32), Kv(3, 2, 64, 32),
                         Kv(4, 2, 64, 32), Kv(5, 2, 64)},
                        {}));
}

// RecurrentGemma keeps its state in its modules (probe2 found no cache object):
// RecurrentGemmaRecurrentBlock keeps conv1d_state [lru_width, conv1d_width - 1] in the model
// dtype and rg_lru.recurrent_states [lru_width] in fp32; attention layers a window of
// attention_window_size tokens.
TEST(LayoutFromHfTest, RecurrentGemmaProbeConfigKeepsItsModulesState) {
  std::vector<SsmLayerSpec> rglru;
  for (uint32_t i : {0u, 1u, 3u, 4u}) rglru.push_back(Ssm(i, "rglru", {256, 3}, {256}));
  const ModelLayout want =
      Expected("recurrent_gemma", 6, {Kv(2, 1, 64, 32), Kv(5, 1, 64, 32)}, rglru);
  ExpectLayout(Convert(kProbeRecurrentGemma), want);
  // conv1d_width - 1 in both conventions.
  ExpectLayout(Convert(kProbeRecurrentGemma, Options(StateConvention::kSglang)), want);
}

TEST(LayoutFromHfTest, TheSglangConventionKeepsOneConvColumnLess) {
  std::vector<SsmLayerSpec> mamba2;
  for (uint32_t i = 0; i < 4; ++i) mamba2.push_back(Ssm(i, "mamba2", {576, 3}, {8, 64, 16}));
  ExpectLayout(Convert(kProbeMamba2, Options(StateConvention::kSglang)),
               Expected("mamba2", 4, {}, mamba2));
  ExpectLayout(Convert(kProbeLfm2, Options(StateConvention::kSglang)),
               Expected("lfm2", 4, {Kv(1, 2, 64), Kv(3, 2, 64)},
                        {Ssm(0, "shortconv", {256, 2}, {}), Ssm(2, "shortconv", {256, 2}, {})}));
  // Attention-only layouts do not depend on it.
  EXPECT_TRUE(Convert(kProbeGemma3Text, Options(StateConvention::kSglang)) ==
              Convert(kProbeGemma3Text));
}

TEST(LayoutFromHfTest, OptionsSetDtypesPageSizeAndName) {
  HfLayoutOptions o;
  o.cache_dtype = DType::kFp16;
  o.state_dtype = DType::kBf16;
  o.page_size_tokens = 64;
  o.model = "org/tiny-bamba";
  const ModelLayout l = Convert(kProbeBamba, o);
  EXPECT_EQ(l.model, "org/tiny-bamba");
  EXPECT_EQ(l.page_size_tokens, 64u);
  ASSERT_EQ(l.attention_layers.size(), 2u);
  ASSERT_EQ(l.ssm_layers.size(), 2u);
  EXPECT_EQ(l.attention_layers[0].dtype, DType::kFp16);
  EXPECT_EQ(l.ssm_layers[0].conv_dtype, DType::kFp16);
  EXPECT_EQ(l.ssm_layers[0].ssm_dtype, DType::kBf16);
  // A shortconv layer has no state: the state dtype changes neither it nor its fingerprint.
  const ModelLayout lfm2 = Convert(kProbeLfm2, o);
  ASSERT_EQ(lfm2.ssm_layers.size(), 2u);
  EXPECT_EQ(lfm2.ssm_layers[0].ssm_dtype, DType::kFp32);
  HfLayoutOptions fp32_state = o;
  fp32_state.state_dtype = DType::kFp32;
  EXPECT_EQ(Convert(kProbeLfm2, fp32_state).FingerprintHex(), lfm2.FingerprintHex());
}

TEST(LayoutFromHfTest, TheModelNameIsTheOptionTheNameOrPathOrTheModelType) {
  constexpr char kNamed[] = R"json({"model_type": "mamba2", "_name_or_path": "org/m2",
    "hidden_size": 256, "num_hidden_layers": 1, "num_heads": 8, "n_groups": 1})json";
  EXPECT_EQ(Convert(kNamed).model, "org/m2");
  EXPECT_EQ(Convert(kNamed, Options(StateConvention::kTransformers, "mine")).model, "mine");
  constexpr char kEmptyName[] = R"json({"model_type": "mamba2", "_name_or_path": "",
    "hidden_size": 256, "num_hidden_layers": 1, "num_heads": 8, "n_groups": 1})json";
  EXPECT_EQ(Convert(kEmptyName).model, "mamba2");
}

TEST(LayoutFromHfTest, EverySupportedModelTypeIsListedSorted) {
  const std::vector<std::string> types = HfConfigModelTypes();
  const std::vector<std::string> want = {"bamba",
                                         "deepseek_v3",
                                         "falcon_h1",
                                         "falcon_mamba",
                                         "gemma3",
                                         "gemma3_text",
                                         "gpt_oss",
                                         "granitemoehybrid",
                                         "jamba",
                                         "kimi_linear",
                                         "lfm2",
                                         "lfm2_moe",
                                         "llama",
                                         "mamba",
                                         "mamba2",
                                         "minimax",
                                         "minimax_m1",
                                         "mistral",
                                         "nemotron_h",
                                         "olmo_hybrid",
                                         "qwen2",
                                         "qwen3",
                                         "qwen3_5",
                                         "qwen3_5_moe",
                                         "qwen3_5_moe_text",
                                         "qwen3_5_text",
                                         "qwen3_next",
                                         "recurrent_gemma",
                                         "zamba",
                                         "zamba2"};
  EXPECT_EQ(types, want);
}

// ---- Hub config.json files: older keys and the current layer_types style ---------------------

// ai21labs/Jamba-v0.1: attention layers from attn_layer_period / attn_layer_offset.
constexpr char kJambaV01[] = R"json({
  "architectures": ["JambaForCausalLM"], "attention_dropout": 0.0, "attn_layer_offset": 4,
  "attn_layer_period": 8, "bos_token_id": 1, "eos_token_id": 2, "expert_layer_offset": 1,
  "expert_layer_period": 2, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "mamba_conv_bias": true,
  "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_dt_rank": 256, "mamba_expand": 2,
  "mamba_proj_bias": false, "max_position_embeddings": 262144, "model_type": "jamba",
  "num_attention_heads": 32, "num_experts": 16, "num_experts_per_tok": 2,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "num_logits_to_keep": 1,
  "output_router_logits": false, "pad_token_id": 0, "rms_norm_eps": 1e-06,
  "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0", "use_cache": true,
  "use_mamba_kernels": true, "vocab_size": 65536})json";

TEST(LayoutFromHfTest, JambaDerivesItsAttentionLayersFromPeriodAndOffset) {
  const ModelLayout l = Convert(kJambaV01);
  ExpectLayers(l, 4, {{0, Kv(4, 8, 128)}, {1, Kv(12, 8, 128)}, {3, Kv(28, 8, 128)}}, 28,
               {{0, Ssm(0, "mamba1", {8192, 4}, {8192, 16})},
                {27, Ssm(31, "mamba1", {8192, 4}, {8192, 16})}});
  EXPECT_EQ(l.model, "jamba");
}

// Zyphra/Zamba2-2.7B: legacy "mamba" names, hybrid_layer_ids and the derived attention sizes
// written out.
constexpr char kZamba2_2_7B[] = R"json({
  "add_bias_linear": false, "architectures": ["Zamba2ForCausalLM"], "attention_dropout": 0.0,
  "attention_head_dim": 160, "attention_hidden_size": 5120, "bos_token_id": 1, "chunk_size": 256,
  "eos_token_id": 2, "ffn_hidden_size": 10240, "hidden_act": "gelu", "hidden_size": 2560,
  "hybrid_layer_ids": [6, 12, 18, 24, 30, 36, 42, 47, 51], "initializer_range": 0.02,
  "intermediate_size": 10240, "kv_channels": 80,
  "layers_block_type": ["mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "hybrid", "mamba",
    "mamba", "mamba", "mamba", "mamba", "hybrid", "mamba", "mamba", "mamba", "mamba", "mamba",
    "hybrid", "mamba", "mamba", "mamba", "mamba", "mamba", "hybrid", "mamba", "mamba", "mamba",
    "mamba", "mamba", "hybrid", "mamba", "mamba", "mamba", "mamba", "mamba", "hybrid", "mamba",
    "mamba", "mamba", "mamba", "mamba", "hybrid", "mamba", "mamba", "mamba", "mamba", "hybrid",
    "mamba", "mamba", "mamba", "hybrid", "mamba", "mamba"],
  "mamba_d_conv": 4, "mamba_d_state": 64, "mamba_expand": 2, "mamba_headdim": 64,
  "mamba_ngroups": 1, "max_position_embeddings": 4096, "model_type": "zamba2",
  "n_mamba_heads": 80, "num_attention_heads": 32, "num_hidden_layers": 54,
  "num_key_value_heads": 32, "num_logits_to_keep": 1, "num_mem_blocks": 2,
  "num_query_groups": 32, "pad_token_id": 0, "rms_norm_eps": 1e-05, "rope_theta": 10000,
  "time_step_floor": 0.0001, "time_step_max": 0.1, "time_step_min": 0.001,
  "transformers_version": "4.48.0.dev0", "use_cache": true, "use_conv_bias": true,
  "use_long_context": false, "use_mamba_kernels": true, "use_mem_eff_path": false,
  "use_mem_rope": true, "use_shared_attention_adapter": false, "vocab_size": 32000})json";

TEST(LayoutFromHfTest, Zamba2HybridLayersHoldKvAndAMambaState) {
  const ModelLayout l = Convert(kZamba2_2_7B);
  const std::vector<uint32_t> hybrid = {6, 12, 18, 24, 30, 36, 42, 47, 51};
  ASSERT_EQ(l.attention_layers.size(), hybrid.size());
  for (size_t a = 0; a < hybrid.size(); ++a) {
    EXPECT_TRUE(l.attention_layers[a] == Kv(hybrid[a], 32, 160)) << a;
  }
  ASSERT_EQ(l.ssm_layers.size(), 54u);
  for (uint32_t i = 0; i < 54; ++i) {
    EXPECT_TRUE(l.ssm_layers[i] == Ssm(i, "mamba2", {5248, 4}, {80, 64, 64})) << i;
  }
  // Without the written-out keys the class derives the same (and its default list is this one).
  constexpr char kDefaults[] = R"json({"model_type": "zamba2", "n_mamba_heads": 80})json";
  ExpectLayout(Convert(kDefaults), Expected("zamba2", 54, l.attention_layers, l.ssm_layers));
  // The current style: layer_types (layers_block_type's alias) with the new names.
  std::string types;
  for (uint32_t i = 0; i < 54; ++i) {
    const bool h = std::find(hybrid.begin(), hybrid.end(), i) != hybrid.end();
    types += std::string(i ? ", " : "") + (h ? "\"hybrid\"" : "\"linear_attention\"");
  }
  const std::string current =
      R"({"model_type": "zamba2", "n_mamba_heads": 80, "layer_types": [)" + types + "]}";
  ExpectLayout(Convert(current), Expected("zamba2", 54, l.attention_layers, l.ssm_layers));
}

// ibm-ai-platform/Bamba-9B: attention at attn_layer_indices, Python's Infinity in
// time_step_limit.
constexpr char kBamba9B[] = R"json({
  "architectures": ["BambaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_layer_indices": [9, 18, 27], "attn_rotary_emb": 64, "bos_token_id": 0,
  "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "mamba_chunk_size": 256, "mamba_conv_bias": true,
  "mamba_d_conv": 4, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_expand": 2,
  "mamba_n_groups": 1, "mamba_n_heads": 128, "mamba_proj_bias": false,
  "max_position_embeddings": 262144, "model_type": "bamba", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "num_logits_to_keep": 1,
  "pad_token_id": 0, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "time_step_limit": [0.0, Infinity], "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.47.0", "use_cache": true, "use_mamba_kernels": true,
  "vocab_size": 128256})json";

TEST(LayoutFromHfTest, BambaTakesAttentionLayersFromTheIndexList) {
  // conv over x, B, C: 2 * 4096 + 2 * 1 * 128 = 8448.
  ExpectLayers(Convert(kBamba9B), 3, {{0, Kv(9, 8, 128)}, {2, Kv(27, 8, 128)}}, 29,
               {{9, Ssm(10, "mamba2", {8448, 4}, {128, 64, 128})}});
}

// tiiuae/Falcon-H1-0.5B-Base: every layer hybrid; head_dim and mamba_d_ssm given.
constexpr char kFalconH1_0_5B[] = R"json({
  "architectures": ["FalconH1ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attention_in_multiplier": 1.0, "attention_out_multiplier": 0.9375, "attn_layer_indices": null,
  "bos_token_id": 1, "embedding_multiplier": 5.656854249492381, "eos_token_id": 11,
  "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02,
  "intermediate_size": 2048, "key_multiplier": 0.390625, "lm_head_multiplier": 0.0390625,
  "mamba_chunk_size": 128, "mamba_conv_bias": true, "mamba_d_conv": 4, "mamba_d_head": 64,
  "mamba_d_ssm": 1536, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1,
  "mamba_n_heads": 24, "mamba_norm_before_gate": false, "mamba_proj_bias": false,
  "mamba_rms_norm": false, "mamba_use_mlp": true, "max_position_embeddings": 16384,
  "mlp_bias": false, "model_type": "falcon_h1", "num_attention_heads": 8,
  "num_hidden_layers": 36, "num_key_value_heads": 2, "num_logits_to_keep": 1,
  "pad_token_id": 0, "projectors_bias": false, "rms_norm_eps": 1e-05, "rope_theta": 100000000000.0,
  "time_step_limit": [0.0, Infinity], "torch_dtype": "bfloat16", "vocab_size": 32784})json";

TEST(LayoutFromHfTest, FalconH1RunsAttentionAndMamba2InEveryLayer) {
  // head_dim 64 (the key), not 1024 / 8; conv 1536 + 2 * 128.
  ExpectLayers(Convert(kFalconH1_0_5B), 36, {{35, Kv(35, 2, 64)}}, 36,
               {{35, Ssm(35, "mamba2", {1792, 4}, {24, 64, 128})}});
}

// ibm-granite/granite-4.0-h style: layer_types with the legacy names.
constexpr char kGranite4H[] = R"json({
  "architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": false,
  "hidden_size": 1536, "layer_types": ["mamba", "mamba", "mamba", "attention", "mamba", "mamba",
    "mamba", "mamba"], "mamba_chunk_size": 256, "mamba_conv_bias": true, "mamba_d_conv": 4,
  "mamba_d_head": 64, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1,
  "mamba_n_heads": 48, "model_type": "granitemoehybrid", "num_attention_heads": 12,
  "num_hidden_layers": 8, "num_key_value_heads": 4, "position_embedding_type": "nope",
  "time_step_limit": [0.0, Infinity], "vocab_size": 100352})json";

TEST(LayoutFromHfTest, GraniteMoeHybridMapsLegacyLayerNames) {
  const ModelLayout l = Convert(kGranite4H);
  ExpectLayers(l, 1, {{0, Kv(3, 4, 128)}}, 7, {{3, Ssm(4, "mamba2", {3328, 4}, {48, 64, 128})}});
  // The same with the current names, under layers_block_type (layer_types' alias).
  std::string current = kGranite4H;
  current.replace(current.find("\"layer_types\""), 13, "\"layers_block_type\"");
  for (size_t at; (at = current.find("\"mamba\"")) != std::string::npos;) {
    current.replace(at, 7, "\"linear_attention\"");
  }
  current.replace(current.find("\"attention\""), 11, "\"full_attention\"");
  EXPECT_TRUE(Convert(current) == l) << current;
}

// nvidia/Nemotron-H-8B-Base-8K: hybrid_override_pattern, attention_head_dim beside head_dim.
constexpr char kNemotronH8B[] = R"json({
  "architectures": ["NemotronHForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attention_head_dim": 128, "bos_token_id": 1, "chunk_size": 128, "conv_kernel": 4,
  "eos_token_id": 2, "expand": 2, "hidden_dropout": 0.0, "hidden_size": 4096,
  "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
  "initializer_range": 0.02, "intermediate_size": 21504, "layer_norm_epsilon": 1e-05,
  "mamba_head_dim": 64, "mamba_hidden_act": "silu", "mamba_num_heads": 128,
  "mamba_proj_bias": false, "max_position_embeddings": 8192, "mlp_bias": false,
  "mlp_hidden_act": "relu2", "model_type": "nemotron_h", "n_groups": 8,
  "num_attention_heads": 32, "num_hidden_layers": 52, "num_key_value_heads": 8,
  "num_logits_to_keep": 1, "pad_token_id": 0, "rescale_prenorm_residual": true,
  "residual_in_fp32": false, "sliding_window": null, "ssm_state_size": 128,
  "tie_word_embeddings": false, "time_step_floor": 0.0001, "time_step_limit": [0.0, Infinity],
  "time_step_max": 0.1, "time_step_min": 0.001, "torch_dtype": "bfloat16",
  "use_bias": false, "use_cache": true, "use_conv_bias": true, "use_mamba_kernels": true,
  "vocab_size": 131072})json";

TEST(LayoutFromHfTest, NemotronHReadsItsOverridePatternAndTheCurrentList) {
  const ModelLayout l = Convert(kNemotronH8B);
  EXPECT_EQ(l.num_layers, 52u);
  ExpectLayers(l, 4, {{0, Kv(7, 8, 128)}, {3, Kv(40, 8, 128)}}, 24,
               {{23, Ssm(50, "mamba2", {10240, 4}, {128, 64, 128})}});
  // layers_block_type wins over the pattern; num_hidden_layers is the list's length; the older
  // mamba_n_groups / mamba_d_conv names win over n_groups / conv_kernel.
  constexpr char kCurrent[] = R"json({"model_type": "nemotron_h", "num_hidden_layers": 99,
    "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp", "mamba"],
    "hybrid_override_pattern": "******", "n_groups": 4, "mamba_n_groups": 2, "conv_kernel": 3,
    "mamba_d_conv": 5, "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 8,
    "num_key_value_heads": 2, "head_dim": 32})json";
  ExpectLayout(Convert(kCurrent), Expected("nemotron_h", 5, {Kv(2, 2, 32)},
                                           {Ssm(0, "mamba2", {96, 5}, {4, 16, 8}),
                                            Ssm(4, "mamba2", {96, 5}, {4, 16, 8})}));
}

// Qwen/Qwen3-Next-80B-A3B-Instruct: full_attention_interval, or layer_types.
constexpr char kQwen3Next80B[] = R"json({
  "architectures": ["Qwen3NextForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
  "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 5120, "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
  "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [],
  "model_type": "qwen3_next", "moe_intermediate_size": 512, "norm_topk_prob": true,
  "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10,
  "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": false,
  "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 10000000, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})json";

TEST(LayoutFromHfTest, Qwen3NextPutsFullAttentionEveryIntervalOrWhereTheListSays) {
  ExpectLayers(Convert(kQwen3Next80B), 12, {{0, Kv(3, 2, 256)}, {11, Kv(47, 2, 256)}}, 36,
               {{35, Ssm(46, "gdn", {8192, 4}, {32, 128, 128})}});
  constexpr char kListed[] = R"json({"model_type": "qwen3_next", "num_hidden_layers": 3,
    "layer_types": ["full_attention", "linear_attention", "attention"],
    "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
    "linear_value_head_dim": 4})json";
  ExpectLayout(Convert(kListed), Expected("qwen3_next", 3, {Kv(0, 2, 256), Kv(2, 2, 256)},
                                          {Ssm(1, "gdn", {24, 4}, {2, 8, 4})}));
}

// LiquidAI/LFM2-1.2B style: layer_types beside full_attn_idxs; the older file has only the
// index list.
constexpr char kLfm2_1_2B[] = R"json({
  "architectures": ["Lfm2ForCausalLM"], "block_auto_adjust_ff_dim": true, "block_dim": 2048,
  "block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.0, "block_mlp_init_scale": 1.0,
  "block_multiple_of": 256, "block_norm_eps": 1e-05, "block_out_init_scale": 1.0,
  "block_use_swiglu": true, "block_use_xavier_init": true, "bos_token_id": 1, "conv_L_cache": 3,
  "conv_bias": false, "conv_dim": 2048, "conv_dim_out": 2048, "conv_use_xavier_init": true,
  "eos_token_id": 7, "full_attn_idxs": [2, 5, 8, 10, 12, 14], "hidden_size": 2048,
  "initializer_range": 0.02, "layer_types": ["conv", "conv", "full_attention", "conv", "conv",
    "full_attention", "conv", "conv", "full_attention", "conv", "full_attention", "conv",
    "full_attention", "conv", "full_attention", "conv"], "max_position_embeddings": 128000,
  "model_type": "lfm2", "norm_eps": 1e-05, "num_attention_heads": 32, "num_heads": 32,
  "num_hidden_layers": 16, "num_key_value_heads": 8, "pad_token_id": 0, "rope_theta": 1000000.0,
  "torch_dtype": "bfloat16", "use_cache": true, "use_pos_enc": true, "vocab_size": 65536})json";

TEST(LayoutFromHfTest, Lfm2ShortConvLayersKeepAConvStateOnly) {
  const ModelLayout l = Convert(kLfm2_1_2B);
  ExpectLayers(l, 6, {{0, Kv(2, 8, 64)}}, 10, {{9, Ssm(15, "shortconv", {2048, 3}, {})}});
  EXPECT_EQ(l.MambaSlotBytes(), 10u * 2048 * 3 * 2);
  std::string older = kLfm2_1_2B;
  const size_t from = older.find("\"layer_types\"");
  older.erase(from, older.find(']', from) + 2 - from);
  EXPECT_TRUE(Convert(older) == l) << older;
  // Neither: every layer is attention (Lfm2Config's full_attn_idxs default).
  constexpr char kNeither[] = R"json({"model_type": "lfm2", "num_hidden_layers": 2})json";
  ExpectLayout(Convert(kNeither), Expected("lfm2", 2, {Kv(0, 8, 80), Kv(1, 8, 80)}, {}));
}

// google/recurrentgemma-2b.
constexpr char kRecurrentGemma2B[] = R"json({
  "architectures": ["RecurrentGemmaForCausalLM"], "attention_bias": false,
  "attention_window_size": 2048, "block_types": ["recurrent", "recurrent", "attention"],
  "bos_token_id": 2, "conv1d_width": 4, "embeddings_scale_by_sqrt_dim": true,
  "eos_token_id": 1, "final_w_init_variance_scale": 0.07692307692307693, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2560, "intermediate_size": 15360,
  "logits_soft_cap": 30.0, "lru_width": 2560, "model_type": "recurrent_gemma",
  "num_attention_heads": 10, "num_hidden_layers": 26, "num_key_value_heads": 1,
  "pad_token_id": 0, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
  "torch_dtype": "float32", "vocab_size": 256000, "w_init_variance_scale": 0.01})json";

TEST(LayoutFromHfTest, RecurrentGemmaRepeatsItsBlockTypes) {
  ExpectLayers(Convert(kRecurrentGemma2B), 8, {{7, Kv(23, 1, 256, 2048)}}, 18,
               {{17, Ssm(25, "rglru", {2560, 3}, {2560})}});
}

// Gemma 3: the multimodal config (decoder under text_config, google/gemma-3-4b-it style) and
// gemma3_text, older (sliding_window_pattern) and current (layer_types).
constexpr char kGemma3_4B[] = R"json({
  "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
  "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
  "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
  "text_config": {"head_dim": 256, "hidden_size": 2560, "intermediate_size": 10240,
    "model_type": "gemma3_text", "num_attention_heads": 8, "num_hidden_layers": 34,
    "num_key_value_heads": 4, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "sliding_window": 1024},
  "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
  "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
    "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
    "patch_size": 14, "vision_use_head": false}})json";
constexpr char kGemma3_1B[] = R"json({
  "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
  "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
  "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
  "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
  "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
  "rope_local_base_freq": 10000, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
  "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})json";

TEST(LayoutFromHfTest, Gemma3SlidesFiveLayersOfSix) {
  const ModelLayout l4 = Convert(kGemma3_4B);
  ExpectLayers(l4, 34, {{4, Kv(4, 4, 256, 1024)}, {5, Kv(5, 4, 256)}, {33, Kv(33, 4, 256, 1024)}},
               0, {});
  EXPECT_EQ(l4.model, "gemma3");
  ExpectLayers(Convert(kGemma3_1B), 26, {{11, Kv(11, 1, 256)}, {12, Kv(12, 1, 256, 512)}}, 0, {});
  // layer_types over the pattern; use_bidirectional_attention halves the window.
  constexpr char kCurrent[] = R"json({"model_type": "gemma3_text", "num_hidden_layers": 3,
    "layer_types": ["full_attention", "sliding_attention", "full_attention"],
    "sliding_window": 512, "sliding_window_pattern": 2, "use_bidirectional_attention": true})json";
  ExpectLayout(Convert(kCurrent),
               Expected("gemma3_text", 3, {Kv(0, 4, 256), Kv(1, 4, 256, 257), Kv(2, 4, 256)}, {}));
}

// meta-llama/Llama-3.1-8B, and the Llama-like families' sliding windows.
constexpr char kLlama31_8B[] = R"json({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})json";
constexpr char kMistral7Bv01[] = R"json({"architectures": ["MistralForCausalLM"],
  "hidden_size": 4096, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 10000.0,
  "sliding_window": 4096, "torch_dtype": "bfloat16", "vocab_size": 32000})json";
constexpr char kQwen2_5_7B[] = R"json({"architectures": ["Qwen2ForCausalLM"],
  "hidden_size": 3584, "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
  "num_hidden_layers": 28, "num_key_value_heads": 4, "sliding_window": 131072,
  "use_sliding_window": false, "vocab_size": 152064})json";
constexpr char kQwen3_0_6B[] = R"json({"architectures": ["Qwen3ForCausalLM"], "head_dim": 128,
  "hidden_size": 1024, "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16,
  "num_hidden_layers": 28, "num_key_value_heads": 8, "sliding_window": null,
  "use_sliding_window": false, "vocab_size": 151936})json";

TEST(LayoutFromHfTest, AttentionOnlyFamiliesAndTheirWindows) {
  ExpectLayers(Convert(kLlama31_8B), 32, {{31, Kv(31, 8, 128)}}, 0, {});
  // Mistral v0.1 slides every layer (sliding_window 4096); v0.3's null window is full.
  ExpectLayers(Convert(kMistral7Bv01), 32, {{0, Kv(0, 8, 128, 4096)}}, 0, {});
  std::string v03 = kMistral7Bv01;
  v03.replace(v03.find("4096, \"torch"), 4, "null");
  EXPECT_TRUE(Convert(v03).attention_layers[0] == Kv(0, 8, 128)) << v03;
  // MistralConfig's own default window when the key is absent.
  constexpr char kMistralDefaults[] =
      R"json({"model_type": "mistral", "num_hidden_layers": 1})json";
  ExpectLayout(Convert(kMistralDefaults), Expected("mistral", 1, {Kv(0, 8, 128, 4096)}, {}));
  // Qwen2.5: head_dim 3584 / 28; the window is off (use_sliding_window false).
  ExpectLayers(Convert(kQwen2_5_7B), 28, {{27, Kv(27, 4, 128)}}, 0, {});
  constexpr char kQwen2Sliding[] = R"json({"model_type": "qwen2", "num_hidden_layers": 4,
    "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
    "use_sliding_window": true, "sliding_window": 64, "max_window_layers": 2})json";
  ExpectLayout(
      Convert(kQwen2Sliding),
      Expected("qwen2", 4, {Kv(0, 2, 64), Kv(1, 2, 64), Kv(2, 2, 64, 64), Kv(3, 2, 64, 64)}, {}));
  // Qwen3: head_dim 128 (a field), not 1024 / 16.
  ExpectLayers(Convert(kQwen3_0_6B), 28, {{0, Kv(0, 8, 128)}}, 0, {});
  // A Llama config that sets a window slides every layer, as DynamicCache does.
  constexpr char kLlamaWindow[] = R"json({"model_type": "llama", "num_hidden_layers": 2,
    "hidden_size": 256, "num_attention_heads": 4, "sliding_window": 128})json";
  ExpectLayout(Convert(kLlamaWindow),
               Expected("llama", 2, {Kv(0, 4, 64, 128), Kv(1, 4, 64, 128)}, {}));
}

// state-spaces/mamba-130m-hf.
constexpr char kMamba130M[] = R"json({"architectures": ["MambaForCausalLM"],
  "bos_token_id": 0, "conv_kernel": 4, "eos_token_id": 0, "expand": 2, "hidden_act": "silu",
  "hidden_size": 768, "initializer_range": 0.1, "intermediate_size": 1536,
  "layer_norm_epsilon": 1e-05, "model_type": "mamba", "n_layer": 24, "num_hidden_layers": 24,
  "pad_token_id": 0, "rescale_prenorm_residual": false, "residual_in_fp32": true,
  "state_size": 16, "time_step_floor": 0.0001, "time_step_init_scheme": "random",
  "time_step_max": 0.1, "time_step_min": 0.001, "time_step_rank": 48, "time_step_scale": 1.0,
  "torch_dtype": "float32", "use_bias": false, "use_cache": true, "use_conv_bias": true,
  "vocab_size": 50280})json";

TEST(LayoutFromHfTest, MambaOneKeepsAConvAndAStateRowPerChannel) {
  ExpectLayers(Convert(kMamba130M), 0, {}, 24, {{23, Ssm(23, "mamba1", {1536, 4}, {1536, 16})}});
}

}  // namespace
}  // namespace cachepawl::hf_test
