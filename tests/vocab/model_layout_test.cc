// ModelLayout: Validate() names the field and value at fault for every bad input; sizes and
// record segments; the fingerprint covers every field.
#include "vocab/model_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace cachepawl {
namespace {

// Two attention layers and two recurrent layers of different sizes and dtypes; layer indices
// interleave (attention 1, 3; SSM 0, 2).
ModelLayout Small() {
  ModelLayout l;
  l.model = "test/small";
  l.num_layers = 4;
  l.page_size_tokens = 16;
  l.attention_layers = {{1, 2, 64, DType::kBf16, 0}, {3, 2, 64, DType::kFp8E4M3, 128}};
  l.ssm_layers = {{0, "mamba2", {96, 3}, DType::kBf16, {2, 16, 8}, DType::kFp32},
                  {2, "gdn", {80, 3}, DType::kFp16, {2, 8, 8}, DType::kFp32}};
  return l;
}

// Expects InvalidArgument whose message contains every one of `parts`.
void ExpectInvalid(const ModelLayout& l, const std::vector<std::string>& parts) {
  Status s = l.Validate();
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

TEST(ModelLayoutTest, SmallLayoutIsValidAndItsSizesAreTheHandCalculation) {
  ModelLayout l = Small();
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  // K = 16 tokens * 2 heads * 64 dims * 2 B (bf16) = 4096; fp8: 2048.
  EXPECT_EQ(l.KBytesPerPage(0), 4096u);
  EXPECT_EQ(l.KBytesPerPage(1), 2048u);
  EXPECT_EQ(l.KvPageBytes(), 2 * 4096u + 2 * 2048u);
  // conv 96*3*2 = 576, ssm 2*16*8*4 = 1024; conv 80*3*2 = 480, ssm 2*8*8*4 = 512.
  EXPECT_EQ(l.ConvStateBytes(0), 576u);
  EXPECT_EQ(l.SsmStateBytes(0), 1024u);
  EXPECT_EQ(l.ConvStateBytes(1), 480u);
  EXPECT_EQ(l.SsmStateBytes(1), 512u);
  EXPECT_EQ(l.MambaSlotBytes(), 576u + 1024u + 480u + 512u);
  // Layer 3 has a 128-token window: its K/V is the kWindowKV record, layer 1's the kKV record.
  EXPECT_TRUE(l.has_window());
  EXPECT_EQ(l.RecordBytes(Kind::kKV), 2 * 4096u);
  EXPECT_EQ(l.RecordBytes(Kind::kWindowKV), 2 * 2048u);
  EXPECT_EQ(l.RecordBytes(Kind::kKV) + l.RecordBytes(Kind::kWindowKV), l.KvPageBytes());
  EXPECT_EQ(l.RecordBytes(Kind::kMamba), l.MambaSlotBytes());
  EXPECT_EQ(l.AttentionKind(0), Kind::kKV);
  EXPECT_EQ(l.AttentionKind(1), Kind::kWindowKV);
  EXPECT_EQ(l.WindowTokens(), 128u);
  EXPECT_EQ(l.WindowPages(), 8u);  // ceil(128 / 16)
  for (Kind k : kAllKinds) EXPECT_TRUE(l.Stores(k)) << KindName(k);
  // Record segments restart at 0 in each kind's record; page segments run over all layers.
  EXPECT_EQ(l.KRecordSegment(1).offset, 0u);
  EXPECT_EQ(l.VRecordSegment(1).offset, 2048u);
  EXPECT_EQ(l.KSegment(1).offset, 2 * 4096u);
  EXPECT_EQ(l.KRecordSegment(0).offset, l.KSegment(0).offset);
  ModelLayout full = l;
  full.attention_layers[1].sliding_window = 0;
  EXPECT_FALSE(full.has_window());
  EXPECT_FALSE(full.Stores(Kind::kWindowKV));
  EXPECT_EQ(full.RecordBytes(Kind::kKV), full.KvPageBytes());
  EXPECT_EQ(full.RecordBytes(Kind::kWindowKV), 0u);
  EXPECT_EQ(full.WindowPages(), 0u);
  ModelLayout windowed = l;
  windowed.attention_layers[0].sliding_window = 40;
  EXPECT_FALSE(windowed.Stores(Kind::kKV));
  EXPECT_EQ(windowed.RecordBytes(Kind::kKV), 0u);
  EXPECT_EQ(windowed.WindowPages(), 8u);  // the largest window governs
  EXPECT_TRUE(l.has_attention());
  EXPECT_TRUE(l.has_ssm());
}

TEST(ModelLayoutTest, SegmentsTileTheRecordInOrder) {
  ModelLayout l = Small();
  EXPECT_EQ(l.KSegment(0).offset, 0u);
  EXPECT_EQ(l.VSegment(0).offset, 4096u);
  EXPECT_EQ(l.KSegment(1).offset, 8192u);
  EXPECT_EQ(l.VSegment(1).offset, 8192u + 2048u);
  EXPECT_EQ(l.VSegment(1).offset + l.VSegment(1).bytes, l.KvPageBytes());
  EXPECT_EQ(l.ConvSegment(0).offset, 0u);
  EXPECT_EQ(l.SsmSegment(0).offset, 576u);
  EXPECT_EQ(l.ConvSegment(1).offset, 1600u);
  EXPECT_EQ(l.SsmSegment(1).offset, 2080u);
  EXPECT_EQ(l.SsmSegment(1).offset + l.SsmSegment(1).bytes, l.MambaSlotBytes());
}

TEST(ModelLayoutTest, AttentionAndSsmMayShareADecoderIndex) {
  ModelLayout l = Small();
  l.attention_layers[0].layer_index = 0;  // SSM layer 0 too (Hymba, Falcon-H1, Zamba2)
  l.attention_layers[1].layer_index = 2;
  EXPECT_TRUE(l.Validate().ok()) << l.Validate().ToString();
}

TEST(ModelLayoutTest, RejectsPageSizeZero) {
  ModelLayout l = Small();
  l.page_size_tokens = 0;
  ExpectInvalid(l, {"page_size_tokens: 0", "must be > 0"});
}

TEST(ModelLayoutTest, RejectsAModelNameThatIsNotUtf8) {
  // The name is written as a JSON string (LayoutToJson, stats); before this check, a C caller's
  // cachepawl_layout_from_hf_config_string(..., model "\xff\xfe", ...) made a layout whose
  // cachepawl_layout_to_json failed with INTERNAL (found by tests/fuzz/fuzz_c_abi.cc).
  ModelLayout l = Small();
  for (const char* good : {"", "org/m\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x90\xbe"}) {
    l.model = good;
    EXPECT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  }
  l.model = "ab\xff";
  ExpectInvalid(l, {"model: byte 0xff at index 2", "not valid UTF-8"});
  // Cut short, an overlong '/', a surrogate, above U+10FFFF, a stray continuation byte.
  for (const char* bad : {"\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80"}) {
    l.model = bad;
    ExpectInvalid(l, {"model: byte", "at index 0", "not valid UTF-8"});
  }
}

TEST(ModelLayoutTest, RejectsZeroHeadsAndZeroHeadDim) {
  ModelLayout l = Small();
  l.attention_layers[1].num_kv_heads = 0;
  ExpectInvalid(l, {"attention_layers[1].num_kv_heads: 0"});
  l = Small();
  l.attention_layers[0].head_dim = 0;
  ExpectInvalid(l, {"attention_layers[0].head_dim: 0"});
}

TEST(ModelLayoutTest, RejectsDuplicateIndicesWithinOneKind) {
  ModelLayout l = Small();
  l.attention_layers[1].layer_index = 1;
  ExpectInvalid(l, {"attention_layers[1].layer_index: 1", "overlaps another attention layer"});
  l = Small();
  l.ssm_layers[1].layer_index = 0;
  ExpectInvalid(l, {"ssm_layers[1].layer_index: 0", "overlaps another SSM layer"});
}

TEST(ModelLayoutTest, RejectsIndicesBeyondTheDecoderStack) {
  ModelLayout l = Small();
  l.attention_layers[1].layer_index = 4;
  ExpectInvalid(l, {"attention_layers[1].layer_index: 4", "must be < num_layers 4"});
  l = Small();
  l.ssm_layers[0].layer_index = 7;
  ExpectInvalid(l, {"ssm_layers[0].layer_index: 7", "must be < num_layers 4"});
  l = Small();
  l.num_layers = 0;
  ExpectInvalid(l, {"num_layers: 0"});
}

TEST(ModelLayoutTest, RejectsUnknownDTypeValuesCastFromBadIntegers) {
  ModelLayout l = Small();
  l.attention_layers[0].dtype = static_cast<DType>(9);
  ExpectInvalid(l, {"attention_layers[0].dtype: 9", "unknown dtype"});
  l = Small();
  l.ssm_layers[1].conv_dtype = static_cast<DType>(200);
  ExpectInvalid(l, {"ssm_layers[1].conv_dtype: 200", "unknown dtype"});
  l = Small();
  l.ssm_layers[0].ssm_dtype = static_cast<DType>(7);
  ExpectInvalid(l, {"ssm_layers[0].ssm_dtype: 7", "unknown dtype"});
}

TEST(ModelLayoutTest, RejectsUnknownBlocks) {
  ModelLayout l = Small();
  l.ssm_layers[1].block = "mamba3";
  ExpectInvalid(l, {"ssm_layers[1].block: 'mamba3'",
                    "mamba1, mamba2, rglru, gdn, kda, shortconv or lightning"});
}

TEST(ModelLayoutTest, ShortConvLayersKeepAConvStateOnly) {
  ModelLayout l = Small();
  l.ssm_layers[1] = {2, "shortconv", {80, 3}, DType::kFp16, {}, DType::kFp32};
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  // conv 80 * 3 * 2 = 480; no SSM state.
  EXPECT_EQ(l.ConvStateBytes(1), 480u);
  EXPECT_EQ(l.SsmStateBytes(1), 0u);
  EXPECT_EQ(l.MambaSlotBytes(), 576u + 1024u + 480u);
  EXPECT_EQ(l.ConvSegment(1).offset, 1600u);
  EXPECT_EQ(l.SsmSegment(1).offset, 2080u);
  EXPECT_EQ(l.SsmSegment(1).bytes, 0u);
  EXPECT_NE(l.Describe().find("[2] shortconv conv=[80, 3] fp16 ssm=none  state=480 B"),
            std::string::npos)
      << l.Describe();
  // An empty shape is distinct from every non-empty one in the fingerprint.
  ModelLayout gdn = Small();
  EXPECT_NE(l.FingerprintHex(), gdn.FingerprintHex());
}

// An MLA layer (layer 0: one latent of 576 values per token) beside usual attention (layer 2)
// and a Kimi Delta Attention layer (layer 1).
ModelLayout Mla() {
  ModelLayout l;
  l.model = "test/mla";
  l.num_layers = 3;
  l.page_size_tokens = 16;
  l.attention_layers = {{0, 1, 576, DType::kBf16, 0}, {2, 2, 64, DType::kBf16, 0}};
  l.attention_layers[0].mla = true;
  l.ssm_layers = {{1, "kda", {96, 3}, DType::kBf16, {2, 16, 16}, DType::kFp32}};
  return l;
}

TEST(ModelLayoutTest, MlaLayersKeepOneLatentAndNoV) {
  const ModelLayout l = Mla();
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  EXPECT_TRUE(l.has_mla());
  EXPECT_FALSE(Small().has_mla());
  // Latent: 16 tokens * 576 * 2 B = 18432, no V; layer 2: K = V = 16 * 2 * 64 * 2 = 4096.
  EXPECT_EQ(l.KBytesPerPage(0), 18432u);
  EXPECT_EQ(l.VBytesPerPage(0), 0u);
  EXPECT_EQ(l.VBytesPerPage(1), 4096u);
  EXPECT_EQ(l.KvPageBytes(), 18432u + 2 * 4096u);
  EXPECT_EQ(l.RecordBytes(Kind::kKV), l.KvPageBytes());
  // The latent, its empty V, then layer 2's K and V, back to back.
  const std::vector<LayerSegment> segs = l.RecordSegments(Kind::kKV);
  ASSERT_EQ(segs.size(), 4u);
  EXPECT_EQ(segs[0].segment.offset, 0u);
  EXPECT_EQ(segs[0].segment.bytes, 18432u);
  EXPECT_TRUE(segs[1].second);
  EXPECT_EQ(segs[1].segment.offset, 18432u);
  EXPECT_EQ(segs[1].segment.bytes, 0u);
  EXPECT_EQ(segs[2].segment.offset, 18432u);
  EXPECT_EQ(segs[3].segment.offset, 18432u + 4096u);
  EXPECT_EQ(l.KvPageSegments()[1].segment.bytes, 0u);
  // KDA: conv 96 * 3 * 2 = 576, state 2 * 16 * 16 * 4 = 2048.
  EXPECT_EQ(l.MambaSlotBytes(), 576u + 2048u);
  EXPECT_NE(l.Describe().find("[0] kv_heads=1 head_dim=576 dtype=bf16 mla  latent/page=18432 B"),
            std::string::npos)
      << l.Describe();
}

TEST(ModelLayoutTest, MlaFingerprintIsVersionThreeAndNamesTheFlag) {
  // Computed independently with Python's hashlib: version 3, each attention layer's encoding
  // followed by its mla byte.
  EXPECT_EQ(Mla().FingerprintHex(),
            "f9ac9ef3d0afb97c0f539506d5c2ebe756670b412f02a9d4ffc6ad0ccb1ed252");
  ModelLayout plain = Mla();
  plain.attention_layers[0].mla = false;
  ASSERT_TRUE(plain.Validate().ok());
  EXPECT_NE(plain.FingerprintHex(), Mla().FingerprintHex());
  EXPECT_FALSE(plain == Mla());
}

// Mla() as rank 1 of 4: the latent on every rank, layer 2's 2 KV heads each on 2 ranks.
ModelLayout ReplicatedRank() {
  ModelLayout l = Mla();
  l.tp_size = 4;
  l.tp_rank = 1;
  l.attention_layers[0].tp_replicas = 4;
  l.attention_layers[1].tp_replicas = 2;
  return l;
}

TEST(ModelLayoutTest, ReplicatedLayersAreVersionFourAndTheirKindHasFewerShares) {
  const ModelLayout l = ReplicatedRank();
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  // Computed independently with Python's hashlib: version 4, each attention layer's encoding
  // followed by its mla byte and its tp_replicas as 4 bytes.
  EXPECT_EQ(l.FingerprintHex(), "0a40dccd4b2fd0c726f8810a0416165718bc702196e99bc98c8db8780d302144");
  ModelLayout plain = l;
  for (AttentionLayerSpec& a : plain.attention_layers) a.tp_replicas = 1;
  EXPECT_NE(plain.FingerprintHex(), l.FingerprintHex());
  EXPECT_FALSE(plain == l);
  // Ranks r, r' hold equal KV when r / gcd(4, 2) == r' / 2: two shares; the state is per rank.
  EXPECT_EQ(l.TpShares(Kind::kKV), 2u);
  EXPECT_EQ(plain.TpShares(Kind::kKV), 4u);
  EXPECT_EQ(l.TpShares(Kind::kMamba), 4u);
  const uint32_t want[] = {0, 0, 1, 1};
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(l.TpShareOf(Kind::kKV, r), want[r]) << r;
    EXPECT_EQ(plain.TpShareOf(Kind::kKV, r), r) << r;
    EXPECT_EQ(l.TpShareOf(Kind::kMamba, r), r) << r;
  }
  EXPECT_EQ(Small().TpShares(Kind::kKV), 1u) << "tp_size 1";
  EXPECT_NE(l.Describe().find("group shares:     kv=2 mamba=4"), std::string::npos) << l.Describe();
  EXPECT_NE(l.Describe().find("same-on=2-ranks"), std::string::npos) << l.Describe();
  // The group's records hold the KV twice (not four times) and the state four times.
  auto group = GroupLayout(l);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  EXPECT_EQ(group->RecordBytes(Kind::kKV), 2 * l.RecordBytes(Kind::kKV));
  EXPECT_EQ(group->RecordBytes(Kind::kMamba), 4 * l.RecordBytes(Kind::kMamba));
  EXPECT_NE(group->FingerprintHex(), GroupLayout(plain)->FingerprintHex());
}

TEST(ModelLayoutTest, ReplicasMustDivideTheTensorParallelSize) {
  ModelLayout l = ReplicatedRank();
  l.attention_layers[1].tp_replicas = 3;
  ExpectInvalid(l, {"attention_layers[1].tp_replicas: 3", "must divide tp_size 4"});
  l.attention_layers[1].tp_replicas = 0;
  ExpectInvalid(l, {"attention_layers[1].tp_replicas: 0"});
  l = Mla();
  l.attention_layers[0].tp_replicas = 2;
  ExpectInvalid(l, {"attention_layers[0].tp_replicas: 2", "must divide tp_size 1"});
}

TEST(ModelLayoutTest, MlaLayersHaveFullAttention) {
  ModelLayout l = Mla();
  l.attention_layers[0].sliding_window = 128;
  ExpectInvalid(l, {"attention_layers[0].sliding_window: 128", "MLA layer", "full attention"});
}

TEST(ModelLayoutTest, LightningLayersKeepTheirStateOnly) {
  ModelLayout l = Small();
  l.ssm_layers[1] = {2, "lightning", {}, DType::kBf16, {2, 8, 8}, DType::kBf16};
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  // No conv; state 2 * 8 * 8 * 2 = 256.
  EXPECT_EQ(l.ConvStateBytes(1), 0u);
  EXPECT_EQ(l.SsmStateBytes(1), 256u);
  EXPECT_EQ(l.MambaSlotBytes(), 576u + 1024u + 256u);
  EXPECT_EQ(l.ConvSegment(1).offset, 1600u);
  EXPECT_EQ(l.ConvSegment(1).bytes, 0u);
  EXPECT_EQ(l.SsmSegment(1).offset, 1600u);
  EXPECT_NE(l.Describe().find("[2] lightning conv=none ssm=[2, 8, 8] bf16  state=256 B"),
            std::string::npos)
      << l.Describe();
  l.ssm_layers[1].conv_shape = {8, 3};
  ExpectInvalid(l, {"ssm_layers[1].conv_shape: [8, 3]", "lightning", "must be []"});
  l = Small();
  l.ssm_layers[1].conv_shape = {};
  ExpectInvalid(l, {"ssm_layers[1].conv_shape: []", "at least one dimension"});
}

TEST(ModelLayoutTest, OnlyShortConvLayersMayOmitTheSsmState) {
  ModelLayout l = Small();
  l.ssm_layers[1].block = "shortconv";
  ExpectInvalid(l, {"ssm_layers[1].ssm_shape: [2, 8, 8]", "shortconv", "must be []"});
  l = Small();
  l.ssm_layers[1].ssm_shape = {};
  ExpectInvalid(l, {"ssm_layers[1].ssm_shape: []", "at least one dimension"});
  l = Small();
  l.ssm_layers[1] = {2, "shortconv", {}, DType::kBf16, {}, DType::kFp32};
  ExpectInvalid(l, {"ssm_layers[1].conv_shape: []", "at least one dimension"});
}

TEST(ModelLayoutTest, Fp4NeedsAMultipleOf16ElementsAndCountsItsScales) {
  ModelLayout l = Small();
  l.page_size_tokens = 1;
  l.attention_layers[0] = {1, 1, 8, DType::kFp4E2M1, 0};  // 1 * 1 * 8 = 8 elements
  ExpectInvalid(l, {"attention_layers[0].dtype: fp4_e2m1", "multiple of 16"});
  l = Small();
  l.ssm_layers[0].conv_shape = {3, 3};
  l.ssm_layers[0].conv_dtype = DType::kFp4E2M1;
  ExpectInvalid(l, {"ssm_layers[0].conv_shape: [3, 3]", "multiple of 16"});
  l.ssm_layers[0].conv_shape = {16, 3};  // 48 values: 24 B packed + 3 B of scales
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  EXPECT_EQ(l.ConvStateBytes(0), 27u);
  l = Small();
  l.attention_layers[0].dtype = DType::kFp4E2M1;  // 16 * 2 * 64 = 2048 values
  ASSERT_TRUE(l.Validate().ok());
  EXPECT_EQ(l.KBytesPerPage(0), 1024u + 128u);
}

TEST(ModelLayoutTest, RejectsEmptyShapesAndZeroDimensions) {
  ModelLayout l = Small();
  l.ssm_layers[0].conv_shape = {};
  ExpectInvalid(l, {"ssm_layers[0].conv_shape: []", "at least one dimension"});
  l = Small();
  l.ssm_layers[1].ssm_shape = {2, 0, 8};
  ExpectInvalid(l, {"ssm_layers[1].ssm_shape: [2, 0, 8]"});
}

TEST(ModelLayoutTest, RejectsSizesThatOverflow64Bits) {
  constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();
  // Element count overflows.
  ModelLayout l = Small();
  l.ssm_layers[0].conv_shape = {1ull << 32, 1ull << 32};
  ExpectInvalid(l, {"ssm_layers[0].conv_shape: [4294967296, 4294967296]", "64 bits"});
  // Element count fits, bytes do not (2^62 fp32 elements).
  l = Small();
  l.ssm_layers[1].ssm_shape = {1ull << 62};
  ExpectInvalid(l, {"ssm_layers[1].ssm_shape: [4611686018427387904]", "overflows"});
  // Each layer fits (2^63 bytes), the slot does not.
  l = Small();
  l.ssm_layers[0].ssm_shape = {1ull << 61};
  l.ssm_layers[1].ssm_shape = {1ull << 61};
  ExpectInvalid(l, {"ssm_layers[1]: state bytes", "overflows 64 bits"});
  // page * heads * dim overflows.
  l = Small();
  l.page_size_tokens = kMax32;
  l.attention_layers[0].num_kv_heads = kMax32;
  l.attention_layers[0].head_dim = kMax32;
  ExpectInvalid(l, {"attention_layers[0].dtype: bf16", "overflows"});
  // K fits (2^62 B), K+V of two layers does not.
  l = Small();
  l.page_size_tokens = 1u << 30;
  l.attention_layers[0] = {1, 1u << 30, 2, DType::kBf16, 0};
  l.attention_layers[1] = {3, 1u << 30, 2, DType::kBf16, 0};
  ExpectInvalid(l, {"attention_layers[1]: K+V bytes", "overflows 64 bits"});
}

TEST(ModelLayoutTest, RejectsBadTensorParallelism) {
  ModelLayout l = Small();
  l.tp_size = 2;
  l.tp_rank = 2;
  ExpectInvalid(l, {"tp_rank: 2", "must be < tp_size 2"});
  l.tp_size = 0;
  l.tp_rank = 0;
  ExpectInvalid(l, {"tp_size: 0"});
  l.tp_size = 4;
  l.tp_rank = 3;
  EXPECT_TRUE(l.Validate().ok());
}

TEST(ModelLayoutTest, RejectsALayoutWithoutLayers) {
  ModelLayout l = Small();
  l.attention_layers.clear();
  l.ssm_layers.clear();
  ExpectInvalid(l, {"attention_layers/ssm_layers", "at least one layer"});
}

TEST(ModelLayoutTest, FingerprintIsTheDocumentedEncoding) {
  // Computed independently with Python's hashlib over the encoding described in
  // model_layout.cc (little-endian integers, length-prefixed strings). Small() has a windowed
  // layer: version 2; the same layout without it is version 1.
  EXPECT_EQ(Small().FingerprintHex(),
            "8e4b675ef35ee24b81da76de01d66a27e292d513d0b6e4fd140ab1176af96496");
  auto fp = Small().Fingerprint();
  std::string hex = Small().FingerprintHex();
  ASSERT_EQ(hex.size(), 64u);
  for (size_t i = 0; i < fp.size(); ++i) {
    EXPECT_EQ(std::stoi(hex.substr(2 * i, 2), nullptr, 16), fp[i]) << i;
  }
}

TEST(ModelLayoutTest, EqualLayoutsHaveEqualFingerprints) {
  ModelLayout a = Small();
  ModelLayout b = Small();
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
  ModelLayout c = a;
  EXPECT_EQ(c.FingerprintHex(), a.FingerprintHex());
}

TEST(ModelLayoutTest, ChangingAnySingleFieldChangesTheFingerprint) {
  using Mutation = std::function<void(ModelLayout&)>;
  const std::vector<std::pair<std::string, Mutation>> mutations = {
      {"model", [](ModelLayout& l) { l.model = "test/small2"; }},
      {"num_layers", [](ModelLayout& l) { l.num_layers = 5; }},
      {"page_size_tokens", [](ModelLayout& l) { l.page_size_tokens = 32; }},
      {"tp_size", [](ModelLayout& l) { l.tp_size = 2; }},
      {"tp_rank",
       [](ModelLayout& l) {
         l.tp_size = 2;
         l.tp_rank = 1;
       }},
      {"attn.layer_index", [](ModelLayout& l) { l.attention_layers[0].layer_index = 0; }},
      {"attn.num_kv_heads", [](ModelLayout& l) { l.attention_layers[0].num_kv_heads = 4; }},
      {"attn.head_dim", [](ModelLayout& l) { l.attention_layers[0].head_dim = 128; }},
      {"attn.dtype", [](ModelLayout& l) { l.attention_layers[0].dtype = DType::kFp16; }},
      {"attn.sliding_window", [](ModelLayout& l) { l.attention_layers[0].sliding_window = 1; }},
      {"attn.mla", [](ModelLayout& l) { l.attention_layers[0].mla = true; }},
      {"attn.tp_replicas",
       [](ModelLayout& l) {
         l.tp_size = 2;
         l.attention_layers[0].tp_replicas = 2;
       }},
      {"attn.order",
       [](ModelLayout& l) { std::swap(l.attention_layers[0], l.attention_layers[1]); }},
      {"attn.removed", [](ModelLayout& l) { l.attention_layers.pop_back(); }},
      {"ssm.layer_index", [](ModelLayout& l) { l.ssm_layers[0].layer_index = 1; }},
      {"ssm.block", [](ModelLayout& l) { l.ssm_layers[0].block = "mamba1"; }},
      {"ssm.conv_shape",
       [](ModelLayout& l) {
         l.ssm_layers[0].conv_shape = {96, 2};
       }},
      {"ssm.conv_shape.rank", [](ModelLayout& l) { l.ssm_layers[0].conv_shape = {288}; }},
      {"ssm.conv_dtype", [](ModelLayout& l) { l.ssm_layers[0].conv_dtype = DType::kFp32; }},
      {"ssm.ssm_shape",
       [](ModelLayout& l) {
         l.ssm_layers[0].ssm_shape = {2, 16, 16};
       }},
      {"ssm.ssm_shape.rank",
       [](ModelLayout& l) {
         l.ssm_layers[0].ssm_shape = {32, 8};
       }},
      {"ssm.ssm_dtype", [](ModelLayout& l) { l.ssm_layers[0].ssm_dtype = DType::kBf16; }},
      {"ssm.order", [](ModelLayout& l) { std::swap(l.ssm_layers[0], l.ssm_layers[1]); }},
      {"ssm.removed", [](ModelLayout& l) { l.ssm_layers.pop_back(); }},
  };
  const ModelLayout base = Small();
  std::set<std::string> seen = {base.FingerprintHex()};
  for (const auto& [name, mutate] : mutations) {
    ModelLayout l = base;
    mutate(l);
    ASSERT_TRUE(l.Validate().ok()) << name << ": " << l.Validate().ToString();
    EXPECT_FALSE(l == base) << name;
    EXPECT_TRUE(seen.insert(l.FingerprintHex()).second) << name << " collides";
  }
}

TEST(ModelLayoutTest, DescribeNamesTheModelSizesAndFingerprint) {
  ModelLayout l = Small();
  std::string d = l.Describe();
  EXPECT_NE(d.find("test/small"), std::string::npos) << d;
  EXPECT_NE(d.find("kv page bytes:    12288"), std::string::npos) << d;
  EXPECT_NE(d.find("mamba slot bytes: 2592"), std::string::npos) << d;
  EXPECT_NE(d.find("window=128"), std::string::npos) << d;
  EXPECT_NE(d.find(l.FingerprintHex()), std::string::npos) << d;
}

}  // namespace
}  // namespace cachepawl
