// `cachepawl replay --tp-size N`: rank processes of the real binary attached to one group
// store, the scheduler's depth checked against every rank's on every request, every loaded byte
// checked in its rank; with --kill-rank-every, ranks SIGKILLed mid-request and started again
// leave no partial entry that any rank loads (it would find another rank's missing share).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tools/run_cli.h"

namespace cachepawl::tools {
namespace {

std::vector<std::string> TpReplay(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "replay", "-w",           "chat", "--requests",     "40", "--host-bytes",
      "256M",   "--disk-bytes", "0",    "--device-bytes", "64M"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(ReplayTpTest, RanksAgreeOnEveryDepthAndLoadTheirOwnBytes) {
  const BinaryResult run = RunBinary(CACHEPAWL_BINARY, TpReplay({"--tp-size", "2"}));
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output;
  for (const char* line : {"cachepawl replay --tp-size 2: workload chat",
                           "every rank's depth equal to the scheduler's: yes (0 mismatches)",
                           "wrong bytes: 0; errors: 0", "rank processes killed: 0"}) {
    EXPECT_NE(run.output.find(line), std::string::npos) << line << "\n" << run.output;
  }
  // Something was reused (and so loaded and compared), not only saved.
  EXPECT_EQ(run.output.find("reused 0 "), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("loaded 0 B"), std::string::npos) << run.output;
}

TEST(ReplayTpTest, RanksKilledMidRequestLeaveNoPartialEntryThatAnyRankLoads) {
  const BinaryResult run =
      RunBinary(CACHEPAWL_BINARY, TpReplay({"--tp-size", "4", "--layout", "llama-3.1-8b",
                                            "--kill-rank-every", "3", "--seed", "5"}));
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output;
  EXPECT_NE(run.output.find("wrong bytes: 0;"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("(0 mismatches)"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("rank processes killed: 0;"), std::string::npos) << run.output;
}

// DeepSeek-V3's latent is the same on every rank: the group store keeps it once (one rank's Save
// copies it, the others' count on it), every rank loads that copy, and ranks killed while
// loading or saving leave no wrong byte. Every rank looks up before any saves (as an engine's
// ranks, which run the forward pass together), so each finds the scheduler's depth.
TEST(ReplayTpTest, AnMlaModelsRanksShareOneLatentCopy) {
  std::vector<std::string> args = TpReplay(
      {"--tp-size", "4", "--layout", "deepseek-v3", "--kill-rank-every", "4", "--seed", "3"});
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--device-bytes") args[i + 1] = "1G";  // 1.1 MiB a page
    if (args[i] == "--requests") args[i + 1] = "24";
  }
  const BinaryResult run = RunBinary(CACHEPAWL_BINARY, args);
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output;
  for (const char* line : {"a group record 1.1 MiB, 1 of the 4 ranks' KV distinct",
                           "(0 mismatches)", "wrong bytes: 0;"}) {
    EXPECT_NE(run.output.find(line), std::string::npos) << line << "\n" << run.output;
  }
  EXPECT_EQ(run.output.find("rank processes killed: 0;"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("loaded 0 B"), std::string::npos) << run.output;
}

TEST(ReplayTpTest, WithADiskTierEveryRankLoadsTheSameDiskHits) {
  // Host memory for a few prompts: most hits come from disk, every rank loading the same group
  // records at once (the first rank's Load reads them, the others wait for it, none is Busy).
  // A Load the host tier has no room for (NoSpace) is a refusal the rank recomputes, counted
  // apart, as in the single-process replay.
  std::vector<std::string> args = TpReplay({"--tp-size", "2"});
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--host-bytes") args[i + 1] = "128M";
    if (args[i] == "--disk-bytes") args[i + 1] = "512M";
  }
  const BinaryResult run = RunBinary(CACHEPAWL_BINARY, args);
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output;
  EXPECT_NE(run.output.find("(0 mismatches)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("wrong bytes: 0; errors: 0"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("Busy"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("reused 0 "), std::string::npos) << run.output;
}

TEST(ReplayTpTest, ArgumentsThatCannotGoTogetherAreRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tp-size", "0"}, "--tp-size 0: must be 1 to 8"},
      {{"--tp-size", "2", "--processes", "2"}, "--tp-size 2: with --processes"},
      {{"--tp-size", "2", "--concurrency", "4"}, "--tp-size 2: with --concurrency"},
      {{"--tp-size", "3"}, "--tp-size 3: attention_layers[0].num_kv_heads: 8"},
      {{"--kill-rank-every", "3"}, "--kill-rank-every: needs --tp-size"},
  };
  for (const auto& [extra, want] : cases) {
    const BinaryResult run = RunBinary(CACHEPAWL_BINARY, TpReplay(extra));
    EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 2) << extra[0] << run.output;
    EXPECT_NE(run.output.find(want), std::string::npos) << want << "\n" << run.output;
  }
}

}  // namespace
}  // namespace cachepawl::tools
