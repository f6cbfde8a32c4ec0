#include "tiers/disk_extent_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "tests/common/test_util.h"

namespace cachepawl {
namespace {

constexpr uint64_t K4 = 4096;

TEST(DiskExtentAllocatorTest, StripesRoundRobinAndFillsExactly) {
  DiskExtentAllocator a({8 * K4, 8 * K4});
  std::vector<DiskExtent> got;
  for (int i = 0; i < 8; ++i) {
    auto e = a.Allocate(2 * K4);
    ASSERT_TRUE(e.has_value()) << i;
    EXPECT_EQ(e->file, static_cast<uint32_t>(i % 2));
    got.push_back(*e);
  }
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_FALSE(a.Allocate(K4).has_value());
  EXPECT_FALSE(a.Allocate(0).has_value());
  EXPECT_FALSE(a.Allocate(100).has_value());  // not a 4 KiB multiple
  // No two extents overlap.
  for (size_t i = 0; i < got.size(); ++i) {
    for (size_t j = i + 1; j < got.size(); ++j) {
      if (got[i].file != got[j].file) continue;
      EXPECT_TRUE(got[i].end() <= got[j].offset || got[j].end() <= got[i].offset);
      EXPECT_NE(got[i].Id(), got[j].Id());
    }
  }
}

TEST(DiskExtentAllocatorTest, FreedNeighboursCoalesceForALargerExtent) {
  DiskExtentAllocator a({6 * K4});
  auto x = a.Allocate(2 * K4), y = a.Allocate(2 * K4), z = a.Allocate(2 * K4);
  ASSERT_TRUE(x && y && z);
  a.Free(*x);
  a.Free(*z);
  EXPECT_EQ(a.LargestFree(), 2 * K4);
  EXPECT_FALSE(a.Allocate(4 * K4).has_value());
  a.Free(*y);
  EXPECT_EQ(a.LargestFree(), 6 * K4);
  auto big = a.Allocate(6 * K4);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->offset, 0u);
}

TEST(DiskExtentAllocatorTest, ReserveRebuildsAndRejectsOverlapsAndOutOfRange) {
  DiskExtentAllocator a({16 * K4, 16 * K4});
  ASSERT_TRUE(a.Reserve({0, 4 * K4, 3 * K4}).ok());
  ASSERT_TRUE(a.Reserve({1, 0, 16 * K4}).ok());
  EXPECT_TRUE(a.Reserve({0, 6 * K4, 2 * K4}).IsCorruption());        // overlaps [4,7)
  EXPECT_TRUE(a.Reserve({0, 2 * K4, 3 * K4}).IsCorruption());        // overlaps [4,7)
  EXPECT_TRUE(a.Reserve({0, 15 * K4, 2 * K4}).IsInvalidArgument());  // past the end
  EXPECT_TRUE(a.Reserve({2, 0, K4}).IsInvalidArgument());            // no such file
  EXPECT_TRUE(a.Reserve({0, 100, K4}).IsInvalidArgument());          // misaligned
  EXPECT_EQ(a.used_bytes(), 19 * K4);
  // What is left: [0,4) and [7,16) of file 0.
  auto e = a.Allocate(9 * K4);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->file, 0u);
  EXPECT_EQ(e->offset, 7 * K4);
  auto f = a.Allocate(4 * K4);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->offset, 0u);
  EXPECT_EQ(a.free_bytes(), 0u);
}

TEST(DiskExtentAllocatorTest, RandomAllocFreeKeepsAccountsAndNeverOverlaps) {
  std::mt19937_64 rng(testing::SeedFromEnv(11));
  DiskExtentAllocator a({256 * K4, 100 * K4, 64 * K4});
  std::vector<DiskExtent> live;
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && (rng() % 3 == 0)) {
      const size_t i = rng() % live.size();
      a.Free(live[i]);
      live[i] = live.back();
      live.pop_back();
    } else {
      const uint64_t units = (rng() % 2) ? 3 : 17;  // two record sizes, like KV and Mamba
      if (auto e = a.Allocate(units * K4)) live.push_back(*e);
    }
    if (step % 1000 == 0) {
      uint64_t used = 0;
      for (const auto& e : live) used += e.bytes;
      ASSERT_EQ(used, a.used_bytes());
      // Rebuilding from the live set reproduces the same free space, and finds no overlap.
      DiskExtentAllocator b({256 * K4, 100 * K4, 64 * K4});
      for (const auto& e : live) ASSERT_TRUE(b.Reserve(e).ok()) << e.ToString();
      ASSERT_EQ(b.free_bytes(), a.free_bytes());
    }
  }
}

}  // namespace
}  // namespace cachepawl
