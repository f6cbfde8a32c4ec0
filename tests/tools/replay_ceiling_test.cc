#include "tools/replay/replay_ceiling.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace cachepawl::tools {
namespace {

CeilingOptions Options(uint32_t block, uint32_t page, uint32_t track, bool hybrid) {
  CeilingOptions o;
  o.block_size_tokens = block;
  o.page_size_tokens = page;
  o.track_interval_pages = track;
  o.hybrid = hybrid;
  return o;
}

TEST(ReplayCeilingTest, SharedPrefixesCountByBlockPageAndToken) {
  // Blocks of 4 pages of 16 tokens.
  std::vector<TraceRequest> requests = {
      {0, 200, 1, {1, 2, 3, 4}},  // 200 tokens: 12 full pages, nothing cached yet
      {1, 150, 1, {1, 2, 7}},     // blocks 1,2 hit; pages: 8 of 9 hit
      {2, 100, 1, {9, 2}},        // block 2 after another prefix: no hit
      {3, 64, 1, {1}},            // block 1 again: 4 pages hit
  };
  auto c = ComputeCeiling(requests, Options(64, 16, 0, /*hybrid=*/false));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->requests, 4u);
  EXPECT_EQ(c->blocks, 10u);
  EXPECT_EQ(c->hit_blocks, 2u + 1u);
  EXPECT_EQ(c->pages, 12u + 9u + 6u + 4u);
  EXPECT_EQ(c->kv_hit_pages, 8u + 4u);
  EXPECT_EQ(c->tokens, 200u + 150u + 100u + 64u);
  EXPECT_EQ(c->kv_hit_tokens, 12u * 16u);
  EXPECT_EQ(c->hybrid_hit_pages, c->kv_hit_pages);  // no SSM layers: KV is enough
  EXPECT_DOUBLE_EQ(c->block_rate(), 3.0 / 10.0);
}

TEST(ReplayCeilingTest, PartialBlocksServeOnlyTheirFullPages) {
  std::vector<TraceRequest> requests = {
      {0, 40, 1, {1}},  // block 1 with 2 full pages of 4
      {1, 64, 1, {1}},  // block 1 whole: 2 pages hit, then all 4 cached
      {2, 64, 1, {1}},
  };
  auto c = ComputeCeiling(requests, Options(64, 16, 0, false));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->hit_blocks, 2u);
  EXPECT_EQ(c->kv_hit_pages, 2u + 4u);
}

TEST(ReplayCeilingTest, HybridNeedsAStateAtTheExactDepth) {
  // Blocks of 2 pages; states every 4 pages and at each prompt's end.
  std::vector<TraceRequest> requests = {
      {0, 192, 1, {1, 2, 3, 4, 5, 6}},  // 12 pages; states saved at 4, 8, 12
      {1, 160, 1, {1, 2, 3, 4, 8}},     // KV 8 pages hit, state at 8: 8; saves 10
      {2, 192, 1, {1, 2, 3, 9, 9, 9}},  // KV 6 pages hit, states at 4 only: 4; saves 8, 12
      {3, 96, 1, {1, 2, 3}},            // KV 6, no state at 6 (was never an end): 4; saves 6
      {4, 96, 1, {1, 2, 3}},            // now 6
  };
  auto c = ComputeCeiling(requests, Options(32, 16, 4, /*hybrid=*/true));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kv_hit_pages, 0u + 8u + 6u + 6u + 6u);
  EXPECT_EQ(c->hybrid_hit_pages, 0u + 8u + 4u + 4u + 6u);
  EXPECT_EQ(c->hybrid_hit_tokens, c->hybrid_hit_pages * 16);
  // Without checkpoints only prompt ends carry states.
  auto ends_only = ComputeCeiling(requests, Options(32, 16, 0, true));
  ASSERT_TRUE(ends_only.ok());
  EXPECT_EQ(ends_only->hybrid_hit_pages, 0u + 0u + 0u + 0u + 6u);
}

TEST(ReplayCeilingTest, RejectsABlockSizeThatIsNotAMultipleOfThePageSize) {
  std::vector<TraceRequest> requests = {{0, 10, 1, {1}}};
  auto c = ComputeCeiling(requests, Options(500, 16, 0, true));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--block-size: 500"), std::string::npos);
}

// The Mooncake synthetic trace: traces/README.md says 3,993 requests, 121,877 blocks, and an
// infinite cache serves 64.0% of blocks as prefix hits.
TEST(ReplayCeilingTest, MooncakeSyntheticTraceCeilingIs64Percent) {
  namespace fs = std::filesystem;
  const fs::path source_root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  const std::vector<fs::path> candidates = {
      source_root / ".." / "shared" / "traces" / "synthetic_trace.jsonl",
      "/work/shared/traces/synthetic_trace.jsonl"};
  fs::path trace_path;
  for (const fs::path& p : candidates) {
    if (fs::exists(p)) {
      trace_path = p;
      break;
    }
  }
  if (trace_path.empty()) {
    GTEST_SKIP() << "no synthetic_trace.jsonl under " << (source_root / ".." / "shared/traces")
                 << " or /work/shared/traces: the Mooncake ceiling check needs it";
  }
  auto trace = LoadTraceFile(trace_path.string());
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->requests.size(), 3993u);
  auto c = ComputeCeiling(trace->requests, Options(512, 16, 32, true));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->blocks, 121877u);
  EXPECT_NEAR(c->block_rate(), 0.640, 0.0005);
  // Pages of hit blocks are hit pages; with a state every block, the hybrid rule loses nothing
  // at block boundaries, and no rate exceeds the KV one.
  EXPECT_GE(c->kv_hit_pages, c->hybrid_hit_pages);
  EXPECT_GE(c->hybrid_hit_pages, c->hit_blocks * 32 - c->requests * 32);
}

}  // namespace
}  // namespace cachepawl::tools
