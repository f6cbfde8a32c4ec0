// `cachepawl bench store`: argument errors (exit 2 naming the flag and value), the --quick preset
// in CPU mode (every documented JSON key, plausible values, no wrong byte, nothing left in --dir;
// docs/PERFORMANCE.md "Store path"), and the byte checks the benchmark relies on catching a wrong
// byte. No time or rate is asserted beyond being positive.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "layouts/layout_presets.h"
#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/tools/run_cli.h"
#include "tiers/machine_probe.h"
#include "tools/bench/bench_store.h"

namespace cachepawl::tools {
namespace {

CliResult Bench(std::vector<std::string> args) {
  args.insert(args.begin(), {"bench", "store"});
  return RunCli(args);
}

TEST(CmdBenchStoreTest, ArgumentErrorsExitTwoNamingTheValue) {
  testing::TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--layouts", "llama-3.1-8b,no-such-model"}, "--layouts: 'no-such-model'"},
      {{"--layouts", "mamba2-2.7b"}, "'mamba2-2.7b' (a pure SSM layout"},
      {{"--pages", "1,x,16"}, "--pages: 'x'"},
      {{"--pages", "0"}, "--pages: '0'"},
      {{"--pages", "1,,16"}, "--pages: '' in '1,,16'"},
      {{"--pages", "16,"}, "--pages: '16,'"},
      {{"--threads", "1,300"}, "--threads: '300'"},
      {{"--threads", "-4"}, "--threads: '-4'"},
      {{"--iters", "0"}, "--iters: 0"},
      {{"--disk-iters", "0"}, "--disk-iters: 0"},
      {{"--lookup-iters", "-3"}, "--lookup-iters: -3"},
      {{"--pools", "owned,gpu"}, "--pools: 'gpu'"},
      {{"--host-bytes", "12x"}, "--host-bytes: '12x'"},
      {{"--host-bytes", "1M"}, "--host-bytes: 1048576"},
      {{"--device-bytes", "-5"}, "--device-bytes: '-5'"},
      {{"--disk-bytes", "99999999999T"}, "--disk-bytes: '99999999999T'"},
      {{"--dir", (dir.path() / "missing").string()}, "is not a folder"},
      {{"--iters", "three"}, "--iters"},
      {{"--max-seconds", "-1"}, "--max-seconds: -1"},
      {{"--host-free-target", "12q"}, "--host-free-target: '12q'"},
      {{"--host-free-target", "1T"}, "--host-free-target: 1099511627776"},
      {{"--watchdog", "soon"}, "--watchdog: 'soon'"},
      {{"--mover-polling", "maybe"}, "--mover-polling: 'maybe' (expected on or off)"},
      {{"--load-split-pages", "2000000"}, "--load-split-pages: 2000000"},
      {{"--tp-size", "0"}, "--tp-size: 0 (must be 1 to 8)"},
      {{"--tp-size", "9"}, "--tp-size: 9 (must be 1 to 8)"},
      {{"--tp-size", "2", "--processes", "1"}, "--tp-size with --processes"},
      {{"--tp-size", "2", "--layouts", "llama-3.1-8b,jamba-v0.1"}, "names 2 layouts (give one)"},
      {{"--tp-size", "2", "--layouts", "jamba-v0.1", "--pages", "16,128"}, "gives 2 values"},
      {{"--tp-size", "3", "--layouts", "jamba-v0.1"}, "--tp-size 3: attention_layers[0]"},
      {{"--tp-size", "2", "--layouts", "gpt-oss-120b"},
       "'gpt-oss-120b' (layer 0 keeps a sliding window of 128"},
      // (This test's binary is not cachepawl: a run would start it again as its ranks.)
      {{"--tp-size", "2", "--layouts", "jamba-v0.1"}, "starts the cachepawl binary again"},
      {{"--frobnicate"}, "--frobnicate"},
  };
  for (const auto& [args, want] : cases) {
    std::vector<std::string> a = args;
    // --dry-run: should an error slip through, nothing heavy runs.
    a.insert(a.end(), {"--cpu", "--dry-run"});
    const CliResult r = Bench(a);
    EXPECT_EQ(r.code, kExitUsage) << args[0] << " " << (args.size() > 1 ? args[1] : "");
    EXPECT_NE(r.err.find(want), std::string::npos) << "want '" << want << "' in: " << r.err;
  }
}

// --tp-size: rank processes of the real binary attached to one owner, each loading and saving
// its own shares at once; every loaded byte checked in the rank that loaded it.
TEST(CmdBenchStoreTest, TpSizeRunsARankProcessPerRankAndChecksEveryByte) {
  testing::TempDir dir;
  const BinaryResult run = RunBinary(
      CACHEPAWL_BINARY, {"bench", "store", "--tp-size", "2", "--cpu", "--layouts", "jamba-v0.1",
                         "--pages", "8", "--iters", "2", "--host-bytes", "64M", "--device-bytes",
                         "32M", "--dir", dir.str(), "--watchdog", "120s"});
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output;
  for (const char* line : {"cachepawl bench store --tp-size 2: jamba-v0.1, 8 pages a request; 2 "
                           "rank processes",
                           "rank0    rank1  aggregate    limit  /limit  limit alone", "\nload ",
                           "\nsave ", "wrong bytes: 0 records; errors: 0"}) {
    EXPECT_NE(run.output.find(line), std::string::npos) << line << "\n" << run.output;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the owner's folder was left behind";
}

// The presets of the newer families in CPU mode, briefly (about 20 s on the dev box): every
// row of every tier runs, its bytes compared. gpt-oss-120b and Samba have sliding-window layers:
// a Load brings the windowed KV of a request's last pages only (the JSON says how many), and a
// request's bytes count what each direction moves.
TEST(CmdBenchStoreTest, TheNewerPresetsRunEveryRowWithoutAWrongByte) {
  // (layout, its WindowPages(), pages a request): gpt-oss and Hymba's requests reach past their
  // window, so a Load moves fewer windowed records than a Save keeps (gpt-oss) or the windowed
  // records of the first pages stay poisoned after a Load (both).
  const std::vector<std::tuple<std::string, uint64_t, uint64_t>> cases = {
      {"deepseek-v3", 0, 8}, {"gpt-oss-120b", 8, 16},     {"kimi-linear-48b-a3b", 0, 8},
      {"minimax-m1", 0, 8},  {"qwen3.5-122b-a10b", 0, 8}, {"samba-1.3b", 128, 8},
      {"hymba-1.5b", 64, 72}};
  for (const auto& [layout, window, pages] : cases) {
    testing::TempDir dir;
    const CliResult r =
        Bench({"--cpu", "--json", "--layouts", layout, "--pages", std::to_string(pages),
               "--threads", "1", "--iters", "2", "--host-bytes", "1G", "--device-bytes", "1G",
               "--disk-bytes", "1G", "--dir", dir.str()});
    ASSERT_EQ(r.code, kExitOk) << layout << ": " << r.err << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["mismatches"].get<int>(), 0) << layout << ": " << j["mismatch_details"].dump();
    EXPECT_TRUE(j["errors"].empty()) << layout << ": " << j["errors"].dump();
    EXPECT_TRUE(j["skipped"].empty()) << layout << ": " << j["skipped"].dump();
    EXPECT_EQ(j["layouts"][0]["window_pages"].get<uint64_t>(), window) << layout;
    const ModelLayout l = LayoutPreset(layout, 16).value();
    const uint64_t state = l.has_ssm() ? l.MambaSlotBytes() : 0;
    const uint64_t loaded = std::min(pages, window), saved = l.has_ssm() ? loaded : pages;
    std::set<std::string> seen;
    ASSERT_EQ(j["rows"].size(), 9u) << layout << ": " << r.out;  // host 3 ops x 2 pools, disk 3
    for (const auto& row : j["rows"]) {
      EXPECT_EQ(row["layout"], layout) << row.dump();
      EXPECT_EQ(row["mismatches"], 0) << row.dump();
      seen.insert(row["pool"].get<std::string>() + " " + row["tier"].get<std::string>() + " " +
                  row["op"].get<std::string>());
      const bool save = row["op"] == "save";
      const uint64_t bytes = pages * l.RecordBytes(Kind::kKV) +
                             (save ? saved : loaded) * l.RecordBytes(Kind::kWindowKV) + state;
      EXPECT_EQ(row["bytes"].get<uint64_t>(), bytes) << row.dump();
      if (!save) {
        EXPECT_GT(row["verified_loads"].get<int>(), 0) << row.dump();
      }
    }
    EXPECT_EQ(seen.size(), 9u) << layout;
  }
}

TEST(CmdBenchStoreTest, DryRunNamesWhatDoesNotFit) {
  // The defaults (sized for an H200) in CPU mode: 2,048 Llama pages x 16 threads need 128 GiB
  // per pool, more than --device-bytes 96G gives.
  const CliResult r = Bench({"--cpu", "--dry-run", "--layouts", "llama-3.1-8b"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("llama-3.1-8b 2048 pages x 16 threads: host skipped (needs 128.0 GiB per "
                       "device pool"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("llama-3.1-8b 16 pages x 4 threads: host runs; disk runs"),
            std::string::npos)
      << r.out;
  const CliResult none = Bench({"--cpu", "--dry-run", "--disk-bytes", "0", "--pages", "1"});
  ASSERT_EQ(none.code, kExitOk) << none.err;
  EXPECT_NE(none.out.find("disk skipped (--disk-bytes 0 (no disk tier))"), std::string::npos)
      << none.out;
}

// The defaults (sized for a 128 GiB host: host 24G, device 96G) used to be OOM-killed on a
// 24 GiB machine. Sizes given that cannot fit are refused naming both flags; the defaults shrink
// to fit and say so.
TEST(CmdBenchStoreTest, SizesBeyondTheMachinesMemoryAreRefused) {
  const CliResult r = Bench({"--cpu", "--dry-run", "--host-bytes", "1024T"});
  EXPECT_EQ(r.code, kExitUsage) << r.err;
  EXPECT_NE(r.err.find("--host-bytes 1024.0 TiB and --device-bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is more memory than this machine offers: MemAvailable"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("twice the host tier and 1.5 times --device-bytes"), std::string::npos)
      << r.err;
  const std::optional<uint64_t> takeable = TakeableMemoryBytes(ProbePinnedMemory());
  const uint64_t default_need = 2 * (uint64_t{24} << 30) + 3 * (uint64_t{48} << 30);
  const CliResult defaults = Bench({"--cpu", "--dry-run", "--layouts", "llama-3.1-8b"});
  ASSERT_EQ(defaults.code, kExitOk) << defaults.err;
  if (takeable && *takeable < default_need) {
    EXPECT_NE(defaults.err.find("the default --host-bytes 24.0 GiB --device-bytes 96.0 GiB need "
                                "up to 192.0 GiB of host memory; this machine offers"),
              std::string::npos)
        << defaults.err;
    EXPECT_NE(defaults.err.find(": running with --host-bytes "), std::string::npos) << defaults.err;
  } else {
    EXPECT_EQ(defaults.err.find("running with"), std::string::npos) << defaults.err;
  }
}

TEST(CmdBenchStoreTest, MaxSecondsSkipsWhatIsLeftAndSaysSo) {
  testing::TempDir dir;
  const CliResult r = Bench({"--quick", "--json", "--cpu", "--dir", dir.str(), "--layouts",
                             "jamba-v0.1", "--max-seconds", "0.000001"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["rows"].empty());
  ASSERT_EQ(j["skipped"].size(), 2u * 2u * 2u * 2u);  // pages x threads x pools x tiers
  for (const auto& s : j["skipped"]) {
    EXPECT_NE(s["reason"].get<std::string>().find("--max-seconds"), std::string::npos) << s;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(CmdBenchStoreTest, QuickJsonHasEveryKeyAndNoWrongByte) {
  testing::TempDir dir;
  const CliResult r = Bench({"--quick", "--json", "--cpu", "--dir", dir.str()});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"command",
                          "date",
                          "mode",
                          "device",
                          "quick",
                          "host_bytes",
                          "device_bytes",
                          "pool_bytes",
                          "disk_bytes",
                          "dir",
                          "iters",
                          "disk_iters",
                          "lookup_iters",
                          "pages",
                          "threads",
                          "pools",
                          "seconds",
                          "layouts",
                          "rows",
                          "lookups",
                          "skipped",
                          "mismatches",
                          "mismatch_details",
                          "errors"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["mode"], "cpu");
  EXPECT_TRUE(j["quick"].get<bool>());
  EXPECT_EQ(j["mismatches"].get<int>(), 0) << j["mismatch_details"].dump();
  EXPECT_TRUE(j["errors"].empty()) << j["errors"].dump();
  ASSERT_EQ(j["layouts"].size(), 3u);
  std::map<std::string, bool> has_state;
  for (const auto& l : j["layouts"]) {
    for (const char* key : {"name", "model", "page_size_tokens", "kv_page_bytes", "state_bytes"}) {
      EXPECT_TRUE(l.contains(key)) << key;
    }
    has_state[l["name"]] = l["state_bytes"].get<uint64_t>() > 0;
  }
  EXPECT_FALSE(has_state["llama-3.1-8b"]);
  EXPECT_TRUE(has_state["jamba-v0.1"]);
  EXPECT_TRUE(has_state["hybrid-128mib-state"]);

  // Every (layout, pool, tier, op, pages, threads) the preset should run, once.
  std::set<std::string> seen;
  for (const auto& row : j["rows"]) {
    for (const char* key : {"layout",     "pool",           "tier",           "op",
                            "pages",      "threads",        "state",          "bytes",
                            "iters",      "p50_us",         "p99_us",         "gbps",
                            "load_gbps",  "save_gbps",      "mover_p50_us",   "mover_gbps",
                            "limit_gbps", "store_vs_mover", "store_vs_limit", "verified_loads",
                            "mismatches"}) {
      ASSERT_TRUE(row.contains(key)) << key << " in " << row.dump();
    }
    const std::string op = row["op"], tier = row["tier"], layout = row["layout"];
    const std::string what = row.dump();
    EXPECT_TRUE(seen.insert(layout + "/" + row["pool"].get<std::string>() + "/" + tier + "/" + op +
                            "/" + std::to_string(row["pages"].get<int>()) + "/" +
                            std::to_string(row["threads"].get<int>()))
                    .second)
        << what;
    EXPECT_EQ(row["state"].get<bool>(), has_state[layout]) << what;
    EXPECT_GT(row["bytes"].get<uint64_t>(), 0u) << what;
    EXPECT_GT(row["p50_us"].get<double>(), 0) << what;
    EXPECT_GE(row["p99_us"].get<double>(), row["p50_us"].get<double>()) << what;
    EXPECT_GT(row["gbps"].get<double>(), 0) << what;
    EXPECT_GT(row["mover_gbps"].get<double>(), 0) << what;
    EXPECT_GT(row["limit_gbps"].get<double>(), 0) << what;
    EXPECT_GT(row["store_vs_mover"].get<double>(), 0) << what;
    EXPECT_GT(row["store_vs_limit"].get<double>(), 0) << what;
    EXPECT_EQ(row["mismatches"].get<int>(), 0) << what;
    if (op == "load" || op == "both") {
      // Every timed load, every thread, was compared byte for byte.
      EXPECT_EQ(row["verified_loads"].get<int>(),
                row["iters"].get<int>() * row["threads"].get<int>())
          << what;
      EXPECT_GT(row["load_gbps"].get<double>(), 0) << what;
    } else {
      EXPECT_EQ(row["verified_loads"].get<int>(), 0) << what;
    }
    if (op == "save" || op == "both") {
      EXPECT_GT(row["save_gbps"].get<double>(), 0) << what;
    }
    EXPECT_TRUE(tier == "host" || (tier == "disk" && op != "both")) << what;
  }
  size_t expected = 0;
  for (const char* layout : {"llama-3.1-8b", "jamba-v0.1", "hybrid-128mib-state"}) {
    for (const char* pool : {"owned", "registered"}) {
      for (int threads : {1, 4}) {
        // 4 threads of 128 MiB states (sources and destinations) exceed the preset's pools.
        if (std::string(layout) == "hybrid-128mib-state" && threads == 4) continue;
        for (int pages : {1, 16}) {
          const std::string tail = '/' + std::to_string(pages) + '/' + std::to_string(threads);
          const std::string base = std::string(layout) + "/" + pool;
          for (const char* op : {"load", "save", "both"}) {
            EXPECT_TRUE(seen.count(base + "/host/" + op + tail)) << base << " host " << op << tail;
          }
          EXPECT_TRUE(seen.count(base + "/disk/load" + tail)) << base << " disk load" << tail;
          // The records on disk are the same for both forms: saved through the first.
          if (std::string(pool) == "owned") {
            EXPECT_TRUE(seen.count(base + "/disk/save" + tail)) << base << " disk save" << tail;
          }
          expected += std::string(pool) == "owned" ? 5 : 4;
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), expected);

  // The skipped cases say why, naming the budget.
  ASSERT_EQ(j["skipped"].size(), 2u * 2u * 2u);  // 2 page counts x 2 pools x 2 tiers
  for (const auto& s : j["skipped"]) {
    for (const char* key : {"layout", "pool", "tier", "pages", "threads", "reason"}) {
      EXPECT_TRUE(s.contains(key)) << key;
    }
    EXPECT_EQ(s["layout"], "hybrid-128mib-state");
    EXPECT_EQ(s["threads"].get<int>(), 4);
    EXPECT_NE(s["reason"].get<std::string>().find("--device-bytes"), std::string::npos);
  }

  // Lookups of a 2,048-page prompt whose first 16 pages (the largest prefix loaded) are cached.
  std::set<std::string> lookups;
  for (const auto& l : j["lookups"]) {
    for (const char* key : {"layout", "op", "threads", "prompt_pages", "hit_pages", "calls",
                            "p50_us", "p99_us", "calls_per_s"}) {
      ASSERT_TRUE(l.contains(key)) << key;
    }
    lookups.insert(l["layout"].get<std::string>() + "/" + l["op"].get<std::string>() + "/" +
                   std::to_string(l["threads"].get<int>()));
    EXPECT_EQ(l["prompt_pages"].get<int>(), 2048);
    EXPECT_EQ(l["hit_pages"].get<int>(), 16);
    EXPECT_EQ(l["calls"].get<int>(), 50 * l["threads"].get<int>());
    EXPECT_GT(l["p50_us"].get<double>(), 0);
    EXPECT_GE(l["p99_us"].get<double>(), l["p50_us"].get<double>());
    EXPECT_GT(l["calls_per_s"].get<double>(), 0);
  }
  // Lookup and LookupHashes for each layout and thread count (the hybrid: 1 thread only).
  EXPECT_EQ(lookups.size(), (2u + 2u + 1u) * 2u);
  EXPECT_TRUE(lookups.count("jamba-v0.1/lookup_hashes/4"));
  // The disk tier's temporary folder is gone.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// The checks the benchmark counts on: a record written through a view reads back equal, and a
// single wrong byte (or the poison) is reported with its slot and offset.
TEST(CmdBenchStoreTest, ViewsReportAWrongByte) {
  using namespace bench_store;  // NOLINT(build/namespaces)
  const ModelLayout layout = LayoutPreset("jamba-v0.1").value();
  HostBuffers buffers(/*gpu=*/false);
  auto pool = MakeBenchPool(layout, /*gpu=*/false, 8, 4);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  for (bool block : {false, true}) {
    auto view = MakeBenchView(layout, *pool, block, false, &buffers);
    const std::vector<uint64_t> slots = {2, 3, 5}, seeds = {11, 12, 13};
    ASSERT_TRUE(view->Write(Kind::kKV, slots, seeds).ok());
    ASSERT_TRUE(view->Write(Kind::kMamba, {&slots[1], 1}, {&seeds[1], 1}).ok());
    EXPECT_EQ(view->Verify(Kind::kKV, slots, seeds).value(), "");
    EXPECT_EQ(view->Verify(Kind::kMamba, {&slots[1], 1}, {&seeds[1], 1}).value(), "");
    // Slot 3's V of the third attention layer, one byte.
    const DevicePoolDescription& d = block ? pool->block : pool->layer_first;
    d.V(2, 3)[100] ^= std::byte{1};
    const std::string bad = view->Verify(Kind::kKV, slots, seeds).value();
    EXPECT_NE(bad.find("kv slot 3, byte " + std::to_string(layout.VSegment(2).offset + 100) +
                       " of the record"),
              std::string::npos)
        << bad;
    d.V(2, 3)[100] ^= std::byte{1};
    EXPECT_EQ(view->Verify(Kind::kKV, slots, seeds).value(), "");
    ASSERT_TRUE(view->Poison(Kind::kMamba, {&slots[1], 1}).ok());
    EXPECT_NE(view->Verify(Kind::kMamba, {&slots[1], 1}, {&seeds[1], 1})
                  .value()
                  .find("mamba slot 3, byte 0 of the record: got 0x5a"),
              std::string::npos);
  }
  // The store-owned pool, through the Store's record calls.
  StoreOptions o;
  o.layout = layout;
  o.host_bytes = 64 << 20;
  o.cuda_device = -1;
  o.device_pool_bytes = 64 << 20;
  auto store = Store::Open(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto view = MakeOwnedView(store->get(), layout, &buffers);
  const uint64_t slot = (*store)->AllocateDeviceSlot(Kind::kKV).value();
  ASSERT_TRUE(view->Write(Kind::kKV, {&slot, 1}, std::vector<uint64_t>{7}).ok());
  EXPECT_EQ(view->Verify(Kind::kKV, {&slot, 1}, std::vector<uint64_t>{7}).value(), "");
  EXPECT_NE(view->Verify(Kind::kKV, {&slot, 1}, std::vector<uint64_t>{8}).value(), "");
  std::vector<std::byte> rec(layout.KvPageBytes());
  ASSERT_TRUE((*store)->ReadDeviceRecord(Kind::kKV, slot, rec).ok());
  rec[rec.size() - 1] ^= std::byte{0x80};
  ASSERT_TRUE((*store)->WriteDeviceRecord(Kind::kKV, slot, rec).ok());
  EXPECT_NE(view->Verify(Kind::kKV, {&slot, 1}, std::vector<uint64_t>{7})
                .value()
                .find("byte " + std::to_string(rec.size() - 1)),
            std::string::npos);
  ASSERT_TRUE((*store)->Close().ok());
}

}  // namespace
}  // namespace cachepawl::tools
