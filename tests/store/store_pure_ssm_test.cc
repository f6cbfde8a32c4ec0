// The Store with a pure SSM layout (no attention layers, as Mamba-2) in CPU mode: prefixes are
// named by the page hash chain, their pages hold no KV, and a hit is exactly a state at the
// prefix's depth (docs/DESIGN.md, "Pure SSM layouts"). Every loaded state is compared byte by
// byte with what was saved for its key, in a poisoned slot.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_checks.h"
#include "tests/store/store_test_util.h"
#include "tiers/disk_catalog.h"

namespace cachepawl {
namespace {

using testing::TempDir;

constexpr uint32_t kPage = 4;          // TinyPureSsm's page size in tokens
constexpr uint64_t kSlotBytes = 8192;  // one state's host slot (header block + payload)
constexpr int kHost = static_cast<int>(Tier::kHost);
constexpr int kDisk = static_cast<int>(Tier::kDisk);
constexpr int kKv = static_cast<int>(Kind::kKV);
constexpr int kState = static_cast<int>(Kind::kMamba);

class PureSsmStoreTest : public ::testing::Test {
 protected:
  StoreOptions Options(uint64_t host_bytes, uint64_t disk_bytes) {
    return CpuStoreOptions(TinyPureSsm(), host_bytes, 1 << 20, disk_bytes, dir_.str() + "/store");
  }

  std::unique_ptr<Store> OpenOrDie(const StoreOptions& o) {
    auto s = Store::Open(o);
    EXPECT_TRUE(s.ok()) << "Open: " << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // What an engine saves after `pages` pages of `tokens`: the state (its content defined by
  // the page hash at that depth), no device pages.
  void SaveState(Store* store, std::string_view ns, const std::vector<uint32_t>& tokens,
                 size_t pages) {
    const auto hashes = store->HashTokens(ns, tokens);
    ASSERT_GE(hashes.size(), pages);
    auto slot = store->AllocateDeviceSlot(Kind::kMamba);
    ASSERT_TRUE(slot.ok()) << slot.status().ToString();
    ASSERT_TRUE(store
                    ->WriteDeviceRecord(Kind::kMamba, *slot,
                                        Content(store->layout(), hashes[pages - 1], Kind::kMamba))
                    .ok());
    SaveRequest req;
    req.ns = ns;
    req.tokens = tokens;
    req.device_state_slot = *slot;
    req.state_depth_tokens = pages * kPage;
    auto fence = store->Save(req);
    ASSERT_TRUE(fence.ok()) << fence.status().ToString();
    ASSERT_TRUE(fence->Wait(std::chrono::seconds(30)).ok());
    ASSERT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *slot).ok());
  }

  // Loads the state of `match` into a fresh, poisoned slot and compares every byte with the
  // content of the state at the match's depth. Returns the load's status.
  Status LoadState(Store* store, const PrefixMatch& match, LoadOptions options = {}) {
    const ModelLayout& layout = store->layout();
    auto slot = store->AllocateDeviceSlot(Kind::kMamba);
    if (!slot.ok()) return slot.status();
    const std::vector<std::byte> poison(layout.RecordBytes(Kind::kMamba), std::byte{0xEE});
    EXPECT_TRUE(store->WriteDeviceRecord(Kind::kMamba, *slot, poison).ok());
    auto fence = store->Load(match, {}, *slot, options);
    const Status result = fence.ok() ? fence->Wait(std::chrono::seconds(30)) : fence.status();
    if (result.ok()) {
      std::vector<std::byte> got(layout.RecordBytes(Kind::kMamba));
      EXPECT_TRUE(store->ReadDeviceRecord(Kind::kMamba, *slot, got).ok());
      EXPECT_TRUE(got == Content(layout, match.hashes.at(match.reusable_pages - 1), Kind::kMamba))
          << "the state at depth " << match.reusable_pages << " pages";
    }
    EXPECT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *slot).ok());
    return result;
  }

  // Opens a store with `o`, saves the state of each (tokens, pages) and closes it: what is left
  // is on its disk tier. Returns the page hashes of each prompt.
  std::vector<std::vector<PageHash>> SaveAndClose(
      const StoreOptions& o, const std::vector<std::pair<std::vector<uint32_t>, size_t>>& states) {
    std::vector<std::vector<PageHash>> hashes;
    auto store = OpenOrDie(o);
    EXPECT_NE(store, nullptr);
    if (store == nullptr) return hashes;
    for (const auto& [tokens, pages] : states) {
      SaveState(store.get(), "", tokens, pages);
      hashes.push_back(store->HashTokens("", tokens));
    }
    EXPECT_TRUE(store->Close().ok());
    return hashes;
  }

  PrefixMatch LookupOrDie(Store* store, const std::vector<uint32_t>& tokens,
                          std::string_view ns = "") {
    auto m = store->Lookup(ns, tokens);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : PrefixMatch{};
  }

  static std::vector<uint32_t> Head(const std::vector<uint32_t>& tokens, size_t pages) {
    return std::vector<uint32_t>(tokens.begin(), tokens.begin() + pages * kPage);
  }

  TempDir dir_;
};

TEST_F(PureSsmStoreTest, OpensWithoutKvAndRefusesKvSlots) {
  auto store = OpenOrDie(Options(1 << 20, 0));
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->layout().has_attention());
  auto kv = store->AllocateDeviceSlot(Kind::kKV);
  ASSERT_FALSE(kv.ok());
  EXPECT_TRUE(kv.status().IsInvalidArgument()) << kv.status().ToString();
  EXPECT_NE(kv.status().message().find("kind: kv (layout 'test/tiny-ssm' has no attention"),
            std::string::npos)
      << kv.status().ToString();
  auto m = LookupOrDie(store.get(), Tokens(1, 3 * kPage));
  EXPECT_EQ(m.hashes.size(), 3u);
  EXPECT_EQ(m.reusable_pages, 0u);
  EXPECT_EQ(m.kv_only_pages, 0u);
  EXPECT_FALSE(m.state_tier.has_value());
}

TEST_F(PureSsmStoreTest, PromptsBranchingAtTheSameDepthShareTheStateBefore) {
  auto store = OpenOrDie(Options(1 << 20, 0));
  ASSERT_NE(store, nullptr);
  const auto a = Tokens(1, 4 * kPage);
  auto b = a;
  b[3 * kPage] = 999;  // the 4th page differs: 3 pages shared, then the prompts diverge
  const auto ha = store->HashTokens("", a), hb = store->HashTokens("", b);
  ASSERT_EQ(ha[2], hb[2]);
  ASSERT_NE(ha[3], hb[3]);
  // A's engine saved states at depth 3 (a checkpoint) and 4 (the end of its prompt).
  SaveState(store.get(), "", a, 3);
  SaveState(store.get(), "", a, 4);

  // B: the shared state at depth 3 is its hit; the chain B shares ends there.
  PrefixMatch mb = LookupOrDie(store.get(), b);
  EXPECT_EQ(mb.reusable_pages, 3u);
  EXPECT_EQ(mb.kv_only_pages, 3u);
  EXPECT_EQ(mb.checkpoint_hint_pages, 3u);
  EXPECT_TRUE(mb.page_tiers.empty());  // no page is held by any tier: there is no KV
  EXPECT_EQ(mb.state_tier, Tier::kHost);
  EXPECT_TRUE(LoadState(store.get(), mb).ok());
  // B's engine computes its 4th page from that state and saves its own state at depth 4.
  SaveState(store.get(), "", b, 4);

  // Each prompt gets its own state at depth 4; the one at depth 3 serves both.
  for (const std::vector<uint32_t>& prompt : {a, b}) {
    PrefixMatch m = LookupOrDie(store.get(), prompt);
    EXPECT_EQ(m.reusable_pages, 4u);
    EXPECT_TRUE(LoadState(store.get(), m).ok());
    PrefixMatch head = LookupOrDie(store.get(), Head(prompt, 3));
    EXPECT_EQ(head.reusable_pages, 3u);
    EXPECT_TRUE(LoadState(store.get(), head).ok());
  }
  const StoreStats st = store->Stats();
  EXPECT_EQ(st.saved_states, 3u);
  EXPECT_EQ(st.saved_pages, 0u);
  EXPECT_EQ(st.resident_entries[kHost][kState], 3u);
  EXPECT_EQ(st.resident_entries[kHost][kKv], 0u);
  EXPECT_EQ(st.resident_bytes[kHost][kKv], 0u);
  EXPECT_EQ(st.index_entries, 5u);  // A's 4 pages and B's own 4th
}

TEST_F(PureSsmStoreTest, LookupReturnsExactlyTheDeepestStateDepth) {
  StoreOptions o = Options(1 << 20, 0);
  o.track_interval_pages = 2;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  const auto p = Tokens(100, 6 * kPage + 2);  // 6 full pages and a partial one
  SaveState(store.get(), "", p, 2);
  SaveState(store.get(), "", p, 5);

  PrefixMatch m = LookupOrDie(store.get(), p);
  EXPECT_EQ(m.hashes.size(), 6u);
  EXPECT_EQ(m.reusable_pages, 5u);
  EXPECT_EQ(m.reusable_tokens(), 20u);
  EXPECT_EQ(m.kv_only_pages, 5u);  // the chain reaches the deepest state, no further
  EXPECT_EQ(m.checkpoint_hint_pages, 4u);
  EXPECT_EQ(m.state_tier, Tier::kHost);
  EXPECT_TRUE(LoadState(store.get(), m).ok());
  // Between the two states: the one at depth 2, never the deeper one.
  for (size_t pages : {2u, 3u, 4u}) {
    PrefixMatch shorter = LookupOrDie(store.get(), Head(p, pages));
    EXPECT_EQ(shorter.reusable_pages, 2u) << pages << " pages";
    EXPECT_EQ(shorter.kv_only_pages, pages);
    EXPECT_TRUE(LoadState(store.get(), shorter).ok());
  }
  PrefixMatch one = LookupOrDie(store.get(), Head(p, 1));
  EXPECT_EQ(one.reusable_pages, 0u);
  EXPECT_EQ(one.kv_only_pages, 1u);
  EXPECT_FALSE(one.state_tier.has_value());
  EXPECT_EQ(LookupOrDie(store.get(), Tokens(7000, 6 * kPage)).kv_only_pages, 0u);
}

TEST_F(PureSsmStoreTest, MismatchedDepthsAndKvArgumentsAreRefusedClearly) {
  auto store = OpenOrDie(Options(1 << 20, 0));
  ASSERT_NE(store, nullptr);
  const auto p = Tokens(5, 4 * kPage);
  SaveState(store.get(), "", p, 4);
  PrefixMatch m = LookupOrDie(store.get(), p);
  ASSERT_EQ(m.reusable_pages, 4u);
  auto slot = store->AllocateDeviceSlot(Kind::kMamba);
  ASSERT_TRUE(slot.ok());
  auto expect_invalid = [](const StatusOr<Fence>& f, const std::string& want) {
    ASSERT_FALSE(f.ok()) << "want " << want;
    EXPECT_TRUE(f.status().IsInvalidArgument()) << f.status().ToString();
    EXPECT_NE(f.status().message().find(want), std::string::npos) << f.status().ToString();
  };
  // A state at another depth than the match's: refused, naming both depths.
  for (size_t first : {3u, 5u}) {
    LoadOptions lo;
    lo.first_page = first;
    expect_invalid(store->Load(m, {}, *slot, lo), "the match's state is at depth 4 pages");
  }
  const std::vector<uint64_t> pages = {0, 1};
  expect_invalid(store->Load(m, pages, *slot), "has no attention layers");
  expect_invalid(store->Load(m, {}, std::nullopt), "device_state_slot: none");
  const PrefixMatch miss = LookupOrDie(store.get(), Tokens(900, 4 * kPage));
  expect_invalid(store->Load(miss, {}, *slot), "reusable_pages 0");
  ASSERT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *slot).ok());
  // first_page naming the match's depth, or 0, loads it; with per-layer fences too (there are
  // no attention layers, so no sub-fences).
  LoadOptions at_depth;
  at_depth.first_page = 4;
  EXPECT_TRUE(LoadState(store.get(), m, at_depth).ok());
  LoadOptions per_layer;
  per_layer.per_layer_fences = true;
  EXPECT_TRUE(LoadState(store.get(), m, per_layer).ok());
  // A match edited to a depth that holds no state is a miss, never another depth's state.
  PrefixMatch edited = m;
  edited.reusable_pages = 3;
  const Status s = LoadState(store.get(), edited);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();

  // Saves: no device pages; a depth that is not a whole number of full pages.
  auto state = store->AllocateDeviceSlot(Kind::kMamba);
  ASSERT_TRUE(state.ok());
  SaveRequest req;
  req.tokens = p;
  req.device_pages = pages;
  req.device_state_slot = *state;
  req.state_depth_tokens = 4 * kPage;
  expect_invalid(store->Save(req), "SaveRequest.device_pages: 2 pages");
  req.device_pages = {};
  req.state_depth_tokens = 6;
  expect_invalid(store->Save(req), "SaveRequest.state_depth_tokens: 6");
  req.state_depth_tokens = 5 * kPage;
  expect_invalid(store->Save(req), "SaveRequest.state_depth_tokens: 20");
  ASSERT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *state).ok());
  // A Save without a state saves nothing (there is no KV) and leaves no entry behind.
  const auto unsaved = Tokens(4000, 3 * kPage);
  SaveRequest nothing;
  nothing.tokens = unsaved;
  nothing.first_page = 1;
  auto f = store->Save(nothing);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->Wait().ok());
  EXPECT_EQ(LookupOrDie(store.get(), unsaved).kv_only_pages, 0u);
  auto lock = store->Lock(m, 5);
  ASSERT_FALSE(lock.ok());
  EXPECT_TRUE(lock.status().IsInvalidArgument()) << lock.status().ToString();
}

TEST_F(PureSsmStoreTest, EvictedStatesTakeTheirChainsWithThem) {
  // Host memory for 4 states and no disk: 10 prompts' states go through it.
  auto store = OpenOrDie(Options(4 * kSlotBytes, 0));
  ASSERT_NE(store, nullptr);
  std::vector<std::vector<uint32_t>> prompts;
  for (uint32_t r = 0; r < 10; ++r) {
    prompts.push_back(Tokens(1000 * (r + 1), 3 * kPage));
    SaveState(store.get(), "", prompts.back(), 3);
  }
  const StoreStats st = store->Stats();
  EXPECT_GE(st.evictions[kHost][kState], 6u);
  EXPECT_LE(st.resident_entries[kHost][kState], 4u);
  size_t hits = 0;
  for (const auto& p : prompts) {
    PrefixMatch m = LookupOrDie(store.get(), p);
    if (m.reusable_pages == 0) {
      // Its state went, and with it every page of its chain: nothing below holds a state.
      EXPECT_EQ(m.kv_only_pages, 0u);
      continue;
    }
    ++hits;
    EXPECT_EQ(m.reusable_pages, 3u);
    EXPECT_TRUE(LoadState(store.get(), m).ok());
  }
  EXPECT_EQ(hits, st.resident_entries[kHost][kState]);
  EXPECT_EQ(store->Stats().index_entries, 3 * hits);  // the chains of the states left, no more
  EXPECT_EQ(LookupOrDie(store.get(), prompts.back()).reusable_pages, 3u);  // the most recent
}

TEST_F(PureSsmStoreTest, AChainLockedPastItsStateIsPrunedAtUnlock) {
  // LRU eviction, so that the oldest state goes (hybrid eviction would keep the deeper one).
  StoreOptions o = Options(2 * kSlotBytes, 0);  // two states
  o.eviction_policy = EvictionPolicy::kLru;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  const auto p = Tokens(1, 3 * kPage);
  SaveState(store.get(), "", p, 3);
  PrefixMatch m = LookupOrDie(store.get(), p);
  ASSERT_EQ(m.reusable_pages, 3u);
  // The engine locks the first two pages only: the chain, not the state at depth 3.
  auto lock = store->Lock(m, 2);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  EXPECT_FALSE(lock->with_state);
  for (uint32_t r = 0; r < 3; ++r) SaveState(store.get(), "", Tokens(100 * (r + 1), kPage), 1);
  PrefixMatch after = LookupOrDie(store.get(), p);
  EXPECT_EQ(after.reusable_pages, 0u);  // the state went
  EXPECT_EQ(after.kv_only_pages, 2u);   // the locked pages stay until Unlock
  ASSERT_TRUE(store->Unlock(*lock).ok());
  EXPECT_EQ(LookupOrDie(store.get(), p).kv_only_pages, 0u);
  const StoreStats st = store->Stats();
  EXPECT_EQ(st.index_entries, st.resident_entries[kHost][kState]);  // one-page chains
}

TEST_F(PureSsmStoreTest, EngineThreadsUnderHostPressureServeOnlyRightBytesAndKeepNoStrayPages) {
  // Host memory for 8 states, write-back to disk: 4 threads save states at 2 and 4 pages of
  // prompts that share their first 2 pages, look them up, lock (the state, or the chain past
  // it) and load them, while evictions write states to disk and drop chains.
  StoreOptions o = Options(8 * kSlotBytes, 4 << 20);
  o.write_policy = WritePolicy::kWriteBack;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto prompt_of = [](int t, int i) {
    std::vector<uint32_t> prompt = Tokens(1, 2 * kPage);  // shared by every prompt
    const auto own = Tokens(10000 * (t + 1) + 100 * (i % 5), 2 * kPage);
    prompt.insert(prompt.end(), own.begin(), own.end());
    return prompt;
  };
  std::atomic<int> loads{0}, unexpected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        const auto prompt = prompt_of(t, i);
        auto m = store->Lookup("", prompt);
        if (!m.ok()) {
          ++unexpected;
          continue;
        }
        if (m->reusable_pages > 0) {
          // Every other time the lock covers the whole chain the store knows, past the state.
          const size_t pages = i % 2 == 0 ? m->reusable_pages : m->kv_only_pages;
          auto lock = store->Lock(*m, pages);
          if (lock.ok() && lock->with_state) {
            const Status s = LoadState(store.get(), *m);
            if (s.ok()) {
              ++loads;
            } else if (!s.IsNotFound() && !s.IsNoSpace() && !s.IsBusy()) {
              ++unexpected;
              ADD_FAILURE() << s.ToString();
            }
          }
          if (lock.ok()) {
            EXPECT_TRUE(store->Unlock(*lock).ok());
          }
        }
        SaveState(store.get(), "", prompt, 2);
        SaveState(store.get(), "", prompt, 4);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GT(loads.load(), 0);
  // Every page the index holds leads to a cached state: the union of the chains up to each
  // prompt's deepest state, and nothing else.
  std::set<PageHash> chains;
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 5; ++i) {
      const auto prompt = prompt_of(t, i);
      const PrefixMatch m = LookupOrDie(store.get(), prompt);
      for (size_t p = 0; p < m.reusable_pages; ++p) chains.insert(m.hashes[p]);
    }
  }
  const StoreStats st = store->Stats();
  EXPECT_EQ(st.index_entries, chains.size());
  EXPECT_GT(st.bytes_host_to_disk, 0u);
  EXPECT_EQ(st.checksum_failures, 0u);
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(PureSsmStoreTest, StatesEvictedToDiskComeBackByteExact) {
  // Host memory for 4 states, a disk tier, write-through: 20 states go through host memory.
  auto store = OpenOrDie(Options(4 * kSlotBytes, 8 << 20));
  ASSERT_NE(store, nullptr);
  std::vector<std::vector<uint32_t>> prompts;
  for (uint32_t r = 0; r < 10; ++r) {
    prompts.push_back(Tokens(1000 * (r + 1), 4 * kPage));
    SaveState(store.get(), "", prompts.back(), 2);
    SaveState(store.get(), "", prompts.back(), 4);
  }
  EXPECT_GT(store->Stats().evictions[kHost][kState], 0u);
  PrefixMatch first = LookupOrDie(store.get(), prompts[0]);
  EXPECT_EQ(first.state_tier, Tier::kDisk);
  for (const auto& p : prompts) {
    for (size_t pages : {4u, 3u}) {
      PrefixMatch m = LookupOrDie(store.get(), Head(p, pages));
      ASSERT_EQ(m.reusable_pages, pages == 4 ? 4u : 2u);
      EXPECT_TRUE(LoadState(store.get(), m).ok());
    }
  }
  const StoreStats st = store->Stats();
  EXPECT_GT(st.bytes_disk_to_host, 0u);
  EXPECT_GT(st.loaded_entries[kDisk][kState], 0u);
  EXPECT_EQ(st.loaded_entries[kDisk][kKv], 0u);
  EXPECT_EQ(st.checksum_failures, 0u);
}

TEST_F(PureSsmStoreTest, PrefetchBringsADiskStateToHost) {
  // LRU eviction, so that the oldest state leaves host memory first.
  StoreOptions o = Options(2 * kSlotBytes, 8 << 20);
  o.eviction_policy = EvictionPolicy::kLru;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  const auto p = Tokens(1, 3 * kPage);
  SaveState(store.get(), "", p, 3);
  for (uint32_t r = 0; r < 3; ++r) SaveState(store.get(), "", Tokens(100 * (r + 1), kPage), 1);
  PrefixMatch m = LookupOrDie(store.get(), p);
  ASSERT_EQ(m.reusable_pages, 3u);
  ASSERT_EQ(m.state_tier, Tier::kDisk);
  auto prefetch = store->StartPrefetch(m);
  ASSERT_TRUE(prefetch.ok()) << prefetch.status().ToString();
  EXPECT_TRUE((*prefetch)->fence().Wait(std::chrono::seconds(30)).ok());
  PrefixMatch again = LookupOrDie(store.get(), p);
  EXPECT_EQ(again.state_tier, Tier::kHost);
  EXPECT_TRUE(LoadState(store.get(), again).ok());
}

TEST_F(PureSsmStoreTest, RestartFindsTheStatesAndTheirChainsAgain) {
  const StoreOptions o = Options(1 << 20, 8 << 20);
  const auto a = Tokens(1, 4 * kPage);
  auto b = a;
  b[3 * kPage] = 999;
  const auto c = Tokens(500, 2 * kPage);
  SaveAndClose(o, {{a, 3}, {a, 4}, {b, 4}, {c, 1}});
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  const std::vector<std::pair<std::vector<uint32_t>, size_t>> want = {
      {a, 4}, {b, 4}, {Head(b, 3), 3}, {c, 1}};
  for (const auto& [prompt, depth] : want) {
    PrefixMatch m = LookupOrDie(store.get(), prompt);
    ASSERT_EQ(m.reusable_pages, depth);
    EXPECT_EQ(m.state_tier, Tier::kDisk);
    EXPECT_TRUE(LoadState(store.get(), m).ok());
    EXPECT_EQ(LookupOrDie(store.get(), prompt).state_tier, Tier::kHost);
  }
  const StoreStats st = store->Stats();
  EXPECT_EQ(st.resident_entries[kDisk][kState], 4u);
  EXPECT_EQ(st.resident_entries[kDisk][kKv], 0u);
  EXPECT_EQ(st.checksum_failures, 0u);
}

TEST_F(PureSsmStoreTest, ReopenWithAnotherLayoutIsRefusedOrWiped) {
  const StoreOptions o = Options(1 << 20, 8 << 20);
  const auto p = Tokens(1, 2 * kPage);
  SaveAndClose(o, {{p, 2}});
  ModelLayout other = TinyPureSsm();
  other.ssm_layers[0].ssm_shape = {2, 4, 16};
  auto wiped = ReopenRefusedThenWiped(o, other);
  ASSERT_NE(wiped, nullptr);
  EXPECT_EQ(LookupOrDie(wiped.get(), p).kv_only_pages, 0u);
}

TEST_F(PureSsmStoreTest, CorruptStateRecordIsAMissNeverData) {
  const StoreOptions o = Options(1 << 20, 8 << 20);
  const auto p = Tokens(5, 3 * kPage);
  SaveAndClose(o, {{p, 3}});
  // Flip one byte of the state's payload (the data file's only record).
  const std::string data = o.disk_dir + "/cachepawl.data";
  {
    std::fstream file(data, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.good()) << data;
    file.seekg(4096 + 100);
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x01);
    file.seekp(4096 + 100);
    file.write(&byte, 1);
  }
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  PrefixMatch m = LookupOrDie(store.get(), p);
  ASSERT_EQ(m.reusable_pages, 3u);
  EXPECT_FALSE(LoadState(store.get(), m).ok());  // compares bytes only when the load succeeded
  EXPECT_GT(store->Stats().checksum_failures, 0u);
  PrefixMatch after = LookupOrDie(store.get(), p);
  EXPECT_EQ(after.reusable_pages, 0u);
  EXPECT_EQ(after.kv_only_pages, 0u);  // the chain went with its only state
}

TEST_F(PureSsmStoreTest, AStateWhoseChainIsLostOrWrongIsDroppedAtOpen) {
  const StoreOptions o = Options(1 << 20, 8 << 20);
  const auto a = Tokens(1, 3 * kPage), b = Tokens(100, 3 * kPage), c = Tokens(200, 2 * kPage);
  const auto hashes = SaveAndClose(o, {{a, 3}, {b, 3}, {c, 2}});
  ASSERT_EQ(hashes.size(), 3u);
  const std::vector<PageHash>& ha = hashes[0];
  const std::vector<PageHash>& hb = hashes[1];
  // A's chain entry goes; B's names the wrong parent. C's is left as it was.
  {
    auto catalog = DiskCatalog::Open(o.disk_dir + "/catalog", false, /*chains=*/true);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    const DiskKey ka{Kind::kMamba, ha[2], 3 * kPage};
    const std::vector<std::string> raw = {CatalogChainKey(ka)};
    ASSERT_TRUE((*catalog)->DeleteRaw(raw).ok());
    size_t records = 0;
    CatalogRecord rb;
    ASSERT_TRUE((*catalog)
                    ->ForEach(
                        [&](const CatalogRecord& r) {
                          ++records;
                          if (r.key.hash == hb[2]) rb = r;
                        },
                        [](const std::string&) {})
                    .ok());
    ASSERT_EQ(records, 3u);
    ASSERT_EQ(rb.chain.size(), 2u);
    rb.chain[1] = ha[1];  // no longer the state's parent
    ASSERT_TRUE((*catalog)->Apply(std::span<const CatalogRecord>(&rb, 1), {}).ok());
  }
  {
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(LookupOrDie(store.get(), a).kv_only_pages, 0u);
    EXPECT_EQ(LookupOrDie(store.get(), b).kv_only_pages, 0u);
    PrefixMatch mc = LookupOrDie(store.get(), c);
    ASSERT_EQ(mc.reusable_pages, 2u);
    EXPECT_TRUE(LoadState(store.get(), mc).ok());
    EXPECT_EQ(store->Stats().resident_entries[kDisk][kState], 1u);
    ASSERT_TRUE(store->Close().ok());
  }
  // The dropped states left the catalog, chains and all.
  auto catalog = DiskCatalog::Open(o.disk_dir + "/catalog", false, /*chains=*/true);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  std::vector<CatalogRecord> left;
  size_t bad = 0;
  ASSERT_TRUE((*catalog)
                  ->ForEach([&](const CatalogRecord& r) { left.push_back(r); },
                            [&](const std::string&) { ++bad; })
                  .ok());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].chain.size(), 1u);  // C's: its first page
  EXPECT_EQ(bad, 0u);
}

TEST_F(PureSsmStoreTest, NamespacesIsolateTenants) {
  auto store = OpenOrDie(Options(1 << 20, 0));
  ASSERT_NE(store, nullptr);
  const auto p = Tokens(1, 3 * kPage);
  SaveState(store.get(), "tenant-a", p, 3);
  PrefixMatch a = LookupOrDie(store.get(), p, "tenant-a");
  EXPECT_EQ(a.reusable_pages, 3u);
  EXPECT_TRUE(LoadState(store.get(), a).ok());
  for (std::string_view ns : {"tenant-b", ""}) {
    PrefixMatch other = LookupOrDie(store.get(), p, ns);
    EXPECT_EQ(other.reusable_pages, 0u) << "'" << ns << "'";
    EXPECT_EQ(other.kv_only_pages, 0u) << "'" << ns << "'";
  }
}

}  // namespace
}  // namespace cachepawl
