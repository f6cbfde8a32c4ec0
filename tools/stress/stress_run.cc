// RunStress: the store, the prompt pool, the threads and the watchdog of a stress run
// (tools/stress/stress.h).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "layouts/layout_presets.h"
#include "store/store.h"
#include "tools/replay/replay_setup.h"
#include "tools/stress/stress.h"
#include "tools/stress/stress_prompts.h"
#include "tools/stress/stress_watchdog.h"
#include "tools/stress/stress_worker.h"
#include "tools/thread_dump.h"

namespace cachepawl::tools {

const char* StressOpName(StressOp op) {
  switch (op) {
    case StressOp::kLookup:
      return "lookup";
    case StressOp::kLock:
      return "lock";
    case StressOp::kUnlock:
      return "unlock";
    case StressOp::kLoad:
      return "load";
    case StressOp::kSave:
      return "save";
    case StressOp::kPrefetch:
      return "prefetch";
    case StressOp::kCancel:
      return "cancel";
    case StressOp::kFenceWait:
      return "fence wait";
    case StressOp::kStats:
      return "stats";
    case StressOp::kStuck:
      return "stuck (test hook)";
    case StressOp::kFinish:
      return "finish";
    case StressOp::kClose:
      return "close";
  }
  return "unknown";
}

ModelLayout StressHybridLayout(uint32_t page_size_tokens) {
  ModelLayout l;
  l.model = std::string("stress/") + kStressLayoutName;
  l.num_layers = 8;
  l.page_size_tokens = page_size_tokens;
  // Two full-attention layers and one sliding-window layer of 4 pages (8 KiB of K+V each per
  // 16-token page), five Mamba-2 layers (a ~48 KiB state).
  l.attention_layers = {{0, 2, 64, DType::kBf16, 0},
                        {3, 2, 64, DType::kBf16, 0},
                        {6, 2, 64, DType::kBf16, 4 * page_size_tokens}};
  for (uint32_t i : {1u, 2u, 4u, 5u, 7u}) {
    l.ssm_layers.push_back({i, "mamba2", {256, 3}, DType::kBf16, {4, 16, 32}, DType::kFp32});
  }
  return l;
}

StatusOr<ModelLayout> ResolveStressLayout(const std::string& name, uint32_t page_size_tokens) {
  if (name == kStressLayoutName) return StressHybridLayout(page_size_tokens);
  auto layout = ResolveLayout(name, page_size_tokens);
  if (!layout.ok()) {
    return Status::InvalidArgument("--layout: '" + name + "' (" + layout.status().message() +
                                   "; or " + kStressLayoutName + ")");
  }
  return layout;
}

Status StressOptions::Validate() const {
  auto bad = [](const std::string& flag, const std::string& value, const std::string& why) {
    std::string message = flag;
    message.append(": ").append(value).append(" (").append(why).append(")");
    return Status::InvalidArgument(message);
  };
  if (threads < 1 || threads > 1024) {
    return bad("--threads", std::to_string(threads), "must be in [1, 1024]");
  }
  if (!(duration_seconds > 0)) {
    return bad("--duration", std::to_string(duration_seconds) + " s", "must be > 0");
  }
  if (!(watchdog_seconds > 0)) {
    return bad("--watchdog", std::to_string(watchdog_seconds) + " s", "must be > 0");
  }
  if (device_bytes == 0) return bad("--device-bytes", "0", "the threads need device slots");
  if (host_bytes < (1u << 20) || host_bytes % 4096 != 0) {
    return bad("--host-bytes", std::to_string(host_bytes),
               "must be at least 1 MiB and a multiple of 4096");
  }
  if (families == 0 || prompts_per_family == 0 || namespaces == 0) {
    return bad("prompt pool", "0 families, prompts or namespaces", "must each be >= 1");
  }
  if (max_pages < 4) return bad("max_pages", std::to_string(max_pages), "must be >= 4");
  if (Status s = layout.Validate(); !s.ok()) return bad("--layout", layout_name, s.message());
  return Status::OK();
}

namespace {

StoreOptions StressStoreOptions(const StressOptions& o, const std::string& dir) {
  StoreOptions so;
  so.layout = o.layout;
  so.page_size_tokens = o.layout.page_size_tokens;
  so.host_bytes = o.host_bytes;
  // The evict-ahead thread races the engine threads too.
  so.host_free_target_bytes = o.host_bytes / 8 / 4096 * 4096;
  so.disk_bytes = o.disk_bytes;
  so.disk_dir = o.disk_bytes > 0 ? dir : "";
  so.write_policy = o.write_policy;
  so.eviction_policy = o.eviction_policy;
  so.device_pool_bytes = o.device_bytes;
  so.track_interval_pages = 4;
  so.save_chunk_entries = 8;  // Saves of more entries run as a pipeline of operations
  return so;
}

uint64_t TotalOps(const std::deque<StressHeartbeat>& beats) {
  uint64_t n = 0;
  for (const StressHeartbeat& b : beats) {
    for (int op = 0; op < kNumRandomStressOps; ++op) n += b.done(static_cast<StressOp>(op));
  }
  return n;
}

}  // namespace

StatusOr<StressReport> RunStress(const StressOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  ReplayStoreDir dir;
  CACHEPAWL_RETURN_IF_ERROR(dir.Use(options.dir));
  const StoreOptions so = StressStoreOptions(options, dir.path());
  CACHEPAWL_RETURN_IF_ERROR(so.Validate());
  CACHEPAWL_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(so));
  const StressShape shape = StressShape::Of(options.layout, options.host_bytes, options.disk_bytes);
  const StressPrompts prompts =
      StressPrompts::Build(*store, options.families, options.prompts_per_family, options.max_pages,
                           options.namespaces, options.seed);

  StressReport report;
  report.layout_name = options.layout_name;
  report.write_policy = WritePolicyName(options.write_policy);
  report.eviction_policy = EvictionPolicyName(options.eviction_policy);
  report.store_dir = dir.temporary() ? "" : dir.path();
  report.threads = options.threads;
  report.device_bytes = options.device_bytes;
  report.host_bytes = options.host_bytes;
  report.disk_bytes = options.disk_bytes;
  report.seed = options.seed;
  report.working_set_bytes =
      prompts.distinct_pages() * (options.layout.RecordBytes(Kind::kKV) +
                                  options.layout.RecordBytes(Kind::kWindowKV) + shape.state_bytes);
  report.gpu_mode = store->gpu_mode();
  report.duration_seconds = options.duration_seconds;
  report.watchdog_seconds = options.watchdog_seconds;

  std::deque<StressHeartbeat> beats;
  std::deque<StressWorker> workers;
  for (uint32_t t = 0; t < options.threads; ++t) {
    beats.emplace_back("thread " + std::to_string(t));
    workers.emplace_back(store.get(), &prompts, &shape, t, options.seed, &beats.back());
    if (Status s = workers.back().Init(options.max_pages, report.gpu_mode); !s.ok()) {
      (void)store->Close();
      return s;
    }
  }
  beats.emplace_back("main thread");
  StressHeartbeat& main_beat = beats.back();

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> stop{false};
  bool stalled = false;   // guarded by mu
  uint32_t finished = 0;  // threads done with their operations; guarded by mu
  std::string stall_report;
  Store* raw_store = store.get();
  StressWatchdog watchdog(
      &beats, options.watchdog_seconds, [raw_store] { return raw_store->Stats().ToJson(); },
      [&](const std::string& text) {
        if (!options.on_stall) {
          std::fputs(text.c_str(), stderr);
          std::fputs(("process threads:\n" + DumpThreads()).c_str(), stderr);
          std::fputs("cachepawl stress: aborting (watchdog)\n", stderr);
          std::fflush(stderr);
          std::abort();
        }
        options.on_stall(text);
        std::lock_guard lock(mu);
        stalled = true;
        stall_report = text;
        stop.store(true);
        cv.notify_all();
      });
  watchdog.Start();

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < options.threads; ++t) {
    threads.emplace_back([&, t] {
      workers[t].Run(stop, options.ops_per_thread, t == 0 && options.test_stuck_op);
      {
        std::lock_guard lock(mu);
        ++finished;
      }
      cv.notify_all();
      workers[t].Finish();
    });
  }
  {
    const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(options.duration_seconds));
    std::unique_lock lock(mu);
    auto over = [&] { return stalled || finished == options.threads; };
    while (!over() && std::chrono::steady_clock::now() < deadline) {
      const auto next =
          std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(10));
      if (cv.wait_until(lock, next, over)) break;
      if (options.progress != nullptr && std::chrono::steady_clock::now() < deadline) {
        const StoreStats s = store->Stats();
        uint64_t evictions = 0;
        for (const auto& per_kind : s.evictions) {
          for (uint64_t n : per_kind) evictions += n;
        }
        const double t =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        *options.progress << "cachepawl stress: " << static_cast<uint64_t>(t) << " s, "
                          << TotalOps(beats) << " operations, " << evictions << " evictions"
                          << std::endl;
      }
    }
    stop.store(true);
  }
  report.elapsed_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (std::thread& t : threads) t.join();

  StressTotals totals;
  for (const StressWorker& w : workers) totals.Merge(w.totals());
  report.store = store->Stats();
  main_beat.Begin(StressOp::kClose);
  if (Status s = store->Close(); !s.ok()) {
    ++totals.unexpected_errors;
    totals.unexpected_seen.push_back("Close: " + s.ToString());
  }
  main_beat.End();
  watchdog.Stop();

  for (const StressHeartbeat& b : beats) {
    for (int op = 0; op < kNumStressOps; ++op) {
      report.ops[op] += b.done(static_cast<StressOp>(op));
    }
    if (b.max_op_seconds() > report.max_op_seconds) {
      report.max_op_seconds = b.max_op_seconds();
      report.max_op = StressOpName(b.max_op());
    }
  }
  if (watchdog.max_seen_seconds() > report.max_op_seconds) {
    report.max_op_seconds = watchdog.max_seen_seconds();
    report.max_op = watchdog.max_seen_op();
  }
  report.longest_pause_seconds = watchdog.longest_pause_seconds();
  report.load_misses = totals.load_misses;
  report.strict_locked_loads = totals.strict_locked_loads;
  report.allowed_errors = std::move(totals.allowed_errors);
  report.unexpected_errors = totals.unexpected_errors;
  report.unexpected_seen = std::move(totals.unexpected_seen);
  report.records_verified = totals.records_verified;
  report.bytes_verified = totals.bytes_verified;
  report.wrong_records = totals.wrong_records;
  report.wrong_bytes = totals.wrong_bytes;
  report.wrong_seen = std::move(totals.wrong_seen);
  for (int t = 0; t < 3; ++t) {
    for (uint64_t n : report.store.evictions[t]) report.evictions_by_tier[t] += n;
    report.evictions += report.evictions_by_tier[t];
  }
  std::lock_guard lock(mu);
  report.stalled = stalled;
  report.stall_report = stall_report;
  return report;
}

}  // namespace cachepawl::tools
