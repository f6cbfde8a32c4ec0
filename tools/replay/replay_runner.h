// RunReplay: drives a ReplayEngine over a request stream, as `cachepawl replay` does: pacing by
// timestamps, soak loops, requests in flight at once, a progress line, and crash mode.
//
// Concurrency (`concurrency` N > 1): N engine threads share one engine and one store; each
// takes the next request of the stream, in trace order, as soon as it is done with its last
// (so N requests are in flight at once; with `speed`, each also waits for its request's
// timestamp). The calling thread is one of them; N = 1 starts no thread and replays exactly as
// before. `replayed` lists the finished requests in trace order (not in finishing order).
// Crash mode runs one request at a time: Validate refuses it with N > 1.
//
// Crash mode (`crash_every` > 0): the store and the engine run in a forked child process that
// reports every finished request to the parent through a pipe. The parent SIGKILLs the child at
// a random point (after a random number of requests, on average `crash_every`, plus a random
// delay into the next one), then forks a new child that reopens the store from the same folder
// and goes on from the first request not reported finished; every byte it loads is verified
// as before. A fraction of the children (`kill_during_open_fraction`) is killed while it opens
// the store instead: recovery itself must survive a kill. The oracle: a reopened store may have
// forgotten anything, but whatever it serves is exactly what was written for its key.
//
// Thread safety: RunReplay is not reentrant with itself in crash mode (it forks); otherwise
// one call per thread (which may start N - 1 threads of its own, all joined before it returns). The
// process must be single-threaded when it forks (the parent holds no store in crash mode).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"
#include "tools/replay/replay_engine.h"
#include "tools/replay/replay_report.h"
#include "vocab/status.h"

namespace cachepawl::tools {

// Opens the store (in crash mode: in each child, on the same folder every time).
using StoreFactory = std::function<StatusOr<std::unique_ptr<Store>>()>;
// The requests of soak pass `pass` (pass 0 is the plain run).
using RequestSource = std::function<std::vector<TraceRequest>(uint64_t pass)>;

// Where a crash-mode store process starts: it reports to `report_fd` (a pipe's write end) and
// replays from request `index` of pass `pass`; `start_ns` is the run's start on the steady
// clock (CLOCK_MONOTONIC, shared by every process), for --soak's deadline.
struct CrashChildStart {
  int report_fd = -1;
  uint64_t pass = 0;
  uint64_t index = 0;
  int64_t start_ns = 0;

  std::string ToString() const;  // "fd,pass,index,start_ns"
  static std::optional<CrashChildStart> Parse(std::string_view text);
};
// Starts a store process for crash mode and returns its pid; the process must end in
// RunCrashChild(start, ...). Empty: fork and run the child in place (the fork's parent must
// hold no threads and no store). `cachepawl replay` re-executes itself instead, so every store
// process is a fresh program.
using CrashChildSpawner = std::function<StatusOr<pid_t>(const CrashChildStart& start)>;

inline constexpr uint32_t kMaxReplayConcurrency = 1024;

struct ReplayRunOptions {
  double speed = 0;               // replay timestamps at this multiple of real time; 0: no waiting
  double soak_seconds = 0;        // > 0: loop passes until this much time has passed
  uint32_t concurrency = 1;       // requests in flight at once, 1..kMaxReplayConcurrency
  uint64_t crash_every = 0;       // > 0: crash mode, about this many requests between kills
  uint64_t seed = 1;              // for the kill points
  double max_kill_delay_ms = 50;  // the random delay into a request before the kill
  // Crash mode: the fraction of store processes killed while they open the store (recovering
  // the disk catalog and rebuilding the index), at a random point within the last open's time,
  // rather than after a request. 0 to 1.
  double kill_during_open_fraction = 0.25;
  // Progress lines ("replay: 1200/3000 requests, 41.2 req/s, hit 35.1%, 0 errors"): one every
  // `progress_interval_seconds`, the first that long after the start; none when null.
  std::ostream* progress = nullptr;
  double progress_interval_seconds = 5;
  CrashChildSpawner spawn_child;  // crash mode: how store processes start (see above)

  // InvalidArgument naming the flag and value (--speed, --soak, --concurrency, and
  // --concurrency > 1 with --crash-every).
  Status Validate() const;
};

struct ReplayRunResult {
  ReplayTotals totals;
  StoreStats store;                    // summed over store processes
  std::vector<TraceRequest> replayed;  // every request that finished, in order (for the ceiling)
  uint64_t crashes = 0;                // store processes killed (crash mode)
  // Attached store processes that found their owner gone (kReplayExitOwnerGone) and were
  // started again, from their first unfinished request (crash mode with an owner killed too).
  uint64_t owner_losses = 0;
  uint64_t kills_during_open = 0;  // of those, killed before the store had opened
  uint64_t reopens = 0;            // store processes that opened the folder a killed one left
  uint32_t concurrency = 1;        // requests in flight at once
  double wall_seconds = 0;
};

// A crash-mode store process attached to an owner (replay --attach) that found the owner gone
// exits with this status, its request unreported; the parent starts another one.
inline constexpr int kReplayExitOwnerGone = 75;

// The store process of crash mode: opens the store, replays from `start`, reports each finished
// request to start.report_fd, and exits (0 when the stream or the soak ended; 3 after a
// failure it reported). Never returns.
[[noreturn]] void RunCrashChild(const CrashChildStart& start, const StoreFactory& open_store,
                                const ReplayEngineOptions& engine_options,
                                const RequestSource& source, const ReplayRunOptions& options);

// Errors: Validate's, the factory's, an engine failure (ReplayEngine::Run; with N > 1 the first
// one, after the requests in flight have finished), Unavailable when an engine thread cannot be
// started, or a crash-mode child that died other than by our SIGKILL (Internal, with its exit
// status).
StatusOr<ReplayRunResult> RunReplay(const StoreFactory& open_store,
                                    const ReplayEngineOptions& engine_options,
                                    const RequestSource& source, const ReplayRunOptions& options);

}  // namespace cachepawl::tools
