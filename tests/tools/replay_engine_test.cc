// The replay engine's own logic over an in-memory Store (replay_fake_store.h): its hit
// accounting must meet the exactly computed ceiling, and its verifier must catch what a store
// gets wrong.
#include "tools/replay/replay_engine.h"

#include <gtest/gtest.h>

#include <sstream>

#include "tests/tools/replay_fake_store.h"
#include "tests/tools/replay_test_layouts.h"
#include "tools/replay/replay_ceiling.h"
#include "tools/replay/replay_workloads.h"

namespace cachepawl::tools {
namespace {

using fakes::MapStore;

std::vector<TraceRequest> Workload(const std::string& name, size_t n, uint32_t block = 64) {
  WorkloadOptions o;
  o.seed = 21;
  o.requests = n;
  o.block_size_tokens = block;
  auto r = GenerateWorkload(name, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : std::vector<TraceRequest>{};
}

ReplayEngineOptions EngineOptions(uint32_t block = 64, uint32_t track = 4) {
  ReplayEngineOptions o;
  o.block_size_tokens = block;
  o.track_interval_pages = track;
  o.chunk_pages = 8;
  return o;
}

ReplayTotals Replay(Store* store, const std::vector<TraceRequest>& requests,
                    const ReplayEngineOptions& options, Status* failure = nullptr) {
  auto engine = ReplayEngine::Create(store, options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  ReplayTotals totals;
  for (const TraceRequest& r : requests) {
    Status s = (*engine)->Run(r, &totals);
    if (!s.ok()) {
      if (failure != nullptr) *failure = s;
      break;
    }
  }
  return totals;
}

TEST(ReplayEngineTest, AnUnboundedStoreReachesTheCeilingExactly) {
  const std::vector<std::pair<ModelLayout, const char*>> layouts = {
      {test_layouts::Small(true), " hybrid"},
      {test_layouts::Small(false), " attention-only"},
      {test_layouts::SmallPureSsm(), " pure SSM"}};
  for (const auto& [layout, kind] : layouts) {
    const bool hybrid = layout.has_ssm();
    const bool kv = layout.has_attention();
    for (const char* workload : {"chat", "agent", "mixed"}) {
      SCOPED_TRACE(std::string(workload) + kind);
      auto requests = Workload(workload, 60);
      // An L1 of 2 MiB: it serves some prefixes and evicts (the store serves the rest).
      MapStore store(layout, {.device_pool_bytes = 2 << 20});
      ReplayTotals t = Replay(&store, requests, EngineOptions());
      CeilingOptions co;
      co.block_size_tokens = 64;
      co.page_size_tokens = 16;
      co.track_interval_pages = 4;
      co.hybrid = hybrid;
      auto ceiling = ComputeCeiling(requests, co);
      ASSERT_TRUE(ceiling.ok());
      EXPECT_EQ(t.requests, requests.size());
      EXPECT_EQ(t.pages, ceiling->pages);
      EXPECT_EQ(t.prompt_tokens, ceiling->tokens);
      EXPECT_EQ(t.hit_pages_total(), ceiling->hybrid_hit_pages);
      EXPECT_GT(t.hit_pages[static_cast<int>(Tier::kHost)], 0u);
      EXPECT_GT(t.hit_pages[static_cast<int>(Tier::kDevice)], 0u);
      EXPECT_EQ(t.computed_pages, t.pages - t.hit_pages_total());
      EXPECT_GT(t.l1_evictions[kv ? 0 : 1], 0u);
      EXPECT_EQ(t.wrong_bytes, 0u);
      EXPECT_EQ(t.store_errors, 0u) << (t.errors.empty() ? "" : t.errors[0]);
      EXPECT_EQ(t.lost_races, 0u);
      // Every reused record was verified: pages (none without KV), plus states with SSM layers.
      const uint64_t states = t.hit_states[0] + t.hit_states[1] + t.hit_states[2];
      EXPECT_EQ(t.verified_records, (kv ? t.hit_pages_total() : 0) + states);
      EXPECT_EQ(states > 0, hybrid);
      if (!kv) {
        EXPECT_EQ(t.saved_pages + t.loaded_pages, 0u);
        EXPECT_GT(t.loaded_states, 0u);
        EXPECT_EQ(t.l1_evictions[0], 0u);
      }
      EXPECT_EQ(t.lookup_us.count(), requests.size());
    }
  }
}

TEST(ReplayEngineTest, AWrongByteFromTheStoreIsCaughtAndNamed) {
  auto requests = Workload("system-prompt", 30);
  MapStore store(test_layouts::Small(true),
                 {.device_pool_bytes = 64 << 10, .corrupt_every_nth_load = 7});
  ReplayTotals t = Replay(&store, requests, EngineOptions());
  EXPECT_GT(t.loaded_pages, 7u);
  EXPECT_GT(t.wrong_records, 0u);
  EXPECT_EQ(t.wrong_bytes, t.wrong_records);  // one flipped byte each
  ASSERT_FALSE(t.wrong_records_seen.empty());
  EXPECT_NE(t.wrong_records_seen[0].find("1 of "), std::string::npos) << t.wrong_records_seen[0];
}

TEST(ReplayEngineTest, ABoundedStoreMissesMoreButNeverServesWrongBytes) {
  auto requests = Workload("mixed", 80);
  for (const ModelLayout& layout : {test_layouts::Small(true), test_layouts::SmallPureSsm()}) {
    SCOPED_TRACE(layout.model);
    MapStore store(layout, {.device_pool_bytes = 128 << 10, .max_pages = 100});
    ReplayTotals t = Replay(&store, requests, EngineOptions());
    CeilingOptions co;
    co.block_size_tokens = 64;
    co.track_interval_pages = 4;
    auto ceiling = ComputeCeiling(requests, co);
    ASSERT_TRUE(ceiling.ok());
    EXPECT_GT(t.hit_pages_total(), 0u);
    EXPECT_LT(t.hit_pages_total(), ceiling->hybrid_hit_pages);
    EXPECT_EQ(t.wrong_bytes, 0u);
    EXPECT_EQ(t.store_errors, 0u) << (t.errors.empty() ? "" : t.errors[0]);
  }
}

TEST(ReplayEngineTest, EntriesThatVanishBeforeLoadAreMissesNotErrors) {
  auto requests = Workload("few-shot", 20);
  MapStore store(test_layouts::Small(true),
                 {.device_pool_bytes = 32 << 10, .vanish_before_load = true});
  ReplayTotals t = Replay(&store, requests, EngineOptions());
  EXPECT_GT(t.lost_races, 0u);
  EXPECT_EQ(t.hit_pages[static_cast<int>(Tier::kHost)], 0u);
  EXPECT_EQ(t.store_errors, 0u) << (t.errors.empty() ? "" : t.errors[0]);
  EXPECT_EQ(t.wrong_bytes, 0u);
  EXPECT_EQ(t.computed_pages, t.pages - t.hit_pages_total());
}

TEST(ReplayEngineTest, APoolTooSmallForOneChunkIsAClearError) {
  auto requests = Workload("chat", 3);
  const ModelLayout layout = test_layouts::Small(true);
  // Room for a state or a page, never both.
  MapStore store(layout, {.device_pool_bytes = layout.MambaSlotBytes() + layout.KvPageBytes() - 1});
  Status failure;
  Replay(&store, requests, EngineOptions(), &failure);
  EXPECT_TRUE(failure.IsNoSpace()) << failure.ToString();
  EXPECT_NE(failure.message().find("--device-bytes"), std::string::npos);
}

TEST(ReplayEngineTest, OptionsAreValidated) {
  MapStore store(test_layouts::Small(true), {});
  auto bad_block = ReplayEngine::Create(&store, EngineOptions(/*block=*/40));
  EXPECT_NE(bad_block.status().message().find("--block-size: 40"), std::string::npos);
  ReplayEngineOptions zero_chunk = EngineOptions();
  zero_chunk.chunk_pages = 0;
  EXPECT_TRUE(ReplayEngine::Create(&store, zero_chunk).status().IsInvalidArgument());
  EXPECT_TRUE(ReplayEngine::Create(nullptr, EngineOptions()).status().IsInvalidArgument());
}

TEST(ReplayReportTest, JsonHasTheDocumentedKeysAndTheTableSaysOk) {
  auto requests = Workload("chat", 20);
  MapStore store(test_layouts::Small(true), {.device_pool_bytes = 128 << 10});
  ReplayReport report;
  report.source = "workload chat";
  report.layout = "tiny";
  report.page_size_tokens = 16;
  report.block_size_tokens = 64;
  report.totals = Replay(&store, requests, EngineOptions());
  report.wall_seconds = 1;
  auto json = nlohmann::json::parse(ReplayReportJson(report));
  const std::string help = ReplayJsonKeysHelp();
  for (const auto& [key, value] : json.items()) {
    EXPECT_NE(help.find(key), std::string::npos) << "undocumented key " << key;
  }
  EXPECT_EQ(json["ok"], true);
  EXPECT_EQ(json["wrong_bytes"], 0);
  EXPECT_EQ(json["requests"], 20);
  EXPECT_GT(json["hit_rate"]["pages"].get<double>(), 0);
  std::ostringstream table;
  PrintReplayTable(report, table);
  EXPECT_NE(table.str().find("\nOK\n"), std::string::npos) << table.str();
  // Round trip of the totals (how crash-mode children report).
  ReplayTotals back = ReplayTotalsFromJson(ReplayTotalsToJson(report.totals));
  EXPECT_EQ(ReplayTotalsToJson(back), ReplayTotalsToJson(report.totals));
  // Merge adds every counter (how replicas and crash-mode children are summed).
  ReplayTotals twice = report.totals;
  twice.Merge(report.totals);
  const nlohmann::json once_json = ReplayTotalsToJson(report.totals);
  const nlohmann::json twice_json = ReplayTotalsToJson(twice);
  size_t counters = 0;
  for (const auto& [key, value] : once_json.items()) {
    if (!value.is_number_unsigned()) continue;
    ++counters;
    EXPECT_EQ(twice_json[key].get<uint64_t>(), 2 * value.get<uint64_t>()) << key;
  }
  EXPECT_GE(counters, 20u);
  EXPECT_GT(once_json["requests"].get<uint64_t>(), 0u);
}

// A gate on "ok" (or the exit status) never passes on a run that did nothing: a crash soak whose
// every store process was killed before serving reported "ok": true with 0 requests verified.
TEST(ReplayReportTest, OkIsFalseWhenNothingWasReplayedOrVerified) {
  ReplayReport nothing;
  EXPECT_EQ(nothing.Failure(), "no request was replayed");
  nlohmann::json j = nlohmann::json::parse(ReplayReportJson(nothing));
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["failure"], "no request was replayed");
  std::ostringstream table;
  PrintReplayTable(nothing, table);
  EXPECT_NE(table.str().find("\nFAILED: no request was replayed\n"), std::string::npos);

  ReplayReport killed;
  killed.crashes = 1383;
  killed.totals.requests = 5;
  EXPECT_EQ(killed.Failure(), "nothing was verified after 1383 kills");
  killed.totals.verified_records = 1;
  EXPECT_EQ(killed.Failure(), "");

  ReplayReport wrong;
  wrong.totals.requests = 3;
  wrong.totals.verified_records = 3;
  wrong.totals.wrong_bytes = 7;
  wrong.totals.store_errors = 2;
  EXPECT_EQ(wrong.Failure(), "7 wrong bytes; 2 failed store calls");
}

}  // namespace
}  // namespace cachepawl::tools
