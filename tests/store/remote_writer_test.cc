// RemoteWriter alone (store/remote_writer.h), on a real 3-master Redis Cluster on loopback
// (tests/common/redis_test_cluster.h), with a real host arena and prefix index and no Store:
// queued entries reach the cluster byte for byte and are not written twice; a write-on-evict
// victim stays until its write is done and may go after; a full queue drops and counts; a
// disk victim beyond the copy budget is refused.
#include "store/remote_writer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "tests/common/redis_test_cluster.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_util.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

class RemoteWriterTest : public testing::RedisClusterFixture {
 protected:
  void SetUp() override {
    RedisClusterFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    layout_ = TinyAttentionOnly();
    RemoteTierOptions ro;
    ro.redis.seeds = cluster_->Seeds();
    ro.deadline = std::chrono::milliseconds(5000);
    auto remote = RemoteTier::Open(ro, layout_);
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();
    remote_ = std::move(remote).value();
    HostArenaOptions ao;
    ao.bytes = 16 * RecordSlotBytes(layout_, Kind::kKV);
    ao.pin = HostArenaOptions::Pin::kOff;
    auto host = HostArena::Open(layout_, ao);
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    host_ = std::move(host).value();
    auto index = PrefixIndex::Create(IndexOptions{});
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    index_ = std::move(index).value();
  }
  void TearDown() override {
    if (writer_) writer_->Stop(std::chrono::milliseconds(0));
  }

  void MakeWriter(RemoteWriter::Options o) {
    writer_ = std::make_unique<RemoteWriter>(
        remote_.get(), index_.get(), host_.get(), &layout_, &mu_,
        [this] { space_changed_.fetch_add(1); }, o);
  }

  // Page `i` (a chain of one page of its own) in host memory with random content.
  EntryKey AddPage(uint64_t i) {
    PageHash h{};
    h.bytes[0] = static_cast<uint8_t>(i + 1);
    h.bytes[1] = 0x3c;
    auto slot = host_->Allocate(Kind::kKV);
    EXPECT_TRUE(slot.ok());
    std::span<std::byte> payload(host_->SlotPayload(*slot), layout_.RecordBytes(Kind::kKV));
    testing::FillRandom(payload, 1000 + i);
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_TRUE(index_->InsertChain(std::nullopt, std::span<const PageHash>(&h, 1)).ok());
    EXPECT_TRUE(index_->SetLocation(h, Kind::kKV, Tier::kHost, *slot).ok());
    slots_.push_back(*slot);
    return {h, Kind::kKV};
  }

  RemoteStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    RemoteStats s;
    writer_->AddStatsLocked(&s);
    return s;
  }
  // Waits (bounded) until `done(stats)`.
  template <typename Done>
  bool WaitFor(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (done(Stats())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  // The cluster's copy of page `i` (added i-th) equals its host bytes.
  void ExpectInCluster(const EntryKey& key, size_t i) {
    std::vector<std::byte> record(RecordSlotBytes(layout_, Kind::kKV), std::byte{0xA5});
    RemoteGet g{DiskKey{Kind::kKV, key.hash, layout_.page_size_tokens}, record};
    const Status s = remote_->Get(std::span<const RemoteGet>(&g, 1)).front();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(std::memcmp(record.data() + kRecordHeaderBytes, host_->SlotPayload(slots_[i]),
                          layout_.RecordBytes(Kind::kKV)),
              0);
  }

  ModelLayout layout_;
  std::unique_ptr<RemoteTier> remote_;
  std::unique_ptr<HostArena> host_;
  std::unique_ptr<PrefixIndex> index_;
  std::mutex mu_;
  std::atomic<int> space_changed_{0};
  std::vector<HostSlotId> slots_;
  std::unique_ptr<RemoteWriter> writer_;
};

TEST_F(RemoteWriterTest, QueuedEntriesReachTheClusterByteForByteOnce) {
  MakeWriter({});
  std::vector<EntryKey> keys;
  for (uint64_t i = 0; i < 3; ++i) keys.push_back(AddPage(i));
  {
    std::lock_guard<std::mutex> lock(mu_);
    writer_->StartWritesLocked(keys);
  }
  ASSERT_TRUE(WaitFor([](const RemoteStats& s) { return s.writes == 3; }));
  for (size_t i = 0; i < keys.size(); ++i) ExpectInCluster(keys[i], i);
  {
    std::lock_guard<std::mutex> lock(mu_);
    writer_->StartWritesLocked(keys);  // written already: not queued again
  }
  const RemoteStats s = Stats();
  EXPECT_EQ(s.writes_queued, 3u);
  EXPECT_EQ(s.write_failures + s.writes_dropped + s.writes_skipped, 0u);
  // Every pin the writer took to read the host copies is released: they can be cleared.
  std::lock_guard<std::mutex> lock(mu_);
  for (const EntryKey& k : keys) {
    EXPECT_TRUE(index_->ClearLocation(k.hash, Kind::kKV, Tier::kHost).ok());
  }
}

TEST_F(RemoteWriterTest, AWriteOnEvictVictimStaysUntilWrittenThenMayGo) {
  RemoteWriter::Options o;
  o.on_evict = true;
  MakeWriter(o);
  const EntryKey key = AddPage(0);
  TierLocations host_only;
  {
    std::lock_guard<std::mutex> lock(mu_);
    host_only = index_->Lookup(key.hash)->kv;
    size_t started = 0;
    EXPECT_TRUE(writer_->WriteOnEvictLocked(key, host_only, /*useless=*/false, &started));
    EXPECT_EQ(started, 1u);
    EXPECT_TRUE(writer_->EvictingLocked());
  }
  ASSERT_TRUE(WaitFor([](const RemoteStats& s) { return s.writes == 1; }));
  ExpectInCluster(key, 0);
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_FALSE(writer_->EvictingLocked());
  EXPECT_GT(space_changed_.load(), 0) << "the store is told that host room may have come";
  size_t started = 0;
  EXPECT_FALSE(writer_->WriteOnEvictLocked(key, host_only, false, &started)) << "clean now";
  EXPECT_EQ(started, 0u);
  // Useless entries and entries with a disk copy are never kept for a write.
  const EntryKey other = {PageHash{}, Kind::kKV};
  EXPECT_FALSE(writer_->WriteOnEvictLocked(other, host_only, /*useless=*/true, &started));
}

TEST_F(RemoteWriterTest, AFullQueueDropsWritesAndCountsThem) {
  RemoteWriter::Options o;
  o.max_queued_writes = 1;
  MakeWriter(o);
  std::vector<EntryKey> keys;
  for (uint64_t i = 0; i < 3; ++i) keys.push_back(AddPage(i));
  {
    std::lock_guard<std::mutex> lock(mu_);  // the writer cannot take any meanwhile
    writer_->StartWritesLocked(keys);
  }
  ASSERT_TRUE(WaitFor([](const RemoteStats& s) { return s.writes == 1; }));
  const RemoteStats s = Stats();
  EXPECT_EQ(s.writes_queued, 1u);
  EXPECT_EQ(s.writes_dropped, 2u);
}

TEST_F(RemoteWriterTest, ADiskVictimBeyondTheCopyBudgetIsRefused) {
  RemoteWriter::Options o;
  o.on_evict = true;
  o.max_copy_bytes = RecordSlotBytes(layout_, Kind::kKV);  // room for one copy
  MakeWriter(o);
  std::lock_guard<std::mutex> lock(mu_);
  const TierLocations disk_only;  // (no host copy)
  PageHash a{}, b{};
  a.bytes[0] = 0x11;
  b.bytes[0] = 0x22;
  EXPECT_TRUE(writer_->WantsDiskVictimLocked({a, Kind::kKV}, disk_only));
  EXPECT_FALSE(writer_->WantsDiskVictimLocked({a, Kind::kKV}, disk_only)) << "reserved already";
  EXPECT_FALSE(writer_->WantsDiskVictimLocked({b, Kind::kKV}, disk_only)) << "over the budget";
  RemoteStats s;
  writer_->AddStatsLocked(&s);
  EXPECT_EQ(s.writes_dropped, 1u);
}

}  // namespace
}  // namespace cachepawl
