// Shared by the LayoutFromHfConfig tests (tests/vocab/layout_from_hf*_test.cc): expected
// layouts written layer by layer, and a comparison that prints both layouts as JSON when they
// differ.
//
// The configs of the tests are JSON text in `constexpr char kName[] = R"json(...)json";`
// constants, one per config, so that a script can run the same configs through transformers.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "layouts/layout_from_hf.h"
#include "vocab/model_layout.h"

namespace cachepawl::hf_test {

// K/V of `kv_heads` x `head_dim`, bf16 (the default cache dtype).
inline AttentionLayerSpec Kv(uint32_t index, uint32_t kv_heads, uint32_t head_dim,
                             uint32_t window = 0) {
  return {index, kv_heads, head_dim, DType::kBf16, window};
}

// A recurrent layer with a bf16 conv state and an fp32 state (the default dtypes).
inline SsmLayerSpec Ssm(uint32_t index, const char* block, std::vector<uint64_t> conv,
                        std::vector<uint64_t> state) {
  return {index, block, std::move(conv), DType::kBf16, std::move(state), DType::kFp32};
}

inline ModelLayout Expected(std::string model, uint32_t num_layers,
                            std::vector<AttentionLayerSpec> attention,
                            std::vector<SsmLayerSpec> ssm) {
  ModelLayout l;
  l.model = std::move(model);
  l.num_layers = num_layers;
  l.attention_layers = std::move(attention);
  l.ssm_layers = std::move(ssm);
  return l;
}

inline HfLayoutOptions Options(StateConvention convention = StateConvention::kTransformers,
                               std::string model = "") {
  HfLayoutOptions o;
  o.convention = convention;
  o.model = std::move(model);
  return o;
}

// The layout of `config` (expected to convert), or an empty layout after a test failure.
inline ModelLayout Convert(std::string_view config, const HfLayoutOptions& options = Options()) {
  auto l = LayoutFromHfConfig(config, options);
  EXPECT_TRUE(l.ok()) << l.status().ToString() << "\n" << config;
  return l.ok() ? *l : ModelLayout{};
}

// Equal layouts, compared as their JSON form so that a failure shows both.
inline void ExpectLayout(const ModelLayout& got, const ModelLayout& want) {
  EXPECT_EQ(LayoutToJson(got), LayoutToJson(want));
  EXPECT_TRUE(got == want);
}

// Spot checks of a large layout: its counts of attention and SSM layers, and some of them, by
// position in their list.
inline void ExpectLayers(const ModelLayout& got, size_t num_attention,
                         const std::vector<std::pair<size_t, AttentionLayerSpec>>& attention,
                         size_t num_ssm, const std::vector<std::pair<size_t, SsmLayerSpec>>& ssm) {
  ASSERT_EQ(got.attention_layers.size(), num_attention) << LayoutToJson(got);
  ASSERT_EQ(got.ssm_layers.size(), num_ssm) << LayoutToJson(got);
  for (const auto& [at, want] : attention) {
    EXPECT_TRUE(got.attention_layers.at(at) == want) << "attention layer " << at;
  }
  for (const auto& [at, want] : ssm)
    EXPECT_TRUE(got.ssm_layers.at(at) == want) << "ssm layer " << at;
}

// InvalidArgument whose message contains every one of `parts`.
inline void ExpectInvalid(std::string_view config, const std::vector<std::string>& parts,
                          const HfLayoutOptions& options = Options()) {
  auto l = LayoutFromHfConfig(config, options);
  ASSERT_TRUE(l.status().IsInvalidArgument()) << l.status().ToString() << "\n" << config;
  for (const std::string& p : parts) {
    EXPECT_NE(l.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << l.status().message();
  }
}

}  // namespace cachepawl::hf_test
