// PrefixIndex with windowed KV (IndexOptions::window_pages W > 0, Kind::kWindowKV): the window
// rule in Match, "needed" windowed KV and its eviction, window locks, Remove, layouts whose
// attention layers are all windowed, and the error paths. The model-based test
// (prefix_index_model_test.cc) runs the same rule against its reference.
#include <gtest/gtest.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "index/prefix_index.h"
#include "tests/index/index_test_util.h"

namespace cachepawl {
namespace {

using testing::Chain;
using testing::H;
using testing::MakeIndex;

IndexOptions Windowed(uint32_t window_pages, bool require_mamba = true, bool kv_payload = true) {
  IndexOptions o;
  o.window_pages = window_pages;
  o.require_mamba = require_mamba;
  o.kv_payload = kv_payload;
  return o;
}

// Inserts `chain`; with KV payload its KV is set in host at slots 100 + i.
void InsertWithKv(PrefixIndex& index, const std::vector<PageHash>& chain) {
  ASSERT_TRUE(index.InsertChain(std::nullopt, chain).ok());
  if (!index.options().kv_payload) return;
  for (size_t i = 0; i < chain.size(); ++i) {
    ASSERT_TRUE(index.SetLocation(chain[i], Kind::kKV, Tier::kHost, 100 + i).ok());
  }
}

// Windowed KV of chain[i] for each i in `pages`, in `tier` at slot 200 + i.
void SetWindows(PrefixIndex& index, const std::vector<PageHash>& chain,
                const std::vector<size_t>& pages, Tier tier = Tier::kHost) {
  for (size_t i : pages) {
    ASSERT_TRUE(index.SetLocation(chain[i], Kind::kWindowKV, tier, 200 + i).ok()) << i;
  }
}

std::vector<PageHash> Picked(PrefixIndex& index, Tier tier, size_t max_count = 16) {
  auto v = index.PickVictims(tier, Kind::kWindowKV, max_count);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  std::vector<PageHash> out;
  for (const Victim& x : *v) {
    EXPECT_EQ(x.kind, Kind::kWindowKV);
    EXPECT_EQ(x.tier, tier);
    out.push_back(x.hash);
  }
  return out;
}

void ExpectValid(const PrefixIndex& index) {
  const Status s = index.CheckInvariants();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(PrefixIndexWindowTest, OptionsAllowAnAllWindowedLayout) {
  IndexOptions o = Windowed(4, /*require_mamba=*/false, /*kv_payload=*/false);
  EXPECT_TRUE(o.Validate().ok());
  o.window_pages = 0;
  EXPECT_NE(o.Validate().message().find("index.kv_payload: false"), std::string::npos);
  o = Windowed(kMaxWindowPages + 1);
  const Status s = o.Validate();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("index.window_pages: 16777216"), std::string::npos) << s.ToString();
  EXPECT_FALSE(PrefixIndex::Create(o).ok());
  EXPECT_TRUE(Windowed(kMaxWindowPages).Validate().ok());
}

TEST(PrefixIndexWindowTest, ReusableNeedsTheWindowBeforeTheState) {
  auto index = MakeIndex(Windowed(3));
  const auto chain = Chain(1, 8);
  InsertWithKv(*index, chain);
  ASSERT_TRUE(index->SetLocation(chain[5], Kind::kMamba, Tier::kHost, 55).ok());  // n = 6
  ASSERT_TRUE(index->SetLocation(chain[3], Kind::kMamba, Tier::kDisk, 33).ok());  // n = 4
  ASSERT_TRUE(index->SetLocation(chain[1], Kind::kMamba, Tier::kDisk, 11).ok());  // n = 2
  SetWindows(*index, chain, {3, 4, 5});
  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.kv_only_pages, 8u);
  EXPECT_EQ(r.reusable_pages, 6u);
  EXPECT_EQ(r.state.Slot(Tier::kHost), 55u);
  ASSERT_EQ(r.window.size(), 3u);
  EXPECT_EQ(r.window_first_page, 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(r.window[k].Slot(Tier::kHost), 203 + k);

  // A hole in the middle of [n-W, n) makes n non-reusable; n = 4 lacks pages 1 and 2.
  ASSERT_EQ(*index->ClearLocation(chain[4], Kind::kWindowKV, Tier::kHost), 204u);
  r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 0u);
  EXPECT_TRUE(r.window.empty());
  EXPECT_TRUE(r.state.empty());
  EXPECT_EQ(r.window_first_page, 0u);
  // With pages 1 and 2 the shorter prefix n = 4 is reusable, its state reported.
  SetWindows(*index, chain, {1, 2}, Tier::kDisk);
  r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 4u);
  EXPECT_EQ(r.state.Slot(Tier::kDisk), 33u);
  ASSERT_EQ(r.window.size(), 3u);
  EXPECT_EQ(r.window_first_page, 1u);
  EXPECT_EQ(r.window[0].Slot(Tier::kDisk), 201u);
  EXPECT_EQ(r.window[2].Slot(Tier::kHost), 203u);
  ExpectValid(*index);
}

TEST(PrefixIndexWindowTest, AWindowLongerThanThePrefixNeedsItsPagesOnly) {
  auto index = MakeIndex(Windowed(8));
  const auto chain = Chain(20, 4);
  InsertWithKv(*index, chain);
  ASSERT_TRUE(index->SetLocation(chain[1], Kind::kMamba, Tier::kHost, 7).ok());  // n = 2
  ASSERT_TRUE(index->SetLocation(chain[3], Kind::kMamba, Tier::kHost, 8).ok());  // n = 4
  SetWindows(*index, chain, {0, 1, 3});
  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 2u);  // n = 4 lacks page 2
  ASSERT_EQ(r.window.size(), 2u);
  EXPECT_EQ(r.window_first_page, 0u);
  SetWindows(*index, chain, {2});
  r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 4u);
  EXPECT_EQ(r.window.size(), 4u);
  // Recency of the reported windowed KV is refreshed (the state's too), not of others.
  const auto info = index->Lookup(chain[2]);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->window_last_use, info->kv_last_use);
  EXPECT_EQ(info->window_anchors, 1u);  // chain[3]'s state is one level below
  ExpectValid(*index);
}

TEST(PrefixIndexWindowTest, WithoutTheHybridRuleTheLongestFullWindowWins) {
  auto index = MakeIndex(Windowed(2, /*require_mamba=*/false));
  const auto chain = Chain(30, 6);
  InsertWithKv(*index, chain);
  SetWindows(*index, chain, {0, 2, 3});
  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.kv_only_pages, 6u);
  EXPECT_EQ(r.reusable_pages, 4u);  // pages 2, 3; n = 5, 6 lack page 4
  EXPECT_EQ(r.window_first_page, 2u);
  EXPECT_EQ(r.window.size(), 2u);
  r = index->Match(std::span(chain).first(2));
  EXPECT_EQ(r.reusable_pages, 1u);  // n = 1 needs page 0 only
  EXPECT_EQ(r.window.size(), 1u);
  // Without anchors no windowed KV is needed: every unlocked one is evictable.
  EXPECT_EQ(Picked(*index, Tier::kHost).size(), 3u);
  ExpectValid(*index);
}

TEST(PrefixIndexWindowTest, NeededWindowIsPickedOnlyWhenCopiedAndAfterTheUnneeded) {
  IndexOptions o = Windowed(2);
  o.window_page_bytes = 10;
  auto index = MakeIndex(o);
  const auto chain = Chain(40, 5);
  InsertWithKv(*index, chain);
  ASSERT_TRUE(index->SetLocation(chain[3], Kind::kMamba, Tier::kHost, 3).ok());
  SetWindows(*index, chain, {2, 3});  // needed by the state after page 3
  SetWindows(*index, chain, {0, 4});  // needed by nothing, set later (more recent)
  EXPECT_EQ(index->Match(chain).reusable_pages, 4u);
  EXPECT_EQ(Picked(*index, Tier::kHost), (std::vector<PageHash>{chain[0], chain[4]}));
  IndexStats s = index->Stats();
  EXPECT_EQ(s.windows, 4u);
  EXPECT_EQ(s.located[2][1], 4u);
  EXPECT_EQ(s.located_bytes[2][1], 40u);
  EXPECT_EQ(s.evictable[2][1], 2u);

  // A copy on disk makes the host copy of page 3 evictable, after every unneeded one even
  // though it is less recent. The disk copy is then the only one: not evictable.
  SetWindows(*index, chain, {3}, Tier::kDisk);
  EXPECT_EQ(Picked(*index, Tier::kHost), (std::vector<PageHash>{chain[0], chain[4], chain[3]}));
  EXPECT_EQ(Picked(*index, Tier::kDisk), (std::vector<PageHash>{chain[3]}));  // host has one
  auto v = index->PickVictimsForBytes(Tier::kHost, Kind::kWindowKV, 11);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), 2u);
  ASSERT_TRUE(index->ClearLocation(chain[3], Kind::kWindowKV, Tier::kHost).ok());
  EXPECT_TRUE(Picked(*index, Tier::kDisk).empty());

  // Clearing needed windowed KV directly is allowed (a failed read); Match then misses.
  ASSERT_TRUE(index->ClearLocation(chain[2], Kind::kWindowKV, Tier::kHost).ok());
  EXPECT_EQ(index->Match(chain).reusable_pages, 0u);
  SetWindows(*index, chain, {2});
  // Evicting the state makes its window pickable.
  ASSERT_TRUE(index->ClearLocation(chain[3], Kind::kMamba, Tier::kHost).ok());
  EXPECT_EQ(Picked(*index, Tier::kDisk), (std::vector<PageHash>{chain[3]}));
  EXPECT_EQ(Picked(*index, Tier::kHost).size(), 3u);
  s = index->Stats();
  EXPECT_EQ(s.evictable[2][1], 3u);
  EXPECT_EQ(s.evictable[2][2], 1u);
  ExpectValid(*index);
}

TEST(PrefixIndexWindowTest, AStateNeedsTheWindowOnEveryBranchBelow) {
  auto index = MakeIndex(Windowed(3));
  const auto trunk = Chain(50, 2);
  InsertWithKv(*index, trunk);
  const auto branch = Chain(60, 2);
  ASSERT_TRUE(index->InsertChain(trunk[1], branch).ok());
  SetWindows(*index, trunk, {0, 1});
  ASSERT_TRUE(index->SetLocation(branch[1], Kind::kMamba, Tier::kDisk, 1).ok());
  // branch[1] is at depth 4: its window is pages 2..4 (depths 2, 3, 4): trunk[1] yes,
  // trunk[0] (depth 1) no.
  EXPECT_EQ(index->Lookup(trunk[1])->window_anchors, 1u);
  EXPECT_EQ(index->Lookup(trunk[0])->window_anchors, 0u);
  EXPECT_EQ(Picked(*index, Tier::kHost), (std::vector<PageHash>{trunk[0]}));
  ASSERT_TRUE(index->SetLocation(trunk[1], Kind::kMamba, Tier::kDisk, 2).ok());
  EXPECT_EQ(index->Lookup(trunk[1])->window_anchors, 2u);
  EXPECT_EQ(index->Lookup(trunk[0])->window_anchors, 1u);
  EXPECT_TRUE(Picked(*index, Tier::kHost).empty());
  ExpectValid(*index);
}

TEST(PrefixIndexWindowTest, LocksCoverExactlyTheWindow) {
  auto index = MakeIndex(Windowed(3, /*require_mamba=*/false));
  const auto chain = Chain(70, 6);
  InsertWithKv(*index, chain);
  SetWindows(*index, chain, {0, 1, 2, 3, 4, 5});
  ASSERT_TRUE(index->Lock(chain[4]).ok());
  ASSERT_TRUE(index->Lock(chain[4]).ok());
  for (size_t i = 0; i < chain.size(); ++i) {
    const uint32_t want = (i >= 2 && i <= 4) ? 2 : 0;
    EXPECT_EQ(index->Lookup(chain[i])->window_locks, want) << i;
  }
  EXPECT_EQ(Picked(*index, Tier::kHost), (std::vector<PageHash>{chain[0], chain[1], chain[5]}));
  const auto busy = index->ClearLocation(chain[2], Kind::kWindowKV, Tier::kHost);
  EXPECT_TRUE(busy.status().IsBusy()) << busy.status().ToString();
  EXPECT_EQ(index->Stats().err_locked, 1u);
  ASSERT_TRUE(index->Unlock(chain[4]).ok());
  EXPECT_EQ(index->Stats().evictable[2][1], 3u);
  ASSERT_TRUE(index->Unlock(chain[4]).ok());
  EXPECT_EQ(index->Stats().evictable[2][1], 6u);
  EXPECT_EQ(index->Lookup(chain[3])->window_locks, 0u);
  ASSERT_TRUE(index->ClearLocation(chain[2], Kind::kWindowKV, Tier::kHost).ok());
  ExpectValid(*index);
}

TEST(PrefixIndexWindowTest, RemoveIsRefusedWhileWindowedKvIsHeld) {
  auto index = MakeIndex(Windowed(2, /*require_mamba=*/true, /*kv_payload=*/false));
  const auto chain = Chain(80, 2);
  InsertWithKv(*index, chain);
  SetWindows(*index, chain, {1});
  EXPECT_EQ(index->Remove(chain[1]).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(index->Stats().err_remove_busy, 1u);
  ASSERT_TRUE(index->ClearLocation(chain[1], Kind::kWindowKV, Tier::kHost).ok());
  ASSERT_TRUE(index->Remove(chain[1]).ok());
  ASSERT_TRUE(index->Remove(chain[0]).ok());
  EXPECT_EQ(index->Stats().entries, 0u);
  ExpectValid(*index);
}

TEST(PrefixIndexWindowTest, AllWindowedLayoutWithStates) {
  auto index = MakeIndex(Windowed(2, /*require_mamba=*/true, /*kv_payload=*/false));
  const auto chain = Chain(90, 5);
  InsertWithKv(*index, chain);
  ASSERT_TRUE(index->SetLocation(chain[4], Kind::kMamba, Tier::kHost, 4).ok());
  ASSERT_TRUE(index->SetLocation(chain[2], Kind::kMamba, Tier::kHost, 2).ok());
  SetWindows(*index, chain, {1, 2, 4});
  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.kv_only_pages, 5u);
  EXPECT_TRUE(r.pages.empty());
  EXPECT_EQ(r.reusable_pages, 3u);  // n = 5 lacks page 3
  EXPECT_EQ(r.state.Slot(Tier::kHost), 2u);
  EXPECT_EQ(r.window_first_page, 1u);
  EXPECT_TRUE(index->SetLocation(chain[0], Kind::kKV, Tier::kHost, 1).IsInvalidArgument());
  SetWindows(*index, chain, {3});
  EXPECT_EQ(index->Match(chain).reusable_pages, 5u);
  EXPECT_TRUE(Picked(*index, Tier::kHost).empty());  // pages 1..4 all needed
  ExpectValid(*index);
}

TEST(PrefixIndexWindowTest, AllWindowedLayoutWithoutStates) {
  auto index = MakeIndex(Windowed(3, /*require_mamba=*/false, /*kv_payload=*/false));
  const auto chain = Chain(110, 6);
  InsertWithKv(*index, chain);
  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.kv_only_pages, 6u);
  EXPECT_EQ(r.reusable_pages, 0u);  // no windowed KV anywhere
  SetWindows(*index, chain, {0, 1, 3, 4, 5});
  r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 6u);
  EXPECT_EQ(r.window_first_page, 3u);
  ASSERT_TRUE(index->ClearLocation(chain[5], Kind::kWindowKV, Tier::kHost).ok());
  r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 2u);  // n = 3..5 each lack page 2
  EXPECT_EQ(r.window.size(), 2u);
  EXPECT_TRUE(r.state.empty());
  ExpectValid(*index);
}

TEST(PrefixIndexWindowTest, ErrorsAreCountedAndChangeNothing) {
  auto plain = MakeIndex();  // no windowed layers
  const auto chain = Chain(120, 2);
  InsertWithKv(*plain, chain);
  Status s = plain->SetLocation(chain[0], Kind::kWindowKV, Tier::kHost, 1);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("window_pages is 0"), std::string::npos) << s.ToString();
  EXPECT_TRUE(plain->SetLocation(H(999), Kind::kWindowKV, Tier::kHost, 1).IsInvalidArgument());
  EXPECT_TRUE(plain->PinForTransfer(chain[0], Kind::kWindowKV, Tier::kHost).IsInvalidArgument());
  EXPECT_TRUE(plain->ClearLocation(chain[0], Kind::kWindowKV, Tier::kHost).status().IsNotFound());
  EXPECT_TRUE(plain->PickVictims(Tier::kHost, Kind::kWindowKV, 4)->empty());
  s = plain->SetLocation(chain[0], static_cast<Kind>(3), Tier::kHost, 1);
  EXPECT_NE(s.message().find("kind: 3 (expected 0..2)"), std::string::npos) << s.ToString();
  IndexStats st = plain->Stats();
  EXPECT_EQ(st.err_no_window, 3u);
  EXPECT_EQ(st.err_not_located, 1u);
  EXPECT_EQ(st.err_bad_enum, 1u);
  EXPECT_TRUE(plain->Lookup(chain[0])->window.empty());

  auto index = MakeIndex(Windowed(2));
  InsertWithKv(*index, chain);
  SetWindows(*index, chain, {1});
  EXPECT_EQ(index->SetLocation(chain[1], Kind::kWindowKV, Tier::kHost, 5).code(),
            Status::Code::kFailedPrecondition);
  EXPECT_TRUE(index->SetLocation(chain[1], Kind::kWindowKV, Tier::kHost, 201).ok());  // same
  ASSERT_TRUE(index->PinForTransfer(chain[1], Kind::kWindowKV, Tier::kHost).ok());
  EXPECT_EQ(index->Lookup(chain[1])->window_pins[1], 1u);
  EXPECT_TRUE(Picked(*index, Tier::kHost).empty());
  EXPECT_TRUE(index->ClearLocation(chain[1], Kind::kWindowKV, Tier::kHost).status().IsBusy());
  EXPECT_TRUE(index->PinForTransfer(chain[0], Kind::kWindowKV, Tier::kHost).IsNotFound());
  ASSERT_TRUE(index->Unpin(chain[1], Kind::kWindowKV, Tier::kHost).ok());
  EXPECT_EQ(index->Unpin(chain[1], Kind::kWindowKV, Tier::kHost).code(),
            Status::Code::kFailedPrecondition);
  auto v = index->PickVictimsForBytes(Tier::kHost, Kind::kWindowKV, 1);
  EXPECT_TRUE(v.status().IsInvalidArgument());
  EXPECT_NE(v.status().message().find("index.window_page_bytes: 0"), std::string::npos);
  st = index->Stats();
  EXPECT_EQ(st.err_slot_conflict, 1u);
  EXPECT_EQ(st.err_pinned, 1u);
  EXPECT_EQ(st.err_not_located, 1u);
  EXPECT_EQ(st.err_not_pinned, 1u);
  EXPECT_EQ(st.err_bytes_unknown, 1u);
  EXPECT_EQ(st.err_no_window, 0u);
  EXPECT_EQ(Picked(*index, Tier::kHost), (std::vector<PageHash>{chain[1]}));
  ExpectValid(*index);
}

}  // namespace
}  // namespace cachepawl
