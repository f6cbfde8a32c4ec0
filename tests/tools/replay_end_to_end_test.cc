// The replay against the real Store: host and disk tiers, reopen, crash mode, and the
// `cachepawl replay` command line. Every loaded byte is verified by the replay engine.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <vector>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/tools/replay_test_layouts.h"
#include "tests/tools/run_cli.h"
#include "tools/command.h"
#include "tools/replay/replay_ceiling.h"
#include "tools/replay/replay_runner.h"
#include "tools/replay/replay_workloads.h"

namespace cachepawl::tools {
namespace {

using test_layouts::Engine;

namespace fs = std::filesystem;

using test_layouts::SmallStore;

StoreFactory Open(const StoreOptions& o) {
  return [o] { return Store::Open(o); };
}

RequestSource Workload(const std::string& name, size_t n) {
  return [name, n](uint64_t) {
    WorkloadOptions o;
    o.seed = 3;
    o.requests = n;
    o.block_size_tokens = 64;
    return GenerateWorkload(name, o).value();
  };
}

void ExpectClean(const ReplayTotals& t) {
  EXPECT_EQ(t.wrong_bytes, 0u) << (t.wrong_records_seen.empty() ? "" : t.wrong_records_seen[0]);
  EXPECT_EQ(t.wrong_records, 0u);
  EXPECT_EQ(t.store_errors, 0u) << (t.errors.empty() ? "" : t.errors[0]);
}

TEST(ReplayEndToEndTest, HostAndDiskTiersServeVerifiedBytes) {
  testing::TempDir dir;
  auto run = RunReplay(Open(SmallStore(dir.str())), Engine(), Workload("mixed", 150), {});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const ReplayTotals& t = run->totals;
  ExpectClean(t);
  EXPECT_EQ(t.requests, 150u);
  EXPECT_GT(t.hit_pages[static_cast<int>(Tier::kHost)], 0u);
  EXPECT_GT(t.hit_pages[static_cast<int>(Tier::kDisk)], 0u);
  EXPECT_GT(
      t.hit_states[static_cast<int>(Tier::kHost)] + t.hit_states[static_cast<int>(Tier::kDisk)],
      0u);
  EXPECT_EQ(t.verified_records,
            t.hit_pages_total() + t.hit_states[0] + t.hit_states[1] + t.hit_states[2])
      << "lost " << t.lost_races << " refused " << t.refused << " loaded " << t.loaded_pages
      << (t.refusals_seen.empty() ? "" : t.refusals_seen[0]) << " hits " << t.hit_pages[0] << "/"
      << t.hit_pages[1] << "/" << t.hit_pages[2];
  CeilingOptions co;
  co.block_size_tokens = 64;
  co.track_interval_pages = 4;
  auto ceiling = ComputeCeiling(run->replayed, co);
  ASSERT_TRUE(ceiling.ok());
  EXPECT_GT(t.hit_pages_total(), 0u);
  EXPECT_LE(t.hit_pages_total(), ceiling->hybrid_hit_pages);
  EXPECT_GT(run->store.bytes_host_to_disk, 0u);
  EXPECT_GT(run->store.bytes_disk_to_host, 0u);
  EXPECT_EQ(run->store.checksum_failures, 0u);
}

TEST(ReplayEndToEndTest, AReopenedStoreServesTheSameBytesFromDisk) {
  testing::TempDir dir;
  const StoreOptions o = SmallStore(dir.str());
  auto first = RunReplay(Open(o), Engine(), Workload("system-prompt", 40), {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ExpectClean(first->totals);
  // The first request again, on the reopened store (host and L1 start empty): the first time
  // it was all computed; now its prefix comes from disk, verified.
  auto again = RunReplay(Open(o), Engine(), Workload("system-prompt", 1), {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectClean(again->totals);
  ASSERT_EQ(again->replayed.size(), 1u);
  EXPECT_EQ(again->replayed[0], first->replayed[0]);
  EXPECT_GT(again->totals.hit_pages[static_cast<int>(Tier::kDisk)], 0u);
  EXPECT_EQ(again->totals.hit_pages_total(), again->totals.pages);
  EXPECT_EQ(again->totals.hit_states[static_cast<int>(Tier::kDisk)], 1u);
}

TEST(ReplayEndToEndTest, PureSsmStatesServeVerifiedBytesAndSurviveAReopen) {
  testing::TempDir dir;
  StoreOptions o = SmallStore(dir.str());
  o.layout = test_layouts::SmallPureSsm();
  o.host_bytes = 2 << 20;  // ~120 states: the workload's states go through host memory to disk
  auto first = RunReplay(Open(o), Engine(), Workload("mixed", 150), {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const ReplayTotals& t = first->totals;
  ExpectClean(t);
  EXPECT_GT(t.hit_pages[static_cast<int>(Tier::kHost)], 0u);
  EXPECT_GT(t.hit_pages[static_cast<int>(Tier::kDisk)], 0u);
  EXPECT_EQ(t.saved_pages + t.loaded_pages, 0u);  // no KV anywhere
  EXPECT_GT(t.loaded_states, 0u);
  // Only states are reused, each verified, standing for the pages of its prefix.
  EXPECT_EQ(t.verified_records, t.hit_states[0] + t.hit_states[1] + t.hit_states[2]);
  EXPECT_EQ(t.computed_pages, t.pages - t.hit_pages_total());
  CeilingOptions co;
  co.block_size_tokens = 64;
  co.track_interval_pages = 4;
  auto ceiling = ComputeCeiling(first->replayed, co);
  ASSERT_TRUE(ceiling.ok());
  EXPECT_LE(t.hit_pages_total(), ceiling->hybrid_hit_pages);
  EXPECT_GT(first->store.bytes_disk_to_host, 0u);
  EXPECT_EQ(first->store.checksum_failures, 0u);
  // The first request again on the reopened store: its state comes from disk, its chain with it.
  auto again = RunReplay(Open(o), Engine(), Workload("mixed", 1), {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectClean(again->totals);
  EXPECT_EQ(again->totals.hit_states[static_cast<int>(Tier::kDisk)], 1u);
  EXPECT_EQ(again->totals.hit_pages_total(), again->totals.pages);
}

// ---- the command line ----

class ReplayCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_path_ = (dir_.path() / "small.json").string();
    std::ofstream(layout_path_) << LayoutToJson(test_layouts::Small());
    ssm_layout_path_ = (dir_.path() / "small-ssm.json").string();
    std::ofstream(ssm_layout_path_) << LayoutToJson(test_layouts::SmallPureSsm());
  }
  std::vector<std::string> Base() { return Base(layout_path_); }
  std::vector<std::string> Base(const std::string& layout_path) {
    return {"replay", "--layout",     layout_path, "--block-size", "64",  "--device-bytes",
            "512K",   "--host-bytes", "1M",        "--disk-bytes", "32M", "--track-interval",
            "4"};
  }
  // `cachepawl replay --crash-every` over `layout` in `dir`: children killed, no wrong byte.
  void ExpectCrashModeClean(const std::string& layout, const std::string& dir);
  testing::TempDir dir_;
  std::string layout_path_, ssm_layout_path_;
};

TEST_F(ReplayCliTest, JsonReportOfAWorkloadInAKeptFolder) {
  auto argv = Base();
  const std::string store_dir = (dir_.path() / "store").string();
  for (const char* a : {"--workload", "few-shot", "--requests", "30", "--json", "--dir"}) {
    argv.push_back(a);
  }
  argv.push_back(store_dir);
  CliResult r = RunCli(argv);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["requests"], 30);
  EXPECT_EQ(j["wrong_bytes"], 0);
  EXPECT_GT(j["hit_rate"]["pages"].get<double>(), 0.0);
  EXPECT_LE(j["hit_rate"]["pages"].get<double>(), j["ceiling"]["hybrid_pages"].get<double>());
  EXPECT_EQ(j["store_dir"], store_dir);
  EXPECT_FALSE(std::filesystem::is_empty(store_dir));  // kept for `cachepawl dump`
}

// The open errors advise wiping; the replay has the flags they name.
TEST_F(ReplayCliTest, AFolderOfAnotherLayoutIsRefusedOrWipedByFlag) {
  const std::string store_dir = (dir_.path() / "store").string();
  auto run = [&](const std::string& layout, std::vector<std::string> extra) {
    auto argv = Base(layout);
    argv.insert(argv.end(), {"--workload", "chat", "--requests", "5", "--dir", store_dir});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCli(argv);
  };
  const CliResult first = run(layout_path_, {});
  ASSERT_EQ(first.code, 0) << first.err;
  const CliResult other = run(ssm_layout_path_, {});
  EXPECT_EQ(other.code, 2) << other.err;
  EXPECT_NE(other.err.find("set wipe_on_layout_mismatch to start empty"), std::string::npos)
      << other.err;
  EXPECT_NE(other.err.find("cachepawl replay --wipe-on-layout-mismatch"), std::string::npos)
      << other.err;
  const CliResult wiped = run(ssm_layout_path_, {"--wipe-on-layout-mismatch"});
  EXPECT_EQ(wiped.code, 0) << wiped.err;
  // A damaged catalog: refused naming the flag, then wiped with it.
  std::ofstream(store_dir + "/catalog/CURRENT", std::ios::trunc) << "garbage\n";
  const CliResult damaged = run(ssm_layout_path_, {});
  EXPECT_EQ(damaged.code, 1) << damaged.err;  // a store that cannot open: not a usage error
  EXPECT_NE(damaged.err.find("disk tier: to start empty, set wipe_unreadable_catalog ("),
            std::string::npos)
      << damaged.err;
  EXPECT_NE(damaged.err.find("cachepawl replay --wipe-unreadable-catalog"), std::string::npos)
      << damaged.err;
  const CliResult recovered = run(ssm_layout_path_, {"--wipe-unreadable-catalog"});
  EXPECT_EQ(recovered.code, 0) << recovered.err;
}

TEST_F(ReplayCliTest, MambaTwoReplaysAChatWorkloadThroughItsStates) {
  // The real Mamba-2 2.7B layout (a 162 MiB state, no attention layers), sized to run in
  // seconds: L1 holds two states, host memory three, disk about twelve; states at prompt ends.
  CliResult r = RunCli({"replay", "--workload", "chat", "--layout", "mamba2-2.7b", "--requests",
                        "30", "--device-bytes", "350M", "--host-bytes", "512M", "--disk-bytes",
                        "2G", "--track-interval", "0", "--json"});
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["requests"], 30);
  EXPECT_EQ(j["kv_page_bytes"], 0);
  EXPECT_GT(j["mamba_state_bytes"].get<uint64_t>(), 100u << 20);
  EXPECT_EQ(j["saved_pages"], 0);
  EXPECT_EQ(j["loaded_pages"], 0);
  EXPECT_GT(j["loaded_states"].get<uint64_t>(), 0u);
  EXPECT_GT(j["state_hits_by_tier"]["disk"].get<uint64_t>(), 0u);
  EXPECT_GT(j["hit_rate"]["pages"].get<double>(), 0.0);
  EXPECT_LE(j["hit_rate"]["pages"].get<double>(), j["ceiling"]["hybrid_pages"].get<double>());
  EXPECT_EQ(j["wrong_bytes"], 0);
  EXPECT_EQ(j["store_errors"], 0);
  EXPECT_EQ(j["checksum_failures"], 0);
}

// Replays the chat workload over an attention-only preset (no state) and checks what every such
// replay must report: pages of `kv_page_bytes` loaded, no state, every byte right. Returns the
// report (null after a failure).
nlohmann::json ReplayAttentionOnlyPreset(const char* preset, const char* requests,
                                         uint64_t kv_page_bytes) {
  CliResult r =
      RunCli({"replay", "--workload", "chat", "--layout", preset, "--requests", requests,
              "--device-bytes", "256M", "--host-bytes", "256M", "--disk-bytes", "1G", "--json"});
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  if (r.code != 0) return nullptr;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["kv_page_bytes"], kv_page_bytes);
  EXPECT_EQ(j["mamba_state_bytes"], 0);
  EXPECT_GT(j["loaded_pages"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["wrong_bytes"], 0);
  EXPECT_EQ(j["store_errors"], 0);
  return j;
}

TEST_F(ReplayCliTest, GptOssReplaysThroughItsSlidingAndFullLayers) {
  // The gpt-oss-120b preset: 18 full and 18 sliding-window layers (8 pages), no state.
  const auto j = ReplayAttentionOnlyPreset("gpt-oss-120b", "30", 1179648);
  ASSERT_FALSE(j.is_null());
  EXPECT_GT(j["hit_rate"]["pages"].get<double>(), 0.0);
}

TEST_F(ReplayCliTest, DeepseekV3ReplaysThroughItsLatents) {
  // The deepseek-v3 preset: 61 MLA layers, one latent of 576 values per token, no V, no state.
  EXPECT_FALSE(ReplayAttentionOnlyPreset("deepseek-v3", "20", 1124352).is_null());
}

TEST_F(ReplayCliTest, TheNewerHybridPresetsReplayThroughTheirPagesAndStates) {
  // Kimi Linear (MLA beside Kimi Delta Attention), MiniMax-M1 (softmax beside lightning
  // attention), Qwen3.5-122B (GQA beside Gated DeltaNet): pages and states both loaded, every
  // byte right. Their states are 41-147 MiB, so the tiers are larger than the other replays'.
  const std::vector<std::tuple<const char*, uint64_t, uint64_t>> presets = {
      {"kimi-linear-48b-a3b", 129024, 43417600},
      {"minimax-m1", 655360, 146800640},
      {"qwen3.5-122b-a10b", 393216, 153649152}};
  for (const auto& [preset, page, state] : presets) {
    CliResult r =
        RunCli({"replay", "--workload", "chat", "--layout", preset, "--requests", "20",
                "--device-bytes", "1G", "--host-bytes", "2G", "--disk-bytes", "2G", "--json"});
    ASSERT_EQ(r.code, 0) << preset << ": " << r.err << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ok"], true) << preset;
    EXPECT_EQ(j["kv_page_bytes"], page) << preset;
    EXPECT_EQ(j["mamba_state_bytes"], state) << preset;
    EXPECT_GT(j["loaded_pages"].get<uint64_t>(), 0u) << preset;
    EXPECT_GT(j["loaded_states"].get<uint64_t>(), 0u) << preset;
    EXPECT_EQ(j["wrong_bytes"], 0) << preset;
    EXPECT_EQ(j["store_errors"], 0) << preset;
  }
}

TEST_F(ReplayCliTest, ConcurrencyFourReportsItsThroughputAndEveryByteRight) {
  auto argv = Base();
  for (const char* a :
       {"--workload", "few-shot", "--requests", "40", "--concurrency", "4", "--json"}) {
    argv.push_back(a);
  }
  CliResult r = RunCli(argv);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["concurrency"], 4);
  EXPECT_EQ(j["requests"], 40);
  EXPECT_EQ(j["wrong_bytes"], 0);
  EXPECT_GT(j["verified_records"].get<int>(), 0);
  EXPECT_TRUE(j["tokens_per_second"].is_number());
  EXPECT_TRUE(j["requests_per_second"].is_number());
  for (const char* direction :
       {"device_to_host", "host_to_device", "host_to_disk", "disk_to_host"}) {
    EXPECT_TRUE(j["gbps_wall"][direction].is_number()) << direction;
  }
  // The table says how many requests were in flight, and their throughput.
  argv.pop_back();
  CliResult table = RunCli(argv);
  ASSERT_EQ(table.code, 0) << table.err << table.out;
  EXPECT_NE(table.out.find("4 requests in flight"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(" prompt tokens/s"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("\nOK\n"), std::string::npos) << table.out;
}

TEST_F(ReplayCliTest, ReplaysATraceAndNamesItsBadLines) {
  const std::string trace = (dir_.path() / "t.jsonl").string();
  std::ofstream(trace)
      << R"({"timestamp": 0, "input_length": 150, "output_length": 5, "hash_ids": [1, 2, 3]})"
      << "\n"
      << R"({"timestamp": 5, "input_length": 150, "output_length": 5, "hash_ids": [1, 2, x]})"
      << "\n"
      << R"({"timestamp": 9, "input_length": 150, "output_length": 5, "hash_ids": [1, 2, 4]})"
      << "\n";
  auto argv = Base();
  argv.push_back(trace);
  CliResult bad = RunCli(argv);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find(trace + ": line 2"), std::string::npos) << bad.err;
  argv.push_back("--skip-bad-lines");
  CliResult skipped = RunCli(argv);
  ASSERT_EQ(skipped.code, 0) << skipped.err << skipped.out;
  EXPECT_NE(skipped.err.find("skipped 1 bad lines"), std::string::npos) << skipped.err;
  EXPECT_NE(skipped.out.find("2 requests"), std::string::npos) << skipped.out;
  EXPECT_NE(skipped.out.find("\nOK\n"), std::string::npos) << skipped.out;
}

TEST_F(ReplayCliTest, BadArgumentsExitTwoWithTheFieldNamed) {
  struct Case {
    std::vector<std::string> extra;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{}, "give a TRACE file or --workload NAME"},
      {{"t.jsonl", "--workload", "chat"}, "exactly one"},
      {{"--workload", "nope"}, "workload 'nope' is not known"},
      {{"--workload", "chat", "--page-size", "24"}, "--block-size: 64"},
      {{"--workload", "chat", "--soak", "soon"}, "--soak: 'soon'"},
      {{"--workload", "chat", "--write-policy", "sometimes"}, "--write-policy: 'sometimes'"},
      {{"--workload", "chat", "--layout", "no-such-model"}, "--layout"},
      {{(dir_.path() / "missing.jsonl").string()}, "missing.jsonl"},
      {{"--workload", "chat", "--concurrency", "0"}, "--concurrency: '0' (expected a whole"},
      {{"--workload", "chat", "--concurrency", "abc"}, "--concurrency: 'abc'"},
      {{"--workload", "chat", "--concurrency", "1025"}, "--concurrency: '1025'"},
      {{"--workload", "chat", "--concurrency", "4x"}, "--concurrency: '4x'"},
      {{"--workload", "chat", "--concurrency", "4", "--crash-every", "3"},
       "--concurrency 4 with --crash-every"},
      {{"--workload", "chat", "--policy", "fifo"}, "--policy: 'fifo' (expected lru or hybrid)"},
      {{"--workload", "chat", "--processes", "0"}, "--processes: 0 (expected 1 to 64)"},
      {{"--workload", "chat", "--processes", "65"}, "--processes: 65 (expected 1 to 64)"},
      {{"--workload", "chat", "--processes", "2", "--kill-owner"},
       "--kill-owner: needs --processes N (N >= 2) and --crash-every K"},
      {{"--workload", "chat", "--processes", "2", "--replicas", "2"},
       "--processes with --replicas"},
      {{"--workload", "chat", "--processes", "2", "--attach", "/tmp/x.sock"},
       "--attach with --processes"},
      {{"--workload", "chat", "--policy", ""}, "--policy: ''"},
      {{"--workload", "chat", "--sweep", "--sweep-fractions", "0.5,0"},
       "--sweep-fractions: '0.5,0' ('0': a fraction of the working set must be in (0, 4])"},
      {{"--workload", "chat", "--sweep", "--sweep-fractions", "5"}, "--sweep-fractions: '5'"},
      {{"--workload", "chat", "--sweep", "--sweep-fractions", "a,b"}, "--sweep-fractions: 'a,b'"},
      {{"--workload", "chat", "--sweep-fractions", "0.5"}, "--sweep-fractions '0.5' without"},
      {{"--workload", "chat", "--sweep", "--policy", "lru"}, "--sweep with --policy"},
      {{"--workload", "chat", "--sweep", "--dir", "d"}, "--sweep with --dir"},
      {{"--workload", "chat", "--sweep", "--crash-every", "3"}, "--sweep with --crash-every"},
      {{"--workload", "chat", "--crash-every", "3", "--kill-during-open", "1.5"},
       "--kill-during-open: 1.5"},
      // At 1 every store process died while opening and nothing was ever served.
      {{"--workload", "chat", "--crash-every", "3", "--kill-during-open", "1"},
       "--kill-during-open: 1 (must be a fraction from 0 to below 1"},
      // Signs and values past a flag's type used to wrap (to 2^64 - 1, or mod 2^32).
      {{"--workload", "chat", "--host-bytes", "-1"}, "--host-bytes: '-1' (expected a byte count"},
      {{"--workload", "chat", "--device-bytes", "-1"}, "--device-bytes: '-1'"},
      {{"--workload", "chat", "--disk-bytes", "-5G"}, "--disk-bytes: '-5G'"},
      {{"--workload", "chat", "--host-bytes", "99999999999999999999"}, "--host-bytes"},
      {{"--workload", "chat", "--host-bytes", "1.5G"}, "--host-bytes: '1.5G'"},
      {{"--workload", "chat", "--requests", "-1"}, "--requests: '-1' (expected an unsigned"},
      {{"--workload", "chat", "--chunk-pages", " -3"}, "--chunk-pages"},
  };
  for (const Case& c : cases) {
    auto argv = Base();
    argv.insert(argv.end(), c.extra.begin(), c.extra.end());
    CliResult r = RunCli(argv);
    EXPECT_EQ(r.code, 2) << c.expected << ": " << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
  }
  // Flags Base() already gives, with a value past their type (mod 2^32 it used to be 1215752191).
  const std::vector<std::pair<std::string, Case>> replaced = {
      {"--track-interval",
       {{"99999999999"}, "--track-interval: 99999999999 (must be from 0 to 4294967295)"}},
      {"--block-size", {{"4294967296"}, "Could not convert: --block-size = 4294967296"}},
      {"--block-size", {{"-64"}, "--block-size: '-64' (expected an unsigned integer"}},
  };
  for (const auto& [flag, c] : replaced) {
    auto argv = Base();
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == flag) argv[i + 1] = c.extra[0];
    }
    argv.insert(argv.end(), {"--workload", "chat"});
    CliResult r = RunCli(argv);
    EXPECT_EQ(r.code, 2) << c.expected << ": " << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
  }
}

// Crash mode forks the store; the binary's parent process holds no store and no threads.
TEST_F(ReplayCliTest, CrashModeKillsTheStoreAndNeverServesAWrongByte) {
  // The hybrid layout, and a pure SSM one (whose states must come back with their chains).
  for (const std::string& layout : {layout_path_, ssm_layout_path_}) {
    SCOPED_TRACE(layout);
    ExpectCrashModeClean(layout, (dir_.path() / fs::path(layout).stem()).string());
  }
}

void ReplayCliTest::ExpectCrashModeClean(const std::string& layout, const std::string& dir) {
  // Under ThreadSanitizer, the store processes use the RocksDB suppressions (RunBinary).
  std::vector<std::string> args = Base(layout);
  args.insert(args.end(),
              {"--workload", "chat", "--requests", "60", "--crash-every", "4", "--kill-during-open",
               "0.5", "--json", "--seed", std::to_string(testing::SeedFromEnv(11)), "--dir", dir});
  const BinaryResult run = RunBinary(CACHEPAWL_BINARY, args);
  const std::string& out = run.output;
  const int status = run.status;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["wrong_bytes"], 0) << j["wrong_records_seen"];
  EXPECT_EQ(j["store_errors"], 0) << j["errors"];
  EXPECT_GT(j["crashes"].get<int>(), 0);
  EXPECT_EQ(j["requests"], 60);
  EXPECT_GT(j["verified_records"].get<int>(), 0);
  // Half the store processes are killed while they open: recovery survives kills, and the
  // reopens after them find the records.
  EXPECT_GT(j["kills_during_open"].get<int>(), 0);
  EXPECT_LE(j["kills_during_open"].get<int>(), j["crashes"].get<int>());
  EXPECT_GT(j["reopens"].get<int>(), 0);
  EXPECT_GT(j["disk_records_recovered"].get<int>(), 0);
  // Survivors of the kills, served from disk after a reopen, every byte verified.
  EXPECT_GT(j["hit_rate_by_tier"]["disk"]["pages"].get<double>(), 0.0);
}

// One store shared by three engine processes (docs/EMBEDDING.md, "One store for an engine's
// processes"): an owner in the replay's process, three client processes (the binary run again)
// whose store processes are SIGKILLed about every 4 requests; every byte a client loads is
// verified there, and the owner reclaims what the dead ones held.
TEST_F(ReplayCliTest, ProcessesShareOneStoreAndKilledClientsServeNoWrongByte) {
  std::vector<std::string> args = Base(layout_path_);
  args.insert(args.end(),
              {"--workload", "chat", "--requests", "45", "--processes", "3", "--crash-every", "4",
               "--json", "--seed", std::to_string(testing::SeedFromEnv(5)), "--dir",
               (dir_.path() / "owner").string()});
  const BinaryResult run = RunBinary(CACHEPAWL_BINARY, args);
  const std::string& out = run.output;
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["ok"], true);
  ASSERT_EQ(j["processes"].size(), 3u);
  const auto& t = j["totals"];
  EXPECT_EQ(t["requests"], 45);  // 15 a process, each finished exactly once across its kills
  EXPECT_EQ(t["wrong_bytes"], 0);
  EXPECT_EQ(t["store_errors"], 0);
  EXPECT_GT(t["client_kills"].get<int>(), 0);
  EXPECT_GT(t["verified_bytes"].get<uint64_t>(), 0u);
  // Every attached store process ended (killed or done), and the owner saw each go (a process
  // killed while it opened may not have attached yet).
  const auto& owner = j["owner"];
  EXPECT_GT(owner["attaches"].get<int>(), 3);
  EXPECT_EQ(owner["clients_gone"], owner["attaches"]);
  EXPECT_EQ(owner["kills"], 0);
}

TEST_F(ReplayCliTest, EachEvictionPolicyReplaysAWorkload) {
  for (const std::string policy : {"lru", "hybrid"}) {
    auto argv = Base();
    for (const char* a : {"--workload", "chat", "--requests", "20", "--policy"}) argv.push_back(a);
    argv.push_back(policy);
    CliResult table = RunCli(argv);
    ASSERT_EQ(table.code, 0) << table.err << table.out;
    EXPECT_NE(table.out.find("; eviction " + policy + "\n"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("\nOK\n"), std::string::npos) << table.out;
    argv.push_back("--json");
    CliResult r = RunCli(argv);
    ASSERT_EQ(r.code, 0) << r.err << r.out;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ok"], true);
    EXPECT_EQ(j["eviction_policy"], policy);
    EXPECT_EQ(j["requests"], 20);
    EXPECT_GT(j["verified_records"].get<int>(), 0);
  }
  // The default is the store's.
  auto argv = Base();
  for (const char* a : {"--workload", "chat", "--requests", "5", "--json"}) argv.push_back(a);
  CliResult r = RunCli(argv);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["eviction_policy"],
            EvictionPolicyName(StoreOptions().eviction_policy));
}

TEST_F(ReplayCliTest, SweepRunsEveryFractionWithEveryPolicy) {
  auto sweep = [&](const char* requests, bool json) {
    auto argv = Base();
    for (const char* a :
         {"--workload", "chat", "--sweep", "--sweep-fractions", "0.5,1", "--requests", requests}) {
      argv.push_back(a);
    }
    if (json) argv.push_back("--json");
    return RunCli(argv);
  };
  CliResult r = sweep("30", true);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["requests"], 30);
  EXPECT_GT(j["working_set"]["pages"].get<uint64_t>(), 0u);
  EXPECT_GT(j["working_set"]["states"].get<uint64_t>(), 0u);
  const double ceiling = j["ceiling"]["hybrid_tokens"].get<double>();
  EXPECT_GT(ceiling, 0.0);
  ASSERT_EQ(j["rows"].size(), 2u);
  const uint64_t working_set = j["working_set"]["bytes"].get<uint64_t>();
  for (size_t i = 0; i < 2; ++i) {
    const auto& row = j["rows"][i];
    EXPECT_EQ(row["fraction"].get<double>(), i == 0 ? 0.5 : 1.0);
    // The disk is the larger tier: the fraction of the working set, rounded up to whole MiB
    // (or raised to the least the replay needs).
    const uint64_t disk = row["disk_bytes"].get<uint64_t>();
    EXPECT_EQ(disk % (1u << 20), 0u);
    EXPECT_GE(static_cast<double>(disk), row["fraction"].get<double>() * working_set);
    for (const char* policy : {"lru", "hybrid"}) {
      SCOPED_TRACE(std::string(policy) + " at " + row["fraction"].dump());
      const auto& run = row[policy];
      EXPECT_EQ(run["ok"], true) << run["errors"];
      EXPECT_EQ(run["eviction_policy"], policy);
      EXPECT_EQ(run["requests"], 30);
      EXPECT_EQ(run["disk_bytes"], disk);
      EXPECT_EQ(run["wrong_bytes"], 0);
      const double hit = run["hit_rate"]["tokens"].get<double>();
      EXPECT_GE(hit, 0.0);
      EXPECT_LE(hit, ceiling);
      EXPECT_TRUE(run["disk_write_bytes_per_hit_token"].is_number() ||
                  run["disk_write_bytes_per_hit_token"].is_null());
    }
    EXPECT_TRUE(row["hybrid_over_lru"].is_number() || row["hybrid_over_lru"].is_null());
  }
  // The table: both policies side by side, one line per fraction.
  CliResult table = sweep("10", false);
  ASSERT_EQ(table.code, 0) << table.err << table.out;
  for (const char* text :
       {" lru ", " hybrid ", "hybrid/lru", "\n   50%  ", "\n  100%  ", "working set ", "\nOK\n"}) {
    EXPECT_NE(table.out.find(text), std::string::npos) << text << "\n" << table.out;
  }
}

TEST_F(ReplayCliTest, HelpDocumentsTheJsonKeysAndWorkloads) {
  CliResult r = RunCli({"replay", "--help"});
  ASSERT_EQ(r.code, 0);
  for (const char* key :
       {"wrong_bytes", "hit_rate.tokens", "ceiling.blocks", "latency_us", "mixed", "--crash-every",
        "--soak", "--concurrency", "concurrency", "tokens_per_second", "gbps_wall",
        "refused with --concurrency > 1", "--policy", "eviction_policy", "--sweep",
        "--sweep-fractions", "working_set", "hybrid_over_lru", "disk_write_bytes_per_hit_token"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key;
  }
}

}  // namespace
}  // namespace cachepawl::tools
