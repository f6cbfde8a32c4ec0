// cachepawl replay TRACE | --workload NAME [options]
//
// Acts as a serving engine over an embedded store (replay_engine.h), one request at a time or
// --concurrency N at once (replay_runner.h), and reports hit rates per tier against the
// trace's ceiling, throughput, bytes moved, latencies, and every wrong byte it loaded.
// --sweep runs the requests over tiers sized at fractions of their working set with each
// eviction policy, and prints them side by side (replay_sweep.h).
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/gpu_runtime.h"
#include "layouts/layout_presets.h"
#include "layouts/layout_tp.h"
#include "store/store.h"
#include "tools/cli_args.h"
#include "tools/cli_values.h"
#include "tools/command.h"
#include "tools/parse_policies.h"
#include "tools/replay/replay_ceiling.h"
#include "tools/replay/replay_processes.h"
#include "tools/replay/replay_replicas.h"
#include "tools/replay/replay_report.h"
#include "tools/replay/replay_runner.h"
#include "tools/replay/replay_setup.h"
#include "tools/replay/replay_sweep.h"
#include "tools/replay/replay_tp.h"
#include "tools/replay/replay_trace.h"
#include "tools/replay/replay_workloads.h"

namespace cachepawl::tools {
namespace {

constexpr char kName[] = "cachepawl replay";

// This program's path ("" when /proc/self/exe cannot be read).
std::string SelfExecutable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string WorkloadList() {
  std::string out = "built-in workloads (--workload NAME):\n";
  for (const WorkloadInfo& w : Workloads()) {
    out += "  " + w.name + std::string(w.name.size() < 15 ? 15 - w.name.size() : 1, ' ') +
           w.description + " (" + std::to_string(w.default_requests) + " requests)\n";
  }
  return out;
}

// --sweep: every fraction with every policy, one table (or JSON object).
int RunSweepCommand(const ReplaySetup& setup, const RequestSource& source,
                    const ReplayRunOptions& options, const std::vector<double>& fractions,
                    bool json, CommandIo& io) {
  auto sweep = RunSweep(setup, source, options, fractions);
  if (!sweep.ok()) {
    io.err << kName << ": " << sweep.status().ToString() << "\n";
    return kExitUsage;
  }
  if (json) {
    io.out << SweepJson(*sweep).dump(2) << "\n";
  } else {
    PrintSweepTable(*sweep, io.out);
  }
  return sweep->ok() ? kExitOk : kExitFailure;
}

int RunReplayCommand(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Replays a Mooncake-format trace (JSONL: timestamp, input_length, output_length, hash_ids)\n"
      "or a built-in workload against an embedded store, as a serving engine would: lookup,\n"
      "lock, load hits, verify every loaded byte, compute misses, save pages and Mamba states;\n"
      "one request at a time, or --concurrency N in flight at once. --sweep compares the\n"
      "eviction policies over tier sizes (below).\n"
      "Long runs print a progress line to stderr every 5 s.\n"
      "Exit status: 0 when every byte was right, no store call failed and at least one request\n"
      "was replayed (crash mode: and something was verified after the kills), 1 otherwise,\n"
      "2 for bad arguments or input.",
      kName};
  std::string trace_path, workload, layout_name = "jamba-v0.1", dir, soak_text;
  std::string concurrency_text = "1";
  std::string write_policy = "through";
  std::string remote_write_policy = "through", replica_text;
  uint32_t replica_processes = 1;
  std::string eviction_policy = EvictionPolicyName(StoreOptions().eviction_policy);
  std::string sweep_fractions = kDefaultSweepFractions;
  ReplaySetup setup;
  int64_t track_interval = -1;
  uint64_t requests = 0, crash_every = 0, seed = 1;
  double speed = 0, rate = 5.0;
  double kill_during_open = ReplayRunOptions().kill_during_open_fraction;
  bool json = false, skip_bad_lines = false, verbose = false, sweep = false;
  app.add_option("trace", trace_path, "Mooncake-format JSONL trace file");
  app.add_option("--workload,-w", workload, "a built-in workload instead of a trace (below)");
  app.add_option("--layout,-l", layout_name,
                 "model layout: a preset (cachepawl layout --list) or a JSON file (default "
                 "jamba-v0.1)");
  app.add_option("--block-size", setup.block_size_tokens,
                 "tokens per trace block id (default 512)");
  app.add_option("--page-size", setup.page_size_tokens, "tokens per KV page (default 16)");
  app.add_option("--track-interval", track_interval,
                 "pages between saved Mamba states (default: one block); 0: only at the end of "
                 "each prompt");
  app.add_option("--device-bytes", setup.device_bytes,
                 "the engine's own device pool (L1), e.g. 256M (default 512M)")
      ->transform(ByteCount());
  app.add_option("--host-bytes", setup.host_bytes, "host tier budget (default 1G)")
      ->transform(ByteCount());
  app.add_option("--disk-bytes", setup.disk_bytes, "disk tier budget; 0 disables it (default 4G)")
      ->transform(ByteCount());
  app.add_option("--write-policy", write_policy,
                 "when host entries go to disk: through, selective, back (default through)");
  CLI::Option* policy_option =
      app.add_option("--policy", eviction_policy,
                     "which entries leave a full tier first: lru or hybrid (default " +
                         eviction_policy + ", the store's)");
  app.add_flag("--sweep", sweep,
               "run over tier sizes at fractions of the working set, with each --policy, and "
               "print them side by side (below)");
  CLI::Option* fractions_option = app.add_option(
      "--sweep-fractions", sweep_fractions,
      "--sweep's fractions of the working set, each in (0, 4] (default " + sweep_fractions + ")");
  app.add_option("--dir", dir,
                 "put the store's files here and keep them (default: a temporary folder, "
                 "removed at exit)");
  app.add_option("--requests,-n", requests, "replay at most this many requests per pass");
  app.add_option("--speed", speed,
                 "replay timestamps at this multiple of real time (default 0: as fast as "
                 "possible; ignored with --crash-every)");
  app.add_option("--rate", rate, "arrivals per second of built-in workloads (default 5)");
  app.add_option("--soak", soak_text, "loop the workload for this long (90s, 15m, 2h)");
  app.add_option("--concurrency,-c", concurrency_text,
                 "requests in flight at once, 1 to " + std::to_string(kMaxReplayConcurrency) +
                     ": N engine threads share the L1 and the store, each taking the next "
                     "request in trace order (default 1)")
      ->type_name("N");
  app.add_option("--crash-every", crash_every,
                 "run the store in a child process SIGKILLed about every N requests, reopen it "
                 "and keep verifying; one request at a time (refused with --concurrency > 1)");
  app.add_option("--kill-during-open", kill_during_open,
                 "with --crash-every: the fraction of store processes killed while they open the "
                 "store (catalog recovery, index rebuild) instead of after a request")
      ->type_name("FRACTION")
      ->capture_default_str();
  app.add_option("--seed", seed, "seed of built-in workloads and kill points (default 1)");
  app.add_option("--namespace", setup.ns, "namespace of every request (default: empty)");
  app.add_option("--chunk-pages", setup.chunk_pages, "pages per Load / Save call (default 128)");
  app.add_option("--max-prompt-tokens", setup.max_prompt_tokens,
                 "the longest prompt replayed (StoreOptions::max_prompt_tokens): a trace line "
                 "past it is a bad line (default " +
                     std::to_string(kDefaultMaxPromptTokens) + ")");
  app.add_flag("--wipe-on-layout-mismatch", setup.wipe_on_layout_mismatch,
               "--dir: a disk catalog written for another layout is wiped instead of refused");
  app.add_flag("--wipe-unreadable-catalog", setup.wipe_unreadable_catalog,
               "--dir: a disk catalog that cannot be read is removed instead of refused");
  app.add_option("--remote", setup.remote_seeds,
                 "a remote tier shared with other replicas: redis://host:port[,host:port...]");
  app.add_option("--remote-write-policy", remote_write_policy,
                 "what this replica writes to the remote tier: none, through, selective, evict "
                 "(default through)");
  app.add_option("--replicas", replica_processes,
                 "N: run N replicas at once, each a store process of its own (this program run "
                 "with --replica I/N), sharing --remote; prints each one's hits");
  app.add_option("--replica", replica_text,
                 "I/N: this is replica I of N engine replicas behind a round-robin router: it "
                 "replays requests I, I+N, I+2N... (with --remote the replicas share prefixes)");
  app.add_flag("--skip-bad-lines", skip_bad_lines,
               "skip bad trace lines (counted) instead of "
               "stopping at the first");
  app.add_flag("--verbose,-v", verbose, "show the store's informational log lines (stderr)");
  app.add_flag("--json", json, "print one JSON object instead of the table (keys below)");
  uint32_t processes = 1, tp_size = 0;
  uint64_t kill_rank_every = 0;
  std::string tp_rank_worker;  // internal: this process is a rank of --tp-size
  app.add_option("--tp-rank-worker", tp_rank_worker)->group("");
  app.add_option("--tp-size", tp_size,
                 "N: a tensor-parallel deployment: one group store (its owner in this process, "
                 "which also schedules: one lookup per request), N rank processes each loading "
                 "and saving its shares of every request, every byte checked in its rank; "
                 "every rank's depth must equal the scheduler's (one request at a time)");
  app.add_option("--kill-rank-every", kill_rank_every,
                 "with --tp-size: SIGKILL a random rank process during about one request in K, "
                 "and start it again");
  bool kill_owner = false;
  std::string attach;
  app.add_option("--processes", processes,
                 "N: one store shared by N engine processes: an owner serves it (in this process; "
                 "with --kill-owner, a cachepawl serve process), N processes (this program run "
                 "with --replica I/N --attach SOCKET) replay their share through attached stores; "
                 "with --crash-every their store processes are SIGKILLed");
  app.add_flag("--kill-owner", kill_owner,
               "with --processes and --crash-every: the owner runs as cachepawl serve and is "
               "SIGKILLed every 2-6 s and started again on the same folder");
  app.add_option("--attach", attach,
                 "SOCKET: replay through a store attached to the owner serving there "
                 "(Store::Attach) instead of opening one");
  std::string crash_child;  // internal: this process is a crash-mode store process
  app.add_option("--crash-child", crash_child)->group("");  // hidden from --help
  app.footer(WorkloadList() + "\n" + ReplayJsonKeysHelp() + "\n" + SweepHelp());
  if (auto done = ParseArgs(app, args, io)) return *done;
  if (!tp_rank_worker.empty()) return RunTpReplayRank(tp_rank_worker);
  LogStoreToStderr(verbose);
  auto usage = [&](const std::string& message) {
    io.err << kName << ": " << message << "\n";
    return kExitUsage;
  };
  if (trace_path.empty() == workload.empty()) {
    return usage("give a TRACE file or --workload NAME (exactly one)");
  }
  const uint32_t block_size = setup.block_size_tokens, page_size = setup.page_size_tokens;
  if (Status s = ValidateBlockAndPageSize(block_size, page_size); !s.ok()) {
    return usage(s.message());
  }
  if (track_interval < -1 || track_interval > int64_t{UINT32_MAX}) {
    return usage("--track-interval: " + std::to_string(track_interval) + " (must be from 0 to " +
                 std::to_string(UINT32_MAX) + ")");
  }
  setup.track_interval_pages =
      track_interval < 0 ? block_size / page_size : static_cast<uint32_t>(track_interval);
  double soak_seconds = 0;
  if (!soak_text.empty()) soak_seconds = ParseDuration(soak_text).value_or(-1);
  if (soak_seconds < 0) {
    return usage("--soak: '" + soak_text + "' (expected a duration such as 90s, 15m, 2h)");
  }
  if (setup.chunk_pages == 0) return usage("--chunk-pages: 0 (must be > 0)");
  const uint32_t concurrency =
      ParseBoundedUint32(concurrency_text, 1, kMaxReplayConcurrency).value_or(0);
  if (concurrency == 0) {
    return usage("--concurrency: '" + concurrency_text + "' (expected a whole number from 1 to " +
                 std::to_string(kMaxReplayConcurrency) + ")");
  }
  if (concurrency > 1 && crash_every > 0) {
    return usage("--concurrency " + concurrency_text +
                 " with --crash-every: crash mode runs one request at a time (use --concurrency "
                 "1)");
  }
  if (setup.device_bytes == 0) {
    return usage("--device-bytes: 0 (the engine needs a device pool)");
  }
  if (!ParseWritePolicy(write_policy, &setup.write_policy)) {
    return usage("--write-policy: '" + write_policy + "' (expected through, selective or back)");
  }
  if (remote_write_policy == "none") {
    setup.remote_write_policy = RemoteWritePolicy::kNone;
  } else if (remote_write_policy == "through") {
    setup.remote_write_policy = RemoteWritePolicy::kWriteThrough;
  } else if (remote_write_policy == "selective") {
    setup.remote_write_policy = RemoteWritePolicy::kSelective;
  } else if (remote_write_policy == "evict") {
    setup.remote_write_policy = RemoteWritePolicy::kOnEvict;
  } else {
    return usage("--remote-write-policy: '" + remote_write_policy +
                 "' (expected none, through, selective or evict)");
  }
  if (processes == 0 || processes > 64) {
    return usage("--processes: " + std::to_string(processes) + " (expected 1 to 64)");
  }
  if (app.count("--tp-size") > 0) {
    const std::pair<bool, const char*> refused[] = {
        {tp_size == 0 || tp_size > 8, "must be 1 to 8"},
        {processes > 1, "with --processes (the ranks are the processes)"},
        {crash_every > 0, "with --crash-every (--kill-rank-every kills ranks)"},
        {replica_processes > 1 || !replica_text.empty(), "with --replicas"},
        {sweep, "with --sweep"},
        {concurrency != 1, "with --concurrency (one request at a time)"},
        {!setup.remote_seeds.empty(), "with --remote"},
        {!soak_text.empty(), "with --soak (one pass of the requests)"}};
    for (const auto& [given, why] : refused) {
      if (given) return usage("--tp-size " + std::to_string(tp_size) + ": " + why);
    }
  } else if (kill_rank_every > 0) {
    return usage("--kill-rank-every: needs --tp-size");
  }
  if (kill_owner && (processes < 2 || crash_every == 0)) {
    return usage(
        "--kill-owner: needs --processes N (N >= 2) and --crash-every K (a client "
        "process that finds the owner gone is started again by its crash-mode parent)");
  }
  if (processes > 1 || !attach.empty()) {
    const std::pair<bool, const char*> refused[] = {
        {replica_processes > 1, "with --replicas"},
        {sweep, "with --sweep"},
        {!setup.remote_seeds.empty(), "with --remote (the owner's options are its own)"},
        {processes > 1 && !attach.empty(), "--attach with --processes"}};
    for (const auto& [given, why] : refused) {
      if (given) return usage(std::string(processes > 1 ? "--processes " : "--attach ") + why);
    }
  }
  if (replica_processes == 0 || replica_processes > 64) {
    return usage("--replicas: " + std::to_string(replica_processes) + " (expected 1 to 64)");
  }
  if (replica_processes > 1) {
    const std::pair<bool, const char*> refused[] = {
        {setup.remote_seeds.empty(), "without --remote: the replicas would share nothing"},
        {!replica_text.empty(), "with --replica: each replica gets its own"},
        {crash_every > 0, "with --crash-every"},
        {sweep, "with --sweep"},
        {!dir.empty(), "with --dir: each replica has a temporary folder"}};
    for (const auto& [given, why] : refused) {
      if (given) return usage(std::string("--replicas ") + why);
    }
    const std::string self = SelfExecutable();
    if (std::filesystem::path(self).filename() != "cachepawl") {
      return usage("--replicas: runs the cachepawl binary, not '" + self + "'");
    }
    std::vector<std::string> child_args;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--replicas") {
        ++i;  // and its value
      } else if (args[i].rfind("--replicas=", 0) != 0 && args[i] != "--json") {
        child_args.push_back(args[i]);
      }
    }
    return RunReplicas(self, child_args, replica_processes, json, io.out, io.err);
  }
  uint32_t replica = 0, replicas = 1;
  if (!replica_text.empty()) {
    const size_t slash = replica_text.find('/');
    const auto index = ParseBoundedUint32(replica_text.substr(0, slash), 0, 1023);
    const auto count = slash == std::string::npos
                           ? std::nullopt
                           : ParseBoundedUint32(replica_text.substr(slash + 1), 1, 1024);
    if (!index || !count || *index >= *count) {
      return usage("--replica: '" + replica_text + "' (expected I/N with 0 <= I < N <= 1024)");
    }
    replica = *index;
    replicas = *count;
  }
  if (!ParseEvictionPolicy(eviction_policy, &setup.eviction_policy)) {
    return usage("--policy: '" + eviction_policy + "' (expected lru or hybrid)");
  }
  std::vector<double> fractions;
  if (sweep) {
    const std::pair<bool, const char*> refused[] = {
        {policy_option->count() > 0, "--policy: a sweep runs every policy"},
        {!dir.empty(), "--dir: each run of a sweep has a fresh temporary folder"},
        {!soak_text.empty(), "--soak: a sweep replays the requests once per run"},
        {crash_every > 0, "--crash-every: a sweep runs its stores in this process"}};
    for (const auto& [given, why] : refused) {
      if (given) return usage(std::string("--sweep with ") + why);
    }
    auto parsed = ParseSweepFractions(sweep_fractions);
    if (!parsed.ok()) return usage(parsed.status().message());
    fractions = std::move(parsed).value();
  } else if (fractions_option->count() > 0) {
    return usage("--sweep-fractions '" + sweep_fractions + "' without --sweep");
  }
  auto layout = ResolveLayout(layout_name, page_size);
  if (!layout.ok()) return usage("--layout: " + layout.status().ToString());
  setup.layout_name = layout_name;
  setup.layout = *layout;

  // The requests.
  RequestSource source;
  if (!trace_path.empty()) {
    TraceParseOptions po;
    po.skip_bad_lines = skip_bad_lines;
    po.max_requests = requests;
    po.block_size_tokens = block_size;
    po.max_prompt_tokens = setup.max_prompt_tokens;
    auto trace = LoadTraceFile(trace_path, po);
    if (!trace.ok()) return usage(trace.status().ToString());
    if (trace->bad_lines > 0 && crash_child.empty()) {
      io.err << kName << ": skipped " << trace->bad_lines << " bad lines of " << trace_path
             << "; the first:\n";
      for (const std::string& e : trace->errors) io.err << "  " << e << "\n";
    }
    setup.source = trace_path;
    setup.bad_trace_lines = trace->bad_lines;
    source = [requests = std::move(trace->requests)](uint64_t) { return requests; };
  } else {
    WorkloadOptions wo;
    wo.seed = seed;
    wo.requests = requests;
    wo.block_size_tokens = block_size;
    wo.requests_per_second = rate;
    auto first = GenerateWorkload(workload, wo);
    if (!first.ok()) return usage("--workload: " + first.status().ToString());
    setup.source = "workload " + workload;
    // Pass k: a fresh draw (seed + k) whose block ids do not meet earlier passes'.
    source = [wo, workload, first = std::move(first).value()](uint64_t pass) {
      if (pass == 0) return first;
      WorkloadOptions o = wo;
      o.seed = wo.seed + pass;
      auto next = GenerateWorkload(workload, o).value();
      for (TraceRequest& r : next) {
        for (uint64_t& id : r.hash_ids) id += pass << 40;
      }
      return next;
    };
  }

  if (replicas > 1) {  // round robin: this replica's share of every pass
    setup.source +=
        " (replica " + std::to_string(replica) + " of " + std::to_string(replicas) + ")";
    source = [inner = std::move(source), replica, replicas](uint64_t pass) {
      std::vector<TraceRequest> all = inner(pass), mine;
      for (size_t i = replica; i < all.size(); i += replicas) mine.push_back(std::move(all[i]));
      return mine;
    };
  }

  ReplayRunOptions ro;
  ro.speed = speed;
  ro.soak_seconds = soak_seconds;
  ro.concurrency = concurrency;
  ro.crash_every = crash_every;
  ro.kill_during_open_fraction = kill_during_open;
  ro.seed = seed;
  ro.progress = &io.err;  // a line every 5 s on long runs
  if (Status s = ro.Validate(); !s.ok()) return usage(s.ToString());
  if (sweep) return RunSweepCommand(setup, source, ro, fractions, json, io);

  // The store.
  ReplayStoreDir store_dir;
  if (Status s = store_dir.Use(dir); !s.ok()) return usage(s.ToString());
  const StoreOptions so = setup.StoreOptionsIn(store_dir.path());
  if (Status s = so.Validate(); !s.ok()) return usage(s.ToString());
  StoreFactory open_store = [so] { return Store::Open(so); };
  const ReplayEngineOptions eo = setup.EngineOptions();
  if (tp_size > 0) {
    TpReplayRun tr;
    tr.tp_size = tp_size;
    tr.whole = setup.layout;
    tr.owner = so;
    tr.block_size_tokens = block_size;
    tr.device_bytes = setup.device_bytes;
    tr.gpu = so.cuda_device >= 0 && cuda::GpuAvailable();
    tr.self = SelfExecutable();
    tr.source_name = setup.source;
    tr.seed = seed;
    tr.kill_rank_every = kill_rank_every;
    if (std::filesystem::path(tr.self).filename() != "cachepawl") {
      return usage("--tp-size: runs the cachepawl binary, not '" + tr.self + "'");
    }
    if (auto rank = ShardLayout(setup.layout, tp_size, 0); !rank.ok()) {
      return usage("--tp-size " + std::to_string(tp_size) + ": " + rank.status().message());
    }
    return RunTpReplay(tr, source, io.out, io.err);
  }
  if (processes > 1) {
    const std::string self = SelfExecutable();
    if (std::filesystem::path(self).filename() != "cachepawl") {
      return usage("--processes: runs the cachepawl binary, not '" + self + "'");
    }
    ProcessesRun pr;
    pr.processes = processes;
    pr.kill_owner = kill_owner;
    pr.json = json;
    pr.seed = seed;
    pr.owner = so;
    pr.serve_args = {"--dir",          store_dir.path(),
                     "--layout",       layout_name,
                     "--page-size",    std::to_string(page_size),
                     "--host-bytes",   std::to_string(setup.host_bytes),
                     "--disk-bytes",   std::to_string(setup.disk_bytes),
                     "--write-policy", write_policy};
    std::vector<std::string> child_args;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--processes" || args[i] == "--dir") {
        ++i;  // and its value
      } else if (args[i] != "--kill-owner" && args[i] != "--json" &&
                 args[i].rfind("--processes=", 0) != 0 && args[i].rfind("--dir=", 0) != 0) {
        child_args.push_back(args[i]);
      }
    }
    return RunProcesses(self, child_args, pr, io.out, io.err);
  }
  if (!attach.empty()) {
    AttachOptions ao;
    ao.socket_path = attach;
    ao.layout = so.layout;
    ao.cuda_device = so.cuda_device;
    ao.device_pool_bytes = so.device_pool_bytes;
    ao.staging_bytes = so.staging_bytes;
    // An owner being restarted (--kill-owner): attach again for up to 60 s.
    open_store = [ao]() -> StatusOr<std::unique_ptr<Store>> {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (;;) {
        auto store = Store::Attach(ao);
        if (store.ok() || !store.status().IsUnavailable() ||
            std::chrono::steady_clock::now() > deadline) {
          return store;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    };
  }

  if (!crash_child.empty()) {
    auto start = CrashChildStart::Parse(crash_child);
    if (!start) return usage("--crash-child: '" + crash_child + "'");
    RunCrashChild(*start, open_store, eo, source, ro);
  }
  // Crash mode: each store process is this program run afresh (not a fork that goes on
  // running), when this program is the cachepawl binary.
  const std::string self = SelfExecutable();
  if (crash_every > 0 && std::filesystem::path(self).filename() == "cachepawl") {
    std::vector<std::string> child_args = {self, "replay"};
    child_args.insert(child_args.end(), args.begin(), args.end());
    if (dir.empty()) {
      child_args.push_back("--dir");
      child_args.push_back(store_dir.path());
    }
    ro.spawn_child = [child_args](const CrashChildStart& start) -> StatusOr<pid_t> {
      std::vector<std::string> argv_strings = child_args;
      argv_strings.push_back("--crash-child");
      argv_strings.push_back(start.ToString());
      std::vector<char*> argv;
      for (std::string& a : argv_strings) argv.push_back(a.data());
      argv.push_back(nullptr);
      const pid_t pid = ::fork();
      if (pid < 0) return Status::FromErrno("fork", errno);
      if (pid == 0) {
        ::fcntl(start.report_fd, F_SETFD, 0);  // the report pipe survives exec
        ::execv(argv[0], argv.data());
        _exit(127);
      }
      return pid;
    };
  }

  auto run = RunReplay(open_store, eo, source, ro);
  if (!run.ok()) {
    io.err << kName << ": " << run.status().ToString() << "\n";
    const bool bad_input = run.status().IsInvalidArgument() || run.status().IsIncompatible() ||
                           run.status().IsNoSpace() || run.status().IsNotFound();
    return bad_input ? kExitUsage : kExitFailure;
  }
  auto report =
      ReplayReportOf(setup, std::move(run).value(), store_dir.temporary() ? "" : store_dir.path());
  if (!report.ok()) return usage(report.status().ToString());
  if (json) {
    io.out << ReplayReportJson(*report) << "\n";
  } else {
    PrintReplayTable(*report, io.out);
  }
  return report->Failure().empty() ? kExitOk : kExitFailure;
}

const CommandRegistration kRegistration("replay",
                                        "replay a trace or workload against a store, verifying "
                                        "every byte",
                                        &RunReplayCommand);

}  // namespace
}  // namespace cachepawl::tools
