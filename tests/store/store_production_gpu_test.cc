// The Store at production size on a GPU: a 16 GiB pinned host tier (16 registration chunks) and
// a 4 GiB store-owned device pool, Jamba v0.1 (256 KiB pages, 15.3 MiB states). The engine
// saves about 1.5 times the host tier, so the tier evicts and hands freed slots out again in
// every chunk, and loads random earlier prompts in between: every fence must fire OK and every
// loaded byte must be what was saved. A second case runs a 2 GiB host tier over a write-back
// disk tier (write-on-evict). Label `gpu`: skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <random>

#include "cuda/gpu_runtime.h"
#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

constexpr size_t kPagesPerPrompt = 64;

class StoreProductionGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::GpuAvailable()) GTEST_SKIP() << "no GPU: " << cuda::DescribeDevice(0);
  }

  // Saves `prompts` prompts of kPagesPerPrompt pages plus the state at their end, and after
  // every fourth save loads a random earlier prompt (whatever of it is still reusable) into
  // poisoned device slots and compares every byte. Returns how many prompts were loaded whole.
  void SaveAndLoad(Store& store, uint32_t prompts, uint64_t seed, size_t* loaded_whole) {
    const ModelLayout& l = store.layout();
    std::mt19937_64 rng(seed);
    std::vector<std::vector<uint32_t>> saved;
    const std::vector<std::byte> poison_page(l.RecordBytes(Kind::kKV), std::byte{0xA5});
    const std::vector<std::byte> poison_state(l.RecordBytes(Kind::kMamba), std::byte{0xA5});
    for (uint32_t r = 0; r < prompts; ++r) {
      auto tokens = Tokens(1'000'000 * (r + 1), kPagesPerPrompt * l.page_size_tokens);
      auto hashes = store.HashTokens("", tokens);
      std::vector<uint64_t> pages;
      for (const auto& h : hashes) {
        auto p = store.AllocateDeviceSlot(Kind::kKV);
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        ASSERT_TRUE(store.WriteDeviceRecord(Kind::kKV, *p, Content(l, h, Kind::kKV)).ok());
        pages.push_back(*p);
      }
      auto s = store.AllocateDeviceSlot(Kind::kMamba);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ASSERT_TRUE(
          store.WriteDeviceRecord(Kind::kMamba, *s, Content(l, hashes.back(), Kind::kMamba)).ok());
      const SaveRequest req = WholePromptSave(tokens, pages, *s);
      auto f = store.Save(req);
      ASSERT_TRUE(f.ok()) << "prompt " << r << ": " << f.status().ToString();
      Status done = f->Wait(std::chrono::seconds(120));
      ASSERT_TRUE(done.ok()) << "Save of prompt " << r << ": " << done.ToString();
      for (uint64_t p : pages) ASSERT_TRUE(store.FreeDeviceSlot(Kind::kKV, p).ok());
      ASSERT_TRUE(store.FreeDeviceSlot(Kind::kMamba, *s).ok());
      saved.push_back(std::move(tokens));
      if (r % 4 != 3) continue;

      const auto& back = saved[rng() % saved.size()];
      auto m = store.Lookup("", back);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      if (m->reusable_pages == 0) continue;
      auto lock = store.Lock(*m, m->reusable_pages);
      if (!lock.ok()) continue;  // evicted between Lookup and Lock: a miss, not an error
      std::vector<uint64_t> dst;
      for (size_t i = 0; i < m->reusable_pages; ++i) {
        auto p = store.AllocateDeviceSlot(Kind::kKV);
        ASSERT_TRUE(p.ok());
        ASSERT_TRUE(store.WriteDeviceRecord(Kind::kKV, *p, poison_page).ok());
        dst.push_back(*p);
      }
      auto st = store.AllocateDeviceSlot(Kind::kMamba);
      ASSERT_TRUE(st.ok());
      ASSERT_TRUE(store.WriteDeviceRecord(Kind::kMamba, *st, poison_state).ok());
      auto lf = store.Load(*m, dst, *st);
      ASSERT_TRUE(lf.ok()) << lf.status().ToString();
      Status loaded = lf->Wait(std::chrono::seconds(120));
      ASSERT_TRUE(loaded.ok()) << "Load after prompt " << r << ": " << loaded.ToString();
      std::vector<std::byte> got(l.RecordBytes(Kind::kKV));
      for (size_t i = 0; i < dst.size(); ++i) {
        ASSERT_TRUE(store.ReadDeviceRecord(Kind::kKV, dst[i], got).ok());
        ASSERT_TRUE(got == Content(l, m->hashes[i], Kind::kKV)) << "prompt " << r << " page " << i;
      }
      std::vector<std::byte> state(l.RecordBytes(Kind::kMamba));
      ASSERT_TRUE(store.ReadDeviceRecord(Kind::kMamba, *st, state).ok());
      ASSERT_TRUE(state == Content(l, m->hashes[m->reusable_pages - 1], Kind::kMamba))
          << "state after prompt " << r;
      if (m->reusable_pages == kPagesPerPrompt) ++*loaded_whole;
      for (uint64_t p : dst) ASSERT_TRUE(store.FreeDeviceSlot(Kind::kKV, p).ok());
      ASSERT_TRUE(store.FreeDeviceSlot(Kind::kMamba, *st).ok());
      ASSERT_TRUE(store.Unlock(*lock).ok());
    }
  }

  testing::TempDir dir_;
};

TEST_F(StoreProductionGpuTest, SixteenGiBHostTierEvictsAndReusesSlotsInEveryChunk) {
  StoreOptions o;
  o.layout_name = "jamba-v0.1";
  o.host_bytes = uint64_t{16} << 30;
  o.device_pool_bytes = uint64_t{4} << 30;
  o.cuda_device = 0;
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto store = std::move(opened).value();
  ASSERT_TRUE(store->gpu_mode());
  // ~31.6 MiB per prompt: 780 prompts are ~1.5 times the host tier.
  size_t whole = 0;
  SaveAndLoad(*store, 780, 1, &whole);
  const StoreStats st = store->Stats();
  // States leave first (the eviction order), so the freed state slots are cut up again for pages
  // and states all over the arena.
  EXPECT_GT(st.evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kMamba)], 100u);
  EXPECT_GT(whole, 0u);
  EXPECT_EQ(st.failed_operations, 0u);
  std::cout << "[ info ] " << st.saved_pages << " pages and " << st.saved_states
            << " states saved, " << whole << " prompts loaded whole, host evictions (kv, mamba) "
            << st.evictions[static_cast<int>(Tier::kHost)][0] << ", "
            << st.evictions[static_cast<int>(Tier::kHost)][1] << "\n";
  ASSERT_TRUE(store->Close().ok());
}

TEST_F(StoreProductionGpuTest, TwoGiBHostTierOverAWriteBackDiskTier) {
  StoreOptions o;
  o.layout_name = "jamba-v0.1";
  o.host_bytes = uint64_t{2} << 30;
  o.device_pool_bytes = uint64_t{4} << 30;
  o.disk_dir = dir_.str();
  o.disk_bytes = uint64_t{8} << 30;
  o.write_policy = WritePolicy::kWriteBack;
  o.cuda_device = 0;
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto store = std::move(opened).value();
  size_t whole = 0;
  SaveAndLoad(*store, 160, 2, &whole);  // ~5 GiB saved: host evicts to disk, loads read it back
  const StoreStats st = store->Stats();
  EXPECT_GT(st.evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)], 1'000u);
  EXPECT_GT(whole, 0u);
  EXPECT_EQ(st.failed_operations, 0u);
  EXPECT_EQ(st.checksum_failures, 0u);
  ASSERT_TRUE(store->Close().ok());
}

}  // namespace
}  // namespace cachepawl
