// PrefixIndex: the contract of each method, error paths (index unchanged), eviction order.
#include "index/prefix_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/index/index_test_util.h"

namespace cachepawl {
namespace {

using testing::Chain;
using testing::H;
using testing::MakeIndex;

// Inserts `chain` and sets its KV in `tier` at slots base, base+1, ...
void InsertLocated(PrefixIndex& index, const std::optional<PageHash>& parent,
                   const std::vector<PageHash>& chain, Tier tier, uint64_t base) {
  ASSERT_TRUE(index.InsertChain(parent, chain).ok());
  for (size_t i = 0; i < chain.size(); ++i) {
    ASSERT_TRUE(index.SetLocation(chain[i], Kind::kKV, tier, base + i).ok());
  }
}

std::vector<PageHash> VictimHashes(const std::vector<Victim>& v) {
  std::vector<PageHash> out;
  for (const Victim& x : v) out.push_back(x.hash);
  return out;
}

// "Index unchanged": every entry equal (recency included) and the invariants hold.
class Unchanged {
 public:
  explicit Unchanged(const PrefixIndex& index) : index_(index), before_(index.DumpEntries()) {}
  ~Unchanged() {
    EXPECT_EQ(index_.DumpEntries(), before_);
    EXPECT_TRUE(index_.CheckInvariants().ok()) << index_.CheckInvariants().ToString();
  }

 private:
  const PrefixIndex& index_;
  std::vector<EntryInfo> before_;
};

TEST(IndexOptionsTest, ValidateNamesTheField) {
  IndexOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.track_interval_pages = 0;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  EXPECT_NE(o.Validate().message().find("track_interval_pages"), std::string::npos);
  o = {};
  o.max_pages = 0;
  EXPECT_NE(o.Validate().message().find("max_pages: 0"), std::string::npos);
  o.max_pages = kMaxIndexPages + 1;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = {};
  o.max_pages = 10;
  o.expected_pages = 11;
  EXPECT_NE(o.Validate().message().find("expected_pages: 11"), std::string::npos);
  EXPECT_FALSE(PrefixIndex::Create(o).ok());
}

TEST(TierLocationsTest, FastestAndEquality) {
  TierLocations a;
  EXPECT_EQ(a.Fastest(), std::nullopt);
  a.mask = 0b110;
  a.slot = {99, 5, 6};  // slot[0] is not meaningful
  EXPECT_EQ(a.Fastest(), Tier::kHost);
  EXPECT_EQ(a.Slot(Tier::kDevice), std::nullopt);
  EXPECT_EQ(a.Slot(Tier::kDisk), 6u);
  TierLocations b = a;
  b.slot[0] = 0;
  EXPECT_EQ(a, b);
  b.slot[2] = 7;
  EXPECT_FALSE(a == b);
}

TEST(PrefixIndexTest, EmptyIndexMatchesNothing) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 4);
  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 0u);
  EXPECT_EQ(r.kv_only_pages, 0u);
  EXPECT_EQ(r.indexed_pages, 0u);
  EXPECT_TRUE(r.pages.empty());
  EXPECT_TRUE(r.state.empty());
  r = index->Match(std::span<const PageHash>());
  EXPECT_EQ(r.kv_only_pages, 0u);
  EXPECT_TRUE(index->CheckInvariants().ok());
}

TEST(PrefixIndexTest, MatchReportsEveryPageLocation) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 5);
  InsertLocated(*index, std::nullopt, chain, Tier::kHost, 100);
  ASSERT_TRUE(index->SetLocation(chain[1], Kind::kKV, Tier::kDisk, uint64_t{1} << 40).ok());
  ASSERT_TRUE(index->SetLocation(chain[2], Kind::kKV, Tier::kDevice, 7).ok());

  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 5u);
  EXPECT_EQ(r.kv_only_pages, 5u);
  EXPECT_EQ(r.indexed_pages, 5u);
  ASSERT_EQ(r.pages.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(r.pages[i].Slot(Tier::kHost), 100 + i);
  EXPECT_EQ(r.pages[1].Slot(Tier::kDisk), uint64_t{1} << 40);
  EXPECT_EQ(r.pages[1].Fastest(), Tier::kHost);
  EXPECT_EQ(r.pages[2].Fastest(), Tier::kDevice);
  EXPECT_EQ(r.pages[2].mask, 0b011);

  // A longer query stops where the index does; a query starting mid-chain matches nothing
  // (its first page has a parent).
  auto longer = chain;
  longer.push_back(H(999));
  EXPECT_EQ(index->Match(longer).kv_only_pages, 5u);
  EXPECT_EQ(index->Match(std::span(chain).subspan(1)).kv_only_pages, 0u);
  // A page present in the index but under another parent breaks the chain.
  std::vector<PageHash> skip = {chain[0], chain[2]};
  EXPECT_EQ(index->Match(skip).kv_only_pages, 1u);
  EXPECT_TRUE(index->CheckInvariants().ok());
}

// Match takes a shortcut for chains inserted whole (consecutive entries) and falls back to the
// hash table when the next entry is not the next page: every mix must give the same answer.
TEST(PrefixIndexTest, MatchFollowsContiguousAndScatteredChains) {
  auto index = MakeIndex();
  uint64_t next_slot = 1000;
  std::unordered_map<PageHash, uint64_t> slot_of;
  auto locate = [&](const std::vector<PageHash>& pages) {
    for (const PageHash& h : pages) {
      slot_of[h] = next_slot;
      ASSERT_TRUE(index->SetLocation(h, Kind::kKV, Tier::kHost, next_slot++).ok());
    }
  };
  auto expect_match = [&](const std::vector<PageHash>& query, size_t want) {
    const MatchResult r = index->Match(query);
    ASSERT_EQ(r.kv_only_pages, want);
    for (size_t i = 0; i < want; ++i) {
      ASSERT_EQ(r.pages[i].Slot(Tier::kHost), slot_of.at(query[i])) << "page " << i;
    }
  };
  const auto a = Chain(1000, 100);  // inserted whole: consecutive entries
  ASSERT_TRUE(index->InsertChain(std::nullopt, a).ok());
  const auto b = Chain(2000, 60);  // a branch after a[49], also whole
  ASSERT_TRUE(index->InsertChain(a[49], b).ok());
  const auto c = Chain(3000, 40), d = Chain(4000, 40);  // two chains inserted interleaved
  for (size_t i = 0; i < 40; ++i) {
    ASSERT_TRUE(index->InsertKv(i ? std::optional(c[i - 1]) : std::nullopt, c[i]).ok());
    ASSERT_TRUE(index->InsertKv(i ? std::optional(d[i - 1]) : std::nullopt, d[i]).ok());
  }
  for (const auto* pages : {&a, &b, &c, &d}) locate(*pages);

  expect_match(a, 100);
  std::vector<PageHash> ab(a.begin(), a.begin() + 50);
  ab.insert(ab.end(), b.begin(), b.end());
  expect_match(ab, 110);  // leaves a's run for b's at page 50
  std::vector<PageHash> wrong(a.begin(), a.begin() + 30);
  wrong.insert(wrong.end(), b.begin(), b.end());
  expect_match(wrong, 30);  // b[0]'s parent is a[49], not a[29]
  expect_match(c, 40);
  expect_match(d, 40);
  auto a_then_c = a;
  a_then_c[70] = c[5];  // a foreign page in the middle of a run
  expect_match(a_then_c, 70);

  // Re-insert a's tail: the freed entries are reused in another order, the run is broken.
  for (size_t i = 100; i-- > 80;) {
    ASSERT_TRUE(index->ClearLocation(a[i], Kind::kKV, Tier::kHost).ok());
    ASSERT_TRUE(index->Remove(a[i]).ok());
  }
  for (size_t i = 80; i < 100; ++i) ASSERT_TRUE(index->InsertKv(a[i - 1], a[i]).ok());
  std::vector<PageHash> tail(a.begin() + 80, a.end());
  locate(tail);
  expect_match(a, 100);
  expect_match(ab, 110);
  EXPECT_TRUE(index->CheckInvariants().ok());
}

// More chains growing at once than the allocator keeps runs open for, forks in the middle of
// blocks, removed tails (freed entries still hold their hashes) and re-inserted pages: Match
// predicts each page's entry from the previous one and must check every prediction.
TEST(PrefixIndexTest, MatchOverManyInterleavedChainsForksAndRemovals) {
  auto index = MakeIndex();
  constexpr size_t kChains = 1100, kPages = 40;  // > 1,024 runs open at once
  std::vector<std::vector<PageHash>> chains;
  for (size_t c = 0; c < kChains; ++c) chains.push_back(Chain(1'000'000 + c * 1000, kPages));
  for (size_t i = 0; i < kPages; ++i) {
    for (const auto& chain : chains) {
      ASSERT_TRUE(index->InsertKv(i ? std::optional(chain[i - 1]) : std::nullopt, chain[i]).ok());
    }
  }
  // Forks: chain c branches off chain c-1 after page 3 + c % 30 (the middle of a block).
  std::vector<std::vector<PageHash>> forks;
  for (size_t c = 1; c < 200; ++c) {
    const size_t at = 3 + c % 30;
    std::vector<PageHash> fork(chains[c - 1].begin(), chains[c - 1].begin() + at + 1);
    const auto tail = Chain(9'000'000 + c * 1000, 25);
    for (size_t i = 0; i < tail.size(); ++i) {
      ASSERT_TRUE(index->InsertKv(i ? tail[i - 1] : fork.back(), tail[i]).ok());
      fork.push_back(tail[i]);
    }
    forks.push_back(fork);
  }
  std::unordered_map<PageHash, uint64_t> slot_of;
  uint64_t next_slot = 1;
  auto locate = [&](const std::vector<PageHash>& pages) {
    for (const PageHash& h : pages) {
      if (slot_of.count(h)) continue;
      slot_of[h] = next_slot;
      ASSERT_TRUE(index->SetLocation(h, Kind::kKV, Tier::kHost, next_slot++).ok());
    }
  };
  for (const auto& chain : chains) locate(chain);
  for (const auto& fork : forks) locate(fork);
  auto expect_match = [&](const std::vector<PageHash>& query, size_t want) {
    const MatchResult r = index->Match(query);
    ASSERT_EQ(r.kv_only_pages, want);
    for (size_t i = 0; i < want; ++i) {
      ASSERT_EQ(r.pages[i].Slot(Tier::kHost), slot_of.at(query[i])) << "page " << i;
    }
  };
  for (size_t c = 0; c < kChains; c += 7) expect_match(chains[c], kPages);
  for (const auto& fork : forks) expect_match(fork, fork.size());

  // Remove the tails (pages 20..39) of every third chain not forked from; the freed entries
  // keep their hashes, so a prediction that lands on one must not count.
  for (size_t c = 300; c < kChains; c += 3) {
    for (size_t i = kPages; i-- > 20;) {
      ASSERT_TRUE(index->ClearLocation(chains[c][i], Kind::kKV, Tier::kHost).ok());
      ASSERT_TRUE(index->Remove(chains[c][i]).ok());
      slot_of.erase(chains[c][i]);
    }
  }
  for (size_t c = 300; c < kChains; c += 3) expect_match(chains[c], 20);
  // Re-insert them page by page, interleaved: freed entries are reused in another order.
  for (size_t i = 20; i < kPages; ++i) {
    for (size_t c = 300; c < kChains; c += 3) {
      ASSERT_TRUE(index->InsertKv(chains[c][i - 1], chains[c][i]).ok());
    }
  }
  for (size_t c = 300; c < kChains; c += 3) locate(chains[c]);
  for (size_t c = 0; c < kChains; ++c) expect_match(chains[c], kPages);
  for (const auto& fork : forks) expect_match(fork, fork.size());
  // A query that leaves a chain for another chain's pages stops there.
  auto mixed = chains[5];
  std::copy(chains[6].begin() + 10, chains[6].end(), mixed.begin() + 10);
  expect_match(mixed, 10);
  EXPECT_TRUE(index->CheckInvariants().ok()) << index->CheckInvariants().ToString();
}

// A chain inserted whole that fills the entry storage exactly (one chunk of 65,536 entries):
// Match predicts the entry after the last one for the query's next page, which does not
// exist; it must neither touch it (ASan) nor count it.
TEST(PrefixIndexTest, MatchPastTheLastEntry) {
  auto index = MakeIndex();
  const auto chain = Chain(50'000'000, 65'536);
  ASSERT_TRUE(index->InsertChain(std::nullopt, chain).ok());
  auto query = chain;
  query.push_back(H(1));
  query.push_back(H(2));
  const MatchResult r = index->Match(query);
  EXPECT_EQ(r.indexed_pages, chain.size());
  EXPECT_EQ(r.kv_only_pages, 0u);
}

TEST(PrefixIndexTest, KvOnlyStopsAtFirstUnlocatedPageIndexedGoesOn) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 6);
  ASSERT_TRUE(index->InsertChain(std::nullopt, chain).ok());
  for (size_t i : {0, 1, 3, 4}) {
    ASSERT_TRUE(index->SetLocation(chain[i], Kind::kKV, Tier::kHost, i).ok());
  }
  const MatchResult r = index->Match(chain);
  EXPECT_EQ(r.kv_only_pages, 2u);
  EXPECT_EQ(r.reusable_pages, 2u);
  EXPECT_EQ(r.indexed_pages, 6u);
  EXPECT_EQ(r.pages.size(), 2u);
}

TEST(PrefixIndexTest, HybridRuleNeedsStateAtExactDepth) {
  IndexOptions o;
  o.require_mamba = true;
  o.track_interval_pages = 4;
  auto index = MakeIndex(o);
  const auto chain = Chain(1, 11);
  InsertLocated(*index, std::nullopt, chain, Tier::kHost, 0);

  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 0u) << "KV without a state is no hit";
  EXPECT_EQ(r.kv_only_pages, 11u);
  EXPECT_EQ(r.checkpoint_hint_pages, 8u);
  EXPECT_TRUE(r.state.empty());

  ASSERT_TRUE(index->SetLocation(chain[3], Kind::kMamba, Tier::kDisk, 40).ok());
  ASSERT_TRUE(index->SetLocation(chain[7], Kind::kMamba, Tier::kHost, 80).ok());
  ASSERT_TRUE(index->SetLocation(chain[7], Kind::kMamba, Tier::kDevice, 81).ok());
  r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 8u);
  EXPECT_EQ(r.state.mask, 0b011);
  EXPECT_EQ(r.state.Slot(Tier::kHost), 80u);
  EXPECT_EQ(r.state.Fastest(), Tier::kDevice);

  // A shorter query reuses the state at its own depth only.
  r = index->Match(std::span(chain).first(6));
  EXPECT_EQ(r.reusable_pages, 4u);
  EXPECT_EQ(r.state.Slot(Tier::kDisk), 40u);
  EXPECT_EQ(r.checkpoint_hint_pages, 4u);

  // A state without its KV is no hit: drop KV page 5.
  ASSERT_TRUE(index->ClearLocation(chain[5], Kind::kKV, Tier::kHost).ok());
  r = index->Match(chain);
  EXPECT_EQ(r.kv_only_pages, 5u);
  EXPECT_EQ(r.reusable_pages, 4u);
  EXPECT_EQ(r.checkpoint_hint_pages, 4u);
  EXPECT_TRUE(index->CheckInvariants().ok());
}

TEST(PrefixIndexTest, WithoutRequireMambaReusableIsKvOnlyAndReportsStateThere) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 3);
  InsertLocated(*index, std::nullopt, chain, Tier::kHost, 0);
  ASSERT_TRUE(index->SetLocation(chain[2], Kind::kMamba, Tier::kHost, 9).ok());
  MatchResult r = index->Match(chain);
  EXPECT_EQ(r.reusable_pages, 3u);
  EXPECT_EQ(r.state.Slot(Tier::kHost), 9u);
  r = index->Match(std::span(chain).first(2));
  EXPECT_EQ(r.reusable_pages, 2u);
  EXPECT_TRUE(r.state.empty());
}

TEST(PrefixIndexTest, InsertIsIdempotentAndChecksItsParent) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 3);
  ASSERT_TRUE(index->InsertChain(std::nullopt, chain).ok());
  EXPECT_TRUE(index->InsertKv(chain[0], chain[1]).ok());
  EXPECT_TRUE(index->InsertKv(PageHash::Zero(), chain[0]).ok()) << "zero parent = none";
  {
    Unchanged same(*index);
    EXPECT_TRUE(index->InsertKv(H(77), H(78)).IsNotFound());
    EXPECT_TRUE(index->InsertKv(chain[2], chain[1]).IsInvalidArgument()) << "other parent";
    EXPECT_TRUE(index->InsertKv(std::nullopt, chain[1]).IsInvalidArgument());
    EXPECT_TRUE(index->InsertKv(std::nullopt, PageHash::Zero()).IsInvalidArgument());
    EXPECT_TRUE(index->InsertKv(chain[2], chain[2]).IsInvalidArgument());
    // A chain that fails half-way leaves nothing behind.
    std::vector<PageHash> bad = {H(50), H(51), chain[0]};
    Status s = index->InsertChain(chain[2], bad);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find("InsertChain page 2"), std::string::npos) << s.message();
  }
  const IndexStats st = index->Stats();
  EXPECT_EQ(st.entries, 3u);
  EXPECT_EQ(st.err_parent_missing, 1u);
  EXPECT_EQ(st.err_parent_conflict, 3u);
  EXPECT_EQ(st.err_bad_hash, 2u);
  auto info = index->Lookup(chain[2]);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->depth_pages, 3u);
  EXPECT_EQ(info->parent, chain[1]);
  EXPECT_EQ(index->Lookup(chain[0])->parent, std::nullopt);
  EXPECT_EQ(index->Lookup(chain[0])->children, 1u);
  EXPECT_EQ(index->Lookup(H(50)), std::nullopt);
}

TEST(PrefixIndexTest, MaxPagesGivesNoSpace) {
  IndexOptions o;
  o.max_pages = 3;
  auto index = MakeIndex(o);
  ASSERT_TRUE(index->InsertChain(std::nullopt, Chain(1, 3)).ok());
  Unchanged same(*index);
  EXPECT_TRUE(index->InsertKv(std::nullopt, H(9)).IsNoSpace());
  EXPECT_TRUE(index->InsertChain(std::nullopt, Chain(1, 4)).IsNoSpace());
  EXPECT_EQ(index->Stats().err_full, 2u);
}

TEST(PrefixIndexTest, BadKindOrTierIsInvalidArgumentAndChangesNothing) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 2);
  InsertLocated(*index, std::nullopt, chain, Tier::kHost, 0);
  const Tier bad_tier = static_cast<Tier>(3);
  const Kind bad_kind = static_cast<Kind>(9);
  Unchanged same(*index);
  EXPECT_TRUE(index->SetLocation(chain[0], Kind::kKV, bad_tier, 1).IsInvalidArgument());
  EXPECT_TRUE(index->SetLocation(chain[0], bad_kind, Tier::kHost, 1).IsInvalidArgument());
  EXPECT_TRUE(index->ClearLocation(chain[0], Kind::kKV, bad_tier).status().IsInvalidArgument());
  EXPECT_TRUE(index->PinForTransfer(chain[0], bad_kind, Tier::kHost).IsInvalidArgument());
  EXPECT_TRUE(index->Unpin(chain[0], Kind::kKV, bad_tier).IsInvalidArgument());
  EXPECT_TRUE(index->PickVictims(bad_tier, Kind::kKV, 1).status().IsInvalidArgument());
  EXPECT_TRUE(index->PickVictims(Tier::kHost, bad_kind, 1).status().IsInvalidArgument());
  const Status s = index->SetLocation(chain[0], Kind::kKV, static_cast<Tier>(200), 1);
  EXPECT_NE(s.message().find("tier: 200"), std::string::npos) << s.message();
  EXPECT_EQ(index->Stats().err_bad_enum, 8u);
}

TEST(PrefixIndexTest, LocationsSetClearAndConflicts) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 2);
  ASSERT_TRUE(index->InsertChain(std::nullopt, chain).ok());
  ASSERT_TRUE(index->SetLocation(chain[0], Kind::kKV, Tier::kHost, 5).ok());
  EXPECT_TRUE(index->SetLocation(chain[0], Kind::kKV, Tier::kHost, 5).ok()) << "same slot";
  {
    Unchanged same(*index);
    EXPECT_TRUE(index->SetLocation(chain[0], Kind::kKV, Tier::kHost, 6).code() ==
                Status::Code::kFailedPrecondition);
    EXPECT_TRUE(index->SetLocation(H(5), Kind::kKV, Tier::kHost, 6).IsNotFound());
    EXPECT_TRUE(index->ClearLocation(chain[0], Kind::kKV, Tier::kDisk).status().IsNotFound());
    EXPECT_TRUE(index->ClearLocation(chain[1], Kind::kMamba, Tier::kHost).status().IsNotFound());
    EXPECT_TRUE(index->ClearLocation(H(5), Kind::kKV, Tier::kHost).status().IsNotFound());
    EXPECT_TRUE(index->SetLocation(H(5), Kind::kMamba, Tier::kHost, 1).IsNotFound())
        << "a state attached at a page that is not there";
  }
  // Large slots round-trip (they do not fit the inline 32 bits).
  for (uint64_t slot : {uint64_t{0xFFFFFFFF}, ~uint64_t{0}, uint64_t{1} << 33}) {
    ASSERT_TRUE(index->SetLocation(chain[1], Kind::kKV, Tier::kDisk, slot).ok());
    EXPECT_EQ(index->Lookup(chain[1])->kv.Slot(Tier::kDisk), slot);
    EXPECT_TRUE(index->CheckInvariants().ok());
    auto cleared = index->ClearLocation(chain[1], Kind::kKV, Tier::kDisk);
    ASSERT_TRUE(cleared.ok());
    EXPECT_EQ(*cleared, slot);
  }
  ASSERT_TRUE(index->SetLocation(chain[1], Kind::kMamba, Tier::kHost, ~uint64_t{0}).ok());
  EXPECT_EQ(index->Stats().states, 1u);
  auto cleared = index->ClearLocation(chain[1], Kind::kMamba, Tier::kHost);
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(*cleared, ~uint64_t{0});
  EXPECT_EQ(index->Stats().states, 0u) << "last tier cleared detaches the state";
  EXPECT_TRUE(index->Lookup(chain[1])->state.empty());
  EXPECT_TRUE(index->CheckInvariants().ok());
}

TEST(PrefixIndexTest, RemoveOnlyBareLeaves) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 2);
  InsertLocated(*index, std::nullopt, chain, Tier::kHost, 0);
  {
    Unchanged same(*index);
    EXPECT_TRUE(index->Remove(chain[1]).code() == Status::Code::kFailedPrecondition)
        << "still held";
    EXPECT_TRUE(index->Remove(H(9)).IsNotFound());
  }
  ASSERT_TRUE(index->ClearLocation(chain[1], Kind::kKV, Tier::kHost).ok());
  ASSERT_TRUE(index->ClearLocation(chain[0], Kind::kKV, Tier::kHost).ok());
  {
    Unchanged same(*index);
    EXPECT_TRUE(index->Remove(chain[0]).code() == Status::Code::kFailedPrecondition)
        << "has a child";
  }
  ASSERT_TRUE(index->Lock(chain[1]).ok());
  {
    Unchanged same(*index);
    EXPECT_TRUE(index->Remove(chain[1]).IsBusy());
  }
  ASSERT_TRUE(index->Unlock(chain[1]).ok());
  ASSERT_TRUE(index->Remove(chain[1]).ok());
  ASSERT_TRUE(index->Remove(chain[0]).ok());
  EXPECT_EQ(index->Stats().entries, 0u);
  EXPECT_TRUE(index->CheckInvariants().ok());
  // The hash can come back, under another parent even.
  ASSERT_TRUE(index->InsertKv(std::nullopt, chain[1]).ok());
  EXPECT_EQ(index->Lookup(chain[1])->depth_pages, 1u);
  EXPECT_TRUE(index->CheckInvariants().ok());
}

TEST(PrefixIndexTest, LockCoversKvOfThePathAndStateOfTheNode) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 3);
  InsertLocated(*index, std::nullopt, chain, Tier::kHost, 0);
  for (const auto& h : chain) ASSERT_TRUE(index->SetLocation(h, Kind::kMamba, Tier::kHost, 9).ok());
  ASSERT_TRUE(index->Lock(chain[1]).ok());
  ASSERT_TRUE(index->Lock(chain[2]).ok());
  EXPECT_EQ(index->Lookup(chain[0])->kv_locks, 2u);
  EXPECT_EQ(index->Lookup(chain[1])->kv_locks, 2u);
  EXPECT_EQ(index->Lookup(chain[1])->state_locks, 1u);
  EXPECT_EQ(index->Lookup(chain[0])->state_locks, 0u);
  EXPECT_TRUE(index->CheckInvariants().ok());
  {
    Unchanged same(*index);
    EXPECT_TRUE(index->ClearLocation(chain[0], Kind::kKV, Tier::kHost).status().IsBusy());
    EXPECT_TRUE(index->ClearLocation(chain[2], Kind::kMamba, Tier::kHost).status().IsBusy());
    EXPECT_TRUE(index->Unlock(chain[0]).code() == Status::Code::kFailedPrecondition)
        << "never locked there";
    EXPECT_TRUE(index->Unlock(H(99)).IsNotFound());
  }
  // The Mamba state of an inner page is not locked by a lock further down.
  auto victims = index->PickVictims(Tier::kHost, Kind::kMamba, 10);
  ASSERT_TRUE(victims.ok());
  EXPECT_EQ(VictimHashes(*victims), std::vector<PageHash>{chain[0]});
  EXPECT_TRUE(index->PickVictims(Tier::kHost, Kind::kKV, 10)->empty());
  ASSERT_TRUE(index->Unlock(chain[2]).ok());
  victims = index->PickVictims(Tier::kHost, Kind::kKV, 10);
  EXPECT_EQ(VictimHashes(*victims), std::vector<PageHash>{chain[2]});
  ASSERT_TRUE(index->Unlock(chain[1]).ok());
  {
    Unchanged same(*index);
    EXPECT_TRUE(index->Unlock(chain[1]).code() == Status::Code::kFailedPrecondition)
        << "double unlock";
  }
  EXPECT_EQ(index->Stats().locked_entries, 0u);
  EXPECT_EQ(index->Stats().err_not_locked, 2u);
  EXPECT_TRUE(index->CheckInvariants().ok());
}

TEST(PrefixIndexTest, PinsAreCountedAllOrNothingAndBlockEviction) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 2);
  InsertLocated(*index, std::nullopt, chain, Tier::kHost, 0);
  ASSERT_TRUE(index->PinForTransfer(chain, Kind::kKV, Tier::kHost).ok());
  ASSERT_TRUE(index->PinForTransfer(chain[1], Kind::kKV, Tier::kHost).ok());
  EXPECT_EQ(index->Lookup(chain[1])->kv_pins[1], 2u);
  EXPECT_TRUE(index->PickVictims(Tier::kHost, Kind::kKV, 10)->empty());
  {
    Unchanged same(*index);
    EXPECT_TRUE(index->ClearLocation(chain[1], Kind::kKV, Tier::kHost).status().IsBusy());
    std::vector<PageHash> mixed = {chain[0], H(99)};
    EXPECT_TRUE(index->PinForTransfer(mixed, Kind::kKV, Tier::kHost).IsNotFound());
    EXPECT_TRUE(index->PinForTransfer(chain[0], Kind::kKV, Tier::kDisk).IsNotFound());
    EXPECT_TRUE(index->PinForTransfer(chain[0], Kind::kMamba, Tier::kHost).IsNotFound());
    std::vector<PageHash> twice = {chain[0], chain[0]};
    EXPECT_TRUE(index->Unpin(twice, Kind::kKV, Tier::kHost).code() ==
                Status::Code::kFailedPrecondition);
    EXPECT_TRUE(index->Unpin(chain[0], Kind::kKV, Tier::kDisk).code() ==
                Status::Code::kFailedPrecondition);
  }
  ASSERT_TRUE(index->Unpin(chain, Kind::kKV, Tier::kHost).ok());
  EXPECT_TRUE(index->PickVictims(Tier::kHost, Kind::kKV, 10)->empty()) << "leaf still pinned";
  ASSERT_TRUE(index->Unpin(chain[1], Kind::kKV, Tier::kHost).ok());
  EXPECT_EQ(VictimHashes(*index->PickVictims(Tier::kHost, Kind::kKV, 10)),
            (std::vector<PageHash>{chain[1], chain[0]}));
  EXPECT_TRUE(index->CheckInvariants().ok());
}

TEST(PrefixIndexTest, VictimsAreLeastRecentlyUsedLeavesFirst) {
  auto index = MakeIndex();
  // Two branches under a shared root page: a = root,a1,a2 and b = root,b1.
  const PageHash root = H(1);
  const auto a = Chain(10, 2);
  const auto b = Chain(20, 1);
  InsertLocated(*index, std::nullopt, {root}, Tier::kHost, 0);
  InsertLocated(*index, root, a, Tier::kHost, 10);
  InsertLocated(*index, root, b, Tier::kHost, 20);
  // Use branch a after b was inserted: b1 is now the least recent leaf.
  std::vector<PageHash> path_a = {root, a[0], a[1]};
  EXPECT_EQ(index->Match(path_a).kv_only_pages, 3u);

  auto v = index->PickVictims(Tier::kHost, Kind::kKV, 1);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 1u);
  EXPECT_EQ((*v)[0].hash, b[0]);
  EXPECT_EQ((*v)[0].slot, 20u);
  EXPECT_EQ((*v)[0].tier, Tier::kHost);
  EXPECT_EQ((*v)[0].kind, Kind::kKV);
  EXPECT_EQ((*v)[0].depth_pages, 2u);
  // Picking changes nothing: the same answer again.
  EXPECT_EQ(*index->PickVictims(Tier::kHost, Kind::kKV, 1), *v);
  // All of them: a leaf before its parent, the root last (once both branches are gone).
  v = index->PickVictims(Tier::kHost, Kind::kKV, 10);
  EXPECT_EQ(VictimHashes(*v), (std::vector<PageHash>{b[0], a[1], a[0], root}));
  // Clearing in the order given never leaves a cached child under an evicted page.
  for (const Victim& x : *v) {
    ASSERT_TRUE(index->ClearLocation(x.hash, x.kind, x.tier).ok());
    ASSERT_TRUE(index->CheckInvariants().ok());
  }
  EXPECT_TRUE(index->PickVictims(Tier::kHost, Kind::kKV, 10)->empty());
}

TEST(PrefixIndexTest, LeafRuleIsPerTier) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 3);
  InsertLocated(*index, std::nullopt, chain, Tier::kDisk, 0);
  // Only the first page is on host: it is a host leaf though it has children on disk.
  ASSERT_TRUE(index->SetLocation(chain[0], Kind::kKV, Tier::kHost, 5).ok());
  EXPECT_EQ(VictimHashes(*index->PickVictims(Tier::kHost, Kind::kKV, 5)),
            std::vector<PageHash>{chain[0]});
  EXPECT_EQ(VictimHashes(*index->PickVictims(Tier::kDisk, Kind::kKV, 1)),
            std::vector<PageHash>{chain[2]});
  const IndexStats s = index->Stats();
  EXPECT_EQ(s.evictable[0][static_cast<int>(Tier::kDisk)], 1u);
  EXPECT_EQ(s.located[0][static_cast<int>(Tier::kDisk)], 3u);
  EXPECT_EQ(s.evictable[0][static_cast<int>(Tier::kHost)], 1u);
}

TEST(PrefixIndexTest, MambaStatesEvictFromInnerNodesKvStays) {
  IndexOptions o;
  o.require_mamba = true;
  o.mamba_state_bytes = 1000;
  o.kv_page_bytes = 64;
  auto index = MakeIndex(o);
  const auto chain = Chain(1, 4);
  InsertLocated(*index, std::nullopt, chain, Tier::kHost, 0);
  ASSERT_TRUE(index->SetLocation(chain[1], Kind::kMamba, Tier::kHost, 11).ok());
  ASSERT_TRUE(index->SetLocation(chain[3], Kind::kMamba, Tier::kHost, 13).ok());
  ASSERT_TRUE(index->SetLocation(chain[2], Kind::kMamba, Tier::kHost, 12).ok());
  // Using the full prefix refreshes the state at page 3 only.
  EXPECT_EQ(index->Match(chain).reusable_pages, 4u);
  auto v = index->PickVictimsForBytes(Tier::kHost, Kind::kMamba, 1001);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(VictimHashes(*v), (std::vector<PageHash>{chain[1], chain[2]}));
  EXPECT_EQ((*v)[0].slot, 11u);
  EXPECT_EQ(index->PickVictimsForBytes(Tier::kHost, Kind::kKV, 64)->size(), 1u);
  EXPECT_EQ(index->PickVictimsForBytes(Tier::kHost, Kind::kKV, 0)->size(), 0u);
  for (const Victim& x : *v) ASSERT_TRUE(index->ClearLocation(x.hash, x.kind, x.tier).ok());
  // The KV stays; matching a shorter prefix now finds no state.
  EXPECT_EQ(index->Match(std::span(chain).first(3)).reusable_pages, 0u);
  EXPECT_EQ(index->Match(std::span(chain).first(3)).kv_only_pages, 3u);
  const IndexStats s = index->Stats();
  EXPECT_EQ(s.located_bytes[1][1], 1000u);
  EXPECT_EQ(s.located_bytes[0][1], 4 * 64u);
  EXPECT_TRUE(index->CheckInvariants().ok());

  auto unknown = MakeIndex();
  EXPECT_TRUE(unknown->PickVictimsForBytes(Tier::kHost, Kind::kKV, 1).status().IsInvalidArgument());
  EXPECT_EQ(unknown->Stats().err_bytes_unknown, 1u);
}

TEST(PrefixIndexTest, StatsCountMatches) {
  auto index = MakeIndex();
  const auto chain = Chain(1, 3);
  InsertLocated(*index, std::nullopt, chain, Tier::kHost, 0);
  MatchResult r;
  index->Match(chain, &r);
  index->Match(std::span(chain).first(1), &r);
  EXPECT_EQ(r.pages.size(), 1u) << "a reused result is cleared first";
  const IndexStats s = index->Stats();
  EXPECT_EQ(s.matches, 2u);
  EXPECT_EQ(s.match_pages, 4u);
  EXPECT_GT(s.memory_bytes, 0u);
}

}  // namespace
}  // namespace cachepawl
