// ShardLayout (layouts/layout_tp.h): every block's per-rank shapes equal what vLLM's
// MambaStateShapeCalculator and attention layers compute from the model's config numbers
// (worked out here from those numbers, not from the code under test); ranks of an unreplicated
// split add up to the whole; impossible splits are refused naming the field.
#include "layouts/layout_tp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "layouts/layout_presets.h"
#include "tests/layouts/layout_from_hf_test_util.h"

namespace cachepawl {
namespace {

using hf_test::Expected;
using hf_test::Kv;
using hf_test::Ssm;

ModelLayout Preset(const std::string& name) {
  auto l = LayoutPreset(name, 16);
  EXPECT_TRUE(l.ok()) << name << ": " << l.status().ToString();
  return l.ok() ? *l : ModelLayout{};
}

ModelLayout Rank(const ModelLayout& whole, uint32_t n, uint32_t r) {
  auto l = ShardLayout(whole, n, r);
  EXPECT_TRUE(l.ok()) << whole.model << " tp " << n << " rank " << r << ": "
                      << l.status().ToString();
  return l.ok() ? *l : ModelLayout{};
}

void ExpectRefused(const ModelLayout& whole, uint32_t n, uint32_t r,
                   const std::vector<std::string>& parts) {
  auto l = ShardLayout(whole, n, r);
  ASSERT_TRUE(l.status().IsInvalidArgument()) << l.status().ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(l.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << l.status().message();
  }
}

TEST(LayoutTpTest, OneRankIsTheWholeLayout) {
  const ModelLayout whole = Preset("jamba-v0.1");
  const ModelLayout one = Rank(whole, 1, 0);
  EXPECT_TRUE(one == whole);
}

TEST(LayoutTpTest, Mamba1ChannelsAndAttentionHeadsSplitEvenly) {
  // Jamba v0.1: intermediate 8192 (= mamba_expand 2 x hidden 4096), d_state 16, d_conv 4
  // (SGLang's width 3), 8 KV heads of 128. vLLM mamba1_state_shape: conv (8192 / N, 3), state
  // (8192 / N, 16); attention: 8 / N heads.
  const ModelLayout whole = Preset("jamba-v0.1");
  for (uint32_t n : {2u, 4u, 8u}) {
    for (uint32_t r = 0; r < n; ++r) {
      const ModelLayout rank = Rank(whole, n, r);
      EXPECT_EQ(rank.tp_size, n);
      EXPECT_EQ(rank.tp_rank, r);
      ASSERT_EQ(rank.ssm_layers.size(), whole.ssm_layers.size());
      EXPECT_EQ(rank.ssm_layers[0].conv_shape, (std::vector<uint64_t>{8192 / n, 3}));
      EXPECT_EQ(rank.ssm_layers[0].ssm_shape, (std::vector<uint64_t>{8192 / n, 16}));
      EXPECT_EQ(rank.attention_layers[0].num_kv_heads, 8 / n);
      // Nothing is replicated: the ranks hold the whole between them.
      EXPECT_EQ(n * rank.KvPageBytes(), whole.KvPageBytes());
      EXPECT_EQ(n * rank.MambaSlotBytes(), whole.MambaSlotBytes());
      EXPECT_EQ(rank.num_layers, whole.num_layers);
      EXPECT_EQ(rank.model, whole.model);
    }
  }
  // Every rank's fingerprint differs: a rank's records are not another's.
  EXPECT_NE(Rank(whole, 2, 0).FingerprintHex(), Rank(whole, 2, 1).FingerprintHex());
}

TEST(LayoutTpTest, Mamba2GroupsSplitOrAreReplicatedAsVllmDoes) {
  // Nemotron-H 8B: 128 heads of 64, n_groups 8, d_state 128. vLLM: n_groups % N == 0, conv
  // ((8192 + 2 * 8 * 128) / N, 3), state (128 / N, 64, 128).
  const ModelLayout nemotron = Preset("nemotron-h-8b");
  for (uint32_t n : {2u, 4u, 8u}) {
    const ModelLayout rank = Rank(nemotron, n, n - 1);
    EXPECT_EQ(rank.ssm_layers[0].conv_shape, (std::vector<uint64_t>{(8192 + 2048) / n, 3}));
    EXPECT_EQ(rank.ssm_layers[0].ssm_shape, (std::vector<uint64_t>{128 / n, 64, 128}));
  }
  // 16 ranks: 8 groups neither split 16 ways nor are a single group.
  ExpectRefused(nemotron, 16, 0, {"ssm_layers[0] n_groups: 8", "tp_size 16", "single group"});

  // Mamba2 2.7B: 80 heads of 64, one group, d_state 128. vLLM replicates the group
  // (extra_groups_for_head_shards: n_groups becomes N): conv ((5120 + 2 * N * 128) / N, 3).
  const ModelLayout mamba2 = Preset("mamba2-2.7b");
  for (uint32_t n : {2u, 4u, 8u, 16u}) {
    const ModelLayout rank = Rank(mamba2, n, 0);
    EXPECT_EQ(rank.ssm_layers[0].conv_shape, (std::vector<uint64_t>{(5120 + 2 * n * 128) / n, 3}))
        << n;
    EXPECT_EQ(rank.ssm_layers[0].ssm_shape, (std::vector<uint64_t>{80 / n, 64, 128})) << n;
  }
  ExpectRefused(mamba2, 32, 0, {"ssm_layers[0].ssm_shape[0] (heads): 80", "tp_size 32"});
}

TEST(LayoutTpTest, GatedDeltaNetHeadsSplitAndFewKvHeadsAreReplicated) {
  // Qwen3-Next 80B: 16 key heads and 32 value heads of 128; 2 KV heads of 256. vLLM
  // gated_delta_net_state_shape: conv ((2 * 16 * 128 + 32 * 128) / N, 3), state (32 / N, 128,
  // 128); attention: 2 / N heads, or 1 (replicated) when N > 2.
  const ModelLayout whole = Preset("qwen3-next-80b-a3b");
  for (uint32_t n : {2u, 4u, 8u, 16u}) {
    const ModelLayout rank = Rank(whole, n, n / 2);
    EXPECT_EQ(rank.ssm_layers[0].block, "gdn");
    EXPECT_EQ(rank.ssm_layers[0].conv_shape, (std::vector<uint64_t>{8192 / n, 3})) << n;
    EXPECT_EQ(rank.ssm_layers[0].ssm_shape, (std::vector<uint64_t>{32 / n, 128, 128})) << n;
    EXPECT_EQ(rank.attention_layers[0].num_kv_heads, 1u) << n;
    EXPECT_EQ(rank.KvPageBytes(), whole.KvPageBytes() / 2) << "one of the 2 heads on every rank";
    // vLLM's num_kv_head_replicas = N / 2; rank r holds head r / (N / 2). A group store keeps
    // the 2 heads once each; every rank its own state.
    EXPECT_EQ(rank.attention_layers[0].tp_replicas, n / 2) << n;
    EXPECT_EQ(rank.TpShares(Kind::kKV), 2u) << n;
    EXPECT_EQ(rank.TpShares(Kind::kMamba), n) << n;
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_EQ(rank.TpShareOf(Kind::kKV, r), r / (n / 2)) << n << " " << r;
      EXPECT_EQ(rank.TpShareOf(Kind::kMamba, r), r) << n << " " << r;
    }
    auto group = GroupLayout(rank);
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    EXPECT_EQ(group->RecordBytes(Kind::kKV), whole.RecordBytes(Kind::kKV)) << "both heads, once";
    EXPECT_EQ(group->RecordBytes(Kind::kMamba), whole.RecordBytes(Kind::kMamba)) << n;
  }
  const ModelLayout two = Rank(whole, 2, 1);  // one head per rank: nothing is replicated
  EXPECT_EQ(two.attention_layers[0].tp_replicas, 1u);
  EXPECT_EQ(two.TpShares(Kind::kKV), 2u);
  EXPECT_EQ(two.TpShareOf(Kind::kKV, 1), 1u);
  ExpectRefused(whole, 32, 0, {"ssm_layers[0] k_heads: 16", "tp_size 32"});
}

TEST(LayoutTpTest, RecurrentAndShortConvChannelsSplit) {
  // RecurrentGemma 2B: lru_width 2560, one KV head (replicated on every rank).
  const ModelLayout rg = Preset("recurrentgemma-2b");
  const ModelLayout rank = Rank(rg, 4, 3);
  EXPECT_EQ(rank.ssm_layers[0].conv_shape[0], 640u);
  EXPECT_EQ(rank.ssm_layers[0].ssm_shape, (std::vector<uint64_t>{640}));
  EXPECT_EQ(rank.attention_layers[0].num_kv_heads, 1u);
  // Its one windowed KV head is the same on every rank: one share of the windowed KV.
  EXPECT_EQ(rank.attention_layers[0].tp_replicas, 4u);
  EXPECT_EQ(rank.TpShares(Kind::kWindowKV), 1u);
  EXPECT_EQ(rank.TpShareOf(Kind::kWindowKV, 3), 0u);
  EXPECT_EQ(GroupLayout(rank)->RecordBytes(Kind::kWindowKV), rank.RecordBytes(Kind::kWindowKV));
  EXPECT_EQ(GroupLayout(rank)->RecordBytes(Kind::kMamba), 4 * rank.RecordBytes(Kind::kMamba));
  ExpectRefused(rg, 3, 0, {"ssm_layers[0].conv_shape[0] (lru_width): 2560", "tp_size 3"});

  // LFM2-style short convolution: conv [hidden, W], no state.
  const ModelLayout lfm = Expected("lfm", 2, {Kv(1, 12, 64)}, {Ssm(0, "shortconv", {1024, 2}, {})});
  const ModelLayout lfm_rank = Rank(lfm, 4, 1);
  EXPECT_EQ(lfm_rank.ssm_layers[0].conv_shape, (std::vector<uint64_t>{256, 2}));
  EXPECT_TRUE(lfm_rank.ssm_layers[0].ssm_shape.empty());
  ExpectRefused(lfm, 3, 0, {"ssm_layers[0].conv_shape[0] (channels): 1024"});
}

TEST(LayoutTpTest, ImpossibleSplitsAndBadArgumentsNameTheField) {
  const ModelLayout samba = Preset("samba-1.3b");  // 18 KV heads
  ExpectRefused(samba, 4, 0,
                {"attention_layers[0].num_kv_heads: 18",
                 "tp_size 4 neither divides it nor is a multiple of it"});
  const ModelLayout jamba = Preset("jamba-v0.1");
  ExpectRefused(jamba, 0, 0, {"tp_size: 0"});
  ExpectRefused(jamba, 4, 4, {"tp_rank: 4", "must be < tp_size 4"});
  ExpectRefused(Rank(jamba, 2, 1), 2, 0, {"tp_size: 2", "already one rank's"});
  // Shapes a block cannot have been split from.
  ExpectRefused(Expected("m", 1, {}, {Ssm(0, "mamba2", {4096, 3}, {64, 64, 128})}), 2, 0,
                {"ssm_layers[0].conv_shape[0]: 4096", "d_inner 4096 + 2 * n_groups"});
  ExpectRefused(Expected("m", 1, {}, {Ssm(0, "mamba2", {4096, 3}, {64, 64})}), 2, 0,
                {"ssm_layers[0].ssm_shape: [64, 64]", "[heads, head_dim, d_state]"});
  ExpectRefused(Expected("m", 1, {}, {Ssm(0, "mamba1", {4096, 3}, {2048, 16})}), 2, 0,
                {"ssm_layers[0].ssm_shape: [2048, 16]", "d_inner = conv channels"});
  ExpectRefused(Expected("m", 1, {}, {Ssm(0, "mamba1", {4097, 3}, {4097, 16})}), 2, 0,
                {"ssm_layers[0].conv_shape[0] (d_inner): 4097"});
  ExpectRefused(Expected("m", 1, {}, {Ssm(0, "gdn", {100, 3}, {4, 16, 32})}), 2, 0,
                {"ssm_layers[0].conv_shape[0]: 100", "2 * k_heads * k_dim"});
  ExpectRefused(Expected("m", 1, {}, {Ssm(0, "gdn", {4096, 3}, {6, 128, 128})}), 4, 0,
                {"ssm_layers[0].ssm_shape[0] (v_heads): 6"});
  ExpectRefused(Expected("m", 1, {}, {Ssm(0, "rglru", {4096}, {4096})}), 2, 0,
                {"ssm_layers[0].conv_shape: [4096]", "[channels, width]"});
  // A split that leaves an fp4 tensor off its 16-element granularity fails the layout's checks.
  ModelLayout fp4 = Expected("m", 1, {Kv(0, 2, 8)}, {});
  fp4.attention_layers[0].dtype = DType::kFp4E2M1;
  fp4.page_size_tokens = 1;
  ASSERT_TRUE(fp4.Validate().ok()) << fp4.Validate().ToString();
  ExpectRefused(fp4, 2, 0, {"attention_layers[0].dtype: fp4", "multiple of 16"});
}

TEST(LayoutTpTest, HfConfigsSplitAsTheirWholeLayoutDoes) {
  constexpr char kJamba[] = R"json({"model_type": "jamba", "num_hidden_layers": 8,
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    "mamba_expand": 2, "mamba_d_state": 16, "mamba_d_conv": 4,
    "attn_layer_period": 8, "attn_layer_offset": 4})json";
  HfLayoutOptions o = hf_test::Options();
  const ModelLayout whole = hf_test::Convert(kJamba, o);
  for (uint32_t r = 0; r < 4; ++r) {
    o.tp_size = 4;
    o.tp_rank = r;
    hf_test::ExpectLayout(hf_test::Convert(kJamba, o), Rank(whole, 4, r));
  }
  o.tp_rank = 4;
  hf_test::ExpectInvalid(kJamba, {"tp_rank: 4", "must be < tp_size 4"}, o);
  o.tp_size = 0;
  o.tp_rank = 0;
  hf_test::ExpectInvalid(kJamba, {"tp_size: 0"}, o);
  o.tp_size = 3;
  hf_test::ExpectInvalid(kJamba, {"attention_layers[0].num_kv_heads: 8", "tp_size 3"}, o);
}

TEST(LayoutTpTest, TheGroupLayoutHoldsEveryRanksRecordAndIsTheSameForEveryRank) {
  const ModelLayout whole = Preset("jamba-v0.1");
  EXPECT_TRUE(*GroupLayout(whole) == whole) << "tp_size 1 is its own group";
  for (uint32_t n : {2u, 4u}) {
    const ModelLayout rank1 = Rank(whole, n, 1);
    auto group = GroupLayout(rank1);
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    for (Kind k : {Kind::kKV, Kind::kMamba}) {
      EXPECT_EQ(group->RecordBytes(k), n * rank1.RecordBytes(k));
    }
    EXPECT_EQ(group->tp_size, n);
    EXPECT_EQ(group->tp_rank, 0u);
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_EQ(GroupLayout(Rank(whole, n, r))->FingerprintHex(), group->FingerprintHex()) << r;
      EXPECT_NE(Rank(whole, n, r).FingerprintHex(), group->FingerprintHex()) << r;
    }
    // The same bytes as the whole model's records, arranged rank after rank: another
    // fingerprint, so that neither store reads the other's records.
    EXPECT_EQ(group->RecordBytes(Kind::kKV), whole.RecordBytes(Kind::kKV));
    EXPECT_NE(group->FingerprintHex(), whole.FingerprintHex());
  }
  // A lightning layer (no conv) widens its state alone.
  const ModelLayout minimax =
      Expected("mm", 2, {Kv(1, 8, 128)}, {Ssm(0, "lightning", {}, {64, 96, 96})});
  const ModelLayout mm_rank = Rank(minimax, 8, 5);
  auto mm_group = GroupLayout(mm_rank);
  ASSERT_TRUE(mm_group.ok()) << mm_group.status().ToString();
  EXPECT_TRUE(mm_group->ssm_layers[0].conv_shape.empty());
  EXPECT_EQ(mm_group->RecordBytes(Kind::kMamba), minimax.RecordBytes(Kind::kMamba));
  EXPECT_EQ(mm_group->RecordBytes(Kind::kKV), minimax.RecordBytes(Kind::kKV));
  // Widened sizes that overflow are refused by name.
  ModelLayout huge = Expected("m", 1, {}, {Ssm(0, "mamba1", {uint64_t{1} << 44, 3}, {1, 1})});
  huge.tp_size = 1u << 20;
  auto refused = GroupLayout(huge);
  EXPECT_TRUE(refused.status().IsInvalidArgument()) << refused.status().ToString();
}

}  // namespace
}  // namespace cachepawl
