// DiskCascade alone (store/disk_cascade.h): a real disk mover (io_uring, O_DIRECT, RocksDB
// catalog in a temporary folder), host arena and prefix index, and Hooks that stand in for the
// store (a one-thread completion queue, the index's Disk location forgotten as the store does).
// No Store is built here.
#include "store/disk_cascade.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "store/task_queue.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_util.h"
#include "tiers/host_arena.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

using testing::TempDir;

class StoreHooks : public DiskCascade::Hooks {
 public:
  StoreHooks(PrefixIndex* index, std::mutex* mu) : index_(index), mu_(mu) {}
  ~StoreHooks() override { worker_.reset(); }

  void WhenDone(const Fence& fence, std::function<void(const Status&)> fn) override {
    TaskQueue* worker = worker_.get();
    fence.OnComplete(
        [worker, fn = std::move(fn)](const Status& s) { worker->Post([fn, s] { fn(s); }); });
  }
  void OperationStarted() override { ++in_flight; }
  void OperationFinished() override { --in_flight; }
  void ForgetDiskLocked(const EntryKey& key) override {
    (void)index_->ClearLocation(key.hash, key.kind, Tier::kDisk);
    forgotten.push_back(key);
  }
  bool RemoteWantsDiskVictimLocked(const EntryKey&, const TierLocations&) override { return false; }
  void CopyDiskVictimsToRemote(const std::vector<DiskKey>&) override { ADD_FAILURE(); }
  void SpaceChangedLocked() override { ++space_changed; }
  bool ClosedLocked() const override { return false; }

  std::atomic<int> in_flight{0};
  int space_changed = 0;            // guarded by *mu_
  std::vector<EntryKey> forgotten;  // guarded by *mu_

 private:
  PrefixIndex* index_;
  std::mutex* mu_;
  std::unique_ptr<TaskQueue> worker_ = std::make_unique<TaskQueue>();
};

class DiskCascadeTest : public ::testing::Test {
 protected:
  // A cascade over a disk tier of `disk_records` KV records.
  void Open(const ModelLayout& layout, size_t disk_records, DiskCascade::Options o) {
    layout_ = layout;
    HostArenaOptions ao;
    ao.bytes = 16 * RecordSlotBytes(layout_, layout_.has_ssm() ? Kind::kMamba : Kind::kKV);
    ao.pin = HostArenaOptions::Pin::kOff;
    auto host = HostArena::Open(layout_, ao);
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    host_ = std::move(host).value();
    IndexOptions io;
    io.require_mamba = layout_.has_ssm();
    io.hybrid_eviction = o.eviction_policy == EvictionPolicy::kHybrid && layout_.has_ssm();
    io.kv_page_bytes = RecordSlotBytes(layout_, Kind::kKV);
    io.mamba_state_bytes = layout_.has_ssm() ? RecordSlotBytes(layout_, Kind::kMamba) : 0;
    auto index = PrefixIndex::Create(io);
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    index_ = std::move(index).value();
    DiskMoverOptions d;
    d.tier.dir = (dir_.path() / "disk").string();
    d.tier.capacity_bytes = disk_records * RecordSlotBytes(layout_, Kind::kKV);
    d.queue_depth = 8;
    auto disk = DiskMover::Open(d, layout_, host_.get());
    ASSERT_TRUE(disk.ok()) << disk.status().ToString();
    disk_ = std::move(disk).value();
    hooks_ = std::make_unique<StoreHooks>(index_.get(), &mu_);
    cascade_ =
        std::make_unique<DiskCascade>(disk_.get(), index_.get(), &layout_, &mu_, hooks_.get(), o);
  }
  void TearDown() override {
    WaitIdle();
    if (cascade_) cascade_->StopSubmitter();
    hooks_.reset();  // runs the completions left
    cascade_.reset();
  }

  // KV page `i` of one chain (page 0 its root) in host memory with random content.
  EntryKey AddPage(uint64_t i) {
    PageHash h{};
    h.bytes[0] = static_cast<uint8_t>(i + 1);
    h.bytes[1] = 0x7e;
    auto slot = host_->Allocate(Kind::kKV);
    EXPECT_TRUE(slot.ok());
    testing::FillRandom(
        std::span<std::byte>(host_->SlotPayload(*slot), layout_.RecordBytes(Kind::kKV)), 50 + i);
    std::lock_guard<std::mutex> lock(mu_);
    const std::optional<PageHash> parent =
        pages_.empty() ? std::nullopt : std::optional(pages_.back().hash);
    EXPECT_TRUE(index_->InsertChain(parent, std::span<const PageHash>(&h, 1)).ok());
    EXPECT_TRUE(index_->SetLocation(h, Kind::kKV, Tier::kHost, *slot).ok());
    pages_.push_back({h, Kind::kKV});
    return pages_.back();
  }
  bool OnDisk(const EntryKey& k) {
    std::lock_guard<std::mutex> lock(mu_);
    auto e = index_->Lookup(k.hash);
    return e && e->kv.Has(Tier::kDisk);
  }
  // Waits (bounded) until no write or retry of the cascade is in flight.
  void WaitIdle() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (hooks_ && hooks_->in_flight.load() > 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "cascade writes never finished";
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  StoreStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    StoreStats s;
    cascade_->AddStatsLocked(&s);
    return s;
  }

  TempDir dir_;
  ModelLayout layout_;
  std::unique_ptr<HostArena> host_;
  std::unique_ptr<PrefixIndex> index_;
  std::unique_ptr<DiskMover> disk_;
  std::mutex mu_;
  std::unique_ptr<StoreHooks> hooks_;
  std::unique_ptr<DiskCascade> cascade_;
  std::vector<EntryKey> pages_;
};

TEST_F(DiskCascadeTest, WriteThroughPublishesDiskLocationsOnceTheRecordsAreCommitted) {
  Open(TinyAttentionOnly(), 8, {});
  std::vector<EntryKey> keys;
  for (uint64_t i = 0; i < 3; ++i) keys.push_back(AddPage(i));
  {
    std::lock_guard<std::mutex> lock(mu_);
    cascade_->SavedLocked(keys);
    EXPECT_TRUE(cascade_->WritingLocked());
    EXPECT_EQ(cascade_->EvictWritesInFlightLocked(), 0u) << "not write-on-evict";
  }
  WaitIdle();
  for (const EntryKey& k : keys) {
    EXPECT_TRUE(OnDisk(k));
    auto info = disk_->tier().Lookup(DiskKey{Kind::kKV, k.hash, 0});
    ASSERT_TRUE(info.has_value()) << "the index names only what the tier committed";
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(*index_->Lookup(k.hash)->kv.Slot(Tier::kDisk), info->extent.Id());
    // The host copy is unpinned: it can leave.
    EXPECT_TRUE(index_->ClearLocation(k.hash, Kind::kKV, Tier::kHost).ok());
  }
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_FALSE(cascade_->WritingLocked());
  EXPECT_GT(hooks_->space_changed, 0);
}

TEST_F(DiskCascadeTest, WriteOnEvictIsCountedInFlightUntilItsRecordsLanded) {
  DiskCascade::Options o;
  o.write_policy = WritePolicy::kWriteBack;
  Open(TinyAttentionOnly(), 8, o);
  std::vector<EntryKey> keys;
  for (uint64_t i = 0; i < 4; ++i) keys.push_back(AddPage(i));
  {
    std::lock_guard<std::mutex> lock(mu_);
    cascade_->SavedLocked(keys);  // write-back: nothing after a Save
    EXPECT_FALSE(cascade_->WritingLocked());
    auto e = index_->Lookup(keys[3].hash);
    EXPECT_TRUE(cascade_->WritesOnEvictLocked(keys[3], *e, e->kv, /*useless=*/false));
    EXPECT_FALSE(cascade_->WritesOnEvictLocked(keys[3], *e, e->kv, /*useless=*/true));
    EXPECT_EQ(cascade_->StartWritesLocked(keys, /*evict_after=*/true), 4u);
    EXPECT_EQ(cascade_->EvictWritesInFlightLocked(), 4u);
    EXPECT_EQ(cascade_->StartWritesLocked(keys, true), 0u) << "being written: not again";
  }
  WaitIdle();
  for (const EntryKey& k : keys) EXPECT_TRUE(OnDisk(k));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(cascade_->EvictWritesInFlightLocked(), 0u);
  auto e = index_->Lookup(keys[3].hash);
  EXPECT_FALSE(cascade_->WritesOnEvictLocked(keys[3], *e, e->kv, false)) << "on disk already";
}

TEST_F(DiskCascadeTest, AFullDiskRemovesVictimsPickedThroughTheIndexAndRetriesOnce) {
  Open(TinyAttentionOnly(), 2, {});  // room for two records
  const EntryKey a = AddPage(0), b = AddPage(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    cascade_->SavedLocked({a, b});
  }
  WaitIdle();
  ASSERT_TRUE(OnDisk(a) && OnDisk(b));
  // Another chain's two pages: no room until the disk's own victims (a's chain, leaves first)
  // are forgotten by the index and removed from the tier; then the writes are retried.
  pages_.clear();
  const EntryKey c = AddPage(10), d = AddPage(11);
  {
    std::lock_guard<std::mutex> lock(mu_);
    cascade_->SavedLocked({c, d});
  }
  WaitIdle();
  EXPECT_TRUE(OnDisk(c));
  EXPECT_TRUE(OnDisk(d));
  EXPECT_FALSE(OnDisk(a));
  EXPECT_FALSE(OnDisk(b));
  EXPECT_FALSE(disk_->tier().Contains(DiskKey{Kind::kKV, a.hash, 0}));
  EXPECT_FALSE(disk_->tier().Contains(DiskKey{Kind::kKV, b.hash, 0}));
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(hooks_->forgotten.size(), 2u);
  }
  const StoreStats s = Stats();
  EXPECT_EQ(s.evictions[static_cast<int>(Tier::kDisk)][static_cast<int>(Kind::kKV)], 2u);
  EXPECT_EQ(s.no_space_errors, 0u) << "the retry found room";
  EXPECT_EQ(disk_->tier().stats().removes, 2u) << "removed by the cascade (one batch)";
}

TEST_F(DiskCascadeTest, HybridAdmissionRefusesKvThatNoCachedStateCanUse) {
  DiskCascade::Options o;
  o.write_policy = WritePolicy::kWriteBack;
  o.eviction_policy = EvictionPolicy::kHybrid;
  Open(TinyHybrid(), 8, o);
  const EntryKey page = AddPage(0);
  std::lock_guard<std::mutex> lock(mu_);
  auto e = index_->Lookup(page.hash);
  ASSERT_EQ(e->subtree_states, 0u);
  EXPECT_FALSE(cascade_->WritesOnEvictLocked(page, *e, e->kv, false));
  StoreStats s;
  cascade_->AddStatsLocked(&s);
  EXPECT_EQ(s.disk_admission_refused, 1u);
}

}  // namespace
}  // namespace cachepawl
