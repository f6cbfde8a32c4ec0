// StoreCounters alone (store/store_counters.h): every count lands in its StoreStats field,
// loaded bytes come from the layout's record sizes, read errors are classified, remote loads
// and lookup pages go to StoreStats::remote, and Lookup's counters take concurrent callers.
#include "store/store_counters.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

TEST(StoreCountersTest, EveryCountLandsInItsField) {
  const ModelLayout layout = TinyHybrid();
  StoreCounters c;
  c.CountLookup(10, 6, 2);
  c.CountLoadLocked();
  c.CountLoadLocked();
  c.CountPrefetchLocked();
  c.CountSaveLocked();
  c.CountRefreshedLocked();
  c.CountSavedLocked(Kind::kKV);
  c.CountSavedLocked(Kind::kKV);
  c.CountSavedLocked(Kind::kMamba);
  c.CountFailedOperationLocked();
  c.CountLoadedLocked(Tier::kHost, Kind::kKV);
  c.CountLoadedLocked(Tier::kDisk, Kind::kMamba);
  c.CountLoadedLocked(Tier::kRemote, Kind::kKV);  // not a local tier: counted elsewhere
  c.CountReadErrorLocked(Status::Corruption("bad checksum"));
  c.CountReadErrorLocked(Status::IOError("EIO"));
  c.CountReadErrorLocked(Status::NotFound("gone"));  // a miss, not an error
  c.SetOpenedWith(7, 3);
  c.load_latency().Record(std::chrono::microseconds(250));
  StoreStats st;
  st.evicted_ahead = 42;  // another part's field: left alone
  c.FillLocked(layout, &st);
  EXPECT_EQ(st.lookups, 1u);
  EXPECT_EQ(st.lookup_pages, 10u);
  EXPECT_EQ(st.hit_pages, 6u);
  EXPECT_EQ(st.kv_only_hit_pages, 2u);
  EXPECT_EQ(st.loads, 2u);
  EXPECT_EQ(st.prefetches, 1u);
  EXPECT_EQ(st.saves, 1u);
  EXPECT_EQ(st.refreshed_pages, 1u);
  EXPECT_EQ(st.saved_pages, 2u);
  EXPECT_EQ(st.saved_states, 1u);
  EXPECT_EQ(st.saved_window_pages, 0u);
  EXPECT_EQ(st.failed_operations, 1u);
  const int host = static_cast<int>(Tier::kHost), disk = static_cast<int>(Tier::kDisk);
  const int kv = static_cast<int>(Kind::kKV), mamba = static_cast<int>(Kind::kMamba);
  EXPECT_EQ(st.loaded_entries[host][kv], 1u);
  EXPECT_EQ(st.loaded_entries[disk][mamba], 1u);
  EXPECT_EQ(st.loaded_bytes[host][kv], layout.RecordBytes(Kind::kKV));
  EXPECT_EQ(st.loaded_bytes[disk][mamba], layout.RecordBytes(Kind::kMamba));
  uint64_t loaded = 0;
  for (const auto& tier : st.loaded_entries) {
    for (uint64_t n : tier) loaded += n;
  }
  EXPECT_EQ(loaded, 2u);
  EXPECT_EQ(st.checksum_failures, 1u);
  EXPECT_EQ(st.io_errors, 1u);
  EXPECT_EQ(st.disk_records_recovered, 7u);
  EXPECT_EQ(st.disk_unreachable_at_open, 3u);
  EXPECT_EQ(st.load_latency.count, 1u);
  EXPECT_EQ(st.evicted_ahead, 42u);
}

TEST(StoreCountersTest, RemoteReadsAndLookupPagesGoToTheRemoteStats) {
  StoreCounters c;
  c.CountRemoteLoadLocked(true);
  c.CountRemoteLoadLocked(true);
  c.CountRemoteLoadLocked(false);
  c.CountRemoteLookupPages(5);
  RemoteStats r;
  r.writes = 9;  // the writer's: left alone
  c.AddRemoteLocked(&r);
  EXPECT_EQ(r.loaded, 2u);
  EXPECT_EQ(r.load_failures, 1u);
  EXPECT_EQ(r.lookup_pages, 5u);
  EXPECT_EQ(r.writes, 9u);
}

TEST(StoreCountersTest, LookupCountersTakeConcurrentCallersWithoutALock) {
  StoreCounters c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 10000; ++i) {
        c.CountLookup(4, 2, 1);
        c.lookup_latency().Record(std::chrono::microseconds(1));
      }
    });
  }
  for (auto& th : threads) th.join();
  StoreStats st;
  c.FillLocked(TinyHybrid(), &st);
  EXPECT_EQ(st.lookups, 80000u);
  EXPECT_EQ(st.lookup_pages, 320000u);
  EXPECT_EQ(st.hit_pages, 160000u);
  EXPECT_EQ(st.kv_only_hit_pages, 80000u);
  EXPECT_EQ(st.lookup_latency.count, 80000u);
}

}  // namespace
}  // namespace cachepawl
