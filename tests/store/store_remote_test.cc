// The Store over a remote tier (StoreOptions::remote) on a real 3-master Redis Cluster
// (tests/common/redis_test_cluster.h): two stores that share the cluster (two engine replicas)
// reuse each other's prefixes byte for byte, under the hybrid rule across tiers; a corrupted
// value, a dead cluster, another namespace and another layout are misses, never data.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "store/store.h"
#include "tests/common/redis_test_cluster.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_checks.h"
#include "tiers/remote_tier.h"

namespace cachepawl {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class RemoteStoreTest : public testing::RedisClusterFixture {
 protected:
  StoreOptions Options(const ModelLayout& layout, RemoteWritePolicy policy) const {
    StoreOptions o = CpuStoreOptions(layout, 4 << 20, 2 << 20, 0, "");
    o.remote.seeds = cluster_->Seeds();
    o.remote.write_policy = policy;
    o.remote.chunk_bytes = 64 << 10;
    o.remote.lookup_deadline_ms = 2000;  // a loaded test machine: no spurious misses
    return o;
  }
  std::unique_ptr<Store> Open(const StoreOptions& o) {
    auto s = Store::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // Waits until `store`'s writer has stored `n` entries in all (bounded; not a timing check).
  static void WaitForRemoteWrites(Store& store, uint64_t n) {
    const auto give_up = std::chrono::steady_clock::now() + seconds(30);
    while (store.Stats().remote.writes < n && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    ASSERT_EQ(store.Stats().remote.writes, n);
  }

  // Waits until every entry handed to `store`'s writer was written, failed or skipped (bounded;
  // not a timing check).
  static void WaitForWritesToSettle(Store& store) {
    auto settled = [&] {
      const RemoteStats r = store.Stats().remote;
      return r.writes + r.write_failures + r.writes_skipped == r.writes_queued;
    };
    const auto give_up = std::chrono::steady_clock::now() + seconds(60);
    while (!settled() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    ASSERT_TRUE(settled()) << "remote writes still in flight after 60 s";
  }
};

TEST_F(RemoteStoreTest, ASecondStoreReusesAPrefixTheFirstSaved) {
  const ModelLayout layout = TinyHybrid();
  auto a = Open(Options(layout, RemoteWritePolicy::kWriteThrough));
  auto b = Open(Options(layout, RemoteWritePolicy::kNone));
  ASSERT_TRUE(a && b);
  const auto tokens = Tokens(100, 32);  // 8 pages
  ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "tenant", tokens, /*with_state=*/true));
  ASSERT_NO_FATAL_FAILURE(WaitForRemoteWrites(*a, 9));  // 8 KV pages and the state

  auto m = b->Lookup("tenant", tokens);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->reusable_pages, 8u);
  EXPECT_EQ(m->kv_only_pages, 8u);
  ASSERT_EQ(m->page_tiers.size(), 8u);
  for (Tier t : m->page_tiers) EXPECT_EQ(t, Tier::kRemote);
  ASSERT_TRUE(m->state_tier.has_value());
  EXPECT_EQ(*m->state_tier, Tier::kRemote);
  // Nothing of it is here to lock; Load fetches it.
  auto lock = b->Lock(*m, m->reusable_pages);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  EXPECT_TRUE(lock->hashes.empty());
  ASSERT_TRUE(b->Unlock(*lock).ok());
  Status loaded = LoadAndVerify(b.get(), *m);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  const StoreStats st = b->Stats();
  EXPECT_TRUE(st.remote.enabled);
  EXPECT_EQ(st.remote.loaded, 9u);
  EXPECT_EQ(st.remote.load_failures, 0u);
  EXPECT_EQ(st.remote.writes_queued, 0u);  // policy none: b writes nothing
  // Now b holds it in host memory: the next lookup says so, and loads it again.
  m = b->Lookup("tenant", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 8u);
  for (Tier t : m->page_tiers) EXPECT_EQ(t, Tier::kHost);
  EXPECT_EQ(*m->state_tier, Tier::kHost);
  EXPECT_TRUE(LoadAndVerify(b.get(), *m).ok());
  EXPECT_EQ(b->Stats().remote.loaded, 9u);
}

TEST_F(RemoteStoreTest, TwoStoreProcessesShareAPrefix) {
  // Another process (tests/store/store_writer_main.cc: TinyHybrid, a disk tier of its own)
  // saves 6 pages and the state after them, writes them through to the cluster, and exits.
  testing::TempDir writer_dir;
  const std::string cmd =
      std::string(CACHEPAWL_STORE_WRITER) + " " + writer_dir.str() + " 77 6 " + cluster_->Seeds();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  // This process, with no disk and nothing saved, reuses all of it.
  auto b = Open(Options(TinyHybrid(), RemoteWritePolicy::kNone));
  ASSERT_TRUE(b);
  const auto tokens = Tokens(77, 24);
  auto m = b->Lookup("", tokens);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->reusable_pages, 6u);
  for (Tier t : m->page_tiers) EXPECT_EQ(t, Tier::kRemote);
  Status loaded = LoadAndVerify(b.get(), *m);
  EXPECT_TRUE(loaded.ok()) << loaded.ToString();
  EXPECT_EQ(b->Stats().remote.loaded, 7u);
}

TEST_F(RemoteStoreTest, AKilledMasterCostsHitsNeverAWrongByte) {
  const ModelLayout layout = TinyHybrid();
  StoreOptions oa = Options(layout, RemoteWritePolicy::kWriteThrough);
  oa.host_bytes = 64 << 20;
  StoreOptions ob = Options(layout, RemoteWritePolicy::kNone);
  ob.remote.deadline_ms = 1000;
  ob.remote.lookup_deadline_ms = 1000;
  auto a = Open(oa);
  auto b = Open(ob);
  ASSERT_TRUE(a && b);
  constexpr uint32_t kPrompts = 30;
  for (uint32_t p = 0; p < kPrompts; ++p) {
    ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", Tokens(1000 * (p + 1), 12), true));
  }
  ASSERT_NO_FATAL_FAILURE(WaitForRemoteWrites(*a, kPrompts * 4));
  ASSERT_TRUE(cluster_->Kill(1).ok());
  // b asks for every prompt: those whose records lived on the dead master are misses (at lookup
  // or at load); every load that succeeds has every byte right (LoadAndVerify compares them).
  size_t hits = 0, misses = 0;
  for (uint32_t p = 0; p < kPrompts; ++p) {
    auto m = b->Lookup("", Tokens(1000 * (p + 1), 12));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    if (m->reusable_pages == 0) {
      ++misses;
      continue;
    }
    Status loaded = LoadAndVerify(b.get(), *m);
    if (loaded.ok()) {
      ++hits;
    } else {
      EXPECT_FALSE(loaded.IsCorruption()) << loaded.ToString();
      ++misses;
    }
  }
  EXPECT_GT(hits, 0u);
  EXPECT_GT(misses, 0u);  // 4 records per prompt over 3 masters: most prompts touch the dead one
  // b keeps serving: its own saves and loads work, and what it fetched is in host memory.
  ASSERT_NO_FATAL_FAILURE(SaveAll(b.get(), "", Tokens(99999, 8), true));
  auto own = b->Lookup("", Tokens(99999, 8));
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->reusable_pages, 2u);
  EXPECT_TRUE(LoadAndVerify(b.get(), *own).ok());
}

TEST_F(RemoteStoreTest, TheHybridRuleSpansLocalAndRemoteTiers) {
  const ModelLayout layout = TinyHybrid();
  auto a = Open(Options(layout, RemoteWritePolicy::kWriteThrough));
  auto b = Open(Options(layout, RemoteWritePolicy::kNone));
  ASSERT_TRUE(a && b);
  const auto tokens = Tokens(7, 32);
  // a: 8 pages, a state at depth 6 only. b: the first 3 pages, locally, no state.
  ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", tokens, true, /*state_pages=*/6));
  ASSERT_NO_FATAL_FAILURE(WaitForRemoteWrites(*a, 9));
  ASSERT_NO_FATAL_FAILURE(SaveAll(b.get(), "", Tokens(7, 12), false));
  auto m = b->Lookup("", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 6u);  // the deepest state with every page before it
  EXPECT_EQ(m->kv_only_pages, 8u);
  ASSERT_EQ(m->page_tiers.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(m->page_tiers[i], i < 3 ? Tier::kHost : Tier::kRemote) << i;
  }
  EXPECT_EQ(m->state_tier, Tier::kRemote);
  // The lock covers the 3 local pages.
  auto lock = b->Lock(*m, m->reusable_pages);
  ASSERT_TRUE(lock.ok());
  EXPECT_EQ(lock->hashes.size(), 3u);
  Status loaded = LoadAndVerify(b.get(), *m);
  EXPECT_TRUE(loaded.ok()) << loaded.ToString();
  ASSERT_TRUE(b->Unlock(*lock).ok());
  EXPECT_EQ(b->Stats().remote.loaded, 4u);  // pages 3..5 and the state
  // A prompt whose state is nowhere is not reusable past what is local (nothing here).
  ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", Tokens(500, 16), false));
  m = b->Lookup("", Tokens(500, 16));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 0u);
}

TEST_F(RemoteStoreTest, PrefetchBringsRemoteRecordsIntoHostMemory) {
  const ModelLayout layout = TinyHybrid();
  auto a = Open(Options(layout, RemoteWritePolicy::kWriteThrough));
  auto b = Open(Options(layout, RemoteWritePolicy::kNone));
  ASSERT_TRUE(a && b);
  const auto tokens = Tokens(1, 20);
  ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "p", tokens, true));
  ASSERT_NO_FATAL_FAILURE(WaitForRemoteWrites(*a, 6));
  auto m = b->Lookup("p", tokens);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 5u);
  auto prefetch = b->StartPrefetch(*m);
  ASSERT_TRUE(prefetch.ok()) << prefetch.status().ToString();
  ASSERT_TRUE((*prefetch)->fence().Wait(seconds(30)).ok());
  m = b->Lookup("p", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 5u);
  for (Tier t : m->page_tiers) EXPECT_EQ(t, Tier::kHost);
  EXPECT_EQ(m->state_tier, Tier::kHost);
  EXPECT_TRUE(LoadAndVerify(b.get(), *m).ok());
}

TEST_F(RemoteStoreTest, ACorruptedValueIsAMissNeverData) {
  const ModelLayout layout = TinyHybrid();
  StoreOptions oa = Options(layout, RemoteWritePolicy::kWriteThrough);
  auto a = Open(oa);
  auto b = Open(Options(layout, RemoteWritePolicy::kNone));
  ASSERT_TRUE(a && b);
  const auto tokens = Tokens(40, 16);
  ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", tokens, true));
  ASSERT_NO_FATAL_FAILURE(WaitForRemoteWrites(*a, 5));
  // Flip one payload byte of page 2's value, behind the stores' backs.
  auto tier = RemoteTier::Open(ToRemoteTierOptions(oa.remote), layout);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const auto hashes = a->HashTokens("", tokens);
  const std::string part = (*tier)->PartKey(DiskKey{Kind::kKV, hashes[2], 12}, 0);
  auto owner = cluster_->OwnerOf(RedisKeySlot(part));
  ASSERT_TRUE(owner.ok());
  auto value = cluster_->Command(*owner, {"GET", part});
  ASSERT_TRUE(value.ok());
  ASSERT_EQ(value->type, RedisReply::Type::kString);
  std::string bad = value->str;
  bad[bad.size() - 1] ^= 1;
  ASSERT_TRUE(cluster_->Command(*owner, {"SET", part, bad}).ok());

  auto m = b->Lookup("", tokens);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 4u);  // existence is all a lookup checks
  Status loaded = LoadAndVerify(b.get(), *m);
  EXPECT_TRUE(loaded.IsNotFound()) << loaded.ToString();
  StoreStats st = b->Stats();
  EXPECT_EQ(st.remote.checksum_failures, 1u);
  EXPECT_EQ(st.remote.deleted_bad, 1u);
  EXPECT_GE(st.remote.load_failures, 1u);
  // The bad record was deleted: the prefix now stops before page 2 (no state there: a miss).
  m = b->Lookup("", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kv_only_pages, 2u);
  EXPECT_EQ(m->reusable_pages, 0u);
}

TEST_F(RemoteStoreTest, NamespacesAndLayoutsNeverSeeEachOther) {
  const ModelLayout layout = TinyHybrid();
  ModelLayout other = TinyHybrid();
  other.model = "test/tiny-hybrid-other";
  auto a = Open(Options(layout, RemoteWritePolicy::kWriteThrough));
  auto b = Open(Options(layout, RemoteWritePolicy::kNone));
  auto c = Open(Options(other, RemoteWritePolicy::kNone));
  ASSERT_TRUE(a && b && c);
  const auto tokens = Tokens(9, 16);
  ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "alice", tokens, true));
  ASSERT_NO_FATAL_FAILURE(WaitForRemoteWrites(*a, 5));
  auto m = b->Lookup("bob", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kv_only_pages, 0u);
  m = c->Lookup("alice", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kv_only_pages, 0u);
  m = b->Lookup("alice", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 4u);
}

TEST_F(RemoteStoreTest, ADeadClusterCostsRemoteCopiesNeverSavesOrLookups) {
  const ModelLayout layout = TinyHybrid();
  StoreOptions o = Options(layout, RemoteWritePolicy::kWriteThrough);
  o.remote.lookup_deadline_ms = 200;
  o.remote.deadline_ms = 300;
  auto a = Open(o);
  ASSERT_TRUE(a);
  for (size_t n = 0; n < cluster_->size(); ++n) ASSERT_TRUE(cluster_->Kill(n).ok());
  // Saves and lookups go on; the writes fail (counted) after their retries.
  const auto tokens = Tokens(3, 16);
  ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", tokens, true));
  auto m = a->Lookup("", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 4u);  // local
  EXPECT_TRUE(LoadAndVerify(a.get(), *m).ok());
  auto miss = a->Lookup("", Tokens(900, 16));  // asks the dead cluster: a miss, no error
  ASSERT_TRUE(miss.ok()) << miss.status().ToString();
  EXPECT_EQ(miss->kv_only_pages, 0u);
  const auto give_up = std::chrono::steady_clock::now() + seconds(60);
  while (a->Stats().remote.write_failures < 5 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  const StoreStats st = a->Stats();
  EXPECT_EQ(st.remote.write_failures, 5u);
  EXPECT_EQ(st.remote.writes, 0u);
  EXPECT_GT(st.remote.transport_errors, 0u);
  EXPECT_TRUE(a->Close().ok());
}

TEST_F(RemoteStoreTest, SelectiveWritesAfterHits) {
  const ModelLayout layout = TinyAttentionOnly();
  StoreOptions o = Options(layout, RemoteWritePolicy::kSelective);
  o.remote.selective_min_hits = 2;
  auto a = Open(o);
  ASSERT_TRUE(a);
  const auto tokens = Tokens(11, 8);  // 2 pages
  ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", tokens, false));
  EXPECT_EQ(a->Stats().remote.writes_queued, 0u);
  for (int hit = 0; hit < 2; ++hit) {
    auto m = a->Lookup("", tokens);
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(LoadAndVerify(a.get(), *m).ok());
  }
  ASSERT_NO_FATAL_FAILURE(WaitForRemoteWrites(*a, 2));
  EXPECT_EQ(a->Stats().remote.writes_queued, 2u);
}

TEST_F(RemoteStoreTest, WriteOnEvictCopiesWhatLeavesHostMemory) {
  const ModelLayout layout = TinyHybrid();
  StoreOptions oa = Options(layout, RemoteWritePolicy::kOnEvict);
  oa.host_bytes = 1 << 20;  // a few dozen entries: the prompts below evict most of them
  oa.host_free_target_bytes = 0;
  auto a = Open(oa);
  auto b = Open(Options(layout, RemoteWritePolicy::kNone));
  ASSERT_TRUE(a && b);
  constexpr uint32_t kPrompts = 40;
  for (uint32_t p = 0; p < kPrompts; ++p) {
    ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", Tokens(1000 * (p + 1), 16), true));
  }
  // Every hand-off ends written, failed or skipped (it left host memory otherwise first).
  ASSERT_NO_FATAL_FAILURE(WaitForWritesToSettle(*a));
  const StoreStats st = a->Stats();
  EXPECT_GT(st.remote.writes, 0u);
  EXPECT_EQ(st.remote.write_failures, 0u);
  uint64_t host_evictions = 0;
  for (uint64_t n : st.evictions[static_cast<int>(Tier::kHost)]) host_evictions += n;
  EXPECT_GT(host_evictions, 0u);
  // The first prompts left a's host memory; b finds them in the remote tier, byte for byte.
  auto m = b->Lookup("", Tokens(1000, 16));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 4u);
  EXPECT_TRUE(LoadAndVerify(b.get(), *m).ok());
  // What was never evicted was never written.
  auto last = a->Lookup("", Tokens(1000 * kPrompts, 16));
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->reusable_pages, 4u);
}

TEST_F(RemoteStoreTest, WriteOnEvictWithADeadClusterStillEvicts) {
  const ModelLayout layout = TinyHybrid();
  StoreOptions oa = Options(layout, RemoteWritePolicy::kOnEvict);
  oa.host_bytes = 1 << 20;
  oa.host_free_target_bytes = 0;
  oa.remote.deadline_ms = 200;
  auto a = Open(oa);
  ASSERT_TRUE(a);
  for (size_t n = 0; n < cluster_->size(); ++n) ASSERT_TRUE(cluster_->Kill(n).ok());
  // Every save completes: victims whose writes failed are dropped unwritten.
  for (uint32_t p = 0; p < 40; ++p) {
    ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", Tokens(1000 * (p + 1), 16), true));
  }
  const StoreStats st = a->Stats();
  EXPECT_EQ(st.remote.writes, 0u);
  EXPECT_GT(st.remote.write_failures, 0u);
  auto m = a->Lookup("", Tokens(40000, 16));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 4u);
  EXPECT_TRUE(LoadAndVerify(a.get(), *m).ok());
}

TEST_F(RemoteStoreTest, WriteOnEvictCopiesWhatLeavesTheDiskTheLastLocalTier) {
  const ModelLayout layout = TinyHybrid();
  testing::TempDir dir;
  StoreOptions oa = Options(layout, RemoteWritePolicy::kOnEvict);
  oa.host_bytes = 1 << 20;
  oa.host_free_target_bytes = 0;
  oa.disk_dir = dir.str();
  oa.disk_bytes = 16 << 20;  // 8 KiB records: about 2000, far fewer than the prompts below save
  oa.disk_queue_depth = 8;
  oa.write_policy = WritePolicy::kWriteThrough;  // host victims have a disk copy: not written
  auto a = Open(oa);
  auto b = Open(Options(layout, RemoteWritePolicy::kNone));
  ASSERT_TRUE(a && b);
  constexpr uint32_t kPrompts = 200;  // 16 pages and a state each: 3400 records
  for (uint32_t p = 0; p < kPrompts; ++p) {
    ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", Tokens(100000 * (p + 1), 64), true));
  }
  // The first prompt left a's host memory and then its disk, and was copied to the remote tier
  // on its way out. Wait (bounded) until b finds it there whole: not until a's writes "settle",
  // since a's disk keeps evicting, and copying, while its write-through queue drains after the
  // Saves returned, so a moment when every queued write is done is no sign that none is coming.
  const std::vector<uint32_t> first = Tokens(100000, 64);
  const auto give_up = std::chrono::steady_clock::now() + seconds(60);
  auto m = b->Lookup("", first);
  while ((!m.ok() || m->reusable_pages < 16) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(20));
    m = b->Lookup("", first);
  }
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->reusable_pages, 16u) << "the first prompt never reached the remote tier whole";
  const StoreStats st = a->Stats();
  uint64_t disk_evictions = 0;
  for (uint64_t n : st.evictions[static_cast<int>(Tier::kDisk)]) disk_evictions += n;
  EXPECT_GT(disk_evictions, 0u);
  EXPECT_GT(st.remote.writes, 0u);
  EXPECT_EQ(st.remote.write_failures, 0u);
  EXPECT_GT(st.remote.disk_copies, 0u);  // read back from the disk before their removal
  EXPECT_EQ(st.remote.disk_copy_failures, 0u);
  // b reads it byte for byte (the records were read back from a's disk and verified on the way).
  EXPECT_TRUE(LoadAndVerify(b.get(), *m).ok());
  // So does a itself, which kept none of it locally.
  auto again = a->Lookup("", Tokens(100000, 64));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->reusable_pages, 16u);
  EXPECT_TRUE(LoadAndVerify(a.get(), *again).ok());
}

TEST(RemoteStoreOptionsTest, BadRemoteOptionsNameTheField) {
  StoreOptions o = CpuStoreOptions(TinyHybrid(), 4 << 20, 0, 0, "");
  o.remote.seeds = "redis://127.0.0.1:6379";
  EXPECT_TRUE(o.Validate().ok()) << o.Validate().ToString();
  o.remote.key_prefix = "a b";
  EXPECT_NE(o.Validate().ToString().find("remote.key_prefix 'a b'"), std::string::npos)
      << o.Validate().ToString();
  o.remote.key_prefix = "ok";
  o.remote.lookup_deadline_ms = 0;
  EXPECT_NE(o.Validate().ToString().find("remote.lookup_deadline_ms: 0"), std::string::npos)
      << o.Validate().ToString();
  o.remote.lookup_deadline_ms = 20;
  o.remote.write_policy = static_cast<RemoteWritePolicy>(9);
  EXPECT_NE(o.Validate().ToString().find("remote.write_policy: 9"), std::string::npos);
  o.remote.write_policy = RemoteWritePolicy::kSelective;
  o.remote.selective_min_hits = 0;
  EXPECT_NE(o.Validate().ToString().find("remote.selective_min_hits: 0"), std::string::npos);
  o.remote.selective_min_hits = 1;
  o.remote.seeds = "redis://nowhere:0";
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  // A cluster nobody runs (yet): the store opens and serves from its local tiers.
  o.remote.seeds = "redis://127.0.0.1:1";
  o.device_pool_bytes = 2 << 20;
  auto s = Store::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const auto tokens = Tokens(5, 8);
  ASSERT_NO_FATAL_FAILURE(SaveAll(s->get(), "", tokens, true));
  auto m = (*s)->Lookup("", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 2u);
  EXPECT_TRUE(LoadAndVerify(s->get(), *m).ok());
}

TEST_F(RemoteStoreTest, AStoreOpenedWhileTheClusterIsDownUsesItOnceItIsUp) {
  const ModelLayout layout = TinyHybrid();
  StoreOptions oa = Options(layout, RemoteWritePolicy::kWriteThrough);
  for (size_t n = 0; n < cluster_->size(); ++n) ASSERT_TRUE(cluster_->Kill(n).ok());
  auto a = Open(oa);
  ASSERT_TRUE(a);
  for (size_t n = 0; n < cluster_->size(); ++n) ASSERT_TRUE(cluster_->Restart(n).ok());
  ASSERT_TRUE(cluster_->WaitClusterOk().ok());
  // The first writes may meet the nodes' back-off; saves go on until some are stored.
  auto b = Open(Options(layout, RemoteWritePolicy::kNone));
  ASSERT_TRUE(b);
  bool shared = false;
  for (uint32_t round = 0; round < 50 && !shared; ++round) {
    const auto tokens = Tokens(10000 * (round + 1), 8);
    ASSERT_NO_FATAL_FAILURE(SaveAll(a.get(), "", tokens, true));
    const auto give_up = std::chrono::steady_clock::now() + seconds(5);
    while (a->Stats().remote.queued_now > 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    auto m = b->Lookup("", tokens);
    ASSERT_TRUE(m.ok());
    if (m->reusable_pages == 2) {
      EXPECT_TRUE(LoadAndVerify(b.get(), *m).ok());
      shared = true;
    }
  }
  EXPECT_TRUE(shared);
}

}  // namespace
}  // namespace cachepawl
