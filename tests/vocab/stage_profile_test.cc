// Stage profile: off by default in tests, records only when on, per-stage counts and times,
// counters, Reset.
#include "vocab/internal/stage_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string_view>
#include <thread>

namespace cachepawl::profile {
namespace {

class StageProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    was_on_ = Enabled();
    Reset();
  }
  void TearDown() override {
    SetEnabled(was_on_);
    Reset();
  }
  bool was_on_ = false;
};

TEST_F(StageProfileTest, OffRecordsNothing) {
  SetEnabled(false);
  EXPECT_EQ(Now(), 0u);
  { ScopedStage s(Stage::kSaveIndex); }
  AddNanos(Stage::kLoadCopy, 1000);
  Count(Counter::kMoverCopyRuns, 3);
  const Totals t = Snapshot();
  for (const StageTotal& st : t.stages) {
    EXPECT_EQ(st.count, 0u);
    EXPECT_EQ(st.nanos, 0u);
  }
  for (uint64_t c : t.counters) EXPECT_EQ(c, 0u);
}

TEST_F(StageProfileTest, OnRecordsCountsTimesAndCounters) {
  SetEnabled(true);
  {
    ScopedStage s(Stage::kSaveIndex);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  { ScopedStage s(Stage::kSaveIndex); }
  AddNanos(Stage::kLoadCopy, 1500);
  const uint64_t start = Now();
  EXPECT_NE(start, 0u);
  Add(Stage::kDiskReadWait, start);
  Add(Stage::kDiskReadVerify, 0);  // a stamp taken while off: ignored
  Count(Counter::kMoverCopyRuns, 3);
  Count(Counter::kMoverCopyRuns);
  const Totals t = Snapshot();
  const auto& index = t.stages[static_cast<size_t>(Stage::kSaveIndex)];
  EXPECT_EQ(index.count, 2u);
  EXPECT_GE(index.nanos, 2'000'000u);
  EXPECT_EQ(t.stages[static_cast<size_t>(Stage::kLoadCopy)].count, 1u);
  EXPECT_EQ(t.stages[static_cast<size_t>(Stage::kLoadCopy)].nanos, 1500u);
  EXPECT_EQ(t.stages[static_cast<size_t>(Stage::kDiskReadWait)].count, 1u);
  EXPECT_EQ(t.stages[static_cast<size_t>(Stage::kDiskReadVerify)].count, 0u);
  EXPECT_EQ(t.counters[static_cast<size_t>(Counter::kMoverCopyRuns)], 4u);
  Totals twice = t;
  twice += t;
  EXPECT_EQ(twice.stages[static_cast<size_t>(Stage::kSaveIndex)].count, 4u);
  EXPECT_EQ(twice.stages[static_cast<size_t>(Stage::kLoadCopy)].nanos, 3000u);
  EXPECT_EQ(twice.counters[static_cast<size_t>(Counter::kMoverCopyRuns)], 8u);
  Reset();
  const Totals after = Snapshot();
  EXPECT_EQ(after.stages[static_cast<size_t>(Stage::kSaveIndex)].count, 0u);
  EXPECT_EQ(after.counters[static_cast<size_t>(Counter::kMoverCopyRuns)], 0u);
}

TEST_F(StageProfileTest, EveryStageAndCounterHasADistinctName) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < static_cast<size_t>(Stage::kCount); ++i) {
    const auto n = StageName(static_cast<Stage>(i));
    EXPECT_FALSE(n.empty());
    EXPECT_NE(n, "unknown");
    EXPECT_TRUE(names.insert(n).second) << n;
  }
  for (size_t i = 0; i < static_cast<size_t>(Counter::kCount); ++i) {
    EXPECT_TRUE(names.insert(CounterName(static_cast<Counter>(i))).second);
  }
  EXPECT_EQ(StageName(Stage::kCount), "unknown");
}

}  // namespace
}  // namespace cachepawl::profile
