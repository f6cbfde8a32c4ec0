// The remote tier's path to the GPU at production size: Jamba v0.1 (256 KiB pages, 15.3 MiB
// states), two stores on one real 3-master Redis Cluster (tests/common/redis_test_cluster.h),
// each with a 16 GiB pinned host tier and a 4 GiB store-owned device pool. Store A saves about
// 19 GiB, more than B's host tier, and writes it through to the cluster. Store B, holding
// nothing locally, finds each prompt in the remote tier and loads it into poisoned device slots
// (remote -> host slots all over its arena, which evicts as it fills -> device by the copy
// engines), half of them after a StartPrefetch; every fence must fire OK and every byte must be
// what A saved. Label `gpu`: skips without a GPU; then, like every remote test, skips without
// redis-server (fails under CI=true).
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "cuda/gpu_runtime.h"
#include "store/store.h"
#include "tests/common/redis_test_cluster.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

constexpr size_t kPagesPerPrompt = 64;
constexpr uint32_t kPrompts = 600;  // ~31.6 MiB each: ~18.5 GiB, more than B's 16 GiB

std::vector<uint32_t> Prompt(const ModelLayout& l, uint32_t r) {
  return Tokens(1'000'000 * (r + 1), kPagesPerPrompt * l.page_size_tokens);
}

class StoreRemoteGpuTest : public testing::RedisClusterFixture {
 protected:
  void SetUp() override {
    if (!cuda::GpuAvailable()) GTEST_SKIP() << "no GPU: " << cuda::DescribeDevice(0);
    RedisClusterFixture::SetUp();
  }

  StoreOptions Options(RemoteWritePolicy policy) const {
    StoreOptions o;
    o.layout_name = "jamba-v0.1";
    o.host_bytes = uint64_t{16} << 30;
    o.device_pool_bytes = uint64_t{4} << 30;
    o.cuda_device = 0;
    o.remote.seeds = cluster_->Seeds();
    o.remote.write_policy = policy;
    o.remote.lookup_deadline_ms = 2000;
    return o;
  }
};

// A saves every prompt; its writer keeps up (at most 64 entries queued) so that no entry leaves
// A's host memory before it was written.
void SaveAllPrompts(Store& a) {
  const ModelLayout& l = a.layout();
  for (uint32_t r = 0; r < kPrompts; ++r) {
    const auto tokens = Prompt(l, r);
    const auto hashes = a.HashTokens("", tokens);
    std::vector<uint64_t> pages;
    for (const auto& h : hashes) {
      auto p = a.AllocateDeviceSlot(Kind::kKV);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      ASSERT_TRUE(a.WriteDeviceRecord(Kind::kKV, *p, Content(l, h, Kind::kKV)).ok());
      pages.push_back(*p);
    }
    auto s = a.AllocateDeviceSlot(Kind::kMamba);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(
        a.WriteDeviceRecord(Kind::kMamba, *s, Content(l, hashes.back(), Kind::kMamba)).ok());
    const SaveRequest req = WholePromptSave(tokens, pages, *s);
    auto f = a.Save(req);
    ASSERT_TRUE(f.ok()) << "prompt " << r << ": " << f.status().ToString();
    Status done = f->Wait(std::chrono::seconds(120));
    ASSERT_TRUE(done.ok()) << "Save of prompt " << r << ": " << done.ToString();
    for (uint64_t p : pages) ASSERT_TRUE(a.FreeDeviceSlot(Kind::kKV, p).ok());
    ASSERT_TRUE(a.FreeDeviceSlot(Kind::kMamba, *s).ok());
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (a.Stats().remote.queued_now > 64 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  for (;;) {
    const RemoteStats rs = a.Stats().remote;
    if (rs.writes + rs.write_failures + rs.writes_skipped == rs.writes_queued) break;
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "A's remote writes did not settle";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// B loads prompt `r` (whatever of it is reusable) into poisoned slots and compares every byte.
// Returns the reusable pages.
size_t LoadAndCompare(Store& b, uint32_t r, bool prefetch_first) {
  const ModelLayout& l = b.layout();
  auto m = b.Lookup("", Prompt(l, r));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok() || m->reusable_pages == 0) return 0;
  EXPECT_EQ(m->page_tiers.front(), Tier::kRemote) << "prompt " << r;
  if (prefetch_first) {
    auto pf = b.StartPrefetch(*m);
    EXPECT_TRUE(pf.ok()) << pf.status().ToString();
    if (pf.ok()) {
      Status fetched = (*pf)->fence().Wait(std::chrono::seconds(120));
      EXPECT_TRUE(fetched.ok()) << "prefetch of prompt " << r << ": " << fetched.ToString();
    }
    m = b.Lookup("", Prompt(l, r));  // host hits now
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok() || m->reusable_pages == 0) return 0;
  }
  const std::vector<std::byte> poison_page(l.RecordBytes(Kind::kKV), std::byte{0xA5});
  const std::vector<std::byte> poison_state(l.RecordBytes(Kind::kMamba), std::byte{0xA5});
  std::vector<uint64_t> dst;
  for (size_t i = 0; i < m->reusable_pages; ++i) {
    auto p = b.AllocateDeviceSlot(Kind::kKV);
    EXPECT_TRUE(p.ok() && b.WriteDeviceRecord(Kind::kKV, *p, poison_page).ok());
    if (!p.ok()) return 0;
    dst.push_back(*p);
  }
  auto st = b.AllocateDeviceSlot(Kind::kMamba);
  EXPECT_TRUE(st.ok() && b.WriteDeviceRecord(Kind::kMamba, *st, poison_state).ok());
  if (!st.ok()) return 0;
  auto lf = b.Load(*m, dst, *st);
  EXPECT_TRUE(lf.ok()) << lf.status().ToString();
  Status loaded = lf.ok() ? lf->Wait(std::chrono::seconds(120)) : lf.status();
  EXPECT_TRUE(loaded.ok()) << "Load of prompt " << r << ": " << loaded.ToString();
  std::vector<std::byte> got(l.RecordBytes(Kind::kKV));
  for (size_t i = 0; loaded.ok() && i < dst.size(); ++i) {
    EXPECT_TRUE(b.ReadDeviceRecord(Kind::kKV, dst[i], got).ok());
    EXPECT_TRUE(got == Content(l, m->hashes[i], Kind::kKV)) << "prompt " << r << " page " << i;
  }
  std::vector<std::byte> state(l.RecordBytes(Kind::kMamba));
  if (loaded.ok()) {
    EXPECT_TRUE(b.ReadDeviceRecord(Kind::kMamba, *st, state).ok());
    EXPECT_TRUE(state == Content(l, m->hashes[m->reusable_pages - 1], Kind::kMamba))
        << "state of prompt " << r;
  }
  for (uint64_t p : dst) EXPECT_TRUE(b.FreeDeviceSlot(Kind::kKV, p).ok());
  EXPECT_TRUE(b.FreeDeviceSlot(Kind::kMamba, *st).ok());
  return m->reusable_pages;
}

TEST_F(StoreRemoteGpuTest, RemoteHitsReachTheDeviceByteForByteThroughSixteenGiBHostTiers) {
  auto a = Store::Open(Options(RemoteWritePolicy::kWriteThrough));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE((*a)->gpu_mode());
  const auto save_start = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(SaveAllPrompts(**a));
  const double save_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - save_start).count();
  const StoreStats sa = (*a)->Stats();
  EXPECT_EQ(sa.remote.write_failures, 0u);
  EXPECT_EQ(sa.remote.writes_dropped, 0u);
  EXPECT_EQ(sa.failed_operations, 0u);

  auto b = Store::Open(Options(RemoteWritePolicy::kNone));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  size_t whole = 0, pages = 0;
  const auto load_start = std::chrono::steady_clock::now();
  for (uint32_t r = 0; r < kPrompts; ++r) {
    const size_t got = LoadAndCompare(**b, r, r % 2 == 1);
    pages += got;
    whole += got == kPagesPerPrompt;
    ASSERT_FALSE(HasFailure()) << "prompt " << r;
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const StoreStats sb = (*b)->Stats();
  EXPECT_EQ(sb.remote.load_failures, 0u);
  EXPECT_EQ(sb.remote.checksum_failures, 0u);
  EXPECT_EQ(sb.failed_operations, 0u);
  EXPECT_GT(sb.evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)], 0u);
  // Everything A wrote is there unless A's host memory dropped it before its turn.
  EXPECT_GE(whole, kPrompts - sa.remote.writes_skipped);
  const double gib = static_cast<double>(sb.remote.get_bytes) / (1ull << 30);
  std::cout << "[ info ] A: " << sa.remote.writes << " entries written (" << save_s
            << " s for saves and writes), skipped " << sa.remote.writes_skipped << "; B: " << whole
            << " of " << kPrompts << " prompts whole, " << pages << " pages, " << gib
            << " GiB from the remote tier in " << load_s << " s (" << gib / load_s
            << " GiB/s with Lookup, Load and compare), host evictions (kv, mamba) "
            << sb.evictions[static_cast<int>(Tier::kHost)][0] << ", "
            << sb.evictions[static_cast<int>(Tier::kHost)][1] << "\n";
  ASSERT_TRUE((*b)->Close().ok());
  ASSERT_TRUE((*a)->Close().ok());
}

}  // namespace
}  // namespace cachepawl
