// A tensor-parallel group's store (a layout with tp_size > 1) in CPU mode: one record per entry
// holds every rank's share (once for ranks that hold equal bytes: MLA latents, replicated KV
// heads); an entry is a hit only once every rank saved its share, and each rank's Load gets its
// own share back byte for byte, from host memory and from disk after a restart; partial entries
// time out; repeated shares are refreshes; bad ranks are refused by name. One store-owned device
// pool stands in for the ranks' pools (each rank its own slots).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "layouts/layout_tp.h"
#include "store/store.h"
#include "store/store_faults.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

using testing::TempDir;

constexpr uint32_t kRanks = 2;

// TinyHybrid as rank 0 of 2 (2 KV heads and a Mamba-2 state of its own per rank).
ModelLayout RankLayout(uint32_t tp_size = kRanks) {
  ModelLayout l = TinyHybrid();
  l.model = "test/tiny-hybrid-tp";
  l.tp_size = tp_size;
  return l;
}

// Rank `rank`'s share of an entry: content defined by the hash, the kind and the share the rank
// holds of that kind (its rank, unless the layout says ranks hold equal bytes: TpShareOf).
std::vector<std::byte> Share(const ModelLayout& l, const PageHash& h, Kind kind, uint32_t rank) {
  std::vector<std::byte> bytes(l.RecordBytes(kind));
  uint64_t seed;
  std::memcpy(&seed, h.bytes.data(), sizeof(seed));
  testing::FillRandom(bytes, seed ^ (kind == Kind::kMamba ? 0x5a5a5a5aull : 0) ^
                                 (uint64_t{l.TpShareOf(kind, rank) + 1} * 0x9e3779b97f4a7c15ull));
  return bytes;
}

// TinyHybrid as rank 0 of 4 whose 2 KV heads are each held by 2 ranks (a model with 2 KV heads
// split 4 ways: ranks 0 and 1 hold one head, ranks 2 and 3 the other), or, `mla`, TinyMla as
// rank 0 of 4 with its latent on every rank (ShardLayout's tp_replicas).
ModelLayout ReplicatedRankLayout(bool mla) {
  ModelLayout l = mla ? TinyMla() : TinyHybrid();
  l.model += "-replicated-tp";
  l.tp_size = 4;
  for (AttentionLayerSpec& a : l.attention_layers) a.tp_replicas = a.mla || mla ? 4 : 2;
  return l;
}

class StoreTpTest : public ::testing::Test {
 protected:
  StoreOptions Options(uint64_t host_bytes = 1 << 20, uint64_t disk_bytes = 0) {
    return CpuStoreOptions(RankLayout(), host_bytes, 1 << 20, disk_bytes, dir_.str() + "/store");
  }
  std::unique_ptr<Store> OpenOrDie(const StoreOptions& o) {
    auto s = Store::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Rank `rank` saves every page of `tokens` and (a layout with SSM layers) the state at its end,
  // from device slots it fills with its shares. Returns the Save's status (after its fence).
  // `name_rank` false: the request leaves tp_rank unset (the store's layout's rank is `rank`).
  Status SaveAsRank(Store* store, const std::vector<uint32_t>& tokens, uint32_t rank,
                    bool name_rank = true) {
    const ModelLayout& l = store->layout();
    const auto hashes = store->HashTokens("", tokens);
    std::vector<uint64_t> pages;
    for (const PageHash& h : hashes) {
      auto slot = store->AllocateDeviceSlot(Kind::kKV);
      if (!slot.ok()) return slot.status();
      EXPECT_TRUE(store->WriteDeviceRecord(Kind::kKV, *slot, Share(l, h, Kind::kKV, rank)).ok());
      pages.push_back(*slot);
    }
    std::optional<uint64_t> state;
    if (l.has_ssm()) {
      auto slot = store->AllocateDeviceSlot(Kind::kMamba);
      if (!slot.ok()) return slot.status();
      state = *slot;
      EXPECT_TRUE(
          store
              ->WriteDeviceRecord(Kind::kMamba, *state, Share(l, hashes.back(), Kind::kMamba, rank))
              .ok());
    }
    SaveRequest req;
    if (state) {
      req = WholePromptSave(tokens, pages, *state);
    } else {
      req.tokens = tokens;
      req.device_pages = pages;
    }
    if (name_rank) req.tp_rank = rank;
    auto fence = store->Save(req);
    const Status s = fence.ok() ? fence->Wait(std::chrono::seconds(30)) : fence.status();
    for (uint64_t p : pages) EXPECT_TRUE(store->FreeDeviceSlot(Kind::kKV, p).ok());
    if (state) {
      EXPECT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *state).ok());
    }
    return s;
  }

  // Rank `rank` loads the whole match (and, a layout with SSM layers, its state) into poisoned
  // slots and compares every byte with its shares. Returns the Load's status. `name_rank` as for
  // SaveAsRank.
  Status LoadAsRank(Store* store, const PrefixMatch& m, uint32_t rank, bool name_rank = true) {
    const ModelLayout& l = store->layout();
    std::vector<uint64_t> pages;
    const std::vector<std::byte> poison_kv(l.RecordBytes(Kind::kKV), std::byte{0xEE});
    for (size_t i = 0; i < m.reusable_pages; ++i) {
      auto slot = store->AllocateDeviceSlot(Kind::kKV);
      if (!slot.ok()) return slot.status();
      EXPECT_TRUE(store->WriteDeviceRecord(Kind::kKV, *slot, poison_kv).ok());
      pages.push_back(*slot);
    }
    std::optional<uint64_t> state;
    if (l.has_ssm()) {
      auto slot = store->AllocateDeviceSlot(Kind::kMamba);
      if (!slot.ok()) return slot.status();
      state = *slot;
      const std::vector<std::byte> poison_state(l.RecordBytes(Kind::kMamba), std::byte{0xEE});
      EXPECT_TRUE(store->WriteDeviceRecord(Kind::kMamba, *state, poison_state).ok());
    }
    LoadOptions lo;
    if (name_rank) lo.tp_rank = rank;
    auto fence = store->Load(m, pages, state, lo);
    const Status s = fence.ok() ? fence->Wait(std::chrono::seconds(30)) : fence.status();
    if (s.ok()) {
      std::vector<std::byte> got(l.RecordBytes(Kind::kKV));
      for (size_t i = 0; i < pages.size(); ++i) {
        EXPECT_TRUE(store->ReadDeviceRecord(Kind::kKV, pages[i], got).ok());
        EXPECT_TRUE(got == Share(l, m.hashes[i], Kind::kKV, rank))
            << "rank " << rank << " page " << i;
      }
      if (state) {
        std::vector<std::byte> state_got(l.RecordBytes(Kind::kMamba));
        EXPECT_TRUE(store->ReadDeviceRecord(Kind::kMamba, *state, state_got).ok());
        EXPECT_TRUE(state_got == Share(l, m.hashes[m.reusable_pages - 1], Kind::kMamba, rank))
            << "rank " << rank << " state";
      }
    }
    for (uint64_t p : pages) EXPECT_TRUE(store->FreeDeviceSlot(Kind::kKV, p).ok());
    if (state) {
      EXPECT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *state).ok());
    }
    return s;
  }

  size_t Reusable(Store* store, const std::vector<uint32_t>& tokens) {
    auto m = store->Lookup("", tokens);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->reusable_pages : 0;
  }

  TempDir dir_;
};

TEST_F(StoreTpTest, AnEntryIsAHitOnlyOnceEveryRankSavedItsShare) {
  auto store = OpenOrDie(Options());
  ASSERT_NE(store, nullptr);
  const auto prompt = Tokens(1, 12);  // 3 pages
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 1).ok());
  EXPECT_EQ(Reusable(store.get(), prompt), 0u) << "rank 0's share is missing";
  EXPECT_EQ(store->Stats().resident_entries[static_cast<int>(Tier::kHost)][0], 0u);
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 0).ok());
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 3u);
  for (uint32_t rank = 0; rank < kRanks; ++rank) {
    EXPECT_TRUE(LoadAsRank(store.get(), *m, rank).ok()) << rank;
  }
  // The host tier holds one record per entry, each the size of both ranks' shares.
  const StoreStats st = store->Stats();
  EXPECT_EQ(st.resident_entries[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)], 3u);
  EXPECT_EQ(st.resident_bytes[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)],
            3 * kRanks * store->layout().RecordBytes(Kind::kKV));
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreTpTest, ARanksSecondSaveIsARefreshAndTheOtherRankCompletesTheEntry) {
  auto store = OpenOrDie(Options());
  ASSERT_NE(store, nullptr);
  const auto prompt = Tokens(100, 8);
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 0).ok());
  const uint64_t refreshed = store->Stats().refreshed_pages;
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 0).ok());
  EXPECT_EQ(store->Stats().refreshed_pages, refreshed + 3) << "2 pages and the state";
  EXPECT_EQ(Reusable(store.get(), prompt), 0u);
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 1).ok());
  EXPECT_EQ(Reusable(store.get(), prompt), 2u);
  // Every rank saving a published entry again only refreshes it.
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 1).ok());
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(LoadAsRank(store.get(), *m, 1).ok());
  EXPECT_TRUE(LoadAsRank(store.get(), *m, 0).ok());
}

TEST_F(StoreTpTest, RanksOutOfRangeAreRefusedByName) {
  auto store = OpenOrDie(Options());
  ASSERT_NE(store, nullptr);
  const auto prompt = Tokens(1, 4);
  const Status s = SaveAsRank(store.get(), prompt, 2);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("SaveRequest.tp_rank: 2 (layout 'test/tiny-hybrid-tp' has tp_size 2)"),
            std::string::npos)
      << s.ToString();
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 0).ok());
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 1).ok());
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  const Status l = LoadAsRank(store.get(), *m, 7);
  EXPECT_TRUE(l.IsInvalidArgument()) << l.ToString();
  EXPECT_NE(l.message().find("LoadOptions.tp_rank: 7"), std::string::npos) << l.ToString();
}

TEST_F(StoreTpTest, APartialEntryTimesOutAndFreesItsSlot) {
  StoreOptions o = Options();
  o.tp_partial_timeout_ms = 1;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  const auto lost = Tokens(1, 8);
  ASSERT_TRUE(SaveAsRank(store.get(), lost, 0).ok());  // rank 1 never saves it
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // The next Save (of anything) drops it; rank 1's share alone then starts a new partial entry.
  ASSERT_TRUE(SaveAsRank(store.get(), Tokens(500, 4), 0).ok());
  EXPECT_GE(store->Stats().tp_partials_dropped, 3u) << "2 pages and the state of the lost prompt";
  ASSERT_TRUE(SaveAsRank(store.get(), lost, 1).ok());
  EXPECT_EQ(Reusable(store.get(), lost), 0u) << "rank 0's share was dropped with the entry";
  // Only complete entries hold host bytes as entries; the index keeps no chain of lost ones.
  EXPECT_EQ(store->Stats().resident_entries[static_cast<int>(Tier::kHost)][0], 0u);
}

TEST_F(StoreTpTest, CompleteEntriesComeBackFromDiskAfterARestartPartialOnesDoNot) {
  StoreOptions o = Options(1 << 20, 8 << 20);
  o.write_policy = WritePolicy::kWriteThrough;
  const auto both = Tokens(1, 12), one = Tokens(1000, 12);
  {
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(SaveAsRank(store.get(), both, 0).ok());
    ASSERT_TRUE(SaveAsRank(store.get(), both, 1).ok());
    ASSERT_TRUE(SaveAsRank(store.get(), one, 1).ok());
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto m = store->Lookup("", both);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 3u);
  EXPECT_EQ(m->state_tier, Tier::kDisk);
  for (uint32_t rank = 0; rank < kRanks; ++rank) {
    EXPECT_TRUE(LoadAsRank(store.get(), *m, rank).ok()) << rank;
  }
  EXPECT_EQ(Reusable(store.get(), one), 0u) << "rank 0 never saved it";
  EXPECT_EQ(store->Stats().checksum_failures, 0u);
}

// Every rank loads the same disk-resident entries at once (after a restart): the first rank's
// Load reads each record into host memory and the others wait for it, none fails Busy.
TEST_F(StoreTpTest, RanksLoadingTheSameDiskEntriesAtOnceAllGetTheirBytes) {
  StoreOptions o = Options(1 << 20, 8 << 20);
  o.write_policy = WritePolicy::kWriteThrough;
  std::vector<std::vector<uint32_t>> prompts;
  for (uint32_t i = 0; i < 6; ++i) prompts.push_back(Tokens(5000 + 100 * i, 12));
  {
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    for (const auto& p : prompts) {
      for (uint32_t rank = 0; rank < kRanks; ++rank)
        ASSERT_TRUE(SaveAsRank(store.get(), p, rank).ok());
    }
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  for (const auto& p : prompts) {
    auto m = store->Lookup("", p);
    ASSERT_TRUE(m.ok());
    ASSERT_EQ(m->reusable_pages, 3u);
    ASSERT_EQ(m->state_tier, Tier::kDisk);
    std::vector<Status> got(kRanks);
    std::vector<std::thread> ranks;
    for (uint32_t rank = 0; rank < kRanks; ++rank) {
      ranks.emplace_back([&, rank] { got[rank] = LoadAsRank(store.get(), *m, rank); });
    }
    for (auto& t : ranks) t.join();
    for (uint32_t rank = 0; rank < kRanks; ++rank)
      EXPECT_TRUE(got[rank].ok()) << got[rank].ToString();
  }
  EXPECT_EQ(store->Stats().checksum_failures, 0u);
}

TEST_F(StoreTpTest, RanksSavingAndLoadingAtOnceUnderHostPressureGetOnlyTheirBytes) {
  // Host memory for 12 records (4 of the 6 prompts): both ranks serve the same requests, as an
  // engine's ranks do, each at its own pace: look the prompt up, load what hits, save it.
  // Evictions take whole entries (every rank's share at once).
  StoreOptions o = Options(96 << 10);
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  std::vector<std::vector<uint32_t>> requests;
  std::mt19937 pick(3);
  for (int i = 0; i < 150; ++i) requests.push_back(Tokens(1 + 100 * (pick() % 6), 8));
  std::atomic<int> loads{0}, unexpected{0};
  std::vector<std::thread> threads;
  for (uint32_t rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      std::mt19937 jitter(rank + 7);
      for (const auto& prompt : requests) {
        if (jitter() % 4 == 0) std::this_thread::yield();
        auto m = store->Lookup("", prompt);
        if (m.ok() && m->reusable_pages > 0) {
          auto lock = store->Lock(*m, m->reusable_pages);
          if (lock.ok()) {
            const Status s = LoadAsRank(store.get(), *m, rank);
            if (s.ok()) {
              ++loads;
            } else if (!s.IsNotFound() && !s.IsBusy() && !s.IsNoSpace()) {
              ++unexpected;
              ADD_FAILURE() << s.ToString();
            }
            EXPECT_TRUE(store->Unlock(*lock).ok());
          }
        }
        const Status s = SaveAsRank(store.get(), prompt, rank);
        if (!s.ok() && !s.IsNoSpace()) {
          ++unexpected;
          ADD_FAILURE() << s.ToString();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_GT(loads.load(), 0);
  EXPECT_GT(store->Stats().evictions[static_cast<int>(Tier::kHost)][0], 0u);
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreTpTest, PartialEntriesGiveWayWhenNothingElseCan) {
  // Rank 0 fills host memory with entries rank 1 never saves: rank 1's new prompt still gets
  // room (the oldest partial entries are dropped) instead of NoSpace.
  StoreOptions o = Options(64 << 10);
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  for (uint32_t p = 0; p < 4; ++p)
    ASSERT_TRUE(SaveAsRank(store.get(), Tokens(1 + 100 * p, 8), 0).ok());
  EXPECT_GT(store->Stats().tp_partials_dropped, 0u) << "8 slots for 12 records";
  const auto fresh = Tokens(5000, 8);
  ASSERT_TRUE(SaveAsRank(store.get(), fresh, 1).ok());
  ASSERT_TRUE(SaveAsRank(store.get(), fresh, 0).ok());
  auto m = store->Lookup("", fresh);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 2u);
  EXPECT_TRUE(LoadAsRank(store.get(), *m, 1).ok());
  EXPECT_GT(store->Stats().tp_partial_entries, 0u);
}

TEST_F(StoreTpTest, ARequestWithoutARankMovesTheStoresOwnRanksShares) {
  StoreOptions o = Options();
  ModelLayout rank1 = RankLayout();
  rank1.tp_rank = 1;
  o.layout = rank1;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  const auto tokens = Tokens(700, 2 * store->layout().page_size_tokens);
  ASSERT_TRUE(SaveAsRank(store.get(), tokens, 1, /*name_rank=*/false).ok());
  EXPECT_EQ(Reusable(store.get(), tokens), 0u);  // rank 0's shares are missing
  ASSERT_TRUE(SaveAsRank(store.get(), tokens, 0).ok());
  auto m = store->Lookup("", tokens);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 2u);
  EXPECT_TRUE(LoadAsRank(store.get(), *m, 1, /*name_rank=*/false).ok());
  EXPECT_TRUE(LoadAsRank(store.get(), *m, 0).ok());
}

TEST_F(StoreTpTest, RanksHoldingTheSameKvHeadStoreItOnceAndEachLoadsIt) {
  StoreOptions o = Options();
  o.layout = ReplicatedRankLayout(/*mla=*/false);
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  const ModelLayout& l = store->layout();
  ASSERT_EQ(l.TpShares(Kind::kKV), 2u);
  ASSERT_EQ(l.TpShares(Kind::kMamba), 4u);
  const auto prompt = Tokens(40, 12);  // 3 pages
  // Rank 0 copies the head it holds with rank 1: rank 1's pages need no copy (refreshes), its
  // state does. Nothing is a hit, nor published, before every rank has saved.
  const uint64_t refreshed = store->Stats().refreshed_pages;
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 0).ok());
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 1).ok());
  EXPECT_EQ(store->Stats().refreshed_pages, refreshed + 3);
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 3).ok());
  EXPECT_EQ(Reusable(store.get(), prompt), 0u) << "rank 2 has not saved";
  EXPECT_EQ(store->Stats().resident_entries[static_cast<int>(Tier::kHost)][0], 0u);
  // Rank 3 copied the other head; rank 2, the last, copies its equal bytes again so that its
  // copy's end publishes the entries.
  ASSERT_TRUE(SaveAsRank(store.get(), prompt, 2).ok());
  EXPECT_EQ(store->Stats().refreshed_pages, refreshed + 3);
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 3u);
  for (uint32_t rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(LoadAsRank(store.get(), *m, rank).ok()) << rank;
  }
  // Two shares of every page (not four), four of the state.
  const StoreStats st = store->Stats();
  const int host = static_cast<int>(Tier::kHost);
  EXPECT_EQ(st.resident_bytes[host][static_cast<int>(Kind::kKV)], 3 * 2 * l.RecordBytes(Kind::kKV));
  EXPECT_EQ(st.resident_bytes[host][static_cast<int>(Kind::kMamba)],
            4 * l.RecordBytes(Kind::kMamba));
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreTpTest, AnMlaLatentIsStoredOnceAndComesBackFromDiskForEveryRank) {
  StoreOptions o = Options(1 << 20, 4 << 20);
  o.layout = ReplicatedRankLayout(/*mla=*/true);
  o.write_policy = WritePolicy::kWriteThrough;
  const auto prompt = Tokens(900, 8);  // 2 pages
  const auto other = Tokens(1900, 8);
  {
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    const ModelLayout& l = store->layout();
    ASSERT_EQ(l.TpShares(Kind::kKV), 1u);
    ASSERT_TRUE(SaveAsRank(store.get(), prompt, 2).ok());
    // Rank 2 copied the latent; ranks 0 and 1 need no copy, rank 3 (the last) copies it again to
    // publish it. The pages are published with the state, once every rank has saved.
    const int host = static_cast<int>(Tier::kHost);
    EXPECT_EQ(store->Stats().resident_entries[host][static_cast<int>(Kind::kKV)], 0u);
    EXPECT_EQ(Reusable(store.get(), prompt), 0u);
    for (uint32_t rank : {0u, 1u, 3u}) ASSERT_TRUE(SaveAsRank(store.get(), prompt, rank).ok());
    ASSERT_EQ(Reusable(store.get(), prompt), 2u);
    EXPECT_EQ(store->Stats().resident_bytes[host][static_cast<int>(Kind::kKV)],
              2 * l.RecordBytes(Kind::kKV))
        << "one latent per page for 4 ranks";
    for (uint32_t rank : {0u, 1u, 2u}) ASSERT_TRUE(SaveAsRank(store.get(), other, rank).ok());
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 2u) << "the complete entries come back from disk";
  EXPECT_EQ(m->state_tier, Tier::kDisk);
  for (uint32_t rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(LoadAsRank(store.get(), *m, rank).ok()) << rank;
  }
  EXPECT_EQ(Reusable(store.get(), other), 0u) << "rank 3 never saved that state";
  EXPECT_EQ(store->Stats().checksum_failures, 0u);
  EXPECT_TRUE(store->Close().ok());
}

// A rank that counted on another rank's copy of their share is saved, but the share is not: when
// that copy fails, the entry is published only after a copy of the share lands, made by the next
// Save of a rank that has not saved, and no rank loads the failed copy's bytes.
TEST_F(StoreTpTest, ASharesFailedCopyIsMadeAgainBeforeTheEntryIsPublished) {
  ModelLayout layout = ReplicatedRankLayout(/*mla=*/true);
  layout.ssm_layers.clear();  // attention only: a Save of pages alone, one share of 4
  StoreOptions o = CpuStoreOptions(layout, 1 << 20, 1 << 20, 0, dir_.str() + "/store");
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> copies{0};
  StoreFaultInjection faults;
  faults.before_operation = [&](const Operation& op) -> Status {
    if (op.direction != Direction::kSave || copies.fetch_add(1) != 0) return Status::OK();
    released.wait();
    return Status::Internal("injected: the first copy fails");
  };
  auto opened = OpenStoreWithFaults(o, faults);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store* store = opened->get();
  const ModelLayout& l = store->layout();
  ASSERT_EQ(l.TpShares(Kind::kKV), 1u);
  const auto prompt = Tokens(3000, 8);  // 2 pages
  auto save = [&](uint32_t rank) { return SaveAsRank(store, prompt, rank); };
  auto first = std::async(std::launch::async, [&] { return save(2); });
  for (int i = 0; i < 30000 && copies.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(copies.load(), 1) << "rank 2's copy is held in flight";
  const uint64_t refreshed = store->Stats().refreshed_pages;
  // (No ASSERT until the copy is released: `first` would wait for it forever.)
  EXPECT_TRUE(save(0).ok()) << "rank 0 counts on rank 2's copy in flight";
  EXPECT_EQ(store->Stats().refreshed_pages, refreshed + 2) << "no copy of its own";
  release.set_value();
  EXPECT_FALSE(first.get().ok()) << "rank 2's copy failed";
  EXPECT_EQ(Reusable(store, prompt), 0u);
  ASSERT_TRUE(save(1).ok());  // the share has no copy that landed: rank 1 makes one
  ASSERT_TRUE(save(3).ok());  // counts on it
  EXPECT_EQ(Reusable(store, prompt), 0u) << "rank 2 has not saved";
  ASSERT_TRUE(save(2).ok());
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 2u);
  for (uint32_t rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(LoadAsRank(store, *m, rank).ok()) << rank;
  }
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreTpTest, TheTiersKeepTheGroupLayoutAndTheApiTheRanks) {
  auto store = OpenOrDie(Options(1 << 20, 4 << 20));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->layout().tp_size, kRanks);
  auto group = GroupLayout(store->layout());
  ASSERT_TRUE(group.ok());
  for (Kind k : {Kind::kKV, Kind::kMamba}) {
    EXPECT_EQ(group->RecordBytes(k), kRanks * store->layout().RecordBytes(k));
  }
  StoreOptions zero = Options();
  zero.tp_partial_timeout_ms = 0;
  auto no_timeout = Store::Open(zero);
  ASSERT_FALSE(no_timeout.ok());
  EXPECT_NE(no_timeout.status().message().find("tp_partial_timeout_ms: 0 (must be > 0)"),
            std::string::npos)
      << no_timeout.status().ToString();
  StoreOptions too_many = Options();
  too_many.layout->tp_size = 65;
  auto refused = Store::Open(too_many);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("StoreOptions.layout.tp_size: 65"), std::string::npos)
      << refused.status().ToString();
}

}  // namespace
}  // namespace cachepawl
