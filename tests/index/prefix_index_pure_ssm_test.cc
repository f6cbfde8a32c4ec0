// PrefixIndex without KV payload (IndexOptions::kv_payload false: a pure SSM layout such as
// Mamba-2): pages are links of the chain, no tier holds their KV, and a prefix is reusable up to
// the deepest state along it. The model-based test (prefix_index_model_test.cc) runs the same
// rule against its reference; these cases pin down the contract one method at a time.
#include <gtest/gtest.h>

#include <optional>
#include <span>
#include <vector>

#include "index/prefix_index.h"
#include "tests/index/index_test_util.h"

namespace cachepawl {
namespace {

using testing::Chain;
using testing::H;
using testing::MakeIndex;

IndexOptions PureSsm(uint32_t track_interval_pages = 1) {
  IndexOptions o;
  o.require_mamba = true;
  o.kv_payload = false;
  o.track_interval_pages = track_interval_pages;
  return o;
}

TEST(PureSsmIndexTest, OptionsNeedTheHybridRule) {
  IndexOptions o = PureSsm();
  EXPECT_TRUE(o.Validate().ok());
  o.require_mamba = false;
  const Status s = o.Validate();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("index.kv_payload: false without require_mamba"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(PrefixIndex::Create(o).ok());
}

TEST(PureSsmIndexTest, ReusableIsTheDeepestStateAlongTheIndexedChain) {
  auto index = MakeIndex(PureSsm(/*track_interval_pages=*/2));
  const auto chain = Chain(1, 6);
  ASSERT_TRUE(index->InsertChain(std::nullopt, std::span(chain).first(5)).ok());
  ASSERT_TRUE(index->SetLocation(chain[1], Kind::kMamba, Tier::kDisk, 70).ok());
  ASSERT_TRUE(index->SetLocation(chain[3], Kind::kMamba, Tier::kHost, 9).ok());

  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 4u);
  EXPECT_EQ(r.kv_only_pages, 5u);  // every indexed page counts: there is no KV to lack
  EXPECT_EQ(r.indexed_pages, 5u);
  EXPECT_EQ(r.checkpoint_hint_pages, 4u);
  EXPECT_TRUE(r.pages.empty());  // no page is held by any tier
  EXPECT_EQ(r.state.Slot(Tier::kHost), 9u);
  EXPECT_FALSE(r.state.Has(Tier::kDisk));

  r = index->Match(std::span(chain).first(3));
  EXPECT_EQ(r.reusable_pages, 2u);
  EXPECT_EQ(r.kv_only_pages, 3u);
  EXPECT_EQ(r.state.Slot(Tier::kDisk), 70u);
  r = index->Match(std::span(chain).first(1));
  EXPECT_EQ(r.reusable_pages, 0u);
  EXPECT_EQ(r.kv_only_pages, 1u);
  EXPECT_TRUE(r.state.empty());
  // A chain that leaves the index stops the match there.
  std::vector<PageHash> other = chain;
  other[2] = H(999);
  r = index->Match(other);
  EXPECT_EQ(r.reusable_pages, 2u);
  EXPECT_EQ(r.kv_only_pages, 2u);
  EXPECT_TRUE(index->CheckInvariants().ok()) << index->CheckInvariants().ToString();
}

TEST(PureSsmIndexTest, KvLocationsAreRefusedAndCounted) {
  auto index = MakeIndex(PureSsm());
  const auto chain = Chain(10, 2);
  ASSERT_TRUE(index->InsertChain(std::nullopt, chain).ok());
  const auto before = index->DumpEntries();
  for (Tier t : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
    const Status s = index->SetLocation(chain[1], Kind::kKV, t, 1);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find("no attention layers"), std::string::npos) << s.ToString();
  }
  // Checked before the page is looked up: an unknown page gets the same answer.
  EXPECT_TRUE(index->SetLocation(H(12345), Kind::kKV, Tier::kHost, 1).IsInvalidArgument());
  // A bad tier is still a bad tier first.
  EXPECT_EQ(index->SetLocation(chain[0], Kind::kKV, static_cast<Tier>(7), 1).code(),
            Status::Code::kInvalidArgument);
  const IndexStats st = index->Stats();
  EXPECT_EQ(st.err_no_kv_payload, 4u);
  EXPECT_EQ(st.err_bad_enum, 1u);
  for (int t = 0; t < kNumLocalTiers; ++t) EXPECT_EQ(st.located[0][t], 0u);
  // Nothing to pin, clear or evict.
  EXPECT_TRUE(index->PinForTransfer(chain[0], Kind::kKV, Tier::kHost).IsNotFound());
  EXPECT_TRUE(index->ClearLocation(chain[0], Kind::kKV, Tier::kHost).status().IsNotFound());
  auto victims = index->PickVictims(Tier::kHost, Kind::kKV, 8);
  ASSERT_TRUE(victims.ok());
  EXPECT_TRUE(victims->empty());
  // Recency is not part of the comparison: failed calls only advance the clock.
  const auto after = index->DumpEntries();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].hash, before[i].hash);
    EXPECT_TRUE(after[i].kv.empty());
    EXPECT_TRUE(after[i].state.empty());
  }
}

TEST(PureSsmIndexTest, StatesEvictFromAnyDepthAndTheChainThenHoldsNothing) {
  auto index = MakeIndex(PureSsm());
  const auto chain = Chain(20, 3);
  ASSERT_TRUE(index->InsertChain(std::nullopt, chain).ok());
  ASSERT_TRUE(index->SetLocation(chain[2], Kind::kMamba, Tier::kHost, 5).ok());
  auto victims = index->PickVictims(Tier::kHost, Kind::kMamba, 4);
  ASSERT_TRUE(victims.ok());
  ASSERT_EQ(victims->size(), 1u);
  EXPECT_EQ((*victims)[0].hash, chain[2]);
  EXPECT_EQ((*victims)[0].depth_pages, 3u);
  ASSERT_EQ(*index->ClearLocation(chain[2], Kind::kMamba, Tier::kHost), 5u);
  // Nothing holds the chain now: its entries go leaf first (the store's pruning).
  EXPECT_EQ(index->Match(chain).reusable_pages, 0u);
  EXPECT_EQ(index->Remove(chain[1]).code(), Status::Code::kFailedPrecondition);  // has a child
  for (size_t i = chain.size(); i-- > 0;) ASSERT_TRUE(index->Remove(chain[i]).ok());
  EXPECT_EQ(index->Stats().entries, 0u);
  EXPECT_TRUE(index->CheckInvariants().ok());
}

TEST(PureSsmIndexTest, AncestorsNameTheChainLeadingToAnEntry) {
  auto index = MakeIndex(PureSsm());
  const auto chain = Chain(30, 4);
  ASSERT_TRUE(index->InsertChain(std::nullopt, chain).ok());
  const auto branch = Chain(40, 2);
  ASSERT_TRUE(index->InsertChain(chain[1], branch).ok());
  const auto before = index->DumpEntries();

  auto a = index->Ancestors(chain[3]);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, std::vector<PageHash>(chain.begin(), chain.begin() + 3));
  a = index->Ancestors(branch[1]);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, (std::vector<PageHash>{chain[0], chain[1], branch[0]}));
  a = index->Ancestors(chain[0]);
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->empty());
  EXPECT_FALSE(index->Ancestors(H(777)).has_value());
  EXPECT_EQ(index->DumpEntries(), before);  // recency unchanged
}

}  // namespace
}  // namespace cachepawl
