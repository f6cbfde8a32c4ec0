// PrefixIndex with hybrid eviction (IndexOptions::hybrid_eviction): KV pages that no cached
// state can use go first, a needed page's only copy is never picked, states leave by their
// GreedyDual-Size-Frequency score, VictimClass filters, and the options' checks. The model-based
// test (prefix_index_model_test.cc, seeds 9-12) runs the same rules against its reference.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "index/prefix_index.h"
#include "tests/index/index_test_util.h"

namespace cachepawl {
namespace {

using testing::Chain;
using testing::H;
using testing::MakeIndex;

IndexOptions Hybrid() {
  IndexOptions o;
  o.require_mamba = true;
  o.hybrid_eviction = true;
  o.state_value_per_page = 1.0;
  o.mamba_state_bytes = 100;
  o.kv_page_bytes = 10;
  return o;
}

void InsertWithKv(PrefixIndex& index, const std::vector<PageHash>& chain, Tier tier) {
  ASSERT_TRUE(index.InsertChain(std::nullopt, chain).ok());
  for (size_t i = 0; i < chain.size(); ++i) {
    ASSERT_TRUE(index.SetLocation(chain[i], Kind::kKV, tier, 100 + i).ok());
  }
}

std::vector<PageHash> Picked(PrefixIndex& index, Tier tier, Kind kind, size_t max_count,
                             VictimClass cls = VictimClass::kAny) {
  auto v = index.PickVictims(tier, kind, max_count, cls);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  std::vector<PageHash> out;
  if (!v.ok()) return out;
  for (const Victim& x : *v) out.push_back(x.hash);
  return out;
}

void ExpectValid(const PrefixIndex& index) {
  const Status s = index.CheckInvariants();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(PrefixIndexHybridTest, KvPastTheLastStateGoesFirstAndNeededKvStays) {
  auto index = MakeIndex(Hybrid());
  // Pages 0..5 in host; a state after page 2: pages 0..2 are needed, 3..5 are not.
  const std::vector<PageHash> c = Chain(1, 6);
  InsertWithKv(*index, c, Tier::kHost);
  ASSERT_TRUE(index->SetLocation(c[2], Kind::kMamba, Tier::kHost, 7).ok());
  EXPECT_EQ(index->Lookup(c[0])->subtree_states, 1u);
  EXPECT_EQ(index->Lookup(c[3])->subtree_states, 0u);
  // Only host holds them: the needed pages' only copy is never picked.
  EXPECT_EQ(Picked(*index, Tier::kHost, Kind::kKV, 10), (std::vector{c[5], c[4], c[3]}));
  EXPECT_TRUE(Picked(*index, Tier::kHost, Kind::kKV, 10, VictimClass::kNeeded).empty());
  for (size_t i = 3; i < 6; ++i)
    ASSERT_TRUE(index->ClearLocation(c[i], Kind::kKV, Tier::kHost).ok());
  EXPECT_TRUE(Picked(*index, Tier::kHost, Kind::kKV, 10).empty());
  EXPECT_EQ(index->Stats().evictable[0][1], 0u);
  // Copied to disk, they may leave host (class kNeeded), leaf first.
  for (size_t i = 0; i < 3; ++i)
    ASSERT_TRUE(index->SetLocation(c[i], Kind::kKV, Tier::kDisk, i).ok());
  EXPECT_TRUE(Picked(*index, Tier::kHost, Kind::kKV, 10, VictimClass::kNotNeeded).empty());
  EXPECT_EQ(Picked(*index, Tier::kHost, Kind::kKV, 10, VictimClass::kNeeded),
            (std::vector{c[2], c[1], c[0]}));
  // Once the state is gone, nothing is needed: every page is a candidate of kNotNeeded.
  ASSERT_TRUE(index->ClearLocation(c[2], Kind::kMamba, Tier::kHost).ok());
  EXPECT_EQ(index->Lookup(c[0])->subtree_states, 0u);
  EXPECT_EQ(Picked(*index, Tier::kDisk, Kind::kKV, 10, VictimClass::kNotNeeded),
            (std::vector{c[2], c[1], c[0]}));
  ExpectValid(*index);
}

TEST(PrefixIndexHybridTest, SharedPagesStayWhileAnyStateUsesThem) {
  auto index = MakeIndex(Hybrid());
  // A shared prefix (pages 1,2) with two branches; a state at the end of each branch.
  const std::vector<PageHash> shared = Chain(1, 2);
  InsertWithKv(*index, shared, Tier::kHost);
  const std::vector<PageHash> a = {H(10), H(11)}, b = {H(20)};
  ASSERT_TRUE(index->InsertChain(shared[1], a).ok());
  ASSERT_TRUE(index->InsertChain(shared[1], b).ok());
  for (const PageHash& h : {a[0], a[1], b[0]}) {
    ASSERT_TRUE(index->SetLocation(h, Kind::kKV, Tier::kHost, 50).ok());
  }
  ASSERT_TRUE(index->SetLocation(a[1], Kind::kMamba, Tier::kDisk, 1).ok());
  ASSERT_TRUE(index->SetLocation(b[0], Kind::kMamba, Tier::kDisk, 2).ok());
  EXPECT_EQ(index->Lookup(shared[0])->subtree_states, 2u);
  EXPECT_TRUE(Picked(*index, Tier::kHost, Kind::kKV, 10).empty());
  // Branch a's state leaves: its pages go, the shared ones stay for branch b.
  ASSERT_TRUE(index->ClearLocation(a[1], Kind::kMamba, Tier::kDisk).ok());
  EXPECT_EQ(Picked(*index, Tier::kHost, Kind::kKV, 10), (std::vector{a[1], a[0]}));
  ExpectValid(*index);
}

TEST(PrefixIndexHybridTest, StatesLeaveByValuePerByteTimesHits) {
  IndexOptions o = Hybrid();
  o.state_value_per_page_squared = 1.0;
  auto index = MakeIndex(o);
  const std::vector<PageHash> c = Chain(1, 8);
  InsertWithKv(*index, c, Tier::kHost);
  // States at depth 2 and 8: the deeper one saves more per byte (value d + d^2 over 100 + 10 d).
  ASSERT_TRUE(index->SetLocation(c[1], Kind::kMamba, Tier::kHost, 1).ok());
  ASSERT_TRUE(index->SetLocation(c[7], Kind::kMamba, Tier::kHost, 2).ok());
  const double v2 = (2.0 + 4.0) / (100.0 + 20.0), v8 = (8.0 + 64.0) / (100.0 + 80.0);
  EXPECT_DOUBLE_EQ(index->Lookup(c[1])->state_priority, v2);
  EXPECT_DOUBLE_EQ(index->Lookup(c[7])->state_priority, v8);
  EXPECT_EQ(Picked(*index, Tier::kHost, Kind::kMamba, 1), (std::vector{c[1]}));
  // Picking raised the inflation to v2. Hits on the shallow state: a Match reports the
  // deepest reusable state, so match only the first two pages.
  const std::vector<PageHash> shallow(c.begin(), c.begin() + 2);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(index->Match(shallow).reusable_pages, 2u);
  const EntryInfo hit = *index->Lookup(c[1]);
  EXPECT_EQ(hit.state_hits, 9u);
  EXPECT_DOUBLE_EQ(hit.state_priority, v2 + 10 * v2);
  EXPECT_GT(hit.state_priority, v8);
  EXPECT_EQ(Picked(*index, Tier::kHost, Kind::kMamba, 1), (std::vector{c[7]}));
  // A new state comes in at the inflation (v8 now) plus its own value: above the old deep one.
  ASSERT_TRUE(index->SetLocation(c[4], Kind::kMamba, Tier::kHost, 3).ok());
  EXPECT_DOUBLE_EQ(index->Lookup(c[4])->state_priority, v8 + (5.0 + 25.0) / (100.0 + 50.0));
  // States are never "not needed"; locked ones are never picked.
  EXPECT_TRUE(Picked(*index, Tier::kHost, Kind::kMamba, 5, VictimClass::kNotNeeded).empty());
  // (The shallow one's ten hits, 11 * v2 = 0.55, are worth less than the new one's 0.6.)
  ASSERT_TRUE(index->Lock(c[7]).ok());
  EXPECT_EQ(Picked(*index, Tier::kHost, Kind::kMamba, 5), (std::vector{c[1], c[4]}));
  ExpectValid(*index);
}

TEST(PrefixIndexHybridTest, StatesOffTheTrackIntervalCountAQuarter) {
  IndexOptions o = Hybrid();
  o.track_interval_pages = 4;
  auto index = MakeIndex(o);
  const std::vector<PageHash> c = Chain(1, 6);
  InsertWithKv(*index, c, Tier::kHost);
  const double v3 = 3.0 / (100.0 + 30.0), v4 = 4.0 / (100.0 + 40.0), v6 = 6.0 / (100.0 + 60.0);
  // Depth 3: neither on the track (4) nor a prompt's end (page 3 has a child): a quarter.
  ASSERT_TRUE(index->SetLocation(c[2], Kind::kMamba, Tier::kHost, 1).ok());
  EXPECT_DOUBLE_EQ(index->Lookup(c[2])->state_priority, 0.25 * v3);
  // Depth 4 is on the track; depth 6 is the chain's end (no child): full value.
  ASSERT_TRUE(index->SetLocation(c[3], Kind::kMamba, Tier::kHost, 2).ok());
  ASSERT_TRUE(index->SetLocation(c[5], Kind::kMamba, Tier::kHost, 3).ok());
  EXPECT_DOUBLE_EQ(index->Lookup(c[3])->state_priority, v4);
  EXPECT_DOUBLE_EQ(index->Lookup(c[5])->state_priority, v6);
  // Its hits keep the quarter weight.
  const std::vector<PageHash> three(c.begin(), c.begin() + 3);
  EXPECT_EQ(index->Match(three).reusable_pages, 3u);
  EXPECT_DOUBLE_EQ(index->Lookup(c[2])->state_priority, 0.25 * 2 * v3);
  ExpectValid(*index);
}

TEST(PrefixIndexHybridTest, WithoutHybridEvictionEverythingIsLeastRecentlyUsed) {
  IndexOptions o = Hybrid();
  o.hybrid_eviction = false;
  auto index = MakeIndex(o);
  const std::vector<PageHash> c = Chain(1, 3);
  InsertWithKv(*index, c, Tier::kHost);
  ASSERT_TRUE(index->SetLocation(c[2], Kind::kMamba, Tier::kHost, 1).ok());
  EXPECT_EQ(index->Lookup(c[0])->subtree_states, 0u);
  EXPECT_EQ(index->Lookup(c[2])->state_priority, 0.0);
  EXPECT_EQ(Picked(*index, Tier::kHost, Kind::kKV, 1), (std::vector{c[2]}));
  ExpectValid(*index);
}

TEST(PrefixIndexHybridTest, BadClassAndOptionsAreRefused) {
  auto index = MakeIndex(Hybrid());
  auto bad = index->PickVictims(Tier::kHost, Kind::kKV, 1, static_cast<VictimClass>(7));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_NE(bad.status().ToString().find("victim class: 7"), std::string::npos);
  EXPECT_EQ(index->Stats().err_bad_enum, 1u);

  IndexOptions o = Hybrid();
  o.state_value_per_page = -1;
  EXPECT_NE(o.Validate().ToString().find("index.state_value_per_page: -1"), std::string::npos);
  o.state_value_per_page = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(o.Validate().ToString().find("index.state_value_per_page: nan"), std::string::npos);
  o.state_value_per_page = 0;
  o.state_value_per_page_squared = std::numeric_limits<double>::infinity();
  EXPECT_NE(o.Validate().ToString().find("index.state_value_per_page_squared: inf"),
            std::string::npos);
  o.state_value_per_page_squared = 0;
  EXPECT_NE(o.Validate().ToString().find("must save something"), std::string::npos);
  o.hybrid_eviction = false;  // the values are not used then
  EXPECT_TRUE(o.Validate().ok());
}

TEST(PrefixIndexHybridTest, StateValuePerByteIsTheValueOverTheBytesAtThatDepth) {
  IndexOptions o;
  o.state_value_per_page = 2.0;
  o.state_value_per_page_squared = 0.5;
  o.mamba_state_bytes = 100;
  o.kv_page_bytes = 10;
  o.window_pages = 3;
  o.window_page_bytes = 4;
  EXPECT_EQ(o.StateValuePerByte(0), 0.0);
  // Depth 2: value 2 * 2 + 0.5 * 4 = 6 over 100 + 2 * 10 + 2 * 4 = 128 bytes.
  EXPECT_DOUBLE_EQ(o.StateValuePerByte(2), 6.0 / 128.0);
  // Depth 5: value 10 + 12.5 over 100 + 50 + 3 windowed pages (the window's length) * 4.
  EXPECT_DOUBLE_EQ(o.StateValuePerByte(5), 22.5 / 162.0);
  o.kv_payload = false;  // pure SSM: the pages carry no KV bytes
  EXPECT_DOUBLE_EQ(o.StateValuePerByte(2), 6.0 / 108.0);
  o.mamba_state_bytes = o.kv_page_bytes = o.window_page_bytes = 0;  // sizes unknown: 1 byte
  EXPECT_DOUBLE_EQ(o.StateValuePerByte(3), 10.5);
}

}  // namespace
}  // namespace cachepawl
