// ReplaySetup: what `cachepawl replay` makes of its command line for one run (the layout, tier
// sizes, policies, the engine's chunking), and what every run is built from it: the store's
// options, the engine's, the ceiling's, the store folder, and the report of a finished run.
// A plain replay uses it once; `--sweep` (replay_sweep.h) once per tier size and policy, each
// run in a fresh temporary folder.
//
// Errors: StoreOptions::Validate's, RunReplay's, and ComputeCeiling's, unchanged.
// Thread safety: plain values and free functions; ReplayStoreDir is not synchronized.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "tools/replay/replay_ceiling.h"
#include "tools/replay/replay_engine.h"
#include "tools/replay/replay_report.h"
#include "tools/replay/replay_runner.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/store_options.h"

namespace cachepawl::tools {

struct ReplaySetup {
  std::string layout_name;  // as given: a preset name or a JSON file path
  ModelLayout layout;       // resolved, at page_size_tokens
  uint32_t page_size_tokens = 16;
  uint32_t block_size_tokens = 512;
  uint32_t track_interval_pages = 32;  // 0: a state only at the end of each prompt
  uint64_t device_bytes = 512ull << 20, host_bytes = 1ull << 30, disk_bytes = 4ull << 30;
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  EvictionPolicy eviction_policy = StoreOptions().eviction_policy;
  std::string ns;  // namespace of every request
  // The remote tier (--remote): seeds, empty for none, and what this replica writes there.
  std::string remote_seeds;
  RemoteWritePolicy remote_write_policy = RemoteWritePolicy::kWriteThrough;
  size_t chunk_pages = 128;
  uint64_t max_prompt_tokens = kDefaultMaxPromptTokens;  // StoreOptions::max_prompt_tokens
  bool wipe_on_layout_mismatch = false, wipe_unreadable_catalog = false;
  std::string source;  // the trace path or "workload NAME"
  uint64_t bad_trace_lines = 0;

  // The store's options with its disk tier (when disk_bytes > 0) in `dir`.
  StoreOptions StoreOptionsIn(const std::string& dir) const;
  ReplayEngineOptions EngineOptions() const;
  CeilingOptions CeilingOptionsOf() const;
};

// The store's folder: a temporary one removed on destruction, or the user's, kept.
// A temporary folder is also removed when the process dies any other way (SIGTERM, SIGKILL, an
// abort): Use starts a reaper, `sh` in a session of its own (so a terminal's SIGINT to the
// process group does not reach it), that waits for the end of a pipe this process holds and
// then removes the folder. Not thread-safe; one owner.
class ReplayStoreDir {
 public:
  ReplayStoreDir() = default;
  ReplayStoreDir(const ReplayStoreDir&) = delete;
  ReplayStoreDir& operator=(const ReplayStoreDir&) = delete;
  ~ReplayStoreDir();

  // `dir` empty: a fresh folder under $TMPDIR (or /tmp). IOError naming --dir when the user's
  // folder cannot be created.
  Status Use(const std::string& dir);
  const std::string& path() const { return path_; }
  bool temporary() const { return remove_; }

 private:
  std::string path_;
  bool remove_ = false;
  int reaper_pipe_ = -1;  // the write end; closing it (or dying) lets the reaper run
  pid_t reaper_pid_ = -1;
};

// The report of a finished run: the setup's sizes and layout, the run's totals and store
// counters, and the ceiling over the requests it replayed. `kept_dir`: the store folder to
// name in the report ("" for a temporary one).
StatusOr<ReplayReport> ReplayReportOf(const ReplaySetup& setup, ReplayRunResult run,
                                      const std::string& kept_dir);

// One run of `source` over a store opened from `setup` in a fresh temporary folder, removed
// after. No crash mode (options.crash_every must be 0).
StatusOr<ReplayReport> RunReplayInTemporaryDir(const ReplaySetup& setup,
                                               const RequestSource& source,
                                               const ReplayRunOptions& options);

}  // namespace cachepawl::tools
