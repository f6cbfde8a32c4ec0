// cachepawl bench store [--layouts L,...] [--pages 1,16,128,2048] [--threads 1,4,16]
//                       [--pools owned,registered] [--host-bytes B] [--device-bytes B]
//                       [--disk-bytes B] [--iters N] [--disk-iters N] [--lookup-iters N]
//                       [--dir D] [--cpu] [--quick] [--dry-run] [--json]
//
// The Store path as an engine sees it, through the public Store API only: Save and Load of 1 to
// 2,048 pages (plus the Mamba state for layouts with SSM layers), with the prefix resident in the
// host tier and, separately, on disk; with a store-owned device pool and with a pool the bench
// allocates and registers (the engine's layer-first KV and state tensors); with 1, 4 and 16
// engine threads issuing their own requests at once. Each figure is printed next to its peers of
// the same run: the DeviceMover alone over its own host arena and the same kind of pool, and
// the contiguous limit (one cudaMemcpyAsync of the same bytes per thread; memcpy in CPU mode).
// Also Lookup and LookupHashes of a 2,048-page prompt. Sources are random, destinations are
// poisoned before every load, and every loaded byte is compared after every timed load (outside
// the timed region): exit 1 on a wrong byte, printing it. Cases that do not fit the budgets are
// skipped with the reason. Bad arguments: exit 2 naming the flag and value.
// Files: tools/bench/bench_store.h (what each part does), docs/PERFORMANCE.md ("Store path").
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <sstream>

#include "cuda/gpu_runtime.h"
#include "layouts/layout_tp.h"
#include "tiers/machine_probe.h"
#include "tools/bench/bench_lookup_load.h"
#include "tools/bench/bench_store.h"
#include "tools/bench/bench_store_report.h"
#include "tools/bench/bench_store_tp.h"
#include "tools/cli_args.h"
#include "tools/cli_values.h"
#include "tools/command.h"
#include "tools/human_bytes.h"
#include "tools/parse_bytes.h"
#include "tools/stall_watchdog.h"
#include "vocab/attach_options.h"
#include "vocab/internal/stage_profile.h"

namespace cachepawl::tools {
namespace {

using namespace bench_store;  // NOLINT(build/namespaces): one tool's own parts

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr char kName[] = "cachepawl bench store";

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string w; std::getline(ss, w, ',');) out.push_back(w);
  if (!text.empty() && text.back() == ',') out.push_back("");
  return out;
}

// What --dry-run prints: the cases that would run and the bytes they would move.
void DryRun(const Config& c, std::ostream& out) {
  double link = 0, disk = 0;
  for (size_t li = 0; li < c.layouts.size(); ++li) {
    const Sizes s = SizesOf(c.layouts[li]);
    bool probe = false;
    for (uint32_t t : c.threads) {
      for (uint64_t p : c.pages) {
        const double req = static_cast<double>(t) * static_cast<double>(s.RequestBytes(p));
        const std::string host = HostCaseFit(c, s, t, p), d = DiskCaseFit(c, s, t, p);
        out << c.layout_names[li] << " " << p << " pages x " << t << " threads: host "
            << (host.empty() ? "runs" : "skipped (" + host + ")") << "; disk "
            << (d.empty() ? "runs" : "skipped (" + d + ")") << "\n";
        const double pools = static_cast<double>(c.pools.size());
        // Store, mover and limit: load, save, both (2x), warm-up included.
        if (host.empty()) link += pools * 3 * 4 * req * (c.iters + 1), probe = true;
        if (d.empty()) {
          const double tier = static_cast<double>(DiskPhaseTierNeed(s, t, p));
          disk += (pools + 1) * c.disk_iters * req;  // saved once, loaded per pool form
          link += pools * c.disk_iters * (req + tier);
        }
      }
    }
    if (probe) link += static_cast<double>(c.pools.size() * c.host_bytes);
  }
  out << "about " << HumanBytes(static_cast<uint64_t>(link)) << " through device copies and "
      << HumanBytes(static_cast<uint64_t>(disk)) << " written to and read from disk\n";
}

// --tp-size N: its own flags' checks, then RunTpBench (tools/bench/bench_store_tp.h).
// `pages_text`: the default --pages ("" when given).
int RunTpCommand(const CLI::App& app, const Config& c, uint32_t tp_size,
                 const std::string& pages_text, const std::string& watchdog_text, CommandIo& io) {
  auto usage = [&](const std::string& what) {
    io.err << kName << ": " << what << "\n";
    return kExitUsage;
  };
  if (tp_size == 0 || tp_size > 8) {
    return usage("--tp-size: " + std::to_string(tp_size) + " (must be 1 to 8)");
  }
  if (app.count("--processes") > 0) {
    return usage("--tp-size with --processes: give one (--tp-size starts its own rank processes)");
  }
  if (c.layouts.size() != 1) {
    return usage("--tp-size: --layouts names " + std::to_string(c.layouts.size()) +
                 " layouts (give one)");
  }
  if (pages_text.empty() && c.pages.size() != 1) {
    return usage("--tp-size: --pages gives " + std::to_string(c.pages.size()) +
                 " values (give one)");
  }
  for (const AttentionLayerSpec& a : c.layouts[0].attention_layers) {
    if (a.sliding_window > 0) {
      // The rank processes check and count whole KV pages (one record a page).
      return usage("--tp-size: '" + c.layout_names[0] + "' (layer " +
                   std::to_string(a.layer_index) + " keeps a sliding window of " +
                   std::to_string(a.sliding_window) +
                   " tokens; the tensor-parallel bench does not measure layouts with "
                   "sliding-window layers yet: `cachepawl bench store` without --tp-size does)");
    }
  }
  if (auto rank = ShardLayout(c.layouts[0], tp_size, 0); !rank.ok()) {
    return usage("--tp-size " + std::to_string(tp_size) + ": " + rank.status().message());
  }
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || std::filesystem::path(self).filename() != "cachepawl") {
    return usage("--tp-size: starts the cachepawl binary again, not '" + self + "'");
  }
  const auto watchdog = ParseWatchdogLimit(watchdog_text);
  if (!watchdog.ok()) return usage(watchdog.status().message());
  TpBenchConfig t;
  t.layout_name = c.layout_names[0];
  t.whole = c.layouts[0];
  t.tp_size = tp_size;
  t.pages = pages_text.empty() ? c.pages[0] : std::stoull(pages_text);
  t.iters = c.iters;
  t.host_bytes = c.host_bytes;
  t.device_bytes = c.device_bytes;
  t.gpu = c.gpu;
  t.self = self;
  t.dir = c.dir;
  t.seed = c.seed;
  t.watchdog_seconds = *watchdog > 0 ? *watchdog : 1e9;
  t.profile_stages = c.profile_stages;
  t.load_split_pages = c.load_split_pages;
  // (The ranks' own watchdogs fire first and print their threads.)
  std::optional<StallWatchdog> dog;
  if (*watchdog > 0) dog.emplace(kName, *watchdog + 60);
  return RunTpBench(t, io.out, io.err);
}

int RunBenchStore(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Benchmarks the Store path as an engine sees it (Save, Load, Lookup through the public API) "
      "next to the DeviceMover alone and the contiguous copy limit, in one run. Defaults are "
      "sized for an H200 host (139 GiB of VRAM, 128 GiB of RAM); --quick is a CPU-mode run of "
      "under a minute.",
      kName};
  std::string layouts = std::string("llama-3.1-8b,jamba-v0.1,") + kHybrid128Name;
  std::string pages = "1,16,128,2048", threads = "1,4,16", pools = "owned,registered";
  std::string host_text = "24G", device_text = "96G", disk_text = "16G";
  uint64_t seed = 1;
  int iters = 5, disk_iters = 2, lookup_iters = 200;
  std::string dir = "/var/tmp";
  bool json = false, quick = false, cpu = false, dry_run = false;
  app.add_option("--layouts", layouts,
                 "comma-separated presets (cachepawl layout --list), JSON layout files, or " +
                     std::string(kHybrid128Name) + " (default: llama-3.1-8b,jamba-v0.1," +
                     kHybrid128Name + ")");
  app.add_option("--pages", pages, "pages per request (default 1,16,128,2048)");
  app.add_option("--threads", threads, "engine threads issuing requests at once (default 1,4,16)");
  app.add_option("--pools", pools,
                 "device pool forms: owned (StoreOptions::device_pool_bytes), registered "
                 "(RegisterDevicePool of the bench's layer-first tensors) (default both)");
  app.add_option("--host-bytes", host_text,
                 "host tier of the host phase; also bounds the peer's arena and the limit's "
                 "buffers (default 24G)");
  app.add_option("--device-bytes", device_text,
                 "device memory in all: two pools of half of it (less 2 GiB for staging in GPU "
                 "mode) (default 96G)");
  app.add_option("--disk-bytes", disk_text, "disk tier; 0 skips the disk phase (default 16G)");
  std::string free_target_text;
  app.add_option(
      "--host-free-target", free_target_text,
      "StoreOptions::host_free_target_bytes of the stores (evict ahead; 0: off; default: "
      "the store's, host_bytes / 16 up to 1 GiB for tiers of 1 GiB or more)");
  app.add_option("--iters", iters, "timed rounds per figure, after one warm-up (default 5)");
  app.add_option("--disk-iters", disk_iters,
                 "disk-resident loads (each after a reopen) and write-through save rounds "
                 "(default 2)");
  app.add_option("--lookup-iters", lookup_iters, "lookups per thread (default 200)");
  app.add_option("--dir", dir,
                 "folder for the disk tier (a temporary folder in it; default /var/tmp)");
  app.add_option("--seed", seed, "record content seed (default 1)");
  double max_seconds = 0;
  app.add_option("--max-seconds", max_seconds,
                 "skip the cases not started after this many seconds, saying so (default 0: no "
                 "limit)");
  app.add_flag("--cpu", cpu, "CPU mode even when a GPU is present");
  app.add_flag(
      "--quick", quick,
      "small preset for CI (under a minute in CPU mode on 2 cores): --pages 1,16 --threads "
      "1,4 --iters 3 --disk-iters 2 --lookup-iters 50 --host-bytes 512M --device-bytes 1G "
      "(+2G in GPU mode) --disk-bytes 1G; flags given override it");
  app.add_flag("--dry-run", dry_run, "print the cases and the bytes they would move; run nothing");
  app.add_flag("--json", json, "print one JSON object instead of the tables");
  std::string watchdog_text = kWatchdogDefault;
  app.add_option("--watchdog", watchdog_text, kWatchdogHelp);
  bool profile_stages = false;
  app.add_flag("--profile-stages", profile_stages,
               "time the store's stages (vocab/internal/stage_profile.h) in every host-phase "
               "case and add "
               "them, per operation, to its rows (store and mover peer)");
  uint32_t processes = 0;
  app.add_option("--processes", processes,
                 "N: every store is an owner (Store::Serve) this process attaches to "
                 "(Store::Attach): Loads and Saves through the attached store next to the same "
                 "process's DeviceMover alone; lookups from T threads through T attached stores "
                 "next to the owner's own in-process calls, while N - 1 other processes look up "
                 "without pause (default: the store in this process)");
  uint32_t poll_spin_us = ServeOptions().poll_spin_us;
  app.add_option("--poll-spin-us", poll_spin_us,
                 "with --processes: ServeOptions and AttachOptions::poll_spin_us (default 200)");
  uint32_t tp_size = 0;
  app.add_option(
      "--tp-size", tp_size,
      "N: one tensor-parallel group's store, its N ranks in N processes (rank r on the "
      "r-th visible GPU) loading and saving their shares of one prompt at once, per rank "
      "and aggregate GB/s next to N contiguous copies at once; one layout, one --pages "
      "value (default 2048; --quick 16)");
  uint32_t load_split_pages = AttachOptions().load_split_pages;
  app.add_option("--load-split-pages", load_split_pages,
                 "with --processes or --tp-size: AttachOptions::load_split_pages of the attached "
                 "stores (default 256; 0: a Load is one call)");
  std::string mover_polling = "on";
  app.add_option("--mover-polling", mover_polling,
                 "on: the device movers poll a copy's end and enqueue on the calling thread "
                 "(StoreOptions::completion_spin_us, wait_spin_us, inline_dispatch at their "
                 "defaults); off: they sleep at once and hand every operation to their "
                 "dispatcher thread, for the stores and the mover peer alike (default on)");
  std::string lookup_load;  // internal: this process is another engine process's lookups
  app.add_option("--lookup-load", lookup_load)->group("");
  std::string tp_rank_worker;  // internal: this process is a rank of --tp-size
  app.add_option("--tp-rank-worker", tp_rank_worker)->group("");
  if (auto exit = ParseArgs(app, args, io)) return *exit;
  if (!lookup_load.empty()) return RunLookupLoad(lookup_load);
  if (!tp_rank_worker.empty()) return RunTpRank(tp_rank_worker);
  auto usage = [&](const std::string& what) {
    io.err << kName << ": " << what << "\n";
    return kExitUsage;
  };
  uint64_t sizes[3] = {0, 0, 0};
  const std::pair<const char*, std::string*> size_flags[] = {
      {"--host-bytes", &host_text}, {"--device-bytes", &device_text}, {"--disk-bytes", &disk_text}};
  for (int i = 0; i < 3; ++i) {
    auto v = ParseBytes(size_flags[i].first, *size_flags[i].second);
    if (!v.ok()) return usage(v.status().message());
    sizes[i] = *v;
  }
  uint64_t host_bytes = sizes[0], device_bytes = sizes[1], disk_bytes = sizes[2];
  const bool gpu = !cpu && cuda::GpuAvailable();
  if (quick) {
    auto unless_given = [&](const char* flag, auto& value, auto preset) {
      if (app.count(flag) == 0) value = preset;
    };
    unless_given("--pages", pages, std::string("1,16"));
    unless_given("--threads", threads, std::string("1,4"));
    unless_given("--iters", iters, 3);
    unless_given("--disk-iters", disk_iters, 2);
    unless_given("--lookup-iters", lookup_iters, 50);
    unless_given("--host-bytes", host_bytes, uint64_t{512} << 20);
    unless_given("--device-bytes", device_bytes, kGiB + (gpu ? kGpuReserveBytes : 0));
    unless_given("--disk-bytes", disk_bytes, kGiB);
  }
  Config c;
  const std::pair<const char*, int> counts[] = {
      {"--iters", iters}, {"--disk-iters", disk_iters}, {"--lookup-iters", lookup_iters}};
  for (const auto& [flag, value] : counts) {
    if (value < 1 || value > 100000) {
      return usage(std::string(flag) + ": " + std::to_string(value) + " (must be 1 to 100000)");
    }
  }
  if (!(max_seconds >= 0 && max_seconds < 1e7)) {
    return usage("--max-seconds: " + std::to_string(max_seconds) + " (must be 0 to 10000000)");
  }
  if (host_bytes < (uint64_t{16} << 20)) {
    return usage("--host-bytes: " + std::to_string(host_bytes) + " (must be at least 16 MiB)");
  }
  if (device_bytes < (uint64_t{16} << 20)) {
    return usage("--device-bytes: " + std::to_string(device_bytes) + " (must be at least 16 MiB)");
  }
  auto page_list = ParseIntegerList<uint64_t>("--pages", pages, 1, uint64_t{1} << 20);
  if (!page_list.ok()) return usage(page_list.status().message());
  auto thread_list = ParseIntegerList<uint32_t>("--threads", threads, 1, 256);
  if (!thread_list.ok()) return usage(thread_list.status().message());
  for (const std::string& name : Split(layouts)) {
    if (std::find(c.layout_names.begin(), c.layout_names.end(), name) != c.layout_names.end()) {
      continue;
    }
    auto l = ResolveBenchLayout(name);
    if (!l.ok()) return usage(l.status().message());
    c.layout_names.push_back(name);
    c.layouts.push_back(std::move(l).value());
  }
  for (const std::string& p : Split(pools)) {
    if (p != "owned" && p != "registered") {
      return usage("--pools: '" + p + "' in '" + pools + "' (known: owned, registered)");
    }
    if (std::find(c.pools.begin(), c.pools.end(), p) == c.pools.end()) c.pools.push_back(p);
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return usage("--dir: '" + dir + "' is not a folder");
  }
  c.pages = *page_list;
  c.threads = *thread_list;
  c.host_bytes = host_bytes / 4096 * 4096;
  c.device_bytes = device_bytes;
  c.disk_bytes = disk_bytes;
  c.iters = iters;
  c.disk_iters = disk_iters;
  c.lookup_iters = lookup_iters;
  c.dir = dir;
  c.json = json;
  c.quick = quick;
  c.dry_run = dry_run;
  c.profile_stages = profile_stages;
  if (app.count("--processes") > 0) {
    if (processes == 0 || processes > 64) {
      return usage("--processes: " + std::to_string(processes) + " (must be 1 to 64)");
    }
    std::error_code self_ec;
    c.self = std::filesystem::read_symlink("/proc/self/exe", self_ec).string();
    if (processes > 1 && (self_ec || std::filesystem::path(c.self).filename() != "cachepawl")) {
      return usage("--processes " + std::to_string(processes) +
                   ": starts the cachepawl binary again, not '" + c.self + "'");
    }
    c.processes = processes;
    c.poll_spin_us = poll_spin_us;
    if (poll_spin_us > 100000) {
      return usage("--poll-spin-us: " + std::to_string(poll_spin_us) + " (must be at most 100000)");
    }
  }
  if (!free_target_text.empty()) {
    auto v = ParseBytes("--host-free-target", free_target_text);
    if (!v.ok()) return usage(v.status().message());
    if (*v > c.host_bytes / 2) {
      return usage("--host-free-target: " + std::to_string(*v) +
                   " (must be at most half the host tier, " + std::to_string(c.host_bytes / 2) +
                   ")");
    }
    c.host_free_target = *v;
  }
  if (profile_stages) profile::SetEnabled(true);
  if (load_split_pages > (1u << 20)) {
    return usage("--load-split-pages: " + std::to_string(load_split_pages) +
                 " (must be at most 1048576)");
  }
  c.load_split_pages = load_split_pages;
  if (mover_polling != "on" && mover_polling != "off") {
    return usage("--mover-polling: '" + mover_polling + "' (expected on or off)");
  }
  c.mover_polling = mover_polling == "on";
  c.seed = seed;
  c.gpu = gpu;
  if (app.count("--tp-size") > 0) {
    return RunTpCommand(app, c, tp_size, app.count("--pages") > 0 ? "" : (quick ? "16" : "2048"),
                        watchdog_text, io);
  }
  if (c.gpu && device_bytes <= kGpuReserveBytes) {
    return usage("--device-bytes: " + HumanBytes(device_bytes) + " (GPU mode keeps " +
                 HumanBytes(kGpuReserveBytes) + " for staging; give more)");
  }
  // Host memory: defaults sized for a large host shrink to fit this machine (said on stderr);
  // sizes given that cannot fit are refused before anything is allocated (the kernel's OOM
  // killer used to take the bench, silently, on a 24 GiB machine).
  const PinnedMemoryLimits memory = ProbePinnedMemory();
  if (const std::optional<uint64_t> takeable = TakeableMemoryBytes(memory);
      takeable && HostMemoryNeed(c) > *takeable) {
    const bool sizes_given =
        quick || app.count("--host-bytes") > 0 || app.count("--device-bytes") > 0;
    if (!sizes_given) {
      const uint64_t need = HostMemoryNeed(c), step = uint64_t{256} << 20;
      const double f = static_cast<double>(*takeable) / static_cast<double>(need);
      const uint64_t before_host = c.host_bytes, before_device = c.device_bytes;
      c.host_bytes =
          std::max<uint64_t>(512 * kMiB, static_cast<uint64_t>(c.host_bytes * f) / step * step);
      c.device_bytes = std::max<uint64_t>(kGiB + (c.gpu ? kGpuReserveBytes : 0),
                                          static_cast<uint64_t>(c.device_bytes * f) / step * step);
      io.err << kName << ": the default --host-bytes " << HumanBytes(before_host)
             << " --device-bytes " << HumanBytes(before_device) << " need up to "
             << HumanBytes(need) << " of host memory; this machine offers " << HumanBytes(*takeable)
             << ": running with --host-bytes " << HumanBytes(c.host_bytes) << " --device-bytes "
             << HumanBytes(c.device_bytes) << "\n";
    }
    if (Status s = CheckTakeableMemory("--host-bytes " + HumanBytes(c.host_bytes) +
                                           " and --device-bytes " + HumanBytes(c.device_bytes) +
                                           " need up to",
                                       HostMemoryNeed(c), memory,
                                       std::string("twice the host tier") +
                                           (c.gpu ? " and half the device memory"
                                                  : " and 1.5 times --device-bytes (CPU "
                                                    "mode: device pools are host memory)") +
                                           "; give smaller sizes");
        !s.ok()) {
      return usage(s.message());
    }
  }
  const auto watchdog_limit = ParseWatchdogLimit(watchdog_text);
  if (!watchdog_limit.ok()) return usage(watchdog_limit.status().message());
  if (dry_run) {
    DryRun(c, io.out);
    return kExitOk;
  }
  std::optional<StallWatchdog> watchdog;
  if (*watchdog_limit > 0) watchdog.emplace(kName, *watchdog_limit);

  RunInfo info;
  info.command = kName;
  for (const std::string& a : args) info.command += " " + a;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::localtime(&now));
  info.date = date;
  info.device = c.gpu ? cuda::DescribeDevice(0)
                      : "CPU mode (" + (cpu ? std::string("--cpu") : cuda::DescribeDevice(0)) + ")";
  if (c.gpu) {
    if (Status s = cuda::SetDevice(0); !s.ok()) {
      io.err << kName << ": " << s.ToString() << "\n";
      return kExitFailure;
    }
  }
  std::string tmpl = dir + "/cachepawl-bench-store-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return usage("--dir: cannot create a folder in '" + dir + "': " + std::strerror(errno));
  }
  const std::string work = tmpl;
  Report report;
  const auto start = Clock::now();
  c.max_seconds = max_seconds;
  c.started = start;
  for (size_t i = 0; i < c.layouts.size(); ++i) {
    if (Status s = RunLayout(c, i, work, &report, io.err); !s.ok()) {
      report.errors.push_back(c.layout_names[i] + ": " + s.ToString());
    }
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::filesystem::remove_all(work, ec);
  if (json) {
    io.out << ReportJson(c, report, info).dump(1) << "\n";
    PrintSkips(report, io.err);
  } else {
    PrintTables(c, report, info, io.out);
  }
  for (const std::string& e : report.errors) io.err << kName << ": error: " << e << "\n";
  for (const std::string& m : report.mismatches) io.err << kName << ": WRONG BYTES: " << m << "\n";
  return report.errors.empty() && report.mismatches.empty() ? kExitOk : kExitFailure;
}

const CommandRegistration kRegistration(
    "bench store",
    "the Store path (Save, Load, Lookup) vs the device mover and the copy limit, host and disk",
    &RunBenchStore);

}  // namespace
}  // namespace cachepawl::tools
