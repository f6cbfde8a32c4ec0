// `cachepawl replay --concurrency N`: N engine threads over one engine (its shared L1) and one
// store. Every loaded or reused byte is verified as with one request at a time; these tests
// check that none is wrong, that slots are neither leaked nor shared wrongly when many threads
// want the same prefix at once, and that one request at a time decides exactly as the
// single-threaded engine did. No test asserts a time or a rate.
#include <gtest/gtest.h>

#include <barrier>
#include <sstream>
#include <thread>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/tools/replay_fake_store.h"
#include "tests/tools/replay_test_layouts.h"
#include "tools/replay/replay_engine.h"
#include "tools/replay/replay_runner.h"
#include "tools/replay/replay_workloads.h"

namespace cachepawl::tools {
namespace {

using fakes::MapStore;

RequestSource Workload(const std::string& name, size_t n, uint64_t seed = 3) {
  return [name, n, seed](uint64_t) {
    WorkloadOptions o;
    o.seed = seed;
    o.requests = n;
    o.block_size_tokens = 64;
    return GenerateWorkload(name, o).value();
  };
}

ReplayEngineOptions Engine(size_t chunk_pages = 16) {
  ReplayEngineOptions e;
  e.block_size_tokens = 64;
  e.track_interval_pages = 4;
  e.chunk_pages = chunk_pages;
  return e;
}

// The real store in CPU mode, with host and disk tiers (as replay_end_to_end_test.cc).
StoreOptions RealStore(const std::string& dir) {
  StoreOptions o = test_layouts::SmallStore(dir);
  o.cuda_device = -1;
  return o;
}

StoreFactory Open(const StoreOptions& o) {
  return [o] { return Store::Open(o); };
}

StoreFactory Fake(MapStore::Options options) {
  return [options]() -> StatusOr<std::unique_ptr<Store>> {
    return std::unique_ptr<Store>(new MapStore(test_layouts::Small(true), options));
  };
}

void ExpectEveryByteRight(const ReplayTotals& t) {
  EXPECT_EQ(t.wrong_bytes, 0u) << (t.wrong_records_seen.empty() ? "" : t.wrong_records_seen[0]);
  EXPECT_EQ(t.wrong_records, 0u);
  EXPECT_EQ(t.store_errors, 0u) << (t.errors.empty() ? "" : t.errors[0]);
  // Every reused record was read back and compared (a fallback after a refused Load may verify
  // pages it then does not count, hence >=).
  const uint64_t states = t.hit_states[0] + t.hit_states[1] + t.hit_states[2];
  EXPECT_GE(t.verified_records, t.hit_pages_total() + states);
  EXPECT_LE(t.hit_pages_total(), t.pages);
}

// ---- the real store, CPU mode ----

TEST(ReplayConcurrencyTest, ManyRequestsInFlightServeOnlyVerifiedBytes) {
  for (uint32_t concurrency : {4u, 16u}) {
    SCOPED_TRACE("--concurrency " + std::to_string(concurrency));
    testing::TempDir dir;
    ReplayRunOptions o;
    o.concurrency = concurrency;
    auto run = RunReplay(Open(RealStore(dir.str())), Engine(), Workload("mixed", 150), o);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    const ReplayTotals& t = run->totals;
    ExpectEveryByteRight(t);
    EXPECT_EQ(t.requests, 150u);
    EXPECT_EQ(run->concurrency, concurrency);
    EXPECT_GT(t.hit_pages_total(), 0u);
    EXPECT_GT(t.verified_records, 0u);
    EXPECT_EQ(run->store.checksum_failures, 0u);
    // `replayed` is in trace order whatever order the requests finished in.
    EXPECT_EQ(run->replayed, Workload("mixed", 150)(0));
  }
}

// Many copies of one long prompt, and prompts sharing its head, at once.
RequestSource SamePrefix(size_t copies) {
  return [copies](uint64_t) {
    std::vector<TraceRequest> requests;
    for (size_t i = 0; i < copies; ++i) {
      TraceRequest r;
      r.timestamp_ms = static_cast<double>(i);
      r.hash_ids = {1, 2, 3, 4, 5, 6, 7, 8};
      if (i % 3 == 1) r.hash_ids.push_back(100 + i);  // the same head, a tail of its own
      r.input_length = r.hash_ids.size() * 64;
      r.output_length = 4;
      requests.push_back(r);
    }
    return requests;
  };
}

TEST(ReplayConcurrencyTest, TheSamePrefixFromManyThreadsAtOnceStaysCorrect) {
  testing::TempDir dir;
  ReplayRunOptions o;
  o.concurrency = 16;
  auto run = RunReplay(Open(RealStore(dir.str())), Engine(/*chunk_pages=*/4), SamePrefix(96), o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ExpectEveryByteRight(run->totals);
  EXPECT_EQ(run->totals.requests, 96u);
  EXPECT_GT(run->totals.verified_records, 0u);
}

TEST(ReplayConcurrencyTest, RequestsSentAtTheSameInstantShareL1WithoutLeakingSlots) {
  // Threads released together by a barrier, each replaying the same prompt, round after round,
  // so that the L1's filling, shared and private entries all occur; then the store's device
  // pool holds exactly the L1's entries (no private or discarded slot left behind).
  for (bool hybrid : {true, false}) {
    SCOPED_TRACE(hybrid ? "hybrid" : "attention-only");
    MapStore store(test_layouts::Small(hybrid), {.device_pool_bytes = 1 << 20});
    auto engine = ReplayEngine::Create(&store, Engine(/*chunk_pages=*/3));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    const std::vector<TraceRequest> prompts = SamePrefix(6)(0);
    constexpr int kThreads = 8, kRounds = 12;
    std::vector<ReplayTotals> totals(kThreads);
    std::vector<Status> failures(kThreads);
    std::barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        for (int round = 0; round < kRounds; ++round) {
          start.arrive_and_wait();
          Status s = (*engine)->Run(prompts[static_cast<size_t>(round + i) % prompts.size()],
                                    &totals[static_cast<size_t>(i)]);
          if (!s.ok() && failures[static_cast<size_t>(i)].ok()) {
            failures[static_cast<size_t>(i)] = s;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    ReplayTotals all;
    for (int i = 0; i < kThreads; ++i) {
      EXPECT_TRUE(failures[static_cast<size_t>(i)].ok())
          << failures[static_cast<size_t>(i)].ToString();
      all.Merge(totals[static_cast<size_t>(i)]);
    }
    ExpectEveryByteRight(all);
    EXPECT_EQ(all.requests, uint64_t{kThreads} * kRounds);
    EXPECT_GT(all.hit_pages_total(), 0u);
    EXPECT_EQ(store.device_slots_in_use(),
              (*engine)->l1_resident(Kind::kKV) + (*engine)->l1_resident(Kind::kMamba));
  }
}

TEST(ReplayConcurrencyTest, WrongBytesAreStillCaughtWithManyThreads) {
  ReplayRunOptions o;
  o.concurrency = 8;
  auto run = RunReplay(Fake({.device_pool_bytes = 256 << 10, .corrupt_every_nth_load = 5}),
                       Engine(8), Workload("system-prompt", 60), o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_GT(run->totals.loaded_pages, 5u);
  EXPECT_GT(run->totals.wrong_records, 0u);
  EXPECT_EQ(run->totals.wrong_bytes, run->totals.wrong_records);  // one flipped byte each
  EXPECT_EQ(run->totals.store_errors, 0u);
}

TEST(ReplayConcurrencyTest, APoolForOneRequestIsSharedBySixteenWithoutFailing) {
  // Room for one state and three pages: enough for one request at a time (chunks cut short),
  // never for 16 in flight. Requests wait for each other's slots, or, when every request in
  // flight waits for another's, one gives up its load or the rest of its prompt (a refusal,
  // not an error); the run ends with every request replayed and every reused byte verified.
  const ModelLayout layout = test_layouts::Small(true);
  const MapStore::Options pool = {.device_pool_bytes =
                                      layout.MambaSlotBytes() + 3 * layout.KvPageBytes()};
  for (uint32_t concurrency : {1u, 16u}) {
    SCOPED_TRACE("--concurrency " + std::to_string(concurrency));
    ReplayRunOptions o;
    o.concurrency = concurrency;
    auto run = RunReplay(Fake(pool), Engine(8), Workload("mixed", 80), o);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    ExpectEveryByteRight(run->totals);
    EXPECT_EQ(run->totals.requests, 80u);
    if (concurrency == 1) {
      EXPECT_EQ(run->totals.refused, 0u);
    }
  }
}

// ---- one request at a time is the single-threaded engine ----

// Totals of the single-threaded engine before --concurrency existed (commit fc564d8), for
// MapStore{device 2 MiB, 1500 pages}, the Small hybrid layout, workloads of seed 3, 120
// requests, block 64, checkpoint every 4 pages, chunks of 16 pages. (The MapStore answers the
// same whatever the timing; the real store's hits at one request at a time depend on when its
// write-through reaches the disk, in the engine of fc564d8 as in this one.)
struct Golden {
  const char* workload;
  std::array<uint64_t, kNumTiers> hit_pages, hit_states;
  uint64_t computed_pages, computed_states, loaded_pages, saved_pages, saved_states;
  std::array<uint64_t, kNumKinds> l1_evictions;
  uint64_t verified_records;
};

TEST(ReplayConcurrencyTest, OneRequestAtATimeHitsExactlyAsTheSingleThreadedEngine) {
  const Golden golden[] = {
      {"mixed", {2285, 7789, 0}, {8, 51, 0}, 13085, 3326, 7789, 13085, 3326, {19965, 3277}, 10133},
      {"chat", {1504, 5111, 0}, {14, 41, 0}, 11408, 2916, 5111, 11588, 2917, {15858, 2834}, 6670},
      {"agent",
       {6101, 26599, 0},
       {21, 94, 0},
       44684,
       11230,
       26599,
       45420,
       11234,
       {68553, 11207},
       32815},
  };
  for (const Golden& g : golden) {
    SCOPED_TRACE(g.workload);
    ReplayRunOptions o;
    o.concurrency = 1;
    auto run = RunReplay(Fake({.device_pool_bytes = 2 << 20, .max_pages = 1500}), Engine(),
                         Workload(g.workload, 120), o);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    const ReplayTotals& t = run->totals;
    EXPECT_EQ(t.hit_pages, g.hit_pages);
    EXPECT_EQ(t.hit_states, g.hit_states);
    EXPECT_EQ(t.computed_pages, g.computed_pages);
    EXPECT_EQ(t.computed_states, g.computed_states);
    EXPECT_EQ(t.loaded_pages, g.loaded_pages);
    EXPECT_EQ(t.saved_pages, g.saved_pages);
    EXPECT_EQ(t.saved_states, g.saved_states);
    EXPECT_EQ(t.l1_evictions, g.l1_evictions);
    EXPECT_EQ(t.verified_records, g.verified_records);
    EXPECT_EQ(t.wrong_bytes, 0u);
    EXPECT_EQ(t.refused, 0u);
  }
}

// ---- options and the progress line ----

TEST(ReplayConcurrencyTest, ConcurrencyIsValidated) {
  StoreFactory factory = []() -> StatusOr<std::unique_ptr<Store>> {
    return Status::Internal("never opened: the options are refused first");
  };
  for (uint32_t bad : {0u, 1025u}) {
    ReplayRunOptions o;
    o.concurrency = bad;
    auto run = RunReplay(factory, Engine(), Workload("chat", 3), o);
    EXPECT_TRUE(run.status().IsInvalidArgument()) << run.status().ToString();
    EXPECT_NE(run.status().message().find("--concurrency: " + std::to_string(bad)),
              std::string::npos)
        << run.status().ToString();
  }
  ReplayRunOptions crash;
  crash.concurrency = 4;
  crash.crash_every = 3;
  auto run = RunReplay(factory, Engine(), Workload("chat", 3), crash);
  EXPECT_TRUE(run.status().IsInvalidArgument());
  EXPECT_NE(run.status().message().find("--crash-every"), std::string::npos);
}

TEST(ReplayConcurrencyTest, TheProgressLineNamesRequestsRateHitsAndErrors) {
  std::ostringstream progress;
  ReplayRunOptions o;
  o.concurrency = 4;
  o.progress = &progress;
  o.progress_interval_seconds = 0;  // a line for every finished request
  auto run = RunReplay(Fake({.device_pool_bytes = 1 << 20}), Engine(), Workload("chat", 12), o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::string lines = progress.str();
  EXPECT_NE(lines.find("replay: 12/12 requests, "), std::string::npos) << lines;
  EXPECT_NE(lines.find(" req/s, hit "), std::string::npos) << lines;
  EXPECT_NE(lines.find("%, 0 errors\n"), std::string::npos) << lines;
}

}  // namespace
}  // namespace cachepawl::tools
