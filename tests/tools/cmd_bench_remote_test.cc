// `cachepawl bench remote`: argument errors, and a tiny run against a real Redis Cluster
// (tests/common/redis_test_cluster.h) whose JSON has every documented key, with no wrong or
// failed record and no key left behind. No timing is asserted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/common/redis_test_cluster.h"
#include "tests/tools/run_cli.h"

namespace cachepawl::tools {
namespace {

CliResult RunBench(std::vector<std::string> args) {
  args.insert(args.begin(), {"bench", "remote"});
  return RunCli(args);
}

TEST(RemoteBenchTest, BadArgumentsAreUsageErrors) {
  CliResult r = RunBench({"--remote", "redis://127.0.0.1:1", "--records", "5000"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--records '5000'"), std::string::npos) << r.err;
  r = RunBench({"--remote", "redis://127.0.0.1:1", "--threads", "0"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--threads 0"), std::string::npos) << r.err;
  r = RunBench({"--remote", "http://nowhere"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("http://nowhere"), std::string::npos) << r.err;
  r = RunBench({"--remote", "redis://127.0.0.1:1", "--password-env", "CACHEPAWL_UNSET_VARIABLE"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("CACHEPAWL_UNSET_VARIABLE"), std::string::npos) << r.err;
  // Nothing listens on port 1: a clear failure naming the seed.
  r = RunBench({"--remote", "redis://127.0.0.1:1", "--mib", "1"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
}

class RemoteBenchClusterTest : public testing::RedisClusterFixture {};

TEST_F(RemoteBenchClusterTest, SmallRunOnAClusterPrintsEveryRowAndCleansUp) {
  CliResult r = RunBench({"--remote", cluster_->Seeds(), "--json", "--records", "64K,1M", "--mib",
                          "4", "--batch-mib", "1", "--threads", "2", "--repeat", "2"});
  ASSERT_EQ(r.code, kExitOk) << r.err << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"remote", "threads", "mib_per_size", "batch_mib", "repeat", "date",
                          "goal_ratio", "wrong_records", "failed_records", "rows"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["wrong_records"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["failed_records"].get<uint64_t>(), 0u);
  ASSERT_EQ(j["rows"].size(), 4u);
  for (const auto& row : j["rows"]) {
    for (const char* key : {"op", "record_bytes", "records", "raw_mb_s", "ours_mb_s", "ratio",
                            "ratio_min", "ratio_max"}) {
      EXPECT_TRUE(row.contains(key)) << key;
    }
    EXPECT_GT(row["raw_mb_s"].get<double>(), 0);
    EXPECT_GT(row["ours_mb_s"].get<double>(), 0);
  }
  // Both sides deleted their keys.
  for (size_t node = 0; node < 3; ++node) {
    auto size = cluster_->Command(node, {"DBSIZE"});
    ASSERT_TRUE(size.ok()) << size.status().ToString();
    EXPECT_EQ(size->integer, 0) << "node " << node;
  }
}

}  // namespace
}  // namespace cachepawl::tools
