// Layout files: round trips, defaults, and a clear error (line and column, or key path and
// value) for every kind of bad file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "layouts/layout_presets.h"
#include "tests/common/test_util.h"
#include "vocab/model_layout.h"

namespace cachepawl {
namespace {

// A minimal valid file body; tests splice one bad piece into it.
const char kMinimal[] = R"({
  "model": "test/tiny",
  "num_layers": 2,
  "attention_layers": [{"layer_index": 1, "num_kv_heads": 4, "head_dim": 64}],
  "ssm_layers": [{"layer_index": 0, "block": "mamba2", "conv_shape": [160, 3],
                  "ssm_shape": [2, 32, 16]}]
})";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Expects InvalidArgument whose message contains every one of `parts`.
void ExpectInvalid(const std::string& text, const std::vector<std::string>& parts) {
  auto l = ParseLayoutJson(text);
  ASSERT_TRUE(l.status().IsInvalidArgument()) << l.status().ToString() << "\n" << text;
  for (const std::string& p : parts) {
    EXPECT_NE(l.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << l.status().message();
  }
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

TEST(LayoutJsonTest, EveryPresetRoundTrips) {
  for (const std::string& name : LayoutPresetNames()) {
    SCOPED_TRACE(name);
    auto preset = LayoutPreset(name);
    ASSERT_TRUE(preset.ok());
    std::string json = LayoutToJson(*preset);
    auto back = ParseLayoutJson(json);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
    EXPECT_TRUE(*back == *preset);
    EXPECT_EQ(back->FingerprintHex(), preset->FingerprintHex());
    EXPECT_EQ(LayoutToJson(*back), json);  // canonical: stable under a round trip
  }
}

TEST(LayoutJsonTest, NonDefaultFieldsRoundTrip) {
  ModelLayout l;
  l.model = "org/\"quoted\" \\ name é";
  l.num_layers = 3;
  l.page_size_tokens = 64;
  l.tp_rank = 1;
  l.tp_size = 2;
  l.attention_layers = {{0, 1, 128, DType::kFp8E5M2, 4096}, {2, 3, 96, DType::kFp4E2M1, 0}};
  l.ssm_layers = {{1, "rglru", {2560, 3}, DType::kFp16, {2560}, DType::kFp32},
                  {2, "mamba1", {16, 3}, DType::kFp4E2M1, {16, 16}, DType::kInt8}};
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  auto back = ParseLayoutJson(LayoutToJson(l));
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << LayoutToJson(l);
  EXPECT_TRUE(*back == l);
}

TEST(LayoutJsonTest, ShortConvLayersRoundTripWithAnEmptySsmShape) {
  ModelLayout l;
  l.model = "LiquidAI/LFM2-tiny";
  l.num_layers = 2;
  l.attention_layers = {{1, 2, 64, DType::kBf16, 0}};
  l.ssm_layers = {{0, "shortconv", {256, 3}, DType::kBf16, {}, DType::kFp32}};
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  const std::string json = LayoutToJson(l);
  EXPECT_NE(json.find(R"("block":"shortconv","conv_shape":[256,3],"conv_dtype":"bf16",)"
                      R"("ssm_shape":[],"ssm_dtype":"fp32")"),
            std::string::npos)
      << json;
  auto back = ParseLayoutJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
  EXPECT_TRUE(*back == l);
  EXPECT_EQ(back->FingerprintHex(), l.FingerprintHex());
  EXPECT_EQ(back->MambaSlotBytes(), 256u * 3 * 2);
  ExpectInvalid(Replace(kMinimal, R"("block": "mamba2")", R"("block": "shortconv")"),
                {"ssm_layers[0].ssm_shape: [2, 32, 16]", "must be []"});
}

TEST(LayoutJsonTest, MlaLayersRoundTripWithTheirFlag) {
  ModelLayout l;
  l.model = "test/deepseek-tiny";
  l.num_layers = 2;
  l.attention_layers = {{0, 1, 576, DType::kBf16, 0}, {1, 2, 64, DType::kBf16, 0}};
  l.attention_layers[0].mla = true;
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  const std::string json = LayoutToJson(l);
  EXPECT_NE(json.find(R"("head_dim":576,"dtype":"bf16","sliding_window":0,"mla":true})"),
            std::string::npos)
      << json;
  // Only MLA layers carry the key: every layout without one reads and writes as before.
  EXPECT_NE(json.find(R"("head_dim":64,"dtype":"bf16","sliding_window":0})"), std::string::npos)
      << json;
  auto back = ParseLayoutJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
  EXPECT_TRUE(*back == l);
  EXPECT_EQ(back->FingerprintHex(), l.FingerprintHex());
  EXPECT_EQ(back->VBytesPerPage(0), 0u);
  auto plain = ParseLayoutJson(Replace(json, R"(,"mla":true)", R"(,"mla":false)"));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->attention_layers[0].mla);
  ExpectInvalid(Replace(kMinimal, R"("head_dim": 64)", R"("head_dim": 64, "mla": 1)"),
                {"attention_layers[0].mla: 1", "expected true or false"});
  ExpectInvalid(Replace(kMinimal, R"("head_dim": 64)", R"("head_dim": 64, "mla": "true")"),
                {"attention_layers[0].mla: 'true'", "expected true or false"});
}

TEST(LayoutJsonTest, ReplicatedLayersRoundTripWithTheirReplicas) {
  ModelLayout l;
  l.model = "test/replicated";
  l.num_layers = 2;
  l.tp_size = 4;
  l.tp_rank = 3;
  l.attention_layers = {{0, 1, 128, DType::kBf16, 0}, {1, 2, 64, DType::kBf16, 0}};
  l.attention_layers[0].tp_replicas = 4;
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  const std::string json = LayoutToJson(l);
  EXPECT_NE(json.find(R"("sliding_window":0,"tp_replicas":4})"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("head_dim":64,"dtype":"bf16","sliding_window":0})"), std::string::npos)
      << "a layer of its own rank's heads carries no key: " << json;
  auto back = ParseLayoutJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
  EXPECT_TRUE(*back == l);
  EXPECT_EQ(back->FingerprintHex(), l.FingerprintHex());
  EXPECT_EQ(back->TpShares(Kind::kKV), 4u) << "layer 1 is every rank's own";
  ExpectInvalid(Replace(json, R"("tp_replicas":4)", R"("tp_replicas":3)"),
                {"attention_layers[0].tp_replicas: 3", "must divide tp_size 4"});
  ExpectInvalid(Replace(json, R"("tp_replicas":4)", R"("tp_replicas":-1)"),
                {"attention_layers[0].tp_replicas: -1"});
}

TEST(LayoutJsonTest, OptionalKeysTakeTheirDefaults) {
  auto l = ParseLayoutJson(kMinimal);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->model, "test/tiny");
  EXPECT_EQ(l->page_size_tokens, 16u);
  EXPECT_EQ(l->tp_rank, 0u);
  EXPECT_EQ(l->tp_size, 1u);
  EXPECT_EQ(l->attention_layers[0].dtype, DType::kBf16);
  EXPECT_EQ(l->attention_layers[0].sliding_window, 0u);
  EXPECT_EQ(l->ssm_layers[0].conv_dtype, DType::kBf16);
  EXPECT_EQ(l->ssm_layers[0].ssm_dtype, DType::kFp32);
  // Engine spellings of dtypes are accepted.
  auto aliases = ParseLayoutJson(
      Replace(kMinimal, R"("head_dim": 64)", R"("head_dim": 64, "dtype": "float8_e4m3fn")"));
  ASSERT_TRUE(aliases.ok()) << aliases.status().ToString();
  EXPECT_EQ(aliases->attention_layers[0].dtype, DType::kFp8E4M3);
}

TEST(LayoutJsonTest, SyntaxErrorsNameLineAndColumn) {
  // Line 3 is `  "num_layers" 2,`: the 2 (column 16) should have been a colon.
  ExpectInvalid(Replace(kMinimal, R"("num_layers": 2)", R"("num_layers" 2)"),
                {"line 3, column 16", "expected ':'"});
  ExpectInvalid("", {"line 1, column 1"});
  ExpectInvalid(std::string(kMinimal) + "\n  x", {"line 8, column 3"});
  ExpectInvalid(Replace(kMinimal, "[160, 3]", "[160, 3,]"), {"line 5, column"});
  ExpectInvalid(Replace(kMinimal, R"("num_layers": 2)", R"("num_layers": 1e400)"),
                {"invalid JSON", "1e400"});
}

// Nesting past json_text::kMaxJsonDepth is refused before parsing: 100,000 levels used to
// overflow the stack while the error message rendered the value (SIGSEGV).
TEST(LayoutJsonTest, DeepNestingIsRefusedNamingWhere) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ExpectInvalid(deep, {"line 1, column 65", "nested deeper than 64 levels"});
  std::string objects;
  for (int i = 0; i < 50000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(50000, '}');
  ExpectInvalid(objects, {"line 1, column 321", "nested deeper than 64 levels"});
  // Brackets inside strings do not count; 64 levels are still read (and refused as a layout).
  auto bracketed = ParseLayoutJson(Replace(kMinimal, R"("model": "test/tiny")",
                                           R"("model": ")" + std::string(1000, '[') + R"(")"));
  ASSERT_TRUE(bracketed.ok()) << bracketed.status().ToString();
  EXPECT_EQ(bracketed->model, std::string(1000, '['));
  ExpectInvalid(std::string(64, '[') + std::string(64, ']'), {"layout: expected a JSON object"});
  ExpectInvalid(std::string(65, '[') + std::string(65, ']'), {"column 65", "deeper than 64"});
}

// The duplicate-key check keeps one frame per open container and builds a path only for the
// duplicate it names: long keys at every level used to build a path string per level per key.
TEST(LayoutJsonTest, DuplicateKeysDeepInsideNameTheirPath) {
  ExpectInvalid(R"({"a": [1, {"b": {"c": 1, "c": 2}}]})", {"a[1].b.c: duplicate key"});
  ExpectInvalid(R"({"a": [[], [0, {"x": 1, "x": 1}]]})", {"a[1][1].x: duplicate key"});
  std::string wide = "{";
  const std::string key(4000, 'k');
  for (int level = 0; level < 60; ++level) wide += "\"" + key + std::to_string(level) + "\": {";
  wide += "\"d\": 1, \"d\": 2" + std::string(61, '}');
  ExpectInvalid(wide, {key + "59.d: duplicate key"});
}

TEST(LayoutJsonTest, WrongTypesNameTheKeyPathAndValue) {
  ExpectInvalid(Replace(kMinimal, R"("num_layers": 2)", R"("num_layers": "2")"),
                {"num_layers: '2'", "unsigned 32-bit integer"});
  ExpectInvalid(Replace(kMinimal, R"("num_kv_heads": 4)", R"("num_kv_heads": -4)"),
                {"attention_layers[0].num_kv_heads: -4"});
  ExpectInvalid(Replace(kMinimal, R"("head_dim": 64)", R"("head_dim": 64.0)"),
                {"attention_layers[0].head_dim: 64.0"});
  ExpectInvalid(Replace(kMinimal, R"("head_dim": 64)", R"("head_dim": 4294967296)"),
                {"attention_layers[0].head_dim: 4294967296", "unsigned 32-bit integer"});
  ExpectInvalid(Replace(kMinimal, R"("head_dim": 64)", R"("head_dim": 64, "dtype": 2)"),
                {"attention_layers[0].dtype: 2", "expected a string"});
  ExpectInvalid(Replace(kMinimal, "[160, 3]", "160"),
                {"ssm_layers[0].conv_shape: 160", "array of unsigned 64-bit integers"});
  ExpectInvalid(Replace(kMinimal, "[160, 3]", R"([160, "3"])"),
                {"ssm_layers[0].conv_shape[1]: '3'"});
  ExpectInvalid(Replace(kMinimal, R"("model": "test/tiny")", R"("model": null)"),
                {"model: null", "expected a string"});
  ExpectInvalid(Replace(kMinimal, R"("attention_layers": [)", R"("attention_layers": [5, )"),
                {"attention_layers[0]: 5", "expected an object"});
  ExpectInvalid(R"({"model": "m", "num_layers": 1, "ssm_layers": {"layer_index": 0}})",
                {"ssm_layers: {", "expected an array"});
  ExpectInvalid("[1, 2]", {"layout: expected a JSON object, got array"});
}

TEST(LayoutJsonTest, UnknownDTypesNameTheKeyPath) {
  ExpectInvalid(Replace(kMinimal, R"("ssm_shape": [2, 32, 16])",
                        R"("ssm_shape": [2, 32, 16], "ssm_dtype": "fp13")"),
                {"ssm_layers[0].ssm_dtype: 'fp13'", "unknown dtype", "bf16"});
}

TEST(LayoutJsonTest, UnknownAndDuplicateKeysAreErrors) {
  ExpectInvalid(Replace(kMinimal, R"("num_layers": 2)", R"("num_layers": 2, "page_size": 16)"),
                {"page_size: unknown key", "page_size_tokens"});
  ExpectInvalid(Replace(kMinimal, R"("block": "mamba2")", R"("block": "mamba2", "d_state": 16)"),
                {"ssm_layers[0].d_state: unknown key"});
  ExpectInvalid(Replace(kMinimal, R"("num_layers": 2)", R"("num_layers": 2, "num_layers": 3)"),
                {"num_layers: duplicate key"});
  ExpectInvalid(Replace(kMinimal, R"("head_dim": 64)", R"("head_dim": 64, "head_dim": 32)"),
                {"attention_layers[0].head_dim: duplicate key"});
}

TEST(LayoutJsonTest, MissingRequiredKeysAreErrors) {
  ExpectInvalid(Replace(kMinimal, R"("model": "test/tiny",)", ""), {"model: missing (required)"});
  ExpectInvalid(Replace(kMinimal, R"("block": "mamba2", )", ""),
                {"ssm_layers[0].block: missing (required)"});
  ExpectInvalid(Replace(kMinimal, R"(, "head_dim": 64)", ""),
                {"attention_layers[0].head_dim: missing (required)"});
}

TEST(LayoutJsonTest, TheResultIsValidated) {
  ExpectInvalid(Replace(kMinimal, R"("layer_index": 1)", R"("layer_index": 2)"),
                {"attention_layers[0].layer_index: 2", "must be < num_layers 2"});
  ExpectInvalid(Replace(kMinimal, R"("block": "mamba2")", R"("block": "s4")"),
                {"ssm_layers[0].block: 's4'"});
  ExpectInvalid(
      Replace(kMinimal, R"("num_layers": 2)", R"("num_layers": 2, "page_size_tokens": 0)"),
      {"page_size_tokens: 0"});
}

TEST(LayoutJsonTest, FilesLoadAndErrorsNameThePath) {
  testing::TempDir dir;
  const std::string good = dir.str() + "/good.json";
  WriteFile(good, kMinimal);
  auto l = LoadLayoutFile(good);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->model, "test/tiny");

  const std::string bad = dir.str() + "/bad.json";
  WriteFile(bad, Replace(kMinimal, R"("num_layers": 2)", R"("num_layers" 2)"));
  auto syntax = LoadLayoutFile(bad);
  ASSERT_TRUE(syntax.status().IsInvalidArgument());
  EXPECT_EQ(syntax.status().message().rfind("layout file " + bad + ": line 3, column 16", 0), 0u)
      << syntax.status().message();

  auto missing = LoadLayoutFile(dir.str() + "/absent.json");
  ASSERT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("absent.json"), std::string::npos);

  auto directory = LoadLayoutFile(dir.str());
  ASSERT_TRUE(directory.status().IsIOError()) << directory.status().ToString();
  EXPECT_NE(directory.status().message().find(dir.str()), std::string::npos);

  const std::string huge = dir.str() + "/huge.json";
  int fd = ::open(huge.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, (16 << 20) + 1), 0);  // sparse
  ::close(fd);
  auto too_big = LoadLayoutFile(huge);
  ASSERT_TRUE(too_big.status().IsInvalidArgument()) << too_big.status().ToString();
  EXPECT_NE(too_big.status().message().find("16777217 bytes"), std::string::npos);
}

TEST(LayoutJsonTest, ResolveTriesThePresetThenTheFile) {
  auto preset = ResolveLayout("jamba-v0.1", 32);
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  EXPECT_EQ(preset->page_size_tokens, 32u);
  EXPECT_TRUE(*preset == *LayoutPreset("jamba-v0.1", 32));

  testing::TempDir dir;
  const std::string plain = dir.str() + "/plain.json";
  WriteFile(plain, kMinimal);  // no page_size_tokens: takes the argument
  auto from_file = ResolveLayout(plain, 64);
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(from_file->page_size_tokens, 64u);

  const std::string sized = dir.str() + "/sized.json";
  WriteFile(sized,
            Replace(kMinimal, R"("num_layers": 2)", R"("num_layers": 2, "page_size_tokens": 128)"));
  auto own = ResolveLayout(sized, 16);  // the file's own page size wins
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(own->page_size_tokens, 128u);

  auto neither = ResolveLayout(dir.str() + "/nope.json");
  ASSERT_TRUE(neither.status().IsNotFound()) << neither.status().ToString();
  EXPECT_NE(neither.status().message().find("neither a layout preset"), std::string::npos);
  EXPECT_NE(neither.status().message().find("nope.json"), std::string::npos);
  EXPECT_NE(neither.status().message().find("no such file"), std::string::npos);

  const std::string broken = dir.str() + "/broken.json";
  WriteFile(broken, "{");
  EXPECT_TRUE(ResolveLayout(broken).status().IsInvalidArgument());
}

}  // namespace
}  // namespace cachepawl
