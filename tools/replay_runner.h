// RunReplay: drives a ReplayEngine over a request stream, as `cachepawl replay` does: pacing by
// timestamps, soak loops, a live progress line, and crash mode.
//
// Crash mode (`crash_every` > 0): the store and the engine run in a forked child process that
// reports every finished request to the parent through a pipe. The parent SIGKILLs the child at
// a random point (after a random number of requests, on average `crash_every`, plus a random
// delay into the next one), then forks a new child that reopens the store from the same folder
// and goes on from the first request not reported finished; every byte it loads is verified
// as before. The oracle: a reopened store may have forgotten anything, but whatever it serves
// is exactly what was written for its key.
//
// Thread safety: RunReplay is not reentrant with itself in crash mode (it forks); otherwise
// one call per thread. The process must be single-threaded when it forks (the parent holds no
// store in crash mode).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <vector>

#include "store/status.h"
#include "store/store.h"
#include "tools/replay_engine.h"
#include "tools/replay_report.h"

namespace cachepawl::tools {

// Opens the store (in crash mode: in each child, on the same folder every time).
using StoreFactory = std::function<StatusOr<std::unique_ptr<Store>>()>;
// The requests of soak pass `pass` (pass 0 is the plain run).
using RequestSource = std::function<std::vector<TraceRequest>(uint64_t pass)>;

struct ReplayRunOptions {
  double speed = 0;               // replay timestamps at this multiple of real time; 0: no waiting
  double soak_seconds = 0;        // > 0: loop passes until this much time has passed
  uint64_t crash_every = 0;       // > 0: crash mode, about this many requests between kills
  uint64_t seed = 1;              // for the kill points
  double max_kill_delay_ms = 50;  // the random delay into a request before the kill
  std::ostream* progress = nullptr;  // a live progress line (use only on a terminal)

  Status Validate() const;
};

struct ReplayRunResult {
  ReplayTotals totals;
  StoreStats store;                    // summed over store processes
  std::vector<TraceRequest> replayed;  // every request that finished, in order (for the ceiling)
  uint64_t crashes = 0;
  double wall_seconds = 0;
};

// Errors: the factory's, an engine failure (ReplayEngine::Run), or a crash-mode child that died
// other than by our SIGKILL (Internal, with its exit status).
StatusOr<ReplayRunResult> RunReplay(const StoreFactory& open_store,
                                    const ReplayEngineOptions& engine_options,
                                    const RequestSource& source, const ReplayRunOptions& options);

}  // namespace cachepawl::tools
