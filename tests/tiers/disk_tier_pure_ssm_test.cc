// DiskTier for a layout without attention layers (pure SSM): it holds states only, each written
// with its chain (the hashes of the pages before it), which the catalog keeps beside the state's
// record and Open hands back once. What a store does with a chain that was lost or damaged is in
// tests/store/store_pure_ssm_test.cc.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"
#include "tiers/disk_tier.h"

namespace cachepawl {
namespace {

using testing::TempDir;
using testing::TestKey;

ModelLayout SmallPureSsm() {
  return testing::WithoutAttention(testing::SmallHybridLayout(), "test/small-ssm");
}

TEST(DiskTierPureSsmTest, StatesAreWrittenWithChainsThatFitTheirDepthAndComeBackAtOpen) {
  TempDir dir;
  const ModelLayout layout = SmallPureSsm();
  DiskTierOptions o;
  o.dir = (dir.path() / "disk").string();
  o.capacity_bytes = 8 * RecordSlotBytes(layout, Kind::kMamba);
  const PageHash h0 = TestKey(Kind::kKV, 0).hash, h1 = TestKey(Kind::kKV, 1).hash;
  const std::vector<PageHash> chain = {h0, h1};
  const DiskKey deep{Kind::kMamba, TestKey(Kind::kKV, 2).hash, 3 * layout.page_size_tokens};
  const DiskKey first{Kind::kMamba, h0, layout.page_size_tokens};
  {
    auto t = DiskTier::Open(o, layout);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    // No KV records at all.
    EXPECT_TRUE((*t)->BeginWrite(TestKey(Kind::kKV, 0), {}).status().IsInvalidArgument());
    // A state whose chain is missing, ends elsewhere than its parent, or is too short.
    const std::vector<std::pair<PageHash, std::vector<PageHash>>> wrong = {
        {h1, {}}, {h0, chain}, {h1, {h1}}};
    for (const auto& [parent, c] : wrong) {
      auto plan = (*t)->BeginWrite(deep, parent, c);
      ASSERT_FALSE(plan.ok());
      EXPECT_TRUE(plan.status().IsInvalidArgument()) << plan.status().ToString();
      EXPECT_NE(plan.status().message().find("chain: " + std::to_string(c.size()) + " hashes"),
                std::string::npos)
          << plan.status().ToString();
    }
    EXPECT_EQ((*t)->stats().chain_errors, 3u);
    // The right chains: two pages before the deep state, none before the first page's.
    auto a = (*t)->BeginWrite(deep, h1, chain);
    auto b = (*t)->BeginWrite(first, PageHash::Zero(), {});
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << " " << b.status().ToString();
    const std::vector<DiskTier::TicketPtr> tickets = {a->ticket, b->ticket};
    const std::vector<uint64_t> sums = {1, 2};
    ASSERT_TRUE((*t)->CommitWrites(tickets, sums).ok());
    ASSERT_TRUE((*t)->Close().ok());
  }
  auto t = DiskTier::Open(o, layout);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  size_t records = 0;
  (*t)->ForEachRecord([&](const DiskRecordInfo& r) {
    ++records;
    EXPECT_EQ(r.key.kind, Kind::kMamba);
  });
  EXPECT_EQ(records, 2u);
  auto chains = (*t)->TakeRecoveredChains();
  ASSERT_EQ(chains.size(), 2u);
  EXPECT_EQ(chains[DiskKeyIdentity(deep)], chain);
  EXPECT_TRUE(chains[DiskKeyIdentity(first)].empty());
  EXPECT_TRUE((*t)->TakeRecoveredChains().empty());  // handed over once, no copy kept
  const DiskTierStats st = (*t)->stats();
  EXPECT_EQ(st.chain_errors, 0u);
  EXPECT_EQ(st.dropped_at_open, 0u);
  EXPECT_EQ(st.records_kv, 0u);
  EXPECT_EQ(st.records_mamba, 2u);
  // Removing a state removes its chain with it: nothing is left to recover.
  ASSERT_TRUE((*t)->Remove(deep).ok());
  ASSERT_TRUE((*t)->Remove(first).ok());
  ASSERT_TRUE((*t)->Close().ok());
  auto again = DiskTier::Open(o, layout);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->TakeRecoveredChains().empty());
  EXPECT_EQ((*again)->stats().dropped_at_open, 0u);  // no orphaned chain entry either
}

// Every attention layer windowed: no KV records either, so states carry chains as above, but
// the window records name their page (hash, depth, parent) and are written without one.
TEST(DiskTierPureSsmTest, AllWindowedLayoutsChainStatesButNotWindowRecords) {
  TempDir dir;
  ModelLayout layout = testing::SmallHybridLayout("test/small-all-windowed");
  layout.attention_layers[0].sliding_window = 32;
  ASSERT_FALSE(layout.Stores(Kind::kKV));
  DiskTierOptions o;
  o.dir = (dir.path() / "disk").string();
  o.capacity_bytes = 8 * RecordSlotBytes(layout, Kind::kMamba);
  const PageHash h0 = TestKey(Kind::kKV, 0).hash, h1 = TestKey(Kind::kKV, 1).hash;
  auto t = DiskTier::Open(o, layout);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE((*t)->BeginWrite(TestKey(Kind::kKV, 0), {}).status().IsInvalidArgument());
  const DiskKey window{Kind::kWindowKV, h1, 2 * layout.page_size_tokens};
  auto w = (*t)->BeginWrite(window, h0);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->extent.bytes, RecordSlotBytes(layout, Kind::kWindowKV));
  const DiskKey state{Kind::kMamba, h1, 2 * layout.page_size_tokens};
  EXPECT_TRUE((*t)->BeginWrite(state, h0).status().IsInvalidArgument());  // no chain
  const std::vector<PageHash> chain = {h0};
  auto s = (*t)->BeginWrite(state, h0, chain);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::vector<DiskTier::TicketPtr> tickets = {w->ticket, s->ticket};
  const std::vector<uint64_t> sums = {1, 2};
  ASSERT_TRUE((*t)->CommitWrites(tickets, sums).ok());
  EXPECT_EQ((*t)->stats().records_window, 1u);
  EXPECT_EQ((*t)->stats().chain_errors, 1u);
  ASSERT_TRUE((*t)->Close().ok());
}

}  // namespace
}  // namespace cachepawl
