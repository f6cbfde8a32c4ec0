// RunReplay's driving logic (passes, pacing, crash mode) over the in-memory store. The real
// store's crash behaviour is tested in replay_end_to_end_test.cc.
#include "tools/replay/replay_runner.h"

#include <gtest/gtest.h>

#include <sstream>

#include "tests/tools/replay_fake_store.h"
#include "tests/tools/replay_test_layouts.h"
#include "tools/replay/replay_workloads.h"

namespace cachepawl::tools {
namespace {

using test_layouts::Engine;

using fakes::MapStore;

StoreFactory FakeFactory(uint64_t device_bytes = 1 << 20) {
  return [device_bytes]() -> StatusOr<std::unique_ptr<Store>> {
    return std::unique_ptr<Store>(
        new MapStore(test_layouts::Small(), {.device_pool_bytes = device_bytes}));
  };
}

RequestSource ChatSource(size_t n) {
  return [n](uint64_t pass) {
    WorkloadOptions o;
    o.seed = 100 + pass;
    o.requests = n;
    o.block_size_tokens = 64;
    return GenerateWorkload("chat", o).value();
  };
}

TEST(ReplayRunnerTest, OnePassReplaysEveryRequestOnce) {
  auto r = RunReplay(FakeFactory(), Engine(), ChatSource(25), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->totals.requests, 25u);
  EXPECT_EQ(r->replayed, ChatSource(25)(0));
  EXPECT_GT(r->totals.hit_pages_total(), 0u);
  EXPECT_EQ(r->totals.wrong_bytes, 0u);
  EXPECT_EQ(r->store.lookups, 25u);
  EXPECT_EQ(r->crashes, 0u);
}

// One very long request used to print nothing until it ended (minutes); a ticker keeps the
// progress line coming with the request in flight.
TEST(ReplayRunnerTest, ALongRequestStillPrintsProgress) {
  TraceRequest big;
  for (uint64_t id = 1; id <= 2000; ++id) big.hash_ids.push_back(id);  // 128,000 tokens
  big.input_length = 2000 * 64;
  RequestSource one = [big](uint64_t) { return std::vector<TraceRequest>{big}; };
  std::ostringstream progress;
  ReplayRunOptions o;
  o.progress = &progress;
  o.progress_interval_seconds = 0.001;
  auto r = RunReplay(FakeFactory(64 << 20), Engine(), one, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->totals.requests, 1u);
  EXPECT_NE(progress.str().find("replay: 0/1 requests"), std::string::npos) << progress.str();
  EXPECT_NE(progress.str().find("1 in flight, the longest for "), std::string::npos)
      << progress.str();
  EXPECT_NE(progress.str().find("(2000 blocks)"), std::string::npos) << progress.str();
}

TEST(ReplayRunnerTest, SoakLoopsPassesUntilTheDeadline) {
  ReplayRunOptions o;
  o.soak_seconds = 0.3;
  auto r = RunReplay(FakeFactory(), Engine(), ChatSource(3), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->wall_seconds, 0.3);  // only the deadline ends a soak
  ASSERT_GE(r->replayed.size(), 3u);
  // Pass k is the source's pass k.
  const auto pass1 = ChatSource(3)(1);
  for (size_t i = 3; i < std::min<size_t>(6, r->replayed.size()); ++i) {
    EXPECT_EQ(r->replayed[i], pass1[i - 3]);
  }
}

TEST(ReplayRunnerTest, SpeedWaitsForTheTimestamps) {
  RequestSource source = [](uint64_t) {
    auto requests = ChatSource(2)(0);
    requests[0].timestamp_ms = 1000;
    requests[1].timestamp_ms = 1400;  // 400 ms later; at 4x, 100 ms
    return requests;
  };
  ReplayRunOptions o;
  o.speed = 4;
  auto r = RunReplay(FakeFactory(), Engine(), source, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->wall_seconds, 0.1);
  o.speed = -1;
  EXPECT_NE(RunReplay(FakeFactory(), Engine(), source, o).status().message().find("--speed"),
            std::string::npos);
}

TEST(ReplayRunnerTest, CrashModeKillsReopensAndFinishesEveryRequestOnce) {
  ReplayRunOptions o;
  o.crash_every = 3;
  o.seed = 5;
  o.max_kill_delay_ms = 2;
  auto r = RunReplay(FakeFactory(), Engine(), ChatSource(30), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->crashes, 0u);
  EXPECT_EQ(r->totals.requests, 30u);
  EXPECT_EQ(r->replayed, ChatSource(30)(0));
  EXPECT_EQ(r->totals.wrong_bytes, 0u);
  EXPECT_EQ(r->totals.store_errors, 0u);
  EXPECT_GE(r->store.lookups, 30u);  // summed over the store processes
}

TEST(ReplayRunnerTest, CrashModeKillsDuringOpenStillFinishEveryRequestOnce) {
  ReplayRunOptions o;
  o.crash_every = 3;
  o.seed = 9;
  o.max_kill_delay_ms = 2;
  o.kill_during_open_fraction = 0.5;
  auto r = RunReplay(FakeFactory(), Engine(), ChatSource(12), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->crashes, 0u);
  EXPECT_LE(r->kills_during_open, r->crashes);
  EXPECT_EQ(r->totals.requests, 12u);
  EXPECT_EQ(r->replayed, ChatSource(12)(0));
  EXPECT_EQ(r->totals.wrong_bytes, 0u);
  o.kill_during_open_fraction = -0.1;
  EXPECT_NE(RunReplay(FakeFactory(), Engine(), ChatSource(2), o)
                .status()
                .message()
                .find("--kill-during-open: -0.1"),
            std::string::npos);
}

TEST(ReplayRunnerTest, CrashModeReportsAStoreThatCannotOpen) {
  StoreFactory broken = []() -> StatusOr<std::unique_ptr<Store>> {
    return Status::Corruption("catalog: bad magic");
  };
  ReplayRunOptions o;
  o.crash_every = 2;
  auto r = RunReplay(broken, Engine(), ChatSource(5), o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  EXPECT_NE(r.status().message().find("reopening the store: catalog: bad magic"), std::string::npos)
      << r.status().ToString();
  auto in_process = RunReplay(broken, Engine(), ChatSource(5), {});
  EXPECT_TRUE(in_process.status().IsCorruption());
}

TEST(ReplayRunnerTest, AnEngineFailureEndsTheRunWithItsReason) {
  ReplayRunOptions o;
  auto r = RunReplay(FakeFactory(/*device_bytes=*/4096), Engine(), ChatSource(5), o);
  EXPECT_TRUE(r.status().IsNoSpace()) << r.status().ToString();
  o.crash_every = 2;
  auto crashing = RunReplay(FakeFactory(4096), Engine(), ChatSource(5), o);
  EXPECT_TRUE(crashing.status().IsNoSpace()) << crashing.status().ToString();
  EXPECT_NE(crashing.status().message().find("--device-bytes"), std::string::npos);
}

}  // namespace
}  // namespace cachepawl::tools
