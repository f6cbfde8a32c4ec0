// `cachepawl layout`: presets, files, --json, --sizes, --list, and exit code 2 with a message on
// stderr for every bad argument.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "layouts/layout_from_hf.h"
#include "layouts/layout_presets.h"
#include "layouts/layout_tp.h"
#include "tests/common/test_util.h"
#include "tools/command.h"
#include "vocab/model_layout.h"

namespace cachepawl::tools {
namespace {

struct Result {
  int code;
  std::string out, err;
};

Result RunCli(const std::vector<std::string>& argv) {
  std::istringstream in;
  std::ostringstream out, err;
  CommandIo io{in, out, err, false};
  int code = RunCommandLine(argv, io);
  return {code, out.str(), err.str()};
}

void ExpectUsageError(const std::vector<std::string>& argv, const std::string& message) {
  Result r = RunCli(argv);
  EXPECT_EQ(r.code, kExitUsage) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find(message), std::string::npos) << "'" << message << "' not in: " << r.err;
}

TEST(CmdLayoutTest, ListPrintsThePresetNamesOnePerLine) {
  Result r = RunCli({"layout", "--list"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::string want;
  for (const std::string& n : LayoutPresetNames()) want += n + "\n";
  EXPECT_EQ(r.out, want);
  EXPECT_NE(r.out.find("jamba-v0.1\n"), std::string::npos);
  EXPECT_TRUE(r.err.empty());
}

TEST(CmdLayoutTest, PrintsThePresetDescription) {
  Result r = RunCli({"layout", "jamba-v0.1"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, LayoutPreset("jamba-v0.1")->Describe());
  EXPECT_NE(r.out.find("kv page bytes:    262144"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mamba slot bytes: 16056320"), std::string::npos) << r.out;

  Result p32 = RunCli({"layout", "--page-size", "32", "jamba-v0.1"});
  ASSERT_EQ(p32.code, kExitOk) << p32.err;
  EXPECT_EQ(p32.out, LayoutPreset("jamba-v0.1", 32)->Describe());
}

TEST(CmdLayoutTest, JsonOutputIsALayoutFileTheCommandReadsBack) {
  Result json = RunCli({"layout", "qwen3-next-80b-a3b", "--json"});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  EXPECT_EQ(json.out, LayoutToJson(*LayoutPreset("qwen3-next-80b-a3b")));

  testing::TempDir dir;
  const std::string path = dir.str() + "/qwen.json";
  std::ofstream(path) << json.out;
  Result from_file = RunCli({"layout", path});
  ASSERT_EQ(from_file.code, kExitOk) << from_file.err;
  EXPECT_EQ(from_file.out, LayoutPreset("qwen3-next-80b-a3b")->Describe());

  // --page-size overrides the page size the file names.
  Result p64 = RunCli({"layout", path, "-p", "64"});
  ASSERT_EQ(p64.code, kExitOk) << p64.err;
  EXPECT_EQ(p64.out, LayoutPreset("qwen3-next-80b-a3b", 64)->Describe());
}

TEST(CmdLayoutTest, WindowedLayoutsPrintTheirRecordsAndSizes) {
  // Samba: every attention layer windowed (2048 tokens): the window record is the whole page.
  const ModelLayout samba = *LayoutPreset("samba-1.3b");
  Result text = RunCli({"layout", "samba-1.3b"});
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_EQ(text.out, samba.Describe());
  EXPECT_NE(text.out.find("windowed:        " + std::to_string(samba.KvPageBytes())),
            std::string::npos)
      << text.out;

  Result sizes = RunCli({"layout", "samba-1.3b", "--sizes"});
  ASSERT_EQ(sizes.code, kExitOk) << sizes.err;
  const auto j = nlohmann::json::parse(sizes.out);
  EXPECT_EQ(j["model"], samba.model);
  EXPECT_EQ(j["kv_page_bytes"], samba.KvPageBytes());
  EXPECT_EQ(j["full_kv_record_bytes"], 0u);
  EXPECT_EQ(j["window_kv_record_bytes"], samba.KvPageBytes());
  EXPECT_EQ(j["window_tokens"], 2048u);
  EXPECT_EQ(j["window_pages"], 128u);
  EXPECT_EQ(j["state_bytes"], samba.MambaSlotBytes());
  EXPECT_EQ(j["fingerprint"], samba.FingerprintHex());

  // A page size that does not divide the window rounds the pages up.
  Result p48 = RunCli({"layout", "samba-1.3b", "--sizes", "-p", "48"});
  ASSERT_EQ(p48.code, kExitOk) << p48.err;
  EXPECT_EQ(nlohmann::json::parse(p48.out)["window_pages"], 43u);  // ceil(2048 / 48)

  // Without windowed layers: the full-attention record is the page, no window.
  Result jamba = RunCli({"layout", "jamba-v0.1", "--sizes"});
  ASSERT_EQ(jamba.code, kExitOk) << jamba.err;
  const auto k = nlohmann::json::parse(jamba.out);
  EXPECT_EQ(k["full_kv_record_bytes"], 262144u);
  EXPECT_EQ(k["kv_page_bytes"], 262144u);
  EXPECT_EQ(k["window_kv_record_bytes"], 0u);
  EXPECT_EQ(k["window_tokens"], 0u);
  EXPECT_EQ(k["window_pages"], 0u);

  ExpectUsageError({"layout", "samba-1.3b", "--sizes", "--json"}, "--json and --sizes");
  ExpectUsageError({"layout", "--list", "--sizes"}, "--list takes no other arguments");
}

TEST(CmdLayoutTest, HelpExitsZero) {
  Result r = RunCli({"layout", "--help"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("--list"), std::string::npos) << r.out;
}

TEST(CmdLayoutTest, BadArgumentsExitTwoWithAClearMessage) {
  ExpectUsageError({"layout"}, "expected a preset name or a layout file");
  ExpectUsageError({"layout", "jamba-v9"}, "'jamba-v9' is neither a layout preset");
  ExpectUsageError({"layout", "jamba-v0.1", "--page-size", "0"}, "page_size_tokens: 0");
  ExpectUsageError({"layout", "jamba-v0.1", "--page-size", "many"}, "--page-size");
  ExpectUsageError({"layout", "--list", "jamba-v0.1"}, "--list takes no other arguments");
  ExpectUsageError({"layout", "--bogus"}, "bogus");
  ExpectUsageError({"layout", "a", "b"}, "cachepawl layout:");
}

TEST(CmdLayoutTest, BadFilesExitTwoNamingTheFileAndTheFault) {
  testing::TempDir dir;
  const std::string syntax = dir.str() + "/syntax.json";
  std::ofstream(syntax) << "{\n  \"model\": \"m\",\n  \"num_layers\": 2\n  \"ssm_layers\": []\n}\n";
  // The position is that of the last character read: the end of the unexpected "ssm_layers".
  ExpectUsageError({"layout", syntax}, syntax + ": line 4, column 14");

  const std::string dtype = dir.str() + "/dtype.json";
  std::ofstream(dtype) << R"({"model": "m", "num_layers": 1, "attention_layers": [
      {"layer_index": 0, "num_kv_heads": 1, "head_dim": 8, "dtype": "fp13"}]})";
  ExpectUsageError({"layout", dtype}, "attention_layers[0].dtype: 'fp13' (unknown dtype");

  ExpectUsageError({"layout", dir.str()}, "Is a directory");
}

// A small hybrid config.json (Bamba: attention at layers 1 and 3, Mamba-2 elsewhere).
constexpr char kBambaConfig[] = R"json({"model_type": "bamba", "_name_or_path": "org/tiny",
  "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "attn_layer_indices": [1, 3], "mamba_n_heads": 8, "mamba_d_state": 16, "mamba_n_groups": 1,
  "time_step_limit": [0.0, Infinity]})json";

TEST(CmdLayoutTest, FromHfConfigPrintsTheLayoutTransformersKeeps) {
  testing::TempDir dir;
  const std::string path = dir.str() + "/config.json";
  std::ofstream(path) << kBambaConfig;
  Result r = RunCli({"layout", "--from-hf-config", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  auto want = LayoutFromHfConfigFile(path, HfLayoutOptions{});
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  EXPECT_EQ(r.out, want->Describe());
  EXPECT_NE(r.out.find("org/tiny"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[0] mamba2 conv=[544, 4] bf16 ssm=[8, 64, 16] fp32"), std::string::npos)
      << r.out;

  Result json =
      RunCli({"layout", "--from-hf-config", path, "--json", "--dtype", "fp16", "--state-dtype",
              "bf16", "--convention", "sglang", "--page-size", "32", "--model", "mine"});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  HfLayoutOptions o;
  o.cache_dtype = DType::kFp16;
  o.state_dtype = DType::kBf16;
  o.convention = StateConvention::kSglang;
  o.page_size_tokens = 32;
  o.model = "mine";
  EXPECT_EQ(json.out, LayoutToJson(*LayoutFromHfConfigFile(path, o)));
  EXPECT_NE(json.out.find(R"("conv_shape":[544,3],"conv_dtype":"fp16")"), std::string::npos)
      << json.out;
  // What --json printed is a layout file the command reads back.
  const std::string layout_file = dir.str() + "/layout.json";
  std::ofstream(layout_file) << json.out;
  Result back = RunCli({"layout", layout_file});
  ASSERT_EQ(back.code, kExitOk) << back.err;
  EXPECT_EQ(back.out, LayoutFromHfConfigFile(path, o)->Describe());
}

TEST(CmdLayoutTest, FromHfConfigUsageErrorsNameTheFlagAndValue) {
  testing::TempDir dir;
  const std::string path = dir.str() + "/config.json";
  std::ofstream(path) << kBambaConfig;
  ExpectUsageError({"layout", "--from-hf-config", path, "--dtype", "fp13"},
                   "--dtype: 'fp13' (unknown dtype)");
  ExpectUsageError({"layout", "--from-hf-config", path, "--state-dtype", "f32x"},
                   "--state-dtype: 'f32x' (unknown dtype)");
  ExpectUsageError({"layout", "--from-hf-config", path, "--convention", "vllm"},
                   "--convention: 'vllm' (expected transformers or sglang)");
  ExpectUsageError({"layout", "--from-hf-config", path, "--page-size", "0"},
                   "page_size_tokens: 0 (must be > 0)");
  ExpectUsageError({"layout", "jamba-v0.1", "--from-hf-config", path},
                   "--from-hf-config takes no preset or layout file (got 'jamba-v0.1')");
  ExpectUsageError({"layout", "jamba-v0.1", "--dtype", "fp16"},
                   "--dtype goes with --from-hf-config");
  ExpectUsageError({"layout", "jamba-v0.1", "--convention", "sglang"},
                   "--convention goes with --from-hf-config");
  ExpectUsageError({"layout", "--list", "--from-hf-config", path}, "--list takes no other");
  ExpectUsageError({"layout", "--from-hf-config"}, "--from-hf-config");
  const std::string missing = dir.str() + "/none.json";
  ExpectUsageError({"layout", "--from-hf-config", missing},
                   "hf config " + missing + ": open: no such file");
  const std::string bad = dir.str() + "/bad.json";
  std::ofstream(bad) << R"({"model_type": "bamba", "num_key_value_heads": 0})";
  ExpectUsageError({"layout", "--from-hf-config", bad},
                   "hf config " + bad + ": num_key_value_heads: 0 (must be > 0)");
  const std::string gpt2 = dir.str() + "/gpt2.json";
  std::ofstream(gpt2) << R"({"model_type": "gpt2"})";
  ExpectUsageError({"layout", "--from-hf-config", gpt2}, "model_type: 'gpt2'");
}

TEST(CmdLayoutTest, TpSizePrintsOneRanksShareOfAPresetAFileOrAConfig) {
  const ModelLayout whole = *LayoutPreset("jamba-v0.1");
  Result r = RunCli({"layout", "jamba-v0.1", "--tp-size", "4", "--tp-rank", "3"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, ShardLayout(whole, 4, 3)->Describe());
  EXPECT_NE(r.out.find("tensor parallel:  rank 3 of 4"), std::string::npos) << r.out;
  Result rank0 = RunCli({"layout", "jamba-v0.1", "--tp-size", "4", "--json"});
  ASSERT_EQ(rank0.code, kExitOk) << rank0.err;
  EXPECT_EQ(rank0.out, LayoutToJson(*ShardLayout(whole, 4, 0))) << "--tp-rank defaults to 0";
  Result sizes = RunCli({"layout", "jamba-v0.1", "--tp-size", "2", "--sizes"});
  ASSERT_EQ(sizes.code, kExitOk) << sizes.err;
  const auto j = nlohmann::json::parse(sizes.out);
  EXPECT_EQ(j["kv_page_bytes"].get<uint64_t>(), whole.KvPageBytes() / 2);
  EXPECT_EQ(j["state_bytes"].get<uint64_t>(), whole.MambaSlotBytes() / 2);

  testing::TempDir dir;
  const std::string config = dir.str() + "/config.json";
  std::ofstream(config) << R"({"model_type": "jamba", "num_hidden_layers": 2, "hidden_size": 256,
    "num_attention_heads": 4, "num_key_value_heads": 2, "attn_layer_period": 2,
    "attn_layer_offset": 1})";
  Result hf = RunCli({"layout", "--from-hf-config", config, "--tp-size", "2", "--tp-rank", "1"});
  ASSERT_EQ(hf.code, kExitOk) << hf.err;
  EXPECT_NE(hf.out.find("rank 1 of 2"), std::string::npos) << hf.out;
  EXPECT_NE(hf.out.find("kv_heads=1 head_dim=64"), std::string::npos) << hf.out;
  // A rank's layout file is itself a share: --tp-size on it is refused.
  const std::string file = dir.str() + "/rank.json";
  std::ofstream(file) << rank0.out;
  ExpectUsageError({"layout", file, "--tp-size", "2"}, "already one rank's");

  ExpectUsageError({"layout", "samba-1.3b", "--tp-size", "4"},
                   "--tp-size 4 --tp-rank 0: InvalidArgument: attention_layers[0].num_kv_heads: "
                   "18 (tp_size 4 neither divides it nor is a multiple of it)");
  ExpectUsageError({"layout", "jamba-v0.1", "--tp-size", "2", "--tp-rank", "2"},
                   "tp_rank: 2 (must be < tp_size 2)");
  ExpectUsageError({"layout", "jamba-v0.1", "--tp-size", "0"}, "tp_size: 0");
  ExpectUsageError({"layout", "jamba-v0.1", "--tp-rank", "1"}, "--tp-rank goes with --tp-size");
  ExpectUsageError({"layout", "jamba-v0.1", "--tp-size", "two"}, "--tp-size");
  ExpectUsageError({"layout", "--list", "--tp-size", "2"}, "--list takes no other arguments");
}

}  // namespace
}  // namespace cachepawl::tools
