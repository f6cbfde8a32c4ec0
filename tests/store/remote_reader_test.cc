// RemoteReader alone (store/remote_reader.h), on a real 3-master Redis Cluster on loopback, no
// Store: a local match is extended by exactly what the cluster holds past it (KV pages up to the
// first missing one; under the hybrid rule, the deepest depth whose state is there); an
// unreachable cluster is a miss; records come back byte for byte; fetches run on several
// reader threads at once.
#include "store/remote_reader.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "tests/common/redis_test_cluster.h"
#include "tests/store/store_test_util.h"
#include "tests/tiers/disk_test_util.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

using testing::FillPayloadForKey;

class RemoteReaderTest : public testing::RedisClusterFixture {
 protected:
  std::unique_ptr<RemoteTier> OpenTier(const ModelLayout& layout, const std::string& seeds) {
    RemoteTierOptions ro;
    ro.redis.seeds = seeds;
    ro.deadline = std::chrono::milliseconds(5000);
    auto t = RemoteTier::Open(ro, layout);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  // A chain of `n` page hashes.
  static std::vector<PageHash> Chain(size_t n) {
    std::vector<PageHash> hashes(n);
    for (size_t i = 0; i < n; ++i) {
      hashes[i].bytes[0] = static_cast<uint8_t>(i + 1);
      hashes[i].bytes[2] = 0x44;
    }
    return hashes;
  }
  DiskKey Key(const ModelLayout& layout, const std::vector<PageHash>& chain, size_t page,
              Kind kind) {
    return DiskKey{kind, chain[page], (page + 1) * uint64_t{layout.page_size_tokens}};
  }
  // Puts `kind` of pages `pages` of `chain` into the cluster (payloads by FillPayloadForKey).
  void Put(RemoteTier& tier, const ModelLayout& layout, const std::vector<PageHash>& chain,
           std::vector<size_t> pages, Kind kind) {
    std::vector<std::vector<std::byte>> payloads;
    std::vector<RemotePut> puts;
    for (size_t p : pages) {
      payloads.emplace_back(layout.RecordBytes(kind));
      FillPayloadForKey(Key(layout, chain, p, kind), payloads.back());
    }
    for (size_t i = 0; i < pages.size(); ++i) {
      const size_t p = pages[i];
      puts.push_back(
          {Key(layout, chain, p, kind), p == 0 ? PageHash::Zero() : chain[p - 1], payloads[i]});
    }
    for (const Status& s : tier.Put(puts)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  static std::optional<Tier> NothingLocal(const PageHash&, Kind) { return std::nullopt; }
};

TEST_F(RemoteReaderTest, ALocalMatchGrowsByTheKvPagesTheClusterHoldsPastIt) {
  const ModelLayout layout = TinyAttentionOnly();
  auto tier = OpenTier(layout, cluster_->Seeds());
  ASSERT_NE(tier, nullptr);
  const auto chain = Chain(8);
  Put(*tier, layout, chain, {2, 3, 4, 5, 7}, Kind::kKV);  // page 6 missing
  RemoteReader reader(tier.get(), &layout, {});
  PrefixMatch m;
  m.hashes = chain;
  m.page_size_tokens = layout.page_size_tokens;
  m.reusable_pages = m.kv_only_pages = 2;  // pages 0 and 1 are local
  m.page_tiers = {Tier::kHost, Tier::kDisk};
  EXPECT_EQ(reader.ExtendMatch(m, NothingLocal), 4u);
  EXPECT_EQ(m.reusable_pages, 6u) << "up to the first page the cluster lacks";
  EXPECT_EQ(m.kv_only_pages, 6u);
  EXPECT_EQ(m.checkpoint_hint_pages, 6u);
  ASSERT_EQ(m.page_tiers.size(), 6u);
  EXPECT_EQ(m.page_tiers[1], Tier::kDisk);
  for (size_t p = 2; p < 6; ++p) EXPECT_EQ(m.page_tiers[p], Tier::kRemote) << p;
}

TEST_F(RemoteReaderTest, UnderTheHybridRuleTheMatchEndsAtTheDeepestStateTheClusterHolds) {
  const ModelLayout layout = TinyHybrid();
  auto tier = OpenTier(layout, cluster_->Seeds());
  ASSERT_NE(tier, nullptr);
  const auto chain = Chain(6);
  Put(*tier, layout, chain, {0, 1, 2, 3, 4, 5}, Kind::kKV);
  Put(*tier, layout, chain, {1, 3}, Kind::kMamba);  // states at depths 2 and 4 pages
  RemoteReader reader(tier.get(), &layout, {});
  PrefixMatch m;
  m.hashes = chain;
  m.page_size_tokens = layout.page_size_tokens;
  EXPECT_EQ(reader.ExtendMatch(m, NothingLocal), 4u);
  EXPECT_EQ(m.reusable_pages, 4u);
  EXPECT_EQ(m.kv_only_pages, 6u) << "KV past the last state is known, not reusable";
  EXPECT_EQ(m.state_tier, Tier::kRemote);
  // A state held locally at depth 6 counts too (it comes from the store's index).
  PrefixMatch deeper;
  deeper.hashes = chain;
  const auto local_state = [&](const PageHash& h, Kind kind) -> std::optional<Tier> {
    if (kind == Kind::kMamba && h == chain[5]) return Tier::kHost;
    return std::nullopt;
  };
  EXPECT_EQ(reader.ExtendMatch(deeper, local_state), 6u);
  EXPECT_EQ(deeper.state_tier, Tier::kHost);
}

TEST_F(RemoteReaderTest, AnUnreachableClusterIsAMiss) {
  const ModelLayout layout = TinyAttentionOnly();
  auto tier = OpenTier(layout, "redis://127.0.0.1:1");
  ASSERT_NE(tier, nullptr);
  RemoteReader reader(tier.get(), &layout, {});
  PrefixMatch m;
  m.hashes = Chain(4);
  m.reusable_pages = m.kv_only_pages = 1;
  m.page_tiers = {Tier::kHost};
  EXPECT_EQ(reader.ExtendMatch(m, NothingLocal), 0u);
  EXPECT_EQ(m.reusable_pages, 1u);
  EXPECT_EQ(m.page_tiers.size(), 1u);
}

TEST_F(RemoteReaderTest, RecordsComeBackByteForByteAndFetchesRunInParallel) {
  const ModelLayout layout = TinyAttentionOnly();
  auto tier = OpenTier(layout, cluster_->Seeds());
  ASSERT_NE(tier, nullptr);
  const auto chain = Chain(2);
  Put(*tier, layout, chain, {0}, Kind::kKV);
  RemoteReader::Options o;
  o.threads = 4;
  RemoteReader reader(tier.get(), &layout, o);
  std::vector<std::byte> record(RecordSlotBytes(layout, Kind::kKV), std::byte{0xA5});
  const RemoteGet gets[] = {{Key(layout, chain, 0, Kind::kKV), record},
                            {Key(layout, chain, 1, Kind::kKV), record}};
  const std::vector<Status> got = reader.Get(gets);
  ASSERT_TRUE(got[0].ok()) << got[0].ToString();
  EXPECT_TRUE(got[1].IsNotFound()) << got[1].ToString();
  std::vector<std::byte> want(layout.RecordBytes(Kind::kKV));
  FillPayloadForKey(gets[0].key, want);
  EXPECT_EQ(std::memcmp(record.data() + kRecordHeaderBytes, want.data(), want.size()), 0);
  // Four fetches that each wait for the other three: they finish only when they run at once.
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0, met = 0;
  for (int i = 0; i < 4; ++i) {
    reader.Post([&] {
      std::unique_lock<std::mutex> lock(mu);
      ++arrived;
      cv.notify_all();
      if (cv.wait_for(lock, std::chrono::seconds(20), [&] { return arrived == 4; })) ++met;
    });
  }
  reader.Stop();  // runs them to their ends
  EXPECT_EQ(met, 4) << "the fetches did not run on 4 threads at once";
}

}  // namespace
}  // namespace cachepawl
