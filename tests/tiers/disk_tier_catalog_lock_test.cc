// DiskTier writes its catalog (RocksDB) without holding its mutex: while a catalog write is
// stalled (DiskTierOptions::before_catalog_write_for_test blocks it), every other call of the
// tier completes, and what is being committed or removed is neither found nor written over.
// Close waits for the catalog writes under way.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"
#include "tiers/disk_tier.h"

namespace cachepawl {
namespace {

using testing::SmallHybridLayout;
using testing::TempDir;
using testing::TestKey;
using testing::TestParent;

// Holds the next catalog write (once armed) until Release(); counts the writes it saw.
class CatalogStall {
 public:
  void Arm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
  }
  // Waits (bounded) until a write is held; false when none came.
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return held_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  void Hook() {
    std::unique_lock<std::mutex> lock(mu_);
    ++writes_;
    if (!armed_) return;
    armed_ = false;
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  int writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, held_ = false, released_ = false;
  int writes_ = 0;
};

class DiskTierCatalogLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.dir = (dir_.path() / "disk").string();
    options_.capacity_bytes = 10 * RecordSlotBytes(layout_, Kind::kKV);
    options_.before_catalog_write_for_test = [this] { stall_.Hook(); };
    auto t = DiskTier::Open(options_, layout_);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
  }
  void TearDown() override {
    stall_.Release();  // never leave a writer held, whatever failed
  }

  DiskTier::TicketPtr Begin(const DiskKey& key) {
    auto plan = tier_->BeginWrite(key, TestParent(key.kind, 0));
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return plan.ok() ? plan->ticket : nullptr;
  }
  Status Commit(const DiskTier::TicketPtr& ticket) {
    const uint64_t sum = 5;
    return tier_->CommitWrites(std::span(&ticket, 1), std::span(&sum, 1));
  }
  void Put(const DiskKey& key) { ASSERT_TRUE(Commit(Begin(key)).ok()); }

  // Every call of the tier but the stalled writer's, on records other than `busy`.
  void ExpectEverythingElseGoesOn() {
    EXPECT_TRUE(tier_->Contains(TestKey(Kind::kKV, 0)));
    auto read = tier_->BeginRead(TestKey(Kind::kKV, 0));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    tier_->EndRead(read->first, /*ok=*/true);
    auto other = tier_->BeginWrite(TestKey(Kind::kKV, 8), TestParent(Kind::kKV, 8));
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    tier_->AbortWrite(other->ticket);
    EXPECT_EQ(tier_->stats().records_kv, 1u);
    size_t n = 0;
    tier_->ForEachRecord([&](const DiskRecordInfo&) { ++n; });
    EXPECT_EQ(n, 1u);
  }

  TempDir dir_;
  ModelLayout layout_ = SmallHybridLayout();
  DiskTierOptions options_;
  CatalogStall stall_;
  std::unique_ptr<DiskTier> tier_;
};

TEST_F(DiskTierCatalogLockTest, AStalledCommitHoldsNoLockAndItsRecordIsNotFoundMeanwhile) {
  Put(TestKey(Kind::kKV, 0));
  const DiskKey k = TestKey(Kind::kKV, 1);
  DiskTier::TicketPtr ticket = Begin(k);
  ASSERT_NE(ticket, nullptr);
  stall_.Arm();
  auto commit = std::async(std::launch::async, [&] { return Commit(ticket); });
  ASSERT_TRUE(stall_.WaitHeld());
  ExpectEverythingElseGoesOn();
  EXPECT_FALSE(tier_->Contains(k));
  EXPECT_TRUE(tier_->BeginRead(k).status().IsNotFound());
  EXPECT_TRUE(tier_->BeginWrite(k, {}).status().IsBusy());
  EXPECT_TRUE(tier_->Remove(k).IsBusy());
  stall_.Release();
  ASSERT_TRUE(commit.get().ok());
  EXPECT_TRUE(tier_->Contains(k));
  EXPECT_EQ(tier_->stats().records_kv, 2u);
}

TEST_F(DiskTierCatalogLockTest, AStalledRemovalHoldsNoLockAndNoWriteOfItsKeyStarts) {
  Put(TestKey(Kind::kKV, 0));
  Put(TestKey(Kind::kKV, 1));
  Put(TestKey(Kind::kKV, 2));
  const std::vector<DiskKey> victims = {TestKey(Kind::kKV, 1), TestKey(Kind::kKV, 2)};
  const int writes_before = stall_.writes();
  stall_.Arm();
  auto removal = std::async(std::launch::async, [&] { return tier_->Remove(victims); });
  ASSERT_TRUE(stall_.WaitHeld());
  ExpectEverythingElseGoesOn();
  for (const DiskKey& k : victims) {
    EXPECT_FALSE(tier_->Contains(k));
    EXPECT_TRUE(tier_->BeginRead(k).status().IsNotFound());
    // A put of the key must not reach the catalog before the delete under way.
    auto w = tier_->BeginWrite(k, TestParent(Kind::kKV, 1));
    EXPECT_TRUE(w.status().IsBusy()) << w.status().ToString();
    EXPECT_TRUE(tier_->Remove(k).IsNotFound());  // its removal is already under way
  }
  stall_.Release();
  const std::vector<Status> removed = removal.get();
  ASSERT_EQ(removed.size(), 2u);
  for (const Status& s : removed) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(stall_.writes() - writes_before, 1) << "two removals, one catalog batch";
  EXPECT_EQ(tier_->stats().removes, 2u);
  // Gone for good: a new write of the key is a new record, and a reopen does not find it.
  auto again = tier_->BeginWrite(victims[0], TestParent(Kind::kKV, 1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->existing);
  tier_->AbortWrite(again->ticket);
  tier_.reset();
  options_.before_catalog_write_for_test = nullptr;
  auto reopened = DiskTier::Open(options_, layout_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_TRUE((*reopened)->Contains(TestKey(Kind::kKV, 0)));
  for (const DiskKey& k : victims) EXPECT_FALSE((*reopened)->Contains(k));
}

TEST_F(DiskTierCatalogLockTest, CloseWaitsForTheCatalogWritesUnderWay) {
  Put(TestKey(Kind::kKV, 0));
  DiskTier::TicketPtr ticket = Begin(TestKey(Kind::kKV, 1));
  ASSERT_NE(ticket, nullptr);
  stall_.Arm();
  auto commit = std::async(std::launch::async, [&] { return Commit(ticket); });
  ASSERT_TRUE(stall_.WaitHeld());
  std::atomic<bool> closed{false};
  auto close = std::async(std::launch::async, [&] {
    Status s = tier_->Close();
    closed = true;
    return s;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(closed.load()) << "Close returned while a commit was writing the catalog";
  // Closing: no new catalog write starts.
  EXPECT_TRUE(tier_->Remove(TestKey(Kind::kKV, 0)).IsFailedPrecondition());
  stall_.Release();
  EXPECT_TRUE(commit.get().ok());
  EXPECT_TRUE(close.get().ok());
  tier_.reset();
  options_.before_catalog_write_for_test = nullptr;
  auto reopened = DiskTier::Open(options_, layout_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_TRUE((*reopened)->Contains(TestKey(Kind::kKV, 1)));  // the commit landed
}

}  // namespace
}  // namespace cachepawl
