// `cachepawl replay --sweep`'s arithmetic: its fractions, the working set of a hand-made trace,
// the tier sizes at a fraction, and the least the replay needs. The command line runs in
// replay_end_to_end_test.cc.
#include "tools/replay/replay_sweep.h"

#include <gtest/gtest.h>

#include "tests/tools/replay_test_layouts.h"

namespace cachepawl::tools {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(ReplaySweepTest, ParsesFractionsAndNamesABadOne) {
  auto f = ParseSweepFractions(kDefaultSweepFractions);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f, (std::vector<double>{0.1, 0.25, 0.5, 1}));
  auto most = ParseSweepFractions("4,0.001");
  ASSERT_TRUE(most.ok());
  EXPECT_EQ(*most, (std::vector<double>{4, 0.001}));
  const std::pair<const char*, const char*> bad[] = {
      {"0", "--sweep-fractions: '0' (a fraction of the working set must be in (0, 4])"},
      {"4.5", "--sweep-fractions: '4.5' (a fraction"},
      {"0.5,-1", "--sweep-fractions: '0.5,-1' ('-1': a fraction"},
      {"", "--sweep-fractions: '' (expected numbers separated by commas"},
      {"0.5,", "--sweep-fractions: '0.5,' ('': expected numbers"},
      {"half", "--sweep-fractions: 'half' (expected numbers"},
      {"0.5x", "--sweep-fractions: '0.5x' (expected numbers"},
      {"nan", "--sweep-fractions: 'nan' (a fraction"},
  };
  for (const auto& [text, expected] : bad) {
    auto parsed = ParseSweepFractions(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_TRUE(parsed.status().IsInvalidArgument()) << text;
    EXPECT_NE(parsed.status().message().find(expected), std::string::npos)
        << parsed.status().message();
  }
}

// Blocks of 2 pages of 16 tokens; states every 4 pages and at each prompt's end (the trace of
// ReplayCeilingTest.HybridNeedsAStateAtTheExactDepth).
TEST(ReplaySweepTest, WorkingSetOfAHandMadeTrace) {
  std::vector<TraceRequest> requests = {
      {0, 192, 1, {1, 2, 3, 4, 5, 6}},  // 12 new pages; states at 4, 8, 12
      {1, 160, 1, {1, 2, 3, 4, 8}},     // block 8: 2 new pages; reuses 8, a state at 10
      {2, 192, 1, {1, 2, 3, 9, 9, 9}},  // 3 new blocks: 6 pages; reuses 4, states at 8, 12
      {3, 96, 1, {1, 2, 3}},            // nothing new but a state at 6 (reuses 4)
      {4, 96, 1, {1, 2, 3}},            // reuses all 6: nothing new
      {5, 20, 1, {7}},                  // a new block with 1 of its 2 pages full; a state at 1
      {6, 32, 1, {7}},                  // the same block whole: 1 more page, a state at 2
  };
  CeilingOptions o;
  o.block_size_tokens = 32;
  o.page_size_tokens = 16;
  o.track_interval_pages = 4;
  auto c = ComputeCeiling(requests, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->distinct_pages, 12u + 2u + 6u + 1u + 1u);
  EXPECT_EQ(c->saved_states, 3u + 1u + 2u + 1u + 1u + 1u);
  // The small test layout: a 4 KiB KV record (2 layers x K+V x 16 tokens x 2 heads x 16 x
  // bf16), a state of a 64 x 3 bf16 conv state and a 4 x 8 x 64 fp32 SSM state.
  const WorkingSet w = WorkingSetOf(*c, test_layouts::Small());
  EXPECT_EQ(w.page_bytes, 4096u);
  EXPECT_EQ(w.state_bytes, 64u * 3 * 2 + 4u * 8 * 64 * 4);
  EXPECT_EQ(w.bytes, 22u * 4096 + 9u * 8576);
  // Attention only: no states, the same pages.
  o.hybrid = false;
  auto kv = ComputeCeiling(requests, o);
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->distinct_pages, 22u);
  EXPECT_EQ(kv->saved_states, 0u);
  EXPECT_EQ(WorkingSetOf(*kv, test_layouts::Small(false)).bytes, 22u * 4096);
}

TEST(ReplaySweepTest, TiersKeepTheirRatioToTheLargerOfHostAndDisk) {
  const SweepTiers given{512 * kMiB, 1024 * kMiB, 4096 * kMiB};
  const SweepTiers least{16 * kMiB, 32 * kMiB, 32 * kMiB};
  SweepTiers t = SweepTierSizes(0.5, 1024 * kMiB, given, least);
  EXPECT_EQ(t.disk, 512 * kMiB);
  EXPECT_EQ(t.host, 128 * kMiB);
  EXPECT_EQ(t.device, 64 * kMiB);
  EXPECT_FALSE(t.device_clamped || t.host_clamped || t.disk_clamped);
  // Rounded up to whole MiB, then raised to the least the replay needs.
  t = SweepTierSizes(0.1, 1024 * kMiB, given, least);
  EXPECT_EQ(t.disk, 103 * kMiB);  // 102.4 MiB
  EXPECT_EQ(t.host, 32 * kMiB);   // 25.6 MiB, raised
  EXPECT_EQ(t.device, 16 * kMiB);
  EXPECT_TRUE(t.device_clamped && t.host_clamped);
  EXPECT_FALSE(t.disk_clamped);
  // Without a disk the host tier is the larger one; the disk stays off.
  t = SweepTierSizes(2, 100 * kMiB, {256 * kMiB, 1024 * kMiB, 0}, least);
  EXPECT_EQ(t.host, 200 * kMiB);
  EXPECT_EQ(t.device, 50 * kMiB);
  EXPECT_EQ(t.disk, 0u);
  EXPECT_FALSE(t.disk_clamped);
}

TEST(ReplaySweepTest, LeastTiersHoldAChunkAndTwoStatesPerRequest) {
  // The small layout: a 4 KiB device unit, a state of 3 units; host slots of 8 KiB per page
  // and 16 KiB per state (a 4 KiB header, the record padded to 4 KiB).
  SweepTiers least = ReplayTierMinimums(test_layouts::Small(), 1024, 1);
  EXPECT_EQ(least.device, 5 * kMiB);  // (342 groups of pages + 2 states) x 12 KiB = 4.03 MiB
  EXPECT_EQ(least.host, 9 * kMiB);    // 1024 x 8 KiB + 2 x 16 KiB
  EXPECT_EQ(least.disk, least.host);
  least = ReplayTierMinimums(test_layouts::Small(), 1024, 2);
  EXPECT_EQ(least.device, 9 * kMiB);
  EXPECT_EQ(least.host, 17 * kMiB);
  // A pure SSM layout stores no pages: two states.
  least = ReplayTierMinimums(test_layouts::SmallPureSsm(), 1024, 1);
  EXPECT_EQ(least.device, kMiB);
  EXPECT_EQ(least.host, kMiB);
}

}  // namespace
}  // namespace cachepawl::tools
