// HostSpace alone (store/host_space.h): a real host arena and prefix index, and a Victims that
// stands in for the store (it drops what it is told to and records what it was asked). No
// Store is built here.
#include "store/host_space.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "tests/common/test_util.h"
#include "tests/store/store_test_util.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

// The store's side, scripted: every victim gets `verdict`; drops clear the index location and
// free the slot as the store does.
class ScriptedVictims : public HostSpace::Victims {
 public:
  ScriptedVictims(PrefixIndex* index, HostArena* host) : index_(index), host_(host) {}

  HostSpace::Verdict DecideLocked(const EntryKey& key, const EntryInfo&, size_t*) override {
    decided.push_back(key);
    for (const auto& [hash, v] : verdict_of) {
      if (hash == key.hash) return v;
    }
    return verdict;
  }
  size_t StartEvictWritesLocked(const std::vector<EntryKey>& keys) override {
    write_batches.push_back(keys);
    in_flight += keys.size();
    return keys.size();
  }
  uint64_t EvictWritesInFlightLocked() const override { return in_flight; }
  void DropLocked(const EntryKey& key) override {
    auto slot = index_->ClearLocation(key.hash, key.kind, Tier::kHost);
    ASSERT_TRUE(slot.ok()) << slot.status().ToString();
    ASSERT_TRUE(host_->Free(*slot).ok());
    dropped.push_back(key);
  }
  bool SpaceMayComeLocked() const override { return in_flight > 0; }
  uint64_t ReclaimLocked(uint64_t) override { return 0; }

  HostSpace::Verdict verdict = HostSpace::Verdict::kDrop;
  std::vector<std::pair<PageHash, HostSpace::Verdict>> verdict_of;  // before `verdict`
  uint64_t in_flight = 0;
  std::vector<EntryKey> decided, dropped;
  std::vector<std::vector<EntryKey>> write_batches;

 private:
  PrefixIndex* index_;
  HostArena* host_;
};

class HostSpaceTest : public ::testing::Test {
 protected:
  static constexpr size_t kSlots = 8;

  void SetUp() override {
    layout_ = TinyAttentionOnly();
    HostArenaOptions ao;
    ao.bytes = kSlots * RecordSlotBytes(layout_, Kind::kKV);
    ao.pin = HostArenaOptions::Pin::kOff;
    auto host = HostArena::Open(layout_, ao);
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    host_ = std::move(host).value();
    IndexOptions io;
    io.kv_page_bytes = RecordSlotBytes(layout_, Kind::kKV);
    auto index = PrefixIndex::Create(io);
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    index_ = std::move(index).value();
    victims_ = std::make_unique<ScriptedVictims>(index_.get(), host_.get());
  }

  std::unique_ptr<HostSpace> Make(HostSpace::Options o) {
    o.policy = EvictionPolicy::kLru;
    return std::make_unique<HostSpace>(host_.get(), index_.get(), &mu_, victims_.get(), o);
  }

  // Page `i` (a chain of one page of its own), in host memory: allocated through `space`.
  PageHash AddPage(HostSpace& space, uint64_t i) {
    PageHash h{};
    h.bytes[0] = static_cast<uint8_t>(i + 1);
    h.bytes[1] = 0x5a;
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<HostSlotId> slot;
    EXPECT_TRUE(space.AllocateLocked(Kind::kKV, 1, lock, &slot).ok());
    EXPECT_TRUE(index_->InsertChain(std::nullopt, std::span<const PageHash>(&h, 1)).ok());
    EXPECT_TRUE(index_->SetLocation(h, Kind::kKV, Tier::kHost, slot.at(0)).ok());
    return h;
  }

  Status Allocate(HostSpace& space, size_t count, std::vector<HostSlotId>* slots) {
    std::unique_lock<std::mutex> lock(mu_);
    return space.AllocateLocked(Kind::kKV, count, lock, slots);
  }

  ModelLayout layout_;
  std::unique_ptr<HostArena> host_;
  std::unique_ptr<PrefixIndex> index_;
  std::unique_ptr<ScriptedVictims> victims_;
  std::mutex mu_;
};

TEST_F(HostSpaceTest, AFullTierEvictsTheLeastRecentlyUsedDroppableVictims) {
  auto space = Make({});
  std::vector<PageHash> pages;
  for (uint64_t i = 0; i < kSlots; ++i) pages.push_back(AddPage(*space, i));
  EXPECT_TRUE(victims_->dropped.empty()) << "nothing is evicted while there is room";
  std::vector<HostSlotId> slots;
  ASSERT_TRUE(Allocate(*space, 3, &slots).ok());
  EXPECT_EQ(slots.size(), 3u);
  ASSERT_EQ(victims_->dropped.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(victims_->dropped[i].hash, pages[i]) << i;
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(space->evictions(Kind::kKV), 3u);
  EXPECT_EQ(space->no_space(), 0u);
}

TEST_F(HostSpaceTest, VictimsThatStayDoNotHideTheEvictableOnesBehindThem) {
  // The least recently used entries are being published (kSkip): the allocation reaches past
  // them to the droppable ones.
  auto space = Make({});
  std::vector<PageHash> pages;
  for (uint64_t i = 0; i < kSlots; ++i) pages.push_back(AddPage(*space, i));
  victims_->verdict_of = {{pages[0], HostSpace::Verdict::kSkip},
                          {pages[1], HostSpace::Verdict::kSkip},
                          {pages[2], HostSpace::Verdict::kSkip}};
  std::vector<HostSlotId> slots;
  const Status s = Allocate(*space, 2, &slots);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(slots.size(), 2u);
  ASSERT_EQ(victims_->dropped.size(), 2u);
  EXPECT_EQ(victims_->dropped[0].hash, pages[3]);
  EXPECT_EQ(victims_->dropped[1].hash, pages[4]);
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(space->no_space(), 0u);
}

TEST_F(HostSpaceTest, AVictimToWriteBehindOnesThatStayIsWrittenAndWaitedFor) {
  // The first victim is being published, the rest must go to disk first: their writes start
  // and the allocation waits for them instead of failing at once.
  HostSpace::Options o;
  o.space_wait = std::chrono::milliseconds(100);
  auto space = Make(o);
  std::vector<PageHash> pages;
  for (uint64_t i = 0; i < kSlots; ++i) pages.push_back(AddPage(*space, i));
  victims_->verdict = HostSpace::Verdict::kWriteToDisk;
  victims_->verdict_of = {{pages[0], HostSpace::Verdict::kSkip}};
  std::vector<HostSlotId> slots;
  const Status s = Allocate(*space, 1, &slots);
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_NE(s.message().find("host_space_wait_ms 100 ms"), std::string::npos)
      << "the allocation waited for the write: " << s.ToString();
  ASSERT_FALSE(victims_->write_batches.empty());
  EXPECT_EQ(victims_->write_batches.front().size(), 1u);
  EXPECT_EQ(victims_->write_batches.front().front().hash, pages[1]);
}

TEST_F(HostSpaceTest, OnlyVictimsThatStayIsNoSpaceAtOnceAfterAskingEachOnce) {
  auto space = Make({});
  for (uint64_t i = 0; i < kSlots; ++i) AddPage(*space, i);
  victims_->verdict = HostSpace::Verdict::kSkip;
  std::vector<HostSlotId> slots;
  const auto start = std::chrono::steady_clock::now();
  const Status s = Allocate(*space, 1, &slots);
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(victims_->dropped.empty());
  std::set<PageHash> asked;
  for (const EntryKey& k : victims_->decided) asked.insert(k.hash);
  EXPECT_EQ(asked.size(), kSlots) << "every entry was considered";
}

TEST_F(HostSpaceTest, VictimsWrittenFirstStayAndTheWaitEndsAfterHostSpaceWaitMs) {
  HostSpace::Options o;
  o.space_wait = std::chrono::milliseconds(100);
  auto space = Make(o);
  for (uint64_t i = 0; i < kSlots; ++i) AddPage(*space, i);
  victims_->verdict = HostSpace::Verdict::kWriteToDisk;
  std::vector<HostSlotId> slots;
  const Status s = Allocate(*space, 2, &slots);
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_NE(s.message().find("host_space_wait_ms 100 ms"), std::string::npos) << s.ToString();
  EXPECT_TRUE(slots.empty()) << "a failed allocation keeps nothing";
  EXPECT_TRUE(victims_->dropped.empty());
  ASSERT_FALSE(victims_->write_batches.empty());
  EXPECT_EQ(victims_->write_batches.front().size(), 2u) << "one batch of the victims' writes";
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(space->no_space(), 1u);
}

TEST_F(HostSpaceTest, AWaitingAllocationGetsTheRoomTheStoreSignals) {
  auto space = Make({});  // the default wait: 30 s
  for (uint64_t i = 0; i < kSlots; ++i) AddPage(*space, i);
  victims_->verdict = HostSpace::Verdict::kWriteToDisk;
  std::vector<HostSlotId> slots;
  auto waiting = std::async(std::launch::async, [&] { return Allocate(*space, 1, &slots); });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(150)), std::future_status::timeout);
  {
    // The writes finished: the victims are clean, the next eviction frees them.
    std::lock_guard<std::mutex> lock(mu_);
    victims_->verdict = HostSpace::Verdict::kDrop;
    victims_->in_flight = 0;
    space->NotifyLocked();
  }
  const Status s = waiting.get();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(slots.size(), 1u);
}

TEST_F(HostSpaceTest, EverythingLockedIsNoSpaceAtOnce) {
  auto space = Make({});
  for (uint64_t i = 0; i < kSlots; ++i) {
    const PageHash h = AddPage(*space, i);
    std::lock_guard<std::mutex> lock(mu_);
    ASSERT_TRUE(index_->Lock(h).ok());
  }
  std::vector<HostSlotId> slots;
  const auto start = std::chrono::steady_clock::now();
  const Status s = Allocate(*space, 1, &slots);
  EXPECT_TRUE(s.IsNoSpace()) << s.ToString();
  EXPECT_NE(s.message().find("locked by the serving engine"), std::string::npos);
  EXPECT_EQ(s.message().find("host_space_wait_ms"), std::string::npos) << "nothing to wait for";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(victims_->decided.empty()) << "locked entries are never victims";
}

TEST_F(HostSpaceTest, StoppingEndsAWaitAndRefusesEvictingAhead) {
  auto space = Make({});
  for (uint64_t i = 0; i < kSlots; ++i) AddPage(*space, i);
  victims_->verdict = HostSpace::Verdict::kWriteToDisk;
  std::vector<HostSlotId> slots;
  auto waiting = std::async(std::launch::async, [&] { return Allocate(*space, 1, &slots); });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  {
    std::lock_guard<std::mutex> lock(mu_);
    space->StopLocked();
  }
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_TRUE(waiting.get().IsNoSpace());
  space->StopEvictor();
}

TEST_F(HostSpaceTest, EvictingAheadKeepsTheFreeTarget) {
  HostSpace::Options o;
  o.free_target_bytes = 3 * RecordSlotBytes(layout_, Kind::kKV);
  auto space = Make(o);
  for (uint64_t i = 0; i < kSlots; ++i) AddPage(*space, i);  // the last ones post passes
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (host_->free_bytes() >= o.free_target_bytes) break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the free target was not reached";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  space->StopEvictor();  // the pass has ended
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_GE(space->evicted_ahead(), 1u);
  EXPECT_EQ(space->evicted_ahead(), space->evictions(Kind::kKV));
  EXPECT_EQ(victims_->dropped.size(), space->evictions(Kind::kKV));
  EXPECT_EQ(host_->free_bytes(), o.free_target_bytes) << "it stops at the target";
}

}  // namespace
}  // namespace cachepawl
