// `cachepawl layout`: presets, files, --json, --list, and exit code 2 with a message on stderr
// for every bad argument.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "store/model_layout.h"
#include "tests/common/test_util.h"
#include "tools/command.h"

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

}  // namespace
}  // namespace cachepawl::tools
