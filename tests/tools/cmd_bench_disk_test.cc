// `cachepawl bench disk`: argument errors, and a tiny run whose JSON has every documented key
// (docs/PERFORMANCE.md, "Disk"). No timing is asserted.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/common/test_util.h"
#include "tools/command.h"

namespace cachepawl::tools {
namespace {

struct Result {
  int code;
  std::string out, err;
};

Result RunBench(std::vector<std::string> args) {
  args.insert(args.begin(), {"bench", "disk"});
  std::istringstream in;
  std::ostringstream out, err;
  CommandIo io{in, out, err, false};
  const int code = RunCommandLine(args, io);
  return {code, out.str(), err.str()};
}

TEST(CmdBenchDiskTest, BadArgumentsAreUsageErrors) {
  testing::TempDir dir;
  Result r = RunBench({"--dir", dir.str(), "--records", "kv-7k"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("kv-7k"), std::string::npos) << r.err;
  r = RunBench({"--dir", (dir.path() / "missing").string()});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("not a folder"), std::string::npos) << r.err;
  r = RunBench({"--dir", dir.str(), "--queue-depth", "0"});
  EXPECT_EQ(r.code, kExitUsage);
  r = RunBench({"--dir", dir.str(), "--watchdog", "-5s"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--watchdog: '-5s'"), std::string::npos) << r.err;
}

TEST(CmdBenchDiskTest, SmallRunPrintsEveryRowAndCleansUp) {
  testing::TempDir dir;
  Result r = RunBench(
      {"--dir", dir.str(), "--json", "--mib", "16", "--repeat", "2", "--records", "kv-64k"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"dir", "file_system", "queue_depth", "mib_per_shape", "repeat", "date",
                          "goal_ratio", "failed_reads", "rows"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["failed_reads"].get<int>(), 0);
  ASSERT_EQ(j["rows"].size(), 4u);
  std::set<std::string> ops;
  for (const auto& row : j["rows"]) {
    for (const char* key : {"record", "record_bytes", "op", "queue_depth", "records", "raw_mb_s",
                            "ours_mb_s", "ratio", "ratio_min", "ratio_max"}) {
      EXPECT_TRUE(row.contains(key)) << key;
    }
    EXPECT_EQ(row["record_bytes"].get<uint64_t>(), 65536u);
    EXPECT_GT(row["raw_mb_s"].get<double>(), 0);
    EXPECT_GT(row["ours_mb_s"].get<double>(), 0);
    ops.insert(row["op"].get<std::string>() + "@" + std::to_string(row["queue_depth"].get<int>()));
  }
  EXPECT_EQ(ops, (std::set<std::string>{"write_seq@32", "read_seq@32", "read_random@1",
                                        "read_random@32"}));
  // Nothing is left behind in --dir.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace cachepawl::tools
