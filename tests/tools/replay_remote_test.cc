// `cachepawl replay --remote --replica I/N`: two engine replicas behind a round-robin router
// share one real Redis Cluster (tests/common/redis_test_cluster.h); the second serves hits the
// first saved, every byte verified. Argument errors name the flag and value.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tests/common/redis_test_cluster.h"
#include "tests/tools/run_cli.h"

namespace cachepawl::tools {
namespace {

std::vector<std::string> ReplayArgs(const std::string& seeds, const std::string& replica) {
  return {"replay",       "-w",    "chat",           "-n",  "40",       "--host-bytes", "128M",
          "--disk-bytes", "0",     "--device-bytes", "64M", "--remote", seeds,          "--replica",
          replica,        "--json"};
}

TEST(RemoteReplayTest, BadRemoteArgumentsAreUsageErrors) {
  CliResult r = RunCli({"replay", "-w", "chat", "--replica", "2/2"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--replica: '2/2'"), std::string::npos) << r.err;
  r = RunCli({"replay", "-w", "chat", "--replica", "1"});
  EXPECT_EQ(r.code, kExitUsage);
  r = RunCli({"replay", "-w", "chat", "--remote-write-policy", "back"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--remote-write-policy: 'back'"), std::string::npos) << r.err;
  r = RunCli({"replay", "-w", "chat", "--remote", "http://x"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("http://x"), std::string::npos) << r.err;
}

class RemoteReplayClusterTest : public testing::RedisClusterFixture {};

TEST_F(RemoteReplayClusterTest, TwoReplicasShareOneClusterEveryByteVerified) {
  const std::string seeds = cluster_->Seeds();
  const CliResult first = RunCli(ReplayArgs(seeds, "0/2"));
  ASSERT_EQ(first.code, kExitOk) << first.err << first.out;
  const CliResult second = RunCli(ReplayArgs(seeds, "1/2"));
  ASSERT_EQ(second.code, kExitOk) << second.err << second.out;
  const auto a = nlohmann::json::parse(first.out), b = nlohmann::json::parse(second.out);
  for (const auto* j : {&a, &b}) {
    EXPECT_TRUE((*j)["ok"].get<bool>());
    EXPECT_EQ((*j)["wrong_bytes"].get<uint64_t>(), 0u);
    EXPECT_EQ((*j)["requests"].get<uint64_t>(), 20u);  // every other request of 40
    ASSERT_TRUE(j->contains("remote"));
  }
  EXPECT_GT(a["remote"]["writes"].get<uint64_t>(), 0u);
  // The second replica's conversations continue the first's: it reuses what the first saved.
  EXPECT_GT(b["remote"]["loaded"].get<uint64_t>(), 0u);
  EXPECT_GT(b["hit_rate_by_tier"]["remote"]["pages"].get<double>(), 0.0);
  EXPECT_EQ(b["remote"]["load_failures"].get<uint64_t>(), 0u);
}

TEST_F(RemoteReplayClusterTest, ReplicasRunsTheReplicaProcessesAtOnce) {
  std::vector<std::string> args = ReplayArgs(cluster_->Seeds(), "0/2");
  args.erase(args.begin());  // "replay": RunBinary gets it below
  const auto replica = std::find(args.begin(), args.end(), "--replica");
  args.erase(replica, replica + 2);
  args.insert(args.begin(), "replay");
  args.push_back("--replicas");
  args.push_back("2");
  const BinaryResult r = RunBinary(CACHEPAWL_BINARY, args);
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t start = r.output.rfind("{\n  \"ok\"");
  ASSERT_NE(start, std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(start));
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_EQ(j["replicas"].size(), 2u);
  // Running at once, which replica finds what the other saved depends on timing: only the
  // bytes and the writes are checked here (the sequential test above checks remote hits).
  for (const auto& rep : j["replicas"]) {
    ASSERT_TRUE(rep.is_object());
    EXPECT_EQ(rep["requests"].get<uint64_t>(), 20u);
    EXPECT_EQ(rep["wrong_bytes"].get<uint64_t>(), 0u);
    EXPECT_EQ(rep["remote"]["load_failures"].get<uint64_t>(), 0u);
    EXPECT_GT(rep["remote"]["writes"].get<uint64_t>(), 0u);
  }
  // Refused combinations name the flag.
  const CliResult bad = RunCli({"replay", "-w", "chat", "--replicas", "2"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("--replicas without --remote"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace cachepawl::tools
