// Stress: many engine threads over one store, for `cachepawl stress` (docs/RELIABILITY.md).
//
// RunStress opens a store whose host and disk tiers are far smaller than the working set of a
// bounded pool of prompts that share prefixes (stress_prompts.h), and runs `threads` engine
// threads (stress_worker.h) that call, at random and for `duration_seconds`: Lookup, Lock and
// Unlock (locks held across other operations), Load of locked and unlocked matches, Save of new
// depths, StartPrefetch, Cancel, waits on fences (Wait, StreamWait, polling Ready, OnComplete,
// per-layer WaitLayer) and Stats. Every byte a Load brings back is compared with the
// deterministic content of its key (replay_content.h), which any thread can recompute: the
// destination is poisoned first, so a byte the Load did not write is a wrong byte too.
//
// Errors the API allows under races (NotFound once something was evicted, Busy, NoSpace, a
// cancelled prefetch's Aborted) are counted per operation and code. Anything else fails the
// run, as does every wrong byte, and a Load of a prefix that a lock held (and that a Lookup
// after the lock confirmed) coming back NotFound (invariant 3).
//
// A watchdog (stress_watchdog.h) checks every thread's heartbeat each second. When one
// operation has run longer than `watchdog_seconds`, it prints which operation each thread is
// in and since when, its last completed operation and its counts, and the store's Stats, then
// aborts the process (or calls `on_stall`, for tests): a deadlock fails CI instead of hanging it.
//
// GPU builds on a machine with a GPU use a store-owned device pool in GPU memory and make a CUDA
// stream wait on fences (StreamWait); otherwise (no CUDA in the build, or cudaGetDeviceCount
// failing) the pool is host memory (CPU mode), as in `cachepawl replay`.
//
// Thread safety: RunStress may be called from any thread; it runs its own threads and joins them
// before returning. The option and report structs are plain values.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/store_options.h"
#include "vocab/store_stats.h"

namespace cachepawl::tools {

// What a stress thread is doing. The last two are not chosen at random: kFinish is a thread's
// clean-up after the run (waits for its fences, unlocks, frees its slots), kClose the store's
// Close on the main thread. kStuck is the watchdog test's hook (an operation that never ends
// by itself).
enum class StressOp : uint8_t {
  kLookup = 0,
  kLock,
  kUnlock,
  kLoad,
  kSave,
  kPrefetch,
  kCancel,
  kFenceWait,
  kStats,
  kStuck,
  kFinish,
  kClose,
};
inline constexpr int kNumStressOps = 12;
// The operations every run must perform at least once ("lookup" ... "stats").
inline constexpr int kNumRandomStressOps = 9;
const char* StressOpName(StressOp op);

// The default layout: a small hybrid (two full-attention layers, one sliding-window layer of
// 4 pages, five Mamba-2 layers), so every kind of record (KV, windowed KV, state) races, and
// a 2-core machine runs thousands of operations per second.
inline constexpr char kStressLayoutName[] = "stress-hybrid";
ModelLayout StressHybridLayout(uint32_t page_size_tokens);
// kStressLayoutName, a preset or a JSON layout file. InvalidArgument naming --layout.
StatusOr<ModelLayout> ResolveStressLayout(const std::string& name, uint32_t page_size_tokens);

struct StressOptions {
  uint32_t threads = 16;
  double duration_seconds = 90;
  // Each thread stops after this many operations, if that comes before the duration; 0: none.
  uint64_t ops_per_thread = 0;
  std::string layout_name = kStressLayoutName;
  ModelLayout layout = StressHybridLayout(16);  // resolved from layout_name
  // The store-owned device pool must hold every thread's slots (max_pages pages and a state
  // each); the tiers are far smaller than the pool's working set.
  uint64_t device_bytes = 64ull << 20;
  uint64_t host_bytes = 16ull << 20;
  uint64_t disk_bytes = 64ull << 20;  // 0: no disk tier
  WritePolicy write_policy = WritePolicy::kWriteBack;
  EvictionPolicy eviction_policy = EvictionPolicy::kHybrid;
  uint64_t seed = 1;
  std::string dir;  // the store's folder, kept; "" a temporary one, removed
  double watchdog_seconds = 60;
  // The prompt pool: `families` groups of `prompts_per_family` prompts; every prompt starts with
  // the same 2 pages, then its family's pages, then its own, `max_pages` pages at most; each
  // in `namespaces` namespaces ("", then "tenant-1", ...; most operations use "").
  uint32_t families = 8;
  uint32_t prompts_per_family = 8;
  uint32_t max_pages = 24;
  uint32_t namespaces = 3;

  // Test hook: thread 0's first operation (kStuck) waits until the run ends, so the watchdog
  // must fire. Hidden from the command's help.
  bool test_stuck_op = false;
  // Called with the watchdog's report when it fires; the run then stops and reports `stalled`.
  // Empty: the report is written to stderr and the process aborts.
  std::function<void(const std::string& report)> on_stall;
  std::ostream* progress = nullptr;  // a line every 10 s when set

  // InvalidArgument naming the flag and value at fault (--threads 0, --duration 0, ...).
  Status Validate() const;
};

struct StressReport {
  // The run's setup.
  std::string layout_name, write_policy, eviction_policy, store_dir;
  uint32_t threads = 0;
  uint64_t device_bytes = 0, host_bytes = 0, disk_bytes = 0, seed = 0;
  uint64_t working_set_bytes = 0;  // what the prompt pool would occupy in full
  bool gpu_mode = false;
  double duration_seconds = 0, watchdog_seconds = 0;

  double elapsed_seconds = 0;
  std::array<uint64_t, kNumStressOps> ops{};  // completed operations per StressOp
  uint64_t load_misses = 0;          // Lookups before a Load, Lock or Prefetch that found nothing
  uint64_t strict_locked_loads = 0;  // Loads of a locked prefix confirmed after the lock
  std::map<std::string, uint64_t> allowed_errors;  // "Load: NotFound" -> count
  uint64_t unexpected_errors = 0;
  std::vector<std::string> unexpected_seen;  // the first few, with the thread and operation
  uint64_t records_verified = 0, bytes_verified = 0;
  uint64_t wrong_records = 0, wrong_bytes = 0;
  std::vector<std::string> wrong_seen;
  std::array<uint64_t, 3> evictions_by_tier{};  // device, host, disk (store Stats)
  uint64_t evictions = 0;
  double max_op_seconds = 0;  // the longest operation, completed or seen in flight
  std::string max_op;         // its name
  // The longest pause of the whole process the watchdog noticed (it woke more than 5 s late);
  // operations in flight then count from its end.
  double longest_pause_seconds = 0;
  bool stalled = false;  // the watchdog fired
  std::string stall_report;
  StoreStats store;  // at the end of the run, before Close

  bool ok() const {
    return !stalled && unexpected_errors == 0 && wrong_records == 0 && wrong_bytes == 0;
  }
};

// Runs the stress run described by `options` (Validate()d here). Errors: the options', the
// store's Open (NoSpace naming --device-bytes when the pool cannot give every thread its
// slots). What the run finds (wrong bytes, unexpected errors, a stall) is in the report.
StatusOr<StressReport> RunStress(const StressOptions& options);

void PrintStressTable(const StressReport& report, std::ostream& out);
nlohmann::json StressJson(const StressReport& report);
// The JSON keys, for the command's help.
std::string StressJsonKeysHelp();

}  // namespace cachepawl::tools
