// The stress driver (tools/stress/stress.h) against the real store: 16 threads over tiny tiers,
// every operation run and every loaded byte verified; the other kinds of layout; the watchdog.
#include "tools/stress/stress.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/common/test_util.h"
#include "tests/tools/replay_test_layouts.h"

namespace cachepawl::tools {
namespace {

// A short run that ends by operation count, not by time: 16 threads, tiers of 4 and 16 MiB
// against a working set of about 120 MiB.
StressOptions Short(uint32_t ops_per_thread) {
  StressOptions o;
  o.threads = 16;
  o.duration_seconds = 600;  // the operation count ends it
  o.ops_per_thread = ops_per_thread;
  o.host_bytes = 4 << 20;
  o.disk_bytes = 16 << 20;
  o.device_bytes = 32 << 20;
  o.seed = testing::SeedFromEnv(7);
  return o;
}

std::string Describe(const StressReport& r) {
  std::ostringstream out;
  PrintStressTable(r, out);
  return out.str();
}

void ExpectClean(const StressReport& r) {
  EXPECT_TRUE(r.ok()) << Describe(r);
  EXPECT_EQ(r.wrong_bytes, 0u) << Describe(r);
  EXPECT_EQ(r.wrong_records, 0u);
  EXPECT_EQ(r.unexpected_errors, 0u) << Describe(r);
  EXPECT_FALSE(r.stalled) << r.stall_report;
  EXPECT_GT(r.records_verified, 0u) << Describe(r);
}

TEST(StressTest, SixteenThreadsRunEveryOperationWithEvictionsAndNoWrongByte) {
  for (WritePolicy policy : {WritePolicy::kWriteBack, WritePolicy::kWriteThrough}) {
    SCOPED_TRACE(WritePolicyName(policy));
    StressOptions o = Short(600);
    o.write_policy = policy;
    auto report = RunStress(o);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    const StressReport& r = *report;
    ExpectClean(r);
    for (int op = 0; op < kNumRandomStressOps; ++op) {
      EXPECT_GT(r.ops[op], 0u) << StressOpName(static_cast<StressOp>(op)) << "\n" << Describe(r);
    }
    EXPECT_EQ(r.ops[static_cast<int>(StressOp::kFinish)], 16u);
    EXPECT_EQ(r.ops[static_cast<int>(StressOp::kClose)], 1u);
    EXPECT_EQ(r.ops[static_cast<int>(StressOp::kStuck)], 0u);
    // Both tiers were under pressure, and loads of locked hits were checked.
    EXPECT_GT(r.evictions_by_tier[static_cast<int>(Tier::kHost)], 0u) << Describe(r);
    EXPECT_GT(r.evictions_by_tier[static_cast<int>(Tier::kDisk)], 0u) << Describe(r);
    EXPECT_GT(r.strict_locked_loads, 0u) << Describe(r);
    EXPECT_GT(r.working_set_bytes, 4 * (o.host_bytes + o.disk_bytes));
  }
}

TEST(StressTest, AttentionOnlyAndPureSsmLayoutsRunClean) {
  for (const ModelLayout& layout :
       {test_layouts::Small(false), test_layouts::SmallPureSsm(), test_layouts::Small(true)}) {
    SCOPED_TRACE(layout.model);
    StressOptions o = Short(300);
    o.threads = 8;
    o.layout = layout;
    o.layout_name = layout.model;
    o.host_bytes = 1 << 20;
    o.disk_bytes = 2 << 20;
    auto report = RunStress(o);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ExpectClean(*report);
    EXPECT_GT(report->ops[static_cast<int>(StressOp::kLoad)], 0u);
    EXPECT_GT(report->evictions_by_tier[static_cast<int>(Tier::kHost)], 0u) << Describe(*report);
  }
}

TEST(StressTest, HostOnlyStoreRunsClean) {
  StressOptions o = Short(300);
  o.threads = 8;
  o.disk_bytes = 0;
  auto report = RunStress(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ExpectClean(*report);
  EXPECT_EQ(report->evictions_by_tier[static_cast<int>(Tier::kDisk)], 0u);
  EXPECT_GT(report->evictions_by_tier[static_cast<int>(Tier::kHost)], 0u);
}

TEST(StressTest, WatchdogReportsEveryThreadWhenAnOperationIsStuck) {
  StressOptions o = Short(0);
  o.threads = 4;
  o.watchdog_seconds = 1;
  o.test_stuck_op = true;
  std::string seen;
  int calls = 0;
  o.on_stall = [&](const std::string& report) {
    seen = report;
    ++calls;
  };
  auto report = RunStress(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(report->stalled);
  EXPECT_FALSE(report->ok());
  EXPECT_EQ(report->stall_report, seen);
  EXPECT_NE(seen.find("watchdog: thread 0 has been in stuck (test hook) for"), std::string::npos)
      << seen;
  EXPECT_NE(seen.find("thread 0: in stuck (test hook) (step: waiting for the run to end"),
            std::string::npos)
      << seen;
  for (const char* other : {"thread 1: ", "thread 2: ", "thread 3: ", "main thread: "}) {
    EXPECT_NE(seen.find(other), std::string::npos) << other << "\n" << seen;
  }
  EXPECT_NE(seen.find("store stats:\n{"), std::string::npos) << seen;
  EXPECT_NE(seen.find("\"lookups\""), std::string::npos) << seen;
  // The stuck operation ended with the run and counts once; the others kept going meanwhile.
  EXPECT_EQ(report->ops[static_cast<int>(StressOp::kStuck)], 1u);
  EXPECT_GT(report->ops[static_cast<int>(StressOp::kLookup)], 0u);
  EXPECT_GT(report->max_op_seconds, 1.0);
  EXPECT_EQ(report->max_op, "stuck (test hook)");
}

TEST(StressTest, OptionsNameTheValueAtFault) {
  struct Case {
    void (*change)(StressOptions&);
    const char* expected;
  };
  const Case cases[] = {
      {[](StressOptions& o) { o.threads = 0; }, "--threads: 0"},
      {[](StressOptions& o) { o.duration_seconds = 0; }, "--duration: 0"},
      {[](StressOptions& o) { o.watchdog_seconds = -1; }, "--watchdog: -1"},
      {[](StressOptions& o) { o.device_bytes = 0; }, "--device-bytes: 0"},
      {[](StressOptions& o) { o.host_bytes = 4097; }, "--host-bytes: 4097"},
      {[](StressOptions& o) { o.max_pages = 2; }, "max_pages: 2"},
      {[](StressOptions& o) { o.layout.page_size_tokens = 0; }, "--layout: stress-hybrid"},
  };
  for (const Case& c : cases) {
    StressOptions o;
    c.change(o);
    Status s = o.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << c.expected;
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << s.message();
    EXPECT_EQ(RunStress(o).status(), s);
  }
}

TEST(StressTest, APoolTooSmallForEveryThreadNamesDeviceBytes) {
  StressOptions o = Short(10);
  o.device_bytes = 256 << 10;
  auto report = RunStress(o);
  ASSERT_FALSE(report.ok());
  EXPECT_TRUE(report.status().IsNoSpace()) << report.status().ToString();
  EXPECT_NE(report.status().message().find("--device-bytes"), std::string::npos);
}

}  // namespace
}  // namespace cachepawl::tools
