// End-to-end tests of the Store in CPU mode: host and disk tiers real (pinned-less host arena,
// io_uring O_DIRECT files, RocksDB catalog), the store-owned device pool in host memory.
#include "store/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <thread>

#include "tests/common/test_util.h"
#include "tests/store/store_test_checks.h"
#include "tests/store/store_test_util.h"
#include "vocab/device_pool.h"

namespace cachepawl {
namespace {

using testing::FillRandom;
using testing::TempDir;

class StoreTest : public ::testing::Test {
 protected:
  StoreOptions Options(ModelLayout layout, uint64_t host_bytes, uint64_t disk_bytes) {
    return CpuStoreOptions(layout, host_bytes, 4 << 20, disk_bytes, dir_.str() + "/store");
  }

  std::unique_ptr<Store> OpenOrDie(const StoreOptions& o) {
    auto s = Store::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // What an engine thread does before prefill: Lookup, Lock the reusable prefix, load and verify
  // it (LoadAndVerify), Unlock. `load` is empty when there was nothing to load (a miss, or the
  // prefix went before Lock); `lookup` is the Lookup's error, if any.
  struct LoadAttempt {
    Status lookup;
    std::optional<Status> load;
  };
  LoadAttempt LookupLockLoad(Store* store, const std::vector<uint32_t>& prompt) {
    LoadAttempt a;
    auto m = store->Lookup("", prompt);
    if (!m.ok()) {
      a.lookup = m.status();
      return a;
    }
    if (m->reusable_pages == 0) return a;
    auto lock = store->Lock(*m, m->reusable_pages);
    if (!lock.ok()) return a;
    a.load = LoadAndVerify(store, *m);
    (void)store->Unlock(*lock);
    return a;
  }
  // What a Load of a locked prefix may answer: OK (every byte verified), or a refusal for now
  // (NoSpace: no host room to stage a disk read; Busy). Never NotFound: the lock keeps every
  // entry of the prefix in some tier, and a locked Load that came back NotFound was a bug.
  static bool LockedLoadOk(const Status& s) { return s.ok() || s.IsNoSpace() || s.IsBusy(); }

  TempDir dir_;
};

TEST_F(StoreTest, SaveLookupLoadHostOnly) {
  auto store = OpenOrDie(Options(TinyHybrid(), 1 << 20, 0));
  ASSERT_NE(store, nullptr);
  auto tokens = Tokens(1, 4 * 6 + 3);  // 6 full pages and a partial one
  SaveAll(store.get(), "", tokens, /*with_state=*/true);
  auto m = store->Lookup("", tokens);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->hashes.size(), 6u);
  EXPECT_EQ(m->reusable_pages, 6u);
  EXPECT_EQ(m->kv_only_pages, 6u);
  EXPECT_EQ(m->reusable_tokens(), 24u);
  ASSERT_EQ(m->page_tiers.size(), 6u);
  for (Tier t : m->page_tiers) EXPECT_EQ(t, Tier::kHost);
  EXPECT_EQ(m->state_tier, Tier::kHost);
  EXPECT_TRUE(LoadAndVerify(store.get(), *m).ok());
  // A longer prompt sharing the prefix hits the same 6 pages.
  auto longer = Tokens(1, 4 * 9);
  auto m2 = store->Lookup("", longer);
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ(m2->reusable_pages, 6u);
  StoreStats st = store->Stats();
  EXPECT_EQ(st.saved_pages, 6u);
  EXPECT_EQ(st.saved_states, 1u);
  EXPECT_GE(st.hit_pages, 12u);
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreTest, HybridRuleNeedsBothKindsAtTheExactDepth) {
  auto store = OpenOrDie(Options(TinyHybrid(), 1 << 20, 0));
  ASSERT_NE(store, nullptr);
  // KV without a state: not a hit.
  auto a = Tokens(100, 4 * 3);
  SaveAll(store.get(), "", a, /*with_state=*/false);
  auto ma = store->Lookup("", a);
  ASSERT_TRUE(ma.ok());
  EXPECT_EQ(ma->reusable_pages, 0u);
  EXPECT_EQ(ma->kv_only_pages, 3u);
  // A state at depth 2 of a 3-page prompt: the hit is 2 pages, not 3.
  auto b = Tokens(200, 4 * 3);
  SaveAll(store.get(), "", b, /*with_state=*/true, /*state_pages=*/2);
  auto mb = store->Lookup("", b);
  ASSERT_TRUE(mb.ok());
  EXPECT_EQ(mb->reusable_pages, 2u);
  EXPECT_EQ(mb->kv_only_pages, 3u);
  EXPECT_TRUE(LoadAndVerify(store.get(), *mb).ok());
  // A state without its KV: save only the state, no pages.
  auto c = Tokens(300, 4 * 2);
  auto hashes = store->HashTokens("", c);
  auto slot = store->AllocateDeviceSlot(Kind::kMamba);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(store
                  ->WriteDeviceRecord(Kind::kMamba, *slot,
                                      Content(store->layout(), hashes[1], Kind::kMamba))
                  .ok());
  SaveRequest req;
  req.tokens = c;
  req.device_state_slot = *slot;
  req.state_depth_tokens = 8;
  auto f = store->Save(req);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(f->Wait().ok());
  auto mc = store->Lookup("", c);
  ASSERT_TRUE(mc.ok());
  EXPECT_EQ(mc->reusable_pages, 0u);
  EXPECT_EQ(mc->kv_only_pages, 0u);
}

TEST_F(StoreTest, AttentionOnlyLayoutNeedsNoState) {
  auto store = OpenOrDie(Options(TinyAttentionOnly(), 1 << 20, 0));
  ASSERT_NE(store, nullptr);
  auto t = Tokens(7, 4 * 5);
  SaveAll(store.get(), "", t, false);
  auto m = store->Lookup("", t);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 5u);
  EXPECT_FALSE(m->state_tier.has_value());
  EXPECT_TRUE(LoadAndVerify(store.get(), *m).ok());
}

TEST_F(StoreTest, NamespacesIsolateTenants) {
  auto store = OpenOrDie(Options(TinyHybrid(), 1 << 20, 0));
  ASSERT_NE(store, nullptr);
  auto t = Tokens(1, 4 * 4);
  SaveAll(store.get(), "tenant-a", t, true);
  auto a = store->Lookup("tenant-a", t);
  auto b = store->Lookup("tenant-b", t);
  auto none = store->Lookup("", t);
  ASSERT_TRUE(a.ok() && b.ok() && none.ok());
  EXPECT_EQ(a->reusable_pages, 4u);
  EXPECT_EQ(b->reusable_pages, 0u);
  EXPECT_EQ(b->kv_only_pages, 0u);
  EXPECT_EQ(none->kv_only_pages, 0u);
}

TEST_F(StoreTest, SavingWhatIsCachedOnlyRefreshes) {
  auto store = OpenOrDie(Options(TinyHybrid(), 1 << 20, 0));
  ASSERT_NE(store, nullptr);
  auto t = Tokens(1, 4 * 3);
  SaveAll(store.get(), "", t, true);
  SaveAll(store.get(), "", t, true);
  StoreStats st = store->Stats();
  EXPECT_EQ(st.saved_pages, 3u);
  EXPECT_EQ(st.saved_states, 1u);
  EXPECT_EQ(st.refreshed_pages, 4u);
  EXPECT_EQ(st.resident_entries[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)], 3u);
}

TEST_F(StoreTest, EvictsToDiskAndLoadsBackThroughHost) {
  // Host holds 16 slots of 8 KiB; 40 pages and 10 states go through it.
  auto store = OpenOrDie(Options(TinyHybrid(), 16 * 8192, 8 << 20));
  ASSERT_NE(store, nullptr);
  std::vector<std::vector<uint32_t>> prompts;
  for (int r = 0; r < 10; ++r) {
    prompts.push_back(Tokens(1000 * (r + 1), 4 * 4));
    SaveAll(store.get(), "", prompts.back(), true);
  }
  StoreStats st = store->Stats();
  EXPECT_GT(st.evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)] +
                st.evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kMamba)],
            0u);
  // The first prompt left host memory; it is a disk hit now and loads back correctly.
  auto m = store->Lookup("", prompts[0]);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 4u);
  bool any_disk = false;
  for (Tier t : m->page_tiers) any_disk = any_disk || t == Tier::kDisk;
  EXPECT_TRUE(any_disk || m->state_tier == Tier::kDisk);
  for (const auto& p : prompts) {
    auto mm = store->Lookup("", p);
    ASSERT_TRUE(mm.ok());
    ASSERT_EQ(mm->reusable_pages, 4u);
    EXPECT_TRUE(LoadAndVerify(store.get(), *mm).ok());
  }
  EXPECT_GT(store->Stats().bytes_disk_to_host, 0u);
}

TEST_F(StoreTest, ShortConvStatesRoundTripThroughHostAndDisk) {
  const ModelLayout layout = TinyShortConv();
  ASSERT_EQ(layout.RecordBytes(Kind::kMamba), 48u + 256u + 48u);
  // Host holds 16 slots; 8 prompts of 3 pages and a state each push some of them to disk.
  auto store = OpenOrDie(Options(layout, 16 * 8192, 8 << 20));
  ASSERT_NE(store, nullptr);
  std::vector<std::vector<uint32_t>> prompts;
  for (int r = 0; r < 8; ++r) {
    prompts.push_back(Tokens(7000 + 100 * r, 4 * 3));
    SaveAll(store.get(), "", prompts.back(), /*with_state=*/true);
  }
  bool any_disk_state = false;
  for (const auto& p : prompts) {
    auto m = store->Lookup("", p);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_EQ(m->reusable_pages, 3u);
    any_disk_state = any_disk_state || m->state_tier == Tier::kDisk;
    EXPECT_TRUE(LoadAndVerify(store.get(), *m).ok());  // every byte of pages and state
  }
  EXPECT_TRUE(any_disk_state) << "no state went to disk: the disk record path went untested";
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreTest, AnEnginePoolWithoutShortConvSsmTensorsRoundTripsStates) {
  const ModelLayout layout = TinyShortConv();
  StoreOptions o = Options(layout, 64 * 8192, 0);
  o.device_pool_bytes = 0;  // the engine registers its own, per layer
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  constexpr uint64_t kPages = 4, kStates = 2;
  std::vector<std::vector<std::byte>> tensors;
  auto tensor = [&](uint64_t bytes) {
    tensors.emplace_back(bytes);
    return tensors.back().data();
  };
  tensors.reserve(8);
  std::vector<std::byte*> k, v, conv, ssm;
  for (size_t a = 0; a < layout.attention_layers.size(); ++a) {
    k.push_back(tensor(kPages * layout.KBytesPerPage(a)));
    v.push_back(tensor(kPages * layout.KBytesPerPage(a)));
  }
  conv.push_back(tensor(kStates * layout.ConvStateBytes(0)));
  ssm.push_back(tensor(kStates * layout.SsmStateBytes(0)));
  conv.push_back(tensor(kStates * layout.ConvStateBytes(1)));
  ssm.push_back(nullptr);  // the shortconv layer has no SSM tensor
  ASSERT_TRUE(store
                  ->RegisterDevicePool(DevicePoolDescription::LayerFirst(layout, -1, kPages, k, v,
                                                                         false, kStates, conv, ssm))
                  .ok());
  for (size_t i = 0; i < tensors.size(); ++i) FillRandom(tensors[i], 1 + i);  // the "prefill"
  SaveThenLoadBack(store.get(), Tokens(11, 4), {0}, 0, {1}, 1);
  auto slot_bytes = [](const std::byte* base, uint64_t bytes, uint64_t slot) {
    return std::vector<std::byte>(base + slot * bytes, base + (slot + 1) * bytes);
  };
  for (size_t a = 0; a < layout.attention_layers.size(); ++a) {
    const uint64_t kb = layout.KBytesPerPage(a);
    EXPECT_EQ(slot_bytes(k[a], kb, 1), slot_bytes(k[a], kb, 0)) << "K of layer " << a;
    EXPECT_EQ(slot_bytes(v[a], kb, 1), slot_bytes(v[a], kb, 0)) << "V of layer " << a;
  }
  EXPECT_EQ(slot_bytes(conv[0], 48, 1), slot_bytes(conv[0], 48, 0));
  EXPECT_EQ(slot_bytes(ssm[0], 256, 1), slot_bytes(ssm[0], 256, 0));
  EXPECT_EQ(slot_bytes(conv[1], 48, 1), slot_bytes(conv[1], 48, 0)) << "the shortconv layer";
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreTest, ReopenInANewProcessServesDiskHits) {
  const StoreOptions o = Options(TinyHybrid(), 1 << 20, 8 << 20);
  auto prompt = Tokens(42, 4 * 5);
  // Another process (tests/store/store_writer_main.cc, the same options) saves and closes;
  // this one reopens the same folder.
  const std::string cmd = std::string(CACHEPAWL_STORE_WRITER) + " " + o.disk_dir + " 42 5";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 5u);
  for (Tier t : m->page_tiers) EXPECT_EQ(t, Tier::kDisk);
  EXPECT_EQ(m->state_tier, Tier::kDisk);
  EXPECT_TRUE(LoadAndVerify(store.get(), *m).ok());
  // Now also in host memory.
  auto again = store->Lookup("", prompt);
  ASSERT_TRUE(again.ok());
  for (Tier t : again->page_tiers) EXPECT_EQ(t, Tier::kHost);
}

TEST_F(StoreTest, ReopenWithAnotherLayoutIsRefusedOrWiped) {
  StoreOptions o = Options(TinyHybrid(), 1 << 20, 8 << 20);
  {
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    SaveAll(store.get(), "", Tokens(1, 8), true);
    ASSERT_TRUE(store->Close().ok());
  }
  ModelLayout other = TinyHybrid();
  other.attention_layers[0].head_dim = 32;
  auto wiped = ReopenRefusedThenWiped(o, other);
  ASSERT_NE(wiped, nullptr);
  auto m = wiped->Lookup("", Tokens(1, 8));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kv_only_pages, 0u);
}

TEST_F(StoreTest, CorruptDiskRecordIsAMissNeverData) {
  StoreOptions o = Options(TinyHybrid(), 1 << 20, 8 << 20);
  auto prompt = Tokens(5, 4 * 3);
  {
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    SaveAll(store.get(), "", prompt, true);
    ASSERT_TRUE(store->Close().ok());
  }
  // Flip one byte in every record's payload area of the data file(s).
  size_t flipped = 0;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir_.path())) {
    if (!f.is_regular_file() || f.path().string().find("catalog") != std::string::npos) continue;
    std::fstream file(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = std::filesystem::file_size(f.path());
    for (uint64_t off = 4096 + 100; off < size; off += 8192) {
      file.seekg(static_cast<std::streamoff>(off));
      char c = 0;
      file.read(&c, 1);
      c = static_cast<char>(c ^ 0x01);
      file.seekp(static_cast<std::streamoff>(off));
      file.write(&c, 1);
      ++flipped;
    }
  }
  ASSERT_GT(flipped, 0u);
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  ASSERT_GT(m->reusable_pages, 0u);
  Status s = LoadAndVerify(store.get(), *m);  // compares bytes only when the load succeeded
  EXPECT_FALSE(s.ok());
  EXPECT_GT(store->Stats().checksum_failures, 0u);
  // The dropped records are misses now.
  auto after = store->Lookup("", prompt);
  ASSERT_TRUE(after.ok());
  EXPECT_LT(after->reusable_pages, 3u);
}

TEST_F(StoreTest, FullOfLockedEntriesFailsWithNoSpaceInsteadOfBlocking) {
  auto store = OpenOrDie(Options(TinyAttentionOnly(), 4 * 8192, 0));  // 4 host slots
  ASSERT_NE(store, nullptr);
  auto a = Tokens(1, 4 * 4);
  SaveAll(store.get(), "", a, false);
  auto m = store->Lookup("", a);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 4u);
  auto lock = store->Lock(*m, 4);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  auto b = Tokens(500, 4);
  auto hashes = store->HashTokens("", b);
  auto slot = store->AllocateDeviceSlot(Kind::kKV);
  ASSERT_TRUE(slot.ok());
  std::vector<uint64_t> pages{*slot};
  SaveRequest req;
  req.tokens = b;
  req.device_pages = pages;
  auto f = store->Save(req);
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(f.status().IsNoSpace()) << f.status().ToString();
  ASSERT_TRUE(store->Unlock(*lock).ok());
  EXPECT_EQ(store->Unlock(*lock).code(), Status::Code::kFailedPrecondition);
  // Unlocked, the old prefix is evictable and the save goes through.
  auto f2 = store->Save(req);
  ASSERT_TRUE(f2.ok()) << f2.status().ToString();
  EXPECT_TRUE(f2->Wait().ok());
}

TEST_F(StoreTest, EvictsAheadToTheFreeTargetButNeverWhatIsLocked) {
  // 16 KV slots of 8 KiB; the target keeps 4 free once an allocation dips below it.
  StoreOptions o = Options(TinyAttentionOnly(), 16 * 8192, 0);
  o.host_free_target_bytes = 4 * 8192;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto locked = Tokens(1, 4 * 4);  // 4 pages, locked below
  SaveAll(store.get(), "", locked, false);
  auto m = store->Lookup("", locked);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 4u);
  auto lock = store->Lock(*m, 4);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  // 10 more pages: 14 of 16 slots used, 2 free < 4, so the evict-ahead thread frees 2 of the
  // unlocked ones (in LRU order), never the locked prefix.
  for (uint32_t r = 0; r < 10; ++r) SaveAll(store.get(), "", Tokens(1000 + 100 * r, 4), false);
  StoreStats st;
  for (int i = 0; i < 500; ++i) {  // the thread runs on its own: wait for it (at most 5 s)
    st = store->Stats();
    if (st.evicted_ahead >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(st.evicted_ahead, 2u);
  EXPECT_EQ(st.resident_entries[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)], 12u);
  EXPECT_EQ(st.evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)], 2u);
  // The two oldest unlocked pages went; the locked prefix and the newest stay, byte for byte.
  EXPECT_EQ(store->Lookup("", Tokens(1000, 4))->reusable_pages, 0u);
  EXPECT_EQ(store->Lookup("", Tokens(1100, 4))->reusable_pages, 0u);
  EXPECT_EQ(store->Lookup("", Tokens(1900, 4))->reusable_pages, 1u);
  auto again = store->Lookup("", locked);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->reusable_pages, 4u);
  EXPECT_TRUE(LoadAndVerify(store.get(), *again).ok());
  ASSERT_TRUE(store->Unlock(*lock).ok());
  // With the target at 0 nothing is evicted before the tier is full.
  StoreOptions off = Options(TinyAttentionOnly(), 16 * 8192, 0);
  off.host_free_target_bytes = 0;
  store.reset();
  store = OpenOrDie(off);
  ASSERT_NE(store, nullptr);
  for (uint32_t r = 0; r < 16; ++r) SaveAll(store.get(), "", Tokens(5000 + 100 * r, 4), false);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(store->Stats().evicted_ahead, 0u);
  EXPECT_EQ(store->Stats().evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)],
            0u);
}

TEST_F(StoreTest, ConcurrentRegistrationsOfADevicePoolLetExactlyOneThrough) {
  StoreOptions o = Options(TinyHybrid(), 64 * 8192, 0);
  o.device_pool_bytes = 0;  // the engine registers its own
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  const ModelLayout& l = store->layout();
  constexpr uint64_t kPages = 8, kStates = 2;
  std::vector<std::byte> kv(kPages * l.RecordBytes(Kind::kKV));
  std::vector<std::byte> states(kStates * l.RecordBytes(Kind::kMamba));
  const DevicePoolDescription pool = DevicePoolDescription::BlockContiguous(
      l, -1, kv.data(), kPages, 0, states.data(), kStates, 0);
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      Status st = store->RegisterDevicePool(pool);
      if (st.ok()) {
        ++ok;
      } else if (st.code() == Status::Code::kFailedPrecondition) {
        ++refused;
      }
    });
  }
  EXPECT_FALSE(store->gpu_mode());  // CPU mode: no pinned host tier, before and after
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(refused.load(), 7);
  EXPECT_FALSE(store->gpu_mode());
  // The one device mover works: a page round-trips through the registered pool.
  auto tokens = Tokens(7, 4);
  auto hashes = store->HashTokens("", tokens);
  const std::vector<std::byte> page = Content(l, hashes[0], Kind::kKV);
  std::memcpy(kv.data(), page.data(), page.size());
  SaveRequest req;
  req.tokens = tokens;
  const std::vector<uint64_t> pages{0};
  req.device_pages = pages;
  auto f = store->Save(req);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(f->Wait().ok());
  std::memset(kv.data() + page.size(), 0xEE, page.size());
  auto m = store->Lookup("", tokens);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->kv_only_pages, 1u);
  const std::vector<uint64_t> into{1};
  auto lf = store->Load(*m, into, std::nullopt);
  ASSERT_TRUE(lf.ok()) << lf.status().ToString();
  ASSERT_TRUE(lf->Wait().ok());
  EXPECT_EQ(std::memcmp(kv.data() + page.size(), page.data(), page.size()), 0);
  ASSERT_TRUE(store->Close().ok());
  EXPECT_FALSE(store->gpu_mode());  // answers after Close too
}

TEST_F(StoreTest, LargeSavesCrossAsAPipelineOfOperations) {
  // 3 entries per operation: 10 pages and a state go as 4 operations behind one fence.
  StoreOptions o = Options(TinyHybrid(), 64 * 8192, 0);
  o.save_chunk_entries = 3;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto prompt = Tokens(1, 10 * 4);
  SaveAll(store.get(), "", prompt, true);
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 10u);
  EXPECT_TRUE(LoadAndVerify(store.get(), *m).ok());
  const StoreStats st = store->Stats();
  EXPECT_EQ(st.saves, 1u);
  EXPECT_EQ(st.saved_pages, 10u);
  EXPECT_EQ(st.saved_states, 1u);
  EXPECT_EQ(st.failed_operations, 0u);
}

TEST_F(StoreTest, APipelinedSaveThatRunsOutOfRoomFailsItsFenceAfterWhatWasInFlight) {
  // 8 host slots of 8 KiB, 4 of them locked; a Save of 6 new pages in operations of 2: the
  // first two operations fit, the third finds no room (everything else is locked or is this
  // Save's own, just published but still its chain's parents).
  StoreOptions o = Options(TinyAttentionOnly(), 8 * 8192, 0);
  o.save_chunk_entries = 2;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto held = Tokens(1, 4 * 4);
  SaveAll(store.get(), "", held, false);
  auto hm = store->Lookup("", held);
  ASSERT_TRUE(hm.ok());
  auto lock = store->Lock(*hm, 4);
  ASSERT_TRUE(lock.ok());
  auto prompt = Tokens(900, 6 * 4);
  std::vector<uint64_t> pages;
  const auto hashes = store->HashTokens("", prompt);
  for (const PageHash& h : hashes) {
    auto slot = store->AllocateDeviceSlot(Kind::kKV);
    ASSERT_TRUE(slot.ok());
    ASSERT_TRUE(
        store->WriteDeviceRecord(Kind::kKV, *slot, Content(store->layout(), h, Kind::kKV)).ok());
    pages.push_back(*slot);
  }
  SaveRequest req;
  req.tokens = prompt;
  req.device_pages = pages;
  auto f = store->Save(req);
  Status st = f.ok() ? f->Wait(std::chrono::seconds(60)) : f.status();
  EXPECT_TRUE(st.IsNoSpace()) << st.ToString();
  // Whatever of the prompt is cached serves right bytes; the locked prefix is whole.
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  EXPECT_LE(m->kv_only_pages, 4u);
  if (m->reusable_pages > 0) {
    EXPECT_TRUE(LoadAndVerify(store.get(), *m).ok());
  }
  auto again = store->Lookup("", held);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->reusable_pages, 4u);
  EXPECT_TRUE(LoadAndVerify(store.get(), *again).ok());
  ASSERT_TRUE(store->Unlock(*lock).ok());
  for (uint64_t p : pages) EXPECT_TRUE(store->FreeDeviceSlot(Kind::kKV, p).ok());
  // Nothing of the failed Save stays held: a Save of 8 new pages needs every one of the 8 host
  // slots, so it goes through only when all of them are evictable again (its own pages, held
  // while it runs, are never its victims).
  auto fresh = Tokens(5000, 8 * 4);
  SaveAll(store.get(), "", fresh, false);
  auto all = store->Lookup("", fresh);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->reusable_pages, 8u);
  EXPECT_TRUE(LoadAndVerify(store.get(), *all).ok());
}

TEST_F(StoreTest, BadArgumentsGetClearErrors) {
  auto store = OpenOrDie(Options(TinyHybrid(), 1 << 20, 0));
  ASSERT_NE(store, nullptr);
  auto t = Tokens(1, 8);
  std::vector<uint64_t> three{0, 1, 2};
  SaveRequest req;
  req.tokens = t;
  req.device_pages = three;  // only 2 full pages
  auto s1 = store->Save(req);
  EXPECT_TRUE(s1.status().IsInvalidArgument());
  EXPECT_NE(s1.status().message().find("SaveRequest.device_pages"), std::string::npos);
  req.device_pages = {};
  req.device_state_slot = 0;
  req.state_depth_tokens = 6;  // not a multiple of 4
  auto s2 = store->Save(req);
  EXPECT_TRUE(s2.status().IsInvalidArgument());
  EXPECT_NE(s2.status().message().find("state_depth_tokens: 6"), std::string::npos);
  auto m = store->Lookup("", t);
  ASSERT_TRUE(m.ok());
  auto l = store->Load(*m, three, std::nullopt);
  EXPECT_TRUE(l.status().IsInvalidArgument());
  EXPECT_FALSE(store->AllocateDeviceSlot(static_cast<Kind>(7)).ok());
  auto no_layout = Store::Open(StoreOptions{});
  EXPECT_TRUE(no_layout.status().IsInvalidArgument());
  StoreOptions unknown;
  unknown.layout_name = "no-such-model";
  auto u = Store::Open(unknown);
  EXPECT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("no-such-model"), std::string::npos);
  ASSERT_TRUE(store->Close().ok());
  EXPECT_EQ(store->Lookup("", t).status().code(), Status::Code::kFailedPrecondition);
}

TEST_F(StoreTest, ConcurrentEngineThreads) {
  auto store = OpenOrDie(Options(TinyHybrid(), 64 * 8192, 16 << 20));
  ASSERT_NE(store, nullptr);
  std::atomic<int> wrong{0}, loads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        // Shared system prompt (pages 0-1) plus a per-thread, per-iteration suffix.
        std::vector<uint32_t> prompt = Tokens(1, 8);
        auto suffix = Tokens(100000 * (t + 1) + 10 * (i % 7), 8);
        prompt.insert(prompt.end(), suffix.begin(), suffix.end());
        const LoadAttempt a = LookupLockLoad(store.get(), prompt);
        if (!a.lookup.ok()) {
          wrong++;
          continue;
        }
        if (a.load && a.load->ok()) loads++;
        if (a.load && !LockedLoadOk(*a.load)) {
          wrong++;
          ADD_FAILURE() << "locked load: " << a.load->ToString();
        }
        SaveAll(store.get(), "", prompt, true);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(loads.load(), 0);
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreTest, WriteBackPolicyWritesOnlyOnEviction) {
  StoreOptions o = Options(TinyHybrid(), 8 * 8192, 8 << 20);
  o.write_policy = WritePolicy::kWriteBack;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  SaveAll(store.get(), "", Tokens(1, 4 * 2), true);
  EXPECT_EQ(store->Stats().bytes_host_to_disk, 0u);
  for (int r = 0; r < 6; ++r) SaveAll(store.get(), "", Tokens(1000 * (r + 2), 4 * 2), true);
  EXPECT_GT(store->Stats().bytes_host_to_disk, 0u);
  auto m = store->Lookup("", Tokens(1, 4 * 2));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 2u);
  EXPECT_TRUE(LoadAndVerify(store.get(), *m).ok());
}

TEST_F(StoreTest, WriteOnEvictUnderPressureFromManyThreadsServesOnlyRightBytes) {
  // A host tier of 32 slots under 4 threads: allocations evict, and under write-back every
  // victim is written to disk first (asynchronously: the evicting thread waits for space, never
  // for the disk under the store's lock). Loads race the evictions; every loaded byte is checked.
  StoreOptions o = Options(TinyHybrid(), 32 * 8192, 32 << 20);
  o.write_policy = WritePolicy::kWriteBack;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  std::atomic<int> wrong{0}, loads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        auto prompt = Tokens(1000 * (10 * t + i % 9) + 1, 4 * 2);
        const LoadAttempt a = LookupLockLoad(store.get(), prompt);
        if (!a.lookup.ok()) {
          wrong++;
          continue;
        }
        if (a.load && a.load->ok()) loads++;
        if (a.load && !LockedLoadOk(*a.load)) {
          wrong++;  // a locked prefix is never a miss
          ADD_FAILURE() << "locked load: " << a.load->ToString();
        }
        SaveAll(store.get(), "", prompt, true);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(loads.load(), 0);
  const StoreStats st = store->Stats();
  EXPECT_GT(st.bytes_host_to_disk, 0u);
  EXPECT_EQ(st.checksum_failures, 0u);
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreTest, PrefetchBringsDiskHitsToHost) {
  StoreOptions o = Options(TinyHybrid(), 1 << 20, 8 << 20);
  auto prompt = Tokens(9, 4 * 3);
  {
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    SaveAll(store.get(), "", prompt, true);
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto m = store->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 3u);
  auto p = store->StartPrefetch(*m);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE((*p)->fence().Wait(std::chrono::seconds(30)).ok());
  auto after = store->Lookup("", prompt);
  ASSERT_TRUE(after.ok());
  for (Tier t : after->page_tiers) EXPECT_EQ(t, Tier::kHost);
  EXPECT_EQ(after->state_tier, Tier::kHost);
  EXPECT_TRUE(LoadAndVerify(store.get(), *after).ok());
}

}  // namespace
}  // namespace cachepawl
