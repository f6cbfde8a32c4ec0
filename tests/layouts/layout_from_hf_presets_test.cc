// The built-in presets against the configs of their models: with the SGLang convention (the
// presets' conv width d_conv - 1) and the preset's model name, LayoutFromHfConfig of a config
// with the upstream model's numbers (docs/MODELS.md cites each) gives exactly LayoutPreset(name),
// fingerprint included.
#include <gtest/gtest.h>

#include <string>

#include "layouts/layout_from_hf.h"
#include "layouts/layout_presets.h"
#include "tests/layouts/layout_from_hf_test_util.h"

namespace cachepawl::hf_test {
namespace {

// meta-llama/Llama-3.1-8B's config.json (the keys the layout reads).
constexpr char kPresetLlama31_8B[] = R"json({"model_type": "llama", "hidden_size": 4096,
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "head_dim": 128, "rope_theta": 500000.0, "vocab_size": 128256})json";

// state-spaces/mamba2-2.7b is a mamba_ssm checkpoint (d_model 2560, n_layer 64, Mamba2 module
// defaults); this is its transformers Mamba2Config equivalent.
constexpr char kPresetMamba2_2_7B[] = R"json({"model_type": "mamba2", "hidden_size": 2560,
  "num_heads": 80, "head_dim": 64, "state_size": 128, "n_groups": 1, "conv_kernel": 4,
  "expand": 2, "num_hidden_layers": 64, "vocab_size": 50288})json";

// ai21labs/Jamba-v0.1 (attn_layer_period / attn_layer_offset).
constexpr char kPresetJambaV01[] = R"json({"model_type": "jamba", "attn_layer_offset": 4,
  "attn_layer_period": 8, "expert_layer_offset": 1, "expert_layer_period": 2,
  "hidden_size": 4096, "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_expand": 2,
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "sliding_window": null, "vocab_size": 65536})json";

// Zyphra/Zamba2-2.7B (hybrid_layer_ids; layers_block_type left to Zamba2Config's default, which
// is this model's).
constexpr char kPresetZamba2_2_7B[] = R"json({"model_type": "zamba2", "hidden_size": 2560,
  "hybrid_layer_ids": [6, 12, 18, 24, 30, 36, 42, 47, 51], "mamba_d_conv": 4,
  "mamba_d_state": 64, "mamba_expand": 2, "mamba_headdim": 64, "mamba_ngroups": 1,
  "n_mamba_heads": 80, "num_attention_heads": 32, "num_hidden_layers": 54,
  "num_key_value_heads": 32, "attention_head_dim": 160})json";

// nvidia/Nemotron-H-8B-Base-8K (hybrid_override_pattern).
constexpr char kPresetNemotronH8B[] = R"json({"model_type": "nemotron_h",
  "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
  "attention_head_dim": 128, "conv_kernel": 4, "hidden_size": 4096, "mamba_head_dim": 64,
  "mamba_num_heads": 128, "n_groups": 8, "num_attention_heads": 32, "num_hidden_layers": 52,
  "num_key_value_heads": 8, "ssm_state_size": 128, "time_step_limit": [0.0, Infinity]})json";

// Qwen/Qwen3-Next-80B-A3B-Instruct (full_attention_interval).
constexpr char kPresetQwen3Next80B[] = R"json({"model_type": "qwen3_next",
  "full_attention_interval": 4, "head_dim": 256, "hidden_size": 2048,
  "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
  "linear_num_value_heads": 32, "linear_value_head_dim": 128, "num_attention_heads": 16,
  "num_hidden_layers": 48, "num_key_value_heads": 2})json";

// tiiuae/Falcon-H1-0.5B-Base.
constexpr char kPresetFalconH1_0_5B[] = R"json({"model_type": "falcon_h1", "head_dim": 64,
  "hidden_size": 1024, "mamba_d_conv": 4, "mamba_d_head": 64, "mamba_d_ssm": 1536,
  "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 24,
  "num_attention_heads": 8, "num_hidden_layers": 36, "num_key_value_heads": 2})json";

// google/recurrentgemma-2b.
constexpr char kPresetRecurrentGemma2B[] = R"json({"model_type": "recurrent_gemma",
  "attention_window_size": 2048, "block_types": ["recurrent", "recurrent", "attention"],
  "conv1d_width": 4, "head_dim": 256, "hidden_size": 2560, "lru_width": 2560,
  "num_attention_heads": 10, "num_hidden_layers": 26, "num_key_value_heads": 1})json";

// openai/gpt-oss-120b (its config.json's cache keys; the MoE and rope keys left out).
constexpr char kPresetGptOss120B[] = R"json({"architectures": ["GptOssForCausalLM"],
  "model_type": "gpt_oss", "head_dim": 64, "hidden_size": 2880, "num_attention_heads": 64,
  "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
  "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention",
  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
  "sliding_attention", "full_attention"]})json";

// deepseek-ai/DeepSeek-V3 (its config.json's cache keys; the MoE, rope and quantization keys
// left out).
constexpr char kPresetDeepseekV3[] = R"json({"architectures": ["DeepseekV3ForCausalLM"],
  "model_type": "deepseek_v3", "hidden_size": 7168, "kv_lora_rank": 512,
  "num_attention_heads": 128, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64, "v_head_dim": 128})json";

// moonshotai/Kimi-Linear-48B-A3B-Instruct (its config.json's cache keys, as the hub's file has
// them: the first 60 lines read first-hand, num_hidden_layers, num_*_heads and qk_*_head_dim from
// a quantized re-upload's full copy, Firworks/Kimi-Linear-48B-A3B-Instruct-nvfp4; docs/MODELS.md).
constexpr char kPresetKimiLinear48B[] = R"json({"model_type": "kimi_linear", "dtype": "bfloat16",
  "head_dim": 72, "hidden_size": 2304, "kv_lora_rank": 512, "linear_attn_config": {
  "full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128, "kda_layers": [1, 2, 3, 5, 6,
  7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26], "num_heads": 32,
  "short_conv_kernel_size": 4}, "mla_use_nope": true, "num_attention_heads": 32,
  "num_hidden_layers": 27, "num_key_value_heads": 32, "q_lora_rank": null,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64})json";

// MiniMax-M1 (config.json of github.com/MiniMax-AI/MiniMax-M1 at 2abb4f4; its cache keys, with
// attn_type_list whole: 1 softmax attention, 0 lightning).
constexpr char kPresetMiniMaxM1[] = R"json({"model_type": "minimax_m1", "head_dim": 128,
  "hidden_size": 6144, "num_attention_heads": 64, "num_hidden_layers": 80,
  "num_key_value_heads": 8, "rotary_dim": 64, "sliding_window": null, "attn_type_list": [
  0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1,
  0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
  1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]})json";

// Qwen/Qwen3.5-122B-A10B (config.json as github.com/alibaba/InferSim keeps it,
// hf_configs/qwen3.5-122B-A10B_config.json at f2293da; its text_config's cache keys).
constexpr char kPresetQwen35_122B[] = R"json({"model_type": "qwen3_5_moe", "text_config": {
  "model_type": "qwen3_5_moe_text", "dtype": "bfloat16", "full_attention_interval": 4,
  "head_dim": 256, "hidden_size": 3072, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
  "linear_num_key_heads": 16, "linear_num_value_heads": 64, "linear_value_head_dim": 128,
  "mamba_ssm_dtype": "float32", "num_attention_heads": 32, "num_hidden_layers": 48,
  "num_key_value_heads": 2, "layer_types": [
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention",
  "linear_attention", "linear_attention", "linear_attention", "full_attention"]}})json";

struct PresetCase {
  const char* preset;
  const char* config;
};

TEST(LayoutFromHfPresetsTest, EveryPresetWithAConfigIsWhatItsConfigGives) {
  const PresetCase cases[] = {
      {"llama-3.1-8b", kPresetLlama31_8B},
      {"mamba2-2.7b", kPresetMamba2_2_7B},
      {"jamba-v0.1", kPresetJambaV01},
      {"zamba2-2.7b", kPresetZamba2_2_7B},
      {"nemotron-h-8b", kPresetNemotronH8B},
      {"qwen3-next-80b-a3b", kPresetQwen3Next80B},
      {"falcon-h1-0.5b", kPresetFalconH1_0_5B},
      {"recurrentgemma-2b", kPresetRecurrentGemma2B},
      {"gpt-oss-120b", kPresetGptOss120B},
      {"deepseek-v3", kPresetDeepseekV3},
      {"kimi-linear-48b-a3b", kPresetKimiLinear48B},
      {"minimax-m1", kPresetMiniMaxM1},
      {"qwen3.5-122b-a10b", kPresetQwen35_122B},
  };
  for (const PresetCase& c : cases) {
    SCOPED_TRACE(c.preset);
    auto preset = LayoutPreset(c.preset);
    ASSERT_TRUE(preset.ok()) << preset.status().ToString();
    const ModelLayout got = Convert(c.config, Options(StateConvention::kSglang, preset->model));
    ExpectLayout(got, *preset);
    EXPECT_EQ(got.FingerprintHex(), preset->FingerprintHex());
  }
}

TEST(LayoutFromHfPresetsTest, TheTransformersConventionDiffersOnlyInTheConvWidth) {
  for (const auto& [preset_name, config] :
       {std::pair{"jamba-v0.1", kPresetJambaV01}, std::pair{"zamba2-2.7b", kPresetZamba2_2_7B}}) {
    SCOPED_TRACE(preset_name);
    ModelLayout want = *LayoutPreset(preset_name);
    for (SsmLayerSpec& s : want.ssm_layers) s.conv_shape[1] += 1;  // d_conv, not d_conv - 1
    ExpectLayout(Convert(config, Options(StateConvention::kTransformers, want.model)), want);
  }
}

}  // namespace
}  // namespace cachepawl::hf_test
