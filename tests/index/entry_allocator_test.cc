// EntryAllocator: indices are never handed out twice, chains grown page by page (interleaved)
// get consecutive indices inside blocks, and unused indices stay within the documented bound.
#include "index/entry_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

#include "tests/common/test_util.h"

namespace cachepawl::index_internal {
namespace {

constexpr uint32_t kNone = EntryAllocator::kNone;
constexpr uint32_t kBlock = EntryAllocator::kBlock;

TEST(EntryAllocatorTest, InterleavedChainsGetConsecutiveIndicesPerBlock) {
  constexpr size_t kChains = 50, kPages = 100;
  EntryAllocator a(/*max_open=*/kChains);
  std::vector<std::vector<uint32_t>> chains(kChains);
  for (size_t p = 0; p < kPages; ++p) {
    for (auto& c : chains) c.push_back(a.Allocate(c.empty() ? kNone : c.back()));
  }
  std::unordered_set<uint32_t> seen;
  for (const auto& c : chains) {
    EXPECT_EQ(c[0] % kBlock, 0u);
    for (size_t p = 0; p < kPages; ++p) {
      ASSERT_TRUE(seen.insert(c[p]).second) << "index " << c[p] << " handed out twice";
      if (p > 0 && (c[p - 1] + 1) % kBlock != 0) {
        EXPECT_EQ(c[p], c[p - 1] + 1) << "page " << p;
      } else if (p > 0) {
        EXPECT_EQ(c[p] % kBlock, 0u) << "a new block begins at page " << p;
      }
    }
  }
  EXPECT_EQ(a.live(), kChains * kPages);
  // Each chain's last block is open with its tail reserved: 100 = 6 * 16 + 4.
  EXPECT_EQ(a.reserved_count(), kChains * (kBlock - kPages % kBlock));
  EXPECT_EQ(a.free_count(), 0u);
  EXPECT_EQ(a.high_water(), a.live() + a.reserved_count());
}

TEST(EntryAllocatorTest, SecondChildAndClosedRunsStartNewBlocks) {
  EntryAllocator a(/*max_open=*/2);
  const uint32_t root = a.Allocate(kNone);
  EXPECT_EQ(a.Allocate(root), root + 1);
  EXPECT_EQ(a.Allocate(root) % kBlock, 0u);  // root + 1 is taken: a new run
  // A third run closes the oldest (root's): its reserved indices become free.
  const uint32_t r2 = a.Allocate(kNone);
  EXPECT_EQ(a.free_count(), kBlock - 2);
  const uint32_t r3 = a.Allocate(kNone);  // closes the second run (one index used)
  EXPECT_NE(r2, r3);
  EXPECT_EQ(a.free_count(), (kBlock - 2) + (kBlock - 1));
  EXPECT_NE(a.Allocate(root + 1), root + 2);  // no longer reserved for it
  EXPECT_EQ(a.live() + a.free_count() + a.reserved_count(), a.high_water());
}

TEST(EntryAllocatorTest, WhollyFreeBlocksAreReopened) {
  EntryAllocator a;
  std::vector<uint32_t> chain;
  for (uint32_t p = 0; p < kBlock; ++p) chain.push_back(a.Allocate(p ? chain.back() : kNone));
  const uint32_t high = a.high_water();
  for (uint32_t i : chain) a.Free(i);
  EXPECT_EQ(a.live(), 0u);
  EXPECT_EQ(a.Allocate(kNone), chain[0]);  // the same block again, not a fresh one
  EXPECT_EQ(a.high_water(), high);
  EXPECT_EQ(a.Allocate(chain[0]), chain[0] + 1);
}

// Random allocations (after a random live index or none) and frees: no index twice, counts
// add up, and the high water mark stays within the bound of entry_allocator.h.
TEST(EntryAllocatorTest, RandomOpsKeepCountsAndTheMemoryBound) {
  for (size_t max_open : {size_t{1}, size_t{4}, size_t{64}}) {
    SCOPED_TRACE("max_open " + std::to_string(max_open));
    std::mt19937_64 rng(testing::SeedFromEnv(20261122 + max_open));
    EntryAllocator a(max_open);
    std::vector<uint32_t> live;
    std::vector<bool> is_live;
    size_t most_live = 0;
    for (int op = 0; op < 300'000; ++op) {
      // Phases: grow, shrink, churn; so that free indices pile up and are reused.
      const int phase = (op / 50'000) % 3;
      const unsigned grow_percent = phase == 0 ? 80 : phase == 1 ? 30 : 50;
      if (live.empty() || rng() % 100 < grow_percent) {
        const uint32_t after =
            (!live.empty() && rng() % 8 != 0) ? live[rng() % live.size()] : kNone;
        const uint32_t i = a.Allocate(after);
        ASSERT_LT(i, a.high_water());
        if (i >= is_live.size()) is_live.resize(a.high_water(), false);
        ASSERT_FALSE(is_live[i]) << "index " << i << " handed out twice";
        is_live[i] = true;
        live.push_back(i);
      } else {
        const size_t k = rng() % live.size();
        const uint32_t i = live[k];
        live[k] = live.back();
        live.pop_back();
        is_live[i] = false;
        a.Free(i);
      }
      most_live = std::max(most_live, live.size());
      ASSERT_EQ(a.live(), live.size());
      ASSERT_EQ(a.live() + a.free_count() + a.reserved_count(), a.high_water());
      const size_t bound =
          most_live + std::max(max_open * kBlock, most_live / 32) + max_open * kBlock + 2 * kBlock;
      ASSERT_LE(a.high_water(), bound) << "op " << op;
    }
  }
}

}  // namespace
}  // namespace cachepawl::index_internal
