// PrefixIndex against a brute-force reference (prefix_index_model_ref.h): 1,000,000 random
// operations (inserts, chains, locations, Mamba states, windowed KV, matches, locks, pins,
// evictions, removals, bad input) over a few hundred prefixes with shared branches, for
// attention-only, hybrid and pure SSM (pages without KV payload) indexes, each also with
// windowed KV (the window rule; 250,000 operations). Every operation's result is compared at the
// step it happens (status code, match result, victims, cleared slot, the touched entries); the
// whole index, its counters and CheckInvariants() every kFullCheckEvery operations and at the end.
//
// Reproduce a failure with CACHEPAWL_TEST_SEED=<seed> (the EnvSeed case), or the fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "index/prefix_index.h"
#include "tests/common/test_util.h"
#include "tests/index/prefix_index_model_ref.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CACHEPAWL_INDEX_MODEL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CACHEPAWL_INDEX_MODEL_SANITIZED 1
#endif
#endif

namespace cachepawl {
namespace {

#ifdef CACHEPAWL_INDEX_MODEL_SANITIZED
constexpr int kOperations = 100'000;  // sanitizers run ~10x slower
#else
constexpr int kOperations = 1'000'000;
#endif
constexpr int kFullCheckEvery = 2'000;
// The windowed seeds: the same count with and without sanitizers (the reference's window rule is
// brute force), enough for every path the run checks it exercised.
constexpr int kWindowOperations = 100'000;
constexpr size_t kHeld = 48;

using index_model::Code;
using index_model::kNoNode;
using index_model::RefIndex;
using index_model::Universe;

// ----- the driver ---------------------------------------------------------------------------

struct ModelConfig {
  uint64_t seed;
  bool require_mamba;
  uint32_t track_interval_pages;
  uint64_t max_pages;
  bool kv_payload = true;     // false: a pure SSM layout (pages without KV)
  uint32_t window_pages = 0;  // > 0: windowed KV and the window rule
  int operations = kOperations;
  bool hybrid = false;  // hybrid eviction: prefix units and state scores
};

class ModelRun {
 public:
  explicit ModelRun(const ModelConfig& cfg)
      : rng_(cfg.seed), u_(Universe::Make(rng_)), options_(MakeOptions(cfg)), ref_(u_, options_) {
    auto index = PrefixIndex::Create(options_);
    EXPECT_TRUE(index.ok());
    index_ = std::move(index).value();
  }

  void Run(int operations) {
    for (step_ = 0; step_ < operations; ++step_) {
      Step();
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "first failure at operation " << step_;
        return;
      }
      if ((step_ + 1) % kFullCheckEvery == 0) FullCheck();
    }
    FullCheck();
    // The run must have exercised the interesting paths.
    EXPECT_GT(hits_, operations / 100);
    EXPECT_GT(victims_, operations / 100);
    EXPECT_GT(pins_ok_, operations / 1000);
    if (options_.window_pages > 0) {
      EXPECT_GT(window_victims_, operations / 1000);
    }
    if (options_.hybrid_eviction && options_.kv_payload) {
      EXPECT_GT(needed_kv_victims_, operations / 1000);  // the needed-and-copied class too
    }
  }

 private:
  static IndexOptions MakeOptions(const ModelConfig& cfg) {
    IndexOptions o;
    o.require_mamba = cfg.require_mamba;
    o.track_interval_pages = cfg.track_interval_pages;
    o.max_pages = cfg.max_pages;
    o.kv_payload = cfg.kv_payload;
    o.window_pages = cfg.window_pages;
    if (cfg.hybrid) {
      // Small sizes so that depth and hits both move scores (ties too: equal depths and hits).
      o.hybrid_eviction = true;
      o.state_value_per_page = 1.5;
      o.state_value_per_page_squared = 0.25;
      o.mamba_state_bytes = 7;
      o.kv_page_bytes = 3;
      o.window_page_bytes = cfg.window_pages > 0 ? 2 : 0;
    }
    return o;
  }

  uint64_t R(uint64_t n) { return rng_() % n; }
  bool P(int percent) { return R(100) < static_cast<uint64_t>(percent); }

  // A universe page, present in the index most of the time.
  int Node() {
    for (int tries = 0; tries < 6 && P(80); ++tries) {
      const int n = static_cast<int>(R(u_.size()));
      if (ref_.Find(u_.hash[n]) != kNoNode) return n;
    }
    return static_cast<int>(R(u_.size()));
  }
  const PageHash& Foreign() { return u_.foreign[R(u_.foreign.size())]; }
  Tier AnyTier() { return static_cast<Tier>(R(kNumLocalTiers)); }
  // Without KV payload, KV is asked for now and then (every such location is refused). With
  // windowed layers a third of the rest is windowed KV (the draws of indexes without are as
  // they were before windowed KV existed).
  Kind AnyKind() {
    if (options_.window_pages == 0) {
      return P(options_.kv_payload ? 75 : 10) ? Kind::kKV : Kind::kMamba;
    }
    if (P(options_.kv_payload ? 45 : 5)) return Kind::kKV;
    return P(40) ? Kind::kMamba : Kind::kWindowKV;
  }
  static const TierLocations& LocationsOf(const EntryInfo& info, Kind kind) {
    if (kind == Kind::kKV) return info.kv;
    return kind == Kind::kMamba ? info.state : info.window;
  }
  uint64_t Slot() {
    if (P(5)) return 0xFFFFFFFFull + R(1000);  // slots that do not fit 32 bits
    return R(64);
  }
  std::optional<PageHash> ParentOf(int n) {
    if (u_.parent[n] == kNoNode) return std::nullopt;
    return u_.hash[u_.parent[n]];
  }

  void ExpectCode(const Status& s, Code want, const char* op) {
    EXPECT_EQ(s.code(), want) << op << " at operation " << step_ << ": " << s.ToString();
  }
  void ExpectEntry(const PageHash& h) {
    const int n = ref_.Find(h);
    const std::optional<EntryInfo> got = index_->Lookup(h);
    ASSERT_EQ(got.has_value(), n != kNoNode) << "presence at operation " << step_;
    if (got) {
      EXPECT_TRUE(*got == ref_.Info(n)) << "entry at operation " << step_;
    }
    // Locations: the same places as the entry's, kind by kind.
    for (Kind k : {Kind::kKV, Kind::kWindowKV, Kind::kMamba}) {
      const std::optional<TierLocations> loc = index_->Locations(h, k);
      ASSERT_EQ(loc.has_value(), got.has_value()) << "Locations at operation " << step_;
      if (loc) {
        const TierLocations& want =
            k == Kind::kKV ? got->kv : (k == Kind::kWindowKV ? got->window : got->state);
        EXPECT_TRUE(*loc == want) << "Locations of kind " << static_cast<int>(k) << " at operation "
                                  << step_;
      }
    }
  }

  void Step() {
    const uint64_t dice = R(100);
    if (dice < 14) return DoInsert();
    if (dice < 18) return DoInsertChain();
    if (dice < 40) return DoSetLocation();
    if (dice < 46) return DoClear();
    if (dice < 56) return DoEvict();
    if (dice < 60) return DoRemove();
    // Locks and pins held at once stay around kHeld, so eviction meets them often but is not
    // blocked everywhere.
    if (dice < 66) return locked_.size() < kHeld ? DoLock() : DoUnlock();
    if (dice < 72) return DoUnlock();
    if (dice < 77) return pinned_.size() < kHeld ? DoPin() : DoUnpin();
    if (dice < 80) return DoUnpin();
    if (dice < 98) return DoMatch();
    return DoBadInput();
  }

  void DoInsert() {
    const int n = Node();
    std::optional<PageHash> parent = ParentOf(n);
    const uint64_t how = R(100);
    if (how < 6) {
      parent = std::nullopt;
    } else if (how < 12) {
      parent = u_.hash[Node()];  // usually the wrong parent
    } else if (how < 14) {
      parent = Foreign();
    }
    const PageHash& h = u_.hash[n];
    ExpectCode(index_->InsertKv(parent, h), ref_.InsertKv(parent, h), "InsertKv");
    ExpectEntry(h);
  }

  void DoInsertChain() {
    const std::vector<int> path = u_.PathTo(Node());
    const size_t from = R(path.size());
    const size_t len = 1 + R(std::min<size_t>(6, path.size() - from));
    std::vector<PageHash> chain;
    for (size_t i = from; i < from + len; ++i) chain.push_back(u_.hash[path[i]]);
    if (P(5)) chain.push_back(chain.front());  // a repeat: must fail and leave nothing
    const std::optional<PageHash> parent =
        from == 0 ? std::nullopt : std::optional<PageHash>(u_.hash[path[from - 1]]);
    ExpectCode(index_->InsertChain(parent, chain), ref_.InsertChain(parent, chain), "InsertChain");
    for (const PageHash& h : chain) ExpectEntry(h);
  }

  void DoSetLocation() {
    const PageHash& h = u_.hash[Node()];
    const Kind kind = AnyKind();
    const Tier tier = AnyTier();
    uint64_t slot = Slot();
    // Sometimes the slot it already has there (an idempotent repeat).
    if (auto info = index_->Lookup(h); info && P(30)) {
      const TierLocations& loc = LocationsOf(*info, kind);
      if (loc.Has(tier)) slot = *loc.Slot(tier);
    }
    ExpectCode(index_->SetLocation(h, kind, tier, slot), ref_.SetLocation(h, kind, tier, slot),
               "SetLocation");
    ExpectEntry(h);
  }

  void Clear(const PageHash& h, Kind kind, Tier tier) {
    const auto [code, slot] = ref_.ClearLocation(h, kind, tier);
    const StatusOr<uint64_t> got = index_->ClearLocation(h, kind, tier);
    ExpectCode(got.status(), code, "ClearLocation");
    if (got.ok() && code == Code::kOk) {
      EXPECT_EQ(*got, slot) << "cleared slot, op " << step_;
    }
    ExpectEntry(h);
  }

  void DoClear() { Clear(u_.hash[Node()], AnyKind(), AnyTier()); }

  // As the Store evicts: pick, sometimes copy to disk first, then clear all or some.
  void DoEvict() {
    const Tier tier = AnyTier();
    const Kind kind = AnyKind();
    const size_t max_count = R(5);
    const VictimClass cls = P(70) ? VictimClass::kAny : static_cast<VictimClass>(1 + R(2));
    const auto [code, want] = ref_.PickVictims(tier, kind, max_count, cls);
    const StatusOr<std::vector<Victim>> got = index_->PickVictims(tier, kind, max_count, cls);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(code, Code::kOk);
    ASSERT_EQ(*got, want) << "victims at operation " << step_;
    victims_ += want.size();
    if (kind == Kind::kWindowKV) CheckWindowVictims(*got);
    if (kind == Kind::kKV && options_.hybrid_eviction) CheckKvVictims(*got);
    const size_t clear = P(70) ? want.size() : R(want.size() + 1);
    for (size_t i = 0; i < clear; ++i) {
      const Victim& v = want[i];
      if (v.tier != Tier::kDisk && P(30)) {
        const uint64_t slot = Slot();
        ExpectCode(index_->SetLocation(v.hash, v.kind, Tier::kDisk, slot),
                   ref_.SetLocation(v.hash, v.kind, Tier::kDisk, slot), "SetLocation(disk)");
      }
      Clear(v.hash, v.kind, v.tier);
    }
  }

  // The property the window rule exists for: no victim is windowed KV that a cached state needs
  // and that no other tier holds.
  void CheckWindowVictims(const std::vector<Victim>& victims) {
    for (const Victim& v : victims) {
      const int n = ref_.Find(v.hash);
      ASSERT_NE(n, kNoNode);
      const auto& w = ref_.entry(n).window;
      ASSERT_TRUE(w && w->loc[static_cast<int>(v.tier)]) << "op " << step_;
      bool copied = false;
      for (int t = 0; t < kNumLocalTiers; ++t) copied |= t != static_cast<int>(v.tier) && w->loc[t];
      EXPECT_TRUE(copied || !ref_.Needed(n)) << "needed windowed KV picked at op " << step_;
      ++window_victims_;
    }
  }

  // Hybrid eviction's prefix rule: no victim is a KV page that a cached state needs and that no
  // other tier holds.
  void CheckKvVictims(const std::vector<Victim>& victims) {
    for (const Victim& v : victims) {
      const int n = ref_.Find(v.hash);
      ASSERT_NE(n, kNoNode);
      const auto& kv = ref_.entry(n).kv;
      bool copied = false;
      for (int t = 0; t < kNumLocalTiers; ++t) copied |= t != static_cast<int>(v.tier) && kv[t];
      EXPECT_TRUE(copied || ref_.SubtreeStates(n) == 0) << "needed KV picked at op " << step_;
      needed_kv_victims_ += ref_.SubtreeStates(n) > 0;
    }
  }

  void DoRemove() {
    const PageHash& h = P(3) ? Foreign() : u_.hash[Node()];
    ExpectCode(index_->Remove(h), ref_.Remove(h), "Remove");
    ExpectEntry(h);
  }

  void DoLock() {
    const PageHash& h = u_.hash[Node()];
    const Code want = ref_.Lock(h);
    ExpectCode(index_->Lock(h), want, "Lock");
    if (want == Code::kOk) locked_.push_back(h);
    ExpectEntry(h);
  }

  void DoUnlock() {
    PageHash h = u_.hash[Node()];
    if (!locked_.empty() && P(85)) {
      const size_t i = R(locked_.size());
      h = locked_[i];
      locked_[i] = locked_.back();
      locked_.pop_back();
    }
    ExpectCode(index_->Unlock(h), ref_.Unlock(h), "Unlock");
    ExpectEntry(h);
  }

  struct PinKey {
    PageHash hash;
    Kind kind;
    Tier tier;
  };

  void DoPin() {
    // A page and up to two ancestors, in a tier the page is in (most of the time).
    const Kind kind = AnyKind();
    Tier tier = AnyTier();
    const int node = Node();
    if (auto info = index_->Lookup(u_.hash[node]); info && P(80)) {
      const TierLocations& loc = LocationsOf(*info, kind);
      if (loc.Fastest()) tier = *loc.Fastest();
    }
    std::vector<PageHash> hashes;
    for (int i = node, n = 1 + static_cast<int>(R(3)); i != kNoNode && n > 0; --n) {
      hashes.push_back(u_.hash[i]);
      i = u_.parent[i];
    }
    if (P(3)) hashes.push_back(Foreign());
    const Code want = ref_.Pin(hashes, kind, tier, /*pin=*/true);
    ExpectCode(index_->PinForTransfer(hashes, kind, tier), want, "PinForTransfer");
    if (want == Code::kOk) {
      ++pins_ok_;
      for (const PageHash& h : hashes) pinned_.push_back({h, kind, tier});
    }
    for (const PageHash& h : hashes) ExpectEntry(h);
  }

  void DoUnpin() {
    PinKey key{u_.hash[Node()], AnyKind(), AnyTier()};
    if (!pinned_.empty() && P(85)) {
      const size_t i = R(pinned_.size());
      key = pinned_[i];
      pinned_[i] = pinned_.back();
      pinned_.pop_back();
    }
    std::vector<PageHash> hashes = {key.hash};
    const Code want = ref_.Pin(hashes, key.kind, key.tier, /*pin=*/false);
    ExpectCode(index_->Unpin(hashes, key.kind, key.tier), want, "Unpin");
    ExpectEntry(key.hash);
  }

  void DoMatch() {
    const int n = Node();
    std::vector<PageHash> query;
    for (int i : u_.PathTo(n)) query.push_back(u_.hash[i]);
    // Sometimes on along a child, or cut short, or with a foreign page or out of order.
    for (int at = n; P(40) && !u_.children[at].empty();) {
      at = u_.children[at][R(u_.children[at].size())];
      query.push_back(u_.hash[at]);
    }
    if (P(10)) query.resize(R(query.size() + 1));
    if (P(5) && !query.empty()) query[R(query.size())] = Foreign();
    if (P(3) && query.size() > 1) std::swap(query[0], query[1]);
    const MatchResult want = ref_.Match(query);
    index_->Match(query, &result_);
    EXPECT_EQ(result_.reusable_pages, want.reusable_pages) << "op " << step_;
    EXPECT_EQ(result_.kv_only_pages, want.kv_only_pages) << "op " << step_;
    EXPECT_EQ(result_.checkpoint_hint_pages, want.checkpoint_hint_pages) << "op " << step_;
    EXPECT_EQ(result_.indexed_pages, want.indexed_pages) << "op " << step_;
    EXPECT_TRUE(result_.pages == want.pages) << "page locations at op " << step_;
    EXPECT_TRUE(result_.state == want.state) << "state location at op " << step_;
    EXPECT_TRUE(result_.window == want.window) << "window locations at op " << step_;
    EXPECT_EQ(result_.window_first_page, want.window_first_page) << "op " << step_;
    hits_ += want.reusable_pages > 0;
    for (size_t i = 0; i < want.kv_only_pages; ++i) ExpectEntry(query[i]);
  }

  void DoBadInput() {
    const PageHash& h = u_.hash[Node()];
    const Tier bad_tier = static_cast<Tier>(3 + R(250));
    const Kind bad_kind = static_cast<Kind>(3 + R(250));
    switch (R(6)) {
      case 0:
        ExpectCode(index_->SetLocation(h, Kind::kKV, bad_tier, 1),
                   ref_.SetLocation(h, Kind::kKV, bad_tier, 1), "SetLocation(bad tier)");
        break;
      case 1:
        Clear(h, bad_kind, Tier::kHost);
        break;
      case 2: {
        const auto [code, want] = ref_.PickVictims(bad_tier, Kind::kKV, 1);
        ExpectCode(index_->PickVictims(bad_tier, Kind::kKV, 1).status(), code, "PickVictims");
        break;
      }
      case 3:
        ExpectCode(index_->InsertKv(std::nullopt, PageHash::Zero()),
                   ref_.InsertKv(std::nullopt, PageHash::Zero()), "InsertKv(zero)");
        break;
      case 4:
        ExpectCode(index_->InsertKv(h, h), ref_.InsertKv(h, h), "InsertKv(self)");
        break;
      default: {
        std::vector<PageHash> hashes = {h};
        ExpectCode(index_->PinForTransfer(hashes, bad_kind, Tier::kDisk),
                   ref_.Pin(hashes, bad_kind, Tier::kDisk, true), "Pin(bad kind)");
        break;
      }
    }
    ExpectEntry(h);
  }

  void FullCheck() {
    const Status inv = index_->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv.ToString() << " after operation " << step_;
    ASSERT_TRUE(index_->DumpEntries() == ref_.Dump()) << "whole index after operation " << step_;
    uint64_t located[kNumKinds][kNumLocalTiers] = {};
    uint64_t evictable[kNumKinds][kNumLocalTiers] = {};
    ref_.Counts(located, evictable);
    const IndexStats s = index_->Stats();
    EXPECT_EQ(s.entries, ref_.live());
    uint64_t windows = 0;
    for (int n = 0; n < u_.size(); ++n) windows += ref_.entry(n).present && ref_.entry(n).window;
    EXPECT_EQ(s.windows, windows) << "op " << step_;
    for (int k = 0; k < kNumKinds; ++k) {
      for (int t = 0; t < kNumLocalTiers; ++t) {
        EXPECT_EQ(s.located[k][t], located[k][t]) << k << "/" << t << " op " << step_;
        EXPECT_EQ(s.evictable[k][t], evictable[k][t]) << k << "/" << t << " op " << step_;
      }
    }
  }

  std::mt19937_64 rng_;
  Universe u_;
  const IndexOptions options_;
  RefIndex ref_;
  std::unique_ptr<PrefixIndex> index_;
  MatchResult result_;
  std::vector<PageHash> locked_;
  std::vector<PinKey> pinned_;
  int step_ = 0;
  int64_t hits_ = 0;
  int64_t victims_ = 0;
  int64_t pins_ok_ = 0;
  int64_t window_victims_ = 0;
  int64_t needed_kv_victims_ = 0;
};

class PrefixIndexModelTest : public ::testing::TestWithParam<ModelConfig> {};

TEST_P(PrefixIndexModelTest, MatchesReferenceForAMillionOperations) {
  const ModelConfig cfg = GetParam();
  SCOPED_TRACE("seed " + std::to_string(cfg.seed));
  ModelRun run(cfg);
  run.Run(cfg.operations);
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, PrefixIndexModelTest,
    ::testing::Values(ModelConfig{1, false, 1, kMaxIndexPages},
                      ModelConfig{2, true, 4, kMaxIndexPages},
                      ModelConfig{3, true, 3, 500},  // max_pages below the universe: NoSpace
                      ModelConfig{4, true, 2, kMaxIndexPages, /*kv_payload=*/false},
                      // Windowed KV (kWindowOperations each): hybrid, attention-only,
                      // all-windowed with and without states.
                      ModelConfig{5, true, 2, kMaxIndexPages, true, 3, kWindowOperations},
                      ModelConfig{6, false, 1, kMaxIndexPages, true, 1, kWindowOperations},
                      ModelConfig{7, true, 3, 700, /*kv_payload=*/false, 8, kWindowOperations},
                      ModelConfig{8, false, 1, kMaxIndexPages, /*kv_payload=*/false, 3,
                                  kWindowOperations},
                      // Hybrid eviction: hybrid with and without windows and max_pages, and
                      // all-windowed (states scored, no KV classes).
                      ModelConfig{9, true, 2, kMaxIndexPages, true, 0, kWindowOperations, true},
                      ModelConfig{10, true, 3, 600, true, 0, kWindowOperations, true},
                      ModelConfig{11, true, 2, kMaxIndexPages, true, 3, kWindowOperations, true},
                      ModelConfig{12, true, 3, kMaxIndexPages, false, 8, kWindowOperations, true}),
    [](const ::testing::TestParamInfo<ModelConfig>& info) {
      return "Seed" + std::to_string(info.param.seed);
    });

TEST(PrefixIndexModelEnvTest, EnvSeed) {
  const uint64_t seed = testing::SeedFromEnv(20261122);
  SCOPED_TRACE("CACHEPAWL_TEST_SEED=" + std::to_string(seed));
  // Seeds cycle through attention-only, hybrid and pure SSM (no KV payload) indexes, and
  // windows of 0, 1, 3 and 8 pages (a pure SSM index with a window: its attention layers are
  // all windowed).
  const uint64_t mode = seed % 3;
  const uint32_t windows[] = {0, 1, 3, 8};
  ModelRun run(ModelConfig{seed, mode != 0, static_cast<uint32_t>(1 + seed % 5), kMaxIndexPages,
                           /*kv_payload=*/mode != 2, windows[(seed / 3) % 4], kOperations,
                           /*hybrid=*/(seed / 12) % 2 == 1});
  run.Run(kOperations);
}

}  // namespace
}  // namespace cachepawl
