// Every preset validates, has the layer counts of its upstream config, and its sizes equal the
// hand calculation in docs/MODELS.md (page size 16). Record segments tile each record.
#include "layouts/layout_presets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "vocab/model_layout.h"

namespace cachepawl {
namespace {

struct Expected {
  size_t attention_layers;
  size_t ssm_layers;
  uint64_t kv_page_bytes;     // page size 16, docs/MODELS.md
  uint64_t mamba_slot_bytes;  // docs/MODELS.md
};

// The numbers of docs/MODELS.md's summary table, worked out by hand there.
const std::map<std::string, Expected>& DocTable() {
  static const auto* table = new std::map<std::string, Expected>{
      {"deepseek-v3", {61, 0, 1124352, 0}},
      {"falcon-h1-0.5b", {36, 36, 294912, 28698624}},
      {"gpt-oss-120b", {36, 0, 1179648, 0}},
      {"hymba-1.5b", {17, 32, 348160, 7168000}},
      {"jamba-v0.1", {4, 28, 262144, 16056320}},
      {"kimi-linear-48b-a3b", {7, 20, 129024, 43417600}},
      {"llama-3.1-8b", {32, 0, 2097152, 0}},
      {"mamba2-2.7b", {0, 64, 0, 169836544}},
      {"minimax-m1", {10, 70, 655360, 146800640}},
      {"nemotron-h-8b", {4, 24, 262144, 102137856}},
      {"qwen3-next-80b-a3b", {12, 36, 393216, 77266944}},
      {"qwen3.5-122b-a10b", {12, 36, 393216, 153649152}},
      {"recurrentgemma-2b", {8, 18, 131072, 460800}},
      {"samba-1.3b", {9, 9, 1327104, 2903040}},
      {"zamba2-2.7b", {9, 54, 2949120, 72479232}},
  };
  return *table;
}

ModelLayout Preset(const std::string& name, uint32_t page_size = 16) {
  auto l = LayoutPreset(name, page_size);
  EXPECT_TRUE(l.ok()) << name << ": " << l.status().ToString();
  return l.ok() ? *l : ModelLayout{};
}

TEST(LayoutPresetsTest, NamesAreSortedLowerCaseAndTheDocumentedSet) {
  auto names = LayoutPresetNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  ASSERT_EQ(names.size(), DocTable().size());
  for (const std::string& n : names) {
    EXPECT_EQ(DocTable().count(n), 1u) << n << " has no row in docs/MODELS.md";
    for (char c : n) {
      EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.') << n;
    }
  }
}

TEST(LayoutPresetsTest, EveryPresetValidatesAndMatchesTheHandCalculation) {
  for (const auto& [name, want] : DocTable()) {
    SCOPED_TRACE(name);
    ModelLayout l = Preset(name);
    ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
    EXPECT_EQ(l.page_size_tokens, 16u);
    EXPECT_EQ(l.tp_rank, 0u);
    EXPECT_EQ(l.tp_size, 1u);
    EXPECT_FALSE(l.model.empty());
    EXPECT_EQ(l.attention_layers.size(), want.attention_layers);
    EXPECT_EQ(l.ssm_layers.size(), want.ssm_layers);
    EXPECT_EQ(l.KvPageBytes(), want.kv_page_bytes);
    EXPECT_EQ(l.MambaSlotBytes(), want.mamba_slot_bytes);
  }
}

TEST(LayoutPresetsTest, SegmentsTileEveryRecordExactly) {
  for (const std::string& name : LayoutPresetNames()) {
    SCOPED_TRACE(name);
    ModelLayout l = Preset(name);
    uint64_t end = 0;
    for (size_t a = 0; a < l.attention_layers.size(); ++a) {
      RecordSegment k = l.KSegment(a);
      RecordSegment v = l.VSegment(a);
      EXPECT_EQ(k.offset, end);
      EXPECT_GT(k.bytes, 0u);
      EXPECT_EQ(k.bytes, l.KBytesPerPage(a));
      EXPECT_EQ(v.offset, k.offset + k.bytes);
      EXPECT_EQ(v.bytes, l.attention_layers[a].mla ? 0 : k.bytes);  // an MLA latent has no V
      end = v.offset + v.bytes;
    }
    EXPECT_EQ(end, l.KvPageBytes());
    end = 0;
    for (size_t s = 0; s < l.ssm_layers.size(); ++s) {
      RecordSegment conv = l.ConvSegment(s);
      RecordSegment ssm = l.SsmSegment(s);
      EXPECT_EQ(conv.offset, end);
      EXPECT_EQ(conv.bytes, l.ConvStateBytes(s));
      EXPECT_EQ(conv.bytes > 0, l.ssm_layers[s].block != "lightning");  // lightning: no conv
      EXPECT_EQ(ssm.offset, conv.offset + conv.bytes);
      EXPECT_EQ(ssm.bytes, l.SsmStateBytes(s));
      EXPECT_GT(ssm.bytes, 0u);
      end = ssm.offset + ssm.bytes;
    }
    EXPECT_EQ(end, l.MambaSlotBytes());
  }
}

TEST(LayoutPresetsTest, PageSizeScalesKvOnly) {
  for (const std::string& name : LayoutPresetNames()) {
    SCOPED_TRACE(name);
    ModelLayout p16 = Preset(name, 16);
    ModelLayout p64 = Preset(name, 64);
    EXPECT_EQ(p64.page_size_tokens, 64u);
    EXPECT_EQ(p64.KvPageBytes(), 4 * p16.KvPageBytes());
    EXPECT_EQ(p64.MambaSlotBytes(), p16.MambaSlotBytes());
    EXPECT_NE(p64.FingerprintHex(), p16.FingerprintHex());
  }
}

TEST(LayoutPresetsTest, PresetsAreDeterministicAndDistinct) {
  std::map<std::string, std::string> by_fingerprint;
  for (const std::string& name : LayoutPresetNames()) {
    EXPECT_TRUE(Preset(name) == Preset(name)) << name;
    auto [it, fresh] = by_fingerprint.emplace(Preset(name).FingerprintHex(), name);
    EXPECT_TRUE(fresh) << name << " has the fingerprint of " << it->second;
  }
}

TEST(LayoutPresetsTest, UnknownPresetAndPageSizeZeroAreClearErrors) {
  auto unknown = LayoutPreset("jamba-v9");
  ASSERT_TRUE(unknown.status().IsNotFound());
  EXPECT_NE(unknown.status().message().find("'jamba-v9'"), std::string::npos);
  auto zero = LayoutPreset("jamba-v0.1", 0);
  ASSERT_TRUE(zero.status().IsInvalidArgument());
  EXPECT_NE(zero.status().message().find("preset jamba-v0.1: page_size_tokens: 0"),
            std::string::npos)
      << zero.status().message();
}

// Spot checks of the layer placement each config describes (docs/MODELS.md).
TEST(LayoutPresetsTest, LayerPlacementFollowsTheConfigs) {
  auto attention_indices = [](const ModelLayout& l) {
    std::vector<uint32_t> v;
    for (const auto& a : l.attention_layers) v.push_back(a.layer_index);
    return v;
  };
  EXPECT_EQ(attention_indices(Preset("jamba-v0.1")), (std::vector<uint32_t>{4, 12, 20, 28}));
  EXPECT_EQ(attention_indices(Preset("nemotron-h-8b")), (std::vector<uint32_t>{7, 18, 29, 40}));
  EXPECT_EQ(attention_indices(Preset("zamba2-2.7b")),
            (std::vector<uint32_t>{6, 12, 18, 24, 30, 36, 42, 47, 51}));
  EXPECT_EQ(attention_indices(Preset("recurrentgemma-2b")),
            (std::vector<uint32_t>{2, 5, 8, 11, 14, 17, 20, 23}));
  EXPECT_EQ(attention_indices(Preset("qwen3-next-80b-a3b")).back(), 47u);

  ModelLayout hymba = Preset("hymba-1.5b");
  for (const auto& a : hymba.attention_layers) {
    bool global = a.layer_index == 0 || a.layer_index == 15 || a.layer_index == 31;
    EXPECT_EQ(a.sliding_window, global ? 0u : 1024u) << a.layer_index;
  }
  for (const auto& a : Preset("samba-1.3b").attention_layers) {
    EXPECT_EQ(a.layer_index % 2, 1u);
    EXPECT_EQ(a.sliding_window, 2048u);
  }
  for (const auto& s : Preset("recurrentgemma-2b").ssm_layers) EXPECT_EQ(s.block, "rglru");
  for (const auto& s : Preset("qwen3-next-80b-a3b").ssm_layers) EXPECT_EQ(s.block, "gdn");
  for (const auto& s : Preset("jamba-v0.1").ssm_layers) EXPECT_EQ(s.block, "mamba1");
  for (const auto& s : Preset("nemotron-h-8b").ssm_layers) EXPECT_EQ(s.block, "mamba2");
}

}  // namespace
}  // namespace cachepawl
