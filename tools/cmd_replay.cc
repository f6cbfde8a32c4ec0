// cachepawl replay TRACE | --workload NAME [options]
//
// Acts as a serving engine over an embedded store (replay_engine.h), one request at a time or
// --concurrency N at once (replay_runner.h), and reports hit rates per tier against the
// trace's ceiling, throughput, bytes moved, latencies, and every wrong byte it loaded.
#include <fcntl.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "store/store.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "tools/replay_ceiling.h"
#include "tools/replay_report.h"
#include "tools/replay_runner.h"
#include "tools/replay_trace.h"
#include "tools/replay_workloads.h"

namespace cachepawl::tools {
namespace {

constexpr char kName[] = "cachepawl replay";

// "90", "90s", "15m", "2h" -> seconds. False on anything else.
bool ParseDuration(const std::string& text, double* seconds) {
  if (text.empty()) return false;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return false;
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "ms") {
    scale = 1e-3;
  } else if (unit == "m" || unit == "min") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else {
    return false;
  }
  if (!(v >= 0)) return false;
  *seconds = v * scale;
  return true;
}

// A temporary folder removed on destruction, or the user's folder, kept.
class StoreDir {
 public:
  StoreDir() = default;
  StoreDir(const StoreDir&) = delete;
  StoreDir& operator=(const StoreDir&) = delete;
  ~StoreDir() {
    if (remove_ && !path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }

  Status Use(const std::string& dir) {
    if (!dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) return Status::IOError("--dir '" + dir + "': " + ec.message());
      path_ = dir;
      return Status::OK();
    }
    const char* base = std::getenv("TMPDIR");
    std::string templ =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/cachepawl-replay-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) return Status::FromErrno("mkdtemp " + templ, errno);
    path_ = templ;
    remove_ = true;
    return Status::OK();
  }

  const std::string& path() const { return path_; }
  bool temporary() const { return remove_; }

 private:
  std::string path_;
  bool remove_ = false;
};

// "16" -> 16, for --concurrency: a whole number in [1, kMaxReplayConcurrency]. False otherwise.
bool ParseConcurrency(const std::string& text, uint32_t* concurrency) {
  uint32_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < 1 || v > kMaxReplayConcurrency) {
    return false;
  }
  *concurrency = v;
  return true;
}

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

int RunReplayCommand(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Replays a Mooncake-format trace (JSONL: timestamp, input_length, output_length, hash_ids)\n"
      "or a built-in workload against an embedded store, as a serving engine would: lookup,\n"
      "lock, load hits, verify every loaded byte, compute misses, save pages and Mamba states;\n"
      "one request at a time, or --concurrency N in flight at once.\n"
      "Long runs print a progress line to stderr every 5 s.\n"
      "Exit status: 0 when every byte was right and no store call failed, 1 otherwise,\n"
      "2 for bad arguments or input.",
      kName};
  std::string trace_path, workload, layout_name = "jamba-v0.1", dir, soak_text, ns;
  std::string concurrency_text = "1";
  std::string write_policy = "through";
  uint32_t block_size = 512, page_size = 16;
  int64_t track_interval = -1;
  uint64_t device_bytes = 512ull << 20, host_bytes = 1ull << 30, disk_bytes = 4ull << 30;
  uint64_t requests = 0, crash_every = 0, seed = 1, chunk_pages = 128;
  double speed = 0, rate = 5.0;
  bool json = false, skip_bad_lines = false, verbose = false;
  app.add_option("trace", trace_path, "Mooncake-format JSONL trace file");
  app.add_option("--workload,-w", workload, "a built-in workload instead of a trace (below)");
  app.add_option("--layout,-l", layout_name,
                 "model layout: a preset (cachepawl layout --list) or a JSON file (default "
                 "jamba-v0.1)");
  app.add_option("--block-size", block_size, "tokens per trace block id (default 512)");
  app.add_option("--page-size", page_size, "tokens per KV page (default 16)");
  app.add_option("--track-interval", track_interval,
                 "pages between saved Mamba states (default: one block); 0: only at the end of "
                 "each prompt");
  app.add_option("--device-bytes", device_bytes,
                 "the engine's own device pool (L1), e.g. 256M (default 512M)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--host-bytes", host_bytes, "host tier budget (default 1G)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--disk-bytes", disk_bytes, "disk tier budget; 0 disables it (default 4G)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--write-policy", write_policy,
                 "when host entries go to disk: through, selective, back (default through)");
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
  app.add_option("--seed", seed, "seed of built-in workloads and kill points (default 1)");
  app.add_option("--namespace", ns, "namespace of every request (default: empty)");
  app.add_option("--chunk-pages", chunk_pages, "pages per Load / Save call (default 128)");
  app.add_flag("--skip-bad-lines", skip_bad_lines,
               "skip bad trace lines (counted) instead of "
               "stopping at the first");
  app.add_flag("--verbose,-v", verbose, "show the store's informational log lines (stderr)");
  app.add_flag("--json", json, "print one JSON object instead of the table (keys below)");
  std::string crash_child;  // internal: this process is a crash-mode store process
  app.add_option("--crash-child", crash_child)->group("");  // hidden from --help
  app.footer(WorkloadList() + "\n" + ReplayJsonKeysHelp());
  if (auto done = ParseArgs(app, args, io)) return *done;
  // The store logs through spdlog: to stderr, so stdout holds only the report.
  auto logger = std::make_shared<spdlog::logger>(
      "cachepawl", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_level(verbose ? spdlog::level::info : spdlog::level::warn);
  spdlog::set_default_logger(logger);
  auto usage = [&](const std::string& message) {
    io.err << kName << ": " << message << "\n";
    return kExitUsage;
  };
  if (trace_path.empty() == workload.empty()) {
    return usage("give a TRACE file or --workload NAME (exactly one)");
  }
  if (Status s = ValidateBlockAndPageSize(block_size, page_size); !s.ok()) {
    return usage(s.message());
  }
  if (track_interval < -1) {
    return usage("--track-interval: " + std::to_string(track_interval) + " (must be >= 0)");
  }
  const uint32_t track =
      track_interval < 0 ? block_size / page_size : static_cast<uint32_t>(track_interval);
  double soak_seconds = 0;
  if (!soak_text.empty() && !ParseDuration(soak_text, &soak_seconds)) {
    return usage("--soak: '" + soak_text + "' (expected a duration such as 90s, 15m, 2h)");
  }
  if (chunk_pages == 0) return usage("--chunk-pages: 0 (must be > 0)");
  uint32_t concurrency = 1;
  if (!ParseConcurrency(concurrency_text, &concurrency)) {
    return usage("--concurrency: '" + concurrency_text + "' (expected a whole number from 1 to " +
                 std::to_string(kMaxReplayConcurrency) + ")");
  }
  if (concurrency > 1 && crash_every > 0) {
    return usage("--concurrency " + concurrency_text +
                 " with --crash-every: crash mode runs one request at a time (use --concurrency "
                 "1)");
  }
  if (device_bytes == 0) return usage("--device-bytes: 0 (the engine needs a device pool)");
  WritePolicy policy;
  if (write_policy == "through") {
    policy = WritePolicy::kWriteThrough;
  } else if (write_policy == "selective") {
    policy = WritePolicy::kWriteThroughSelective;
  } else if (write_policy == "back") {
    policy = WritePolicy::kWriteBack;
  } else {
    return usage("--write-policy: '" + write_policy + "' (expected through, selective or back)");
  }
  auto layout = ResolveLayout(layout_name, page_size);
  if (!layout.ok()) return usage("--layout: " + layout.status().ToString());

  // The requests.
  ReplayReport report;
  RequestSource source;
  if (!trace_path.empty()) {
    TraceParseOptions po;
    po.skip_bad_lines = skip_bad_lines;
    po.max_requests = requests;
    auto trace = LoadTraceFile(trace_path, po);
    if (!trace.ok()) return usage(trace.status().ToString());
    if (trace->bad_lines > 0 && crash_child.empty()) {
      io.err << kName << ": skipped " << trace->bad_lines << " bad lines of " << trace_path
             << "; the first:\n";
      for (const std::string& e : trace->errors) io.err << "  " << e << "\n";
    }
    report.source = trace_path;
    report.bad_trace_lines = trace->bad_lines;
    source = [requests = std::move(trace->requests)](uint64_t) { return requests; };
  } else {
    WorkloadOptions wo;
    wo.seed = seed;
    wo.requests = requests;
    wo.block_size_tokens = block_size;
    wo.requests_per_second = rate;
    auto first = GenerateWorkload(workload, wo);
    if (!first.ok()) return usage("--workload: " + first.status().ToString());
    report.source = "workload " + workload;
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

  // The store.
  StoreDir store_dir;
  if (Status s = store_dir.Use(dir); !s.ok()) return usage(s.ToString());
  StoreOptions so;
  so.layout = *layout;
  so.page_size_tokens = page_size;
  so.host_bytes = host_bytes;
  so.disk_bytes = disk_bytes;
  so.disk_dir = disk_bytes > 0 ? store_dir.path() : "";
  so.write_policy = policy;
  so.device_pool_bytes = device_bytes;
  so.track_interval_pages = track;
  if (Status s = so.Validate(); !s.ok()) return usage(s.ToString());
  StoreFactory open_store = [so] { return Store::Open(so); };

  ReplayEngineOptions eo;
  eo.ns = ns;
  eo.block_size_tokens = block_size;
  eo.track_interval_pages = track;
  eo.chunk_pages = chunk_pages;
  ReplayRunOptions ro;
  ro.speed = speed;
  ro.soak_seconds = soak_seconds;
  ro.concurrency = concurrency;
  ro.crash_every = crash_every;
  ro.seed = seed;
  ro.progress = &io.err;  // a line every 5 s on long runs

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
  CeilingOptions co;
  co.block_size_tokens = block_size;
  co.page_size_tokens = page_size;
  co.track_interval_pages = track;
  co.hybrid = layout->has_ssm();
  auto ceiling = ComputeCeiling(run->replayed, co);
  if (!ceiling.ok()) return usage(ceiling.status().ToString());

  report.layout = layout_name;
  report.page_size_tokens = page_size;
  report.block_size_tokens = block_size;
  report.track_interval_pages = track;
  report.device_bytes = device_bytes;
  report.host_bytes = host_bytes;
  report.disk_bytes = disk_bytes;
  report.kv_page_bytes = layout->KvPageBytes();
  report.state_bytes = layout->has_ssm() ? layout->MambaSlotBytes() : 0;
  report.full_record_bytes = layout->RecordBytes(Kind::kKV);
  report.window_record_bytes = layout->RecordBytes(Kind::kWindowKV);
  report.window_pages = layout->Stores(Kind::kWindowKV) ? layout->WindowPages() : 0;
  report.store_dir = store_dir.temporary() ? "" : store_dir.path();
  report.wall_seconds = run->wall_seconds;
  report.concurrency = run->concurrency;
  report.crashes = run->crashes;
  report.ceiling = *ceiling;
  report.totals = std::move(run->totals);
  report.store = run->store;
  if (json) {
    io.out << ReplayReportJson(report) << "\n";
  } else {
    PrintReplayTable(report, io.out);
  }
  const bool ok = report.totals.wrong_bytes == 0 && report.totals.store_errors == 0;
  return ok ? kExitOk : kExitFailure;
}

const CommandRegistration kRegistration("replay",
                                        "replay a trace or workload against a store, verifying "
                                        "every byte",
                                        &RunReplayCommand);

}  // namespace
}  // namespace cachepawl::tools
