#include "vocab/store_options.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "store/latency_histogram.h"
#include "vocab/store_stats.h"

namespace cachepawl {
namespace {

StoreOptions Good() {
  StoreOptions o;
  o.layout_name = "jamba-v0.1";
  o.host_bytes = 64ull << 20;
  return o;
}

void ExpectBad(const StoreOptions& o, const std::string& needle) {
  Status s = o.Validate();
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(StoreOptionsTest, DefaultsWithALayoutAreValid) { EXPECT_TRUE(Good().Validate().ok()); }

TEST(StoreOptionsTest, HostFreeTargetDefaultsToASixteenthOfLargeTiersOnly) {
  StoreOptions o = Good();
  o.host_bytes = 512ull << 20;
  EXPECT_EQ(o.host_free_target(), 0u);  // small tiers (tests, tools) evict only on demand
  o.host_bytes = 4ull << 30;
  EXPECT_EQ(o.host_free_target(), 256ull << 20);
  o.host_bytes = 64ull << 30;
  EXPECT_EQ(o.host_free_target(), 1ull << 30);  // at most 1 GiB
  o.host_free_target_bytes = 0;
  EXPECT_EQ(o.host_free_target(), 0u);
  o.host_free_target_bytes = 8ull << 20;
  EXPECT_EQ(o.host_free_target(), 8ull << 20);
  EXPECT_TRUE(o.Validate().ok());
}

TEST(StoreOptionsTest, EachBadFieldIsNamed) {
  StoreOptions o = Good();
  o.layout_name.clear();
  ExpectBad(o, "StoreOptions.layout_name: ''");
  o = Good();
  o.host_bytes = 0;
  ExpectBad(o, "StoreOptions.host_bytes: 0");
  o = Good();
  o.host_bytes = 4097;
  ExpectBad(o, "StoreOptions.host_bytes: 4097");
  o = Good();
  o.save_chunk_entries = 0;
  ExpectBad(o, "StoreOptions.save_chunk_entries: 0");
  o = Good();
  o.host_free_target_bytes = o.host_bytes / 2 + 4096;
  ExpectBad(o, "StoreOptions.host_free_target_bytes: " + std::to_string(o.host_bytes / 2 + 4096));
  o = Good();
  o.disk_bytes = 1 << 30;
  ExpectBad(o, "StoreOptions.disk_dir: ''");
  o.disk_dir = "/tmp/x";
  o.disk_queue_depth = 0;
  ExpectBad(o, "StoreOptions.disk_queue_depth: 0");
  o = Good();
  o.disk_data_paths = {"/tmp/a"};
  ExpectBad(o, "StoreOptions.disk_bytes: 0");
  o = Good();
  o.write_policy = static_cast<WritePolicy>(9);
  ExpectBad(o, "StoreOptions.write_policy: 9");
  o = Good();
  o.eviction_policy = static_cast<EvictionPolicy>(7);
  ExpectBad(o, "StoreOptions.eviction_policy: 7");
  o = Good();
  o.write_policy = WritePolicy::kWriteThroughSelective;
  o.selective_min_hits = 0;
  ExpectBad(o, "StoreOptions.selective_min_hits: 0");
  o = Good();
  o.cuda_device = -2;
  ExpectBad(o, "StoreOptions.cuda_device: -2");
  o = Good();
  o.write_stream_priority = 5000;
  ExpectBad(o, "StoreOptions.write_stream_priority: 5000");
  o = Good();
  o.load_stream_priority = -1001;
  ExpectBad(o, "StoreOptions.load_stream_priority: -1001");
  o = Good();
  o.staging_bytes = 1000;
  ExpectBad(o, "StoreOptions.staging_bytes: 1000");
  o = Good();
  o.completion_spin_us = 1000001;
  ExpectBad(o, "StoreOptions.completion_spin_us: 1000001");
  o = Good();
  o.wait_spin_us = 2000000;
  ExpectBad(o, "StoreOptions.wait_spin_us: 2000000");
  o = Good();
  o.page_size_tokens = 0;
  ExpectBad(o, "StoreOptions.page_size_tokens: 0");
  o = Good();
  ModelLayout bad;
  bad.page_size_tokens = 0;
  o.layout = bad;
  ExpectBad(o, "StoreOptions.layout: page_size_tokens: 0");
}

TEST(LatencyHistogramTest, PercentilesAreWithinABucket) {
  LatencyHistogram h;
  EXPECT_EQ(h.Summary().count, 0u);
  for (int i = 1; i <= 1000; ++i) h.Record(std::chrono::microseconds(i));
  LatencySummary s = h.Summary();
  EXPECT_EQ(s.count, 1000u);
  EXPECT_NEAR(s.p50_us, 500, 500 * 0.13);
  EXPECT_NEAR(s.p99_us, 990, 990 * 0.13);
  EXPECT_DOUBLE_EQ(s.max_us, 1000);
  EXPECT_NEAR(s.mean_us, 500.5, 0.01);
  EXPECT_LE(s.p50_us, s.p99_us);
  EXPECT_LE(s.p99_us, s.max_us);
}

TEST(StoreStatsTest, JsonAndPrometheusCarryTheCounters) {
  StoreStats st;
  st.lookups = 7;
  st.checksum_failures = 3;
  st.loaded_entries[static_cast<int>(Tier::kDisk)][static_cast<int>(Kind::kMamba)] = 5;
  st.load_latency.count = 2;
  st.load_latency.p99_us = 12.5;
  auto j = nlohmann::json::parse(st.ToJson());
  EXPECT_EQ(j["lookups"], 7);
  EXPECT_EQ(j["checksum_failures"], 3);
  EXPECT_EQ(j["loaded_entries"]["disk"]["mamba"], 5);
  EXPECT_EQ(j["load_latency"]["p99_us"], 12.5);
  const std::string prom = st.ToPrometheus();
  EXPECT_NE(prom.find("cachepawl_lookups_total 7\n"), std::string::npos) << prom;
  EXPECT_NE(prom.find("cachepawl_loaded_entries_total{tier=\"disk\",kind=\"mamba\"} 5\n"),
            std::string::npos);
  EXPECT_NE(prom.find("cachepawl_load_latency_us{quantile=\"0.99\"} 12.5\n"), std::string::npos);
}

TEST(StoreStatsTest, RemoteFieldsNameEveryCounterAndAddSumsThem) {
  RemoteStats a;
  a.enabled = true;
  a.writes_queued = 1;
  a.deleted_bad = 2;
  a.queued_now = 3;
  a.lookup_pages = 4;
  const auto fields = a.Fields();
  EXPECT_EQ(fields.size(), 19u);
  std::set<std::string> names;
  for (const auto& [name, value] : fields) EXPECT_TRUE(names.insert(name).second) << name;
  EXPECT_EQ(fields.front().first, std::string("writes_queued"));
  EXPECT_EQ(fields.back(), (std::pair<const char*, uint64_t>{fields.back().first, 2}));
  RemoteStats sum;
  sum.Add(a);
  sum.Add(a);
  EXPECT_TRUE(sum.enabled);
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto [name, value] = sum.Fields()[i];
    // queued_now is a level (the later snapshot's); every other field is a count.
    const uint64_t expected = std::string(name) == "queued_now" ? 3 : 2 * fields[i].second;
    EXPECT_EQ(value, expected) << name;
  }
  StoreStats st;
  st.remote = a;
  const auto j = nlohmann::json::parse(st.ToJson());
  for (const auto& [name, value] : fields) EXPECT_EQ(j["remote"][name], value) << name;
}

}  // namespace
}  // namespace cachepawl
