// `cachepawl replay --sweep`: the same requests over tiers sized at fractions of the trace's
// working set, each size with every eviction policy, side by side.
//
// Working set: what an infinite cache holds after the requests under the replay's save points
// (replay_ceiling.h): distinct full pages x (RecordBytes(kKV) + RecordBytes(kWindowKV)) + saved
// states x RecordBytes(kMamba).
// Tier sizes at fraction f: the larger of the host and disk tiers becomes f x working set; the
// device pool (the engine's L1), host and disk tiers keep their ratio to it as given (a disk of
// 0 stays off); each is rounded up to whole MiB and raised to the least the replay needs
// (ReplayTierMinimums), which the row then marks as clamped.
// Each run opens a store in a fresh temporary folder (replay_setup.h), removed after it.
//
// Errors: InvalidArgument naming --sweep-fractions and the value; a run that fails is kept in
// its row (SweepRun::error) and the sweep goes on.
// Thread safety: plain values and free functions.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/cli_values.h"  // ParseSweepFractions, kDefaultSweepFractions
#include "tools/replay/replay_ceiling.h"
#include "tools/replay/replay_report.h"
#include "tools/replay/replay_runner.h"
#include "tools/replay/replay_setup.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/store_options.h"

namespace cachepawl::tools {

struct WorkingSet {
  uint64_t pages = 0, states = 0;            // Ceiling::distinct_pages, saved_states
  uint64_t page_bytes = 0, state_bytes = 0;  // per page (both KV kinds), per state
  uint64_t bytes = 0;
};
WorkingSet WorkingSetOf(const Ceiling& ceiling, const ModelLayout& layout);

struct SweepTiers {
  uint64_t device = 0, host = 0, disk = 0;
  bool device_clamped = false, host_clamped = false, disk_clamped = false;
};

// The least each tier needs for the replay to work, `concurrency` requests in flight: the
// device pool holds a Load or Save chunk of `chunk_pages` pages and two states per request (one
// loaded or computed, the next checkpoint's while the last Save is in flight), the host tier
// the same records in its slots (tiers/host_memory.h RecordSlotBytes), the disk tier too.
// Whole MiB.
SweepTiers ReplayTierMinimums(const ModelLayout& layout, size_t chunk_pages, uint32_t concurrency);

// The tiers at `fraction` of `working_set_bytes`, scaled from `given` (see above).
SweepTiers SweepTierSizes(double fraction, uint64_t working_set_bytes, const SweepTiers& given,
                          const SweepTiers& minimums);

// The policies a sweep compares, in column order.
inline constexpr EvictionPolicy kSweepPolicies[] = {EvictionPolicy::kLru, EvictionPolicy::kHybrid};
inline constexpr size_t kNumSweepPolicies = std::size(kSweepPolicies);

struct SweepRun {
  EvictionPolicy policy = EvictionPolicy::kLru;
  std::optional<ReplayReport> report;  // absent when the run failed
  std::string error;                   // why it failed
  bool ok() const;                     // ran, no wrong byte, no failed store call
};

struct SweepRow {
  double fraction = 0;
  SweepTiers tiers;
  SweepRun runs[kNumSweepPolicies];  // kSweepPolicies' order
};

struct SweepResult {
  std::string source, layout;
  uint64_t requests = 0;  // of the workload or trace (one pass)
  uint32_t page_size_tokens = 0;
  WorkingSet working_set;
  Ceiling ceiling;  // over the requests, as each run's
  SweepTiers given, minimums;
  std::vector<SweepRow> rows;

  bool ok() const;  // every run ok
};

// Runs the sweep; a line per finished run goes to options.progress (when set). Errors: the
// ceiling's (a bad block / page size).
StatusOr<SweepResult> RunSweep(const ReplaySetup& setup, const RequestSource& source,
                               const ReplayRunOptions& options,
                               const std::vector<double>& fractions);

// The side-by-side table, and one JSON object (keys: SweepHelp()).
void PrintSweepTable(const SweepResult& result, std::ostream& out);
nlohmann::json SweepJson(const SweepResult& result);
// The --sweep section of `cachepawl replay --help`.
std::string SweepHelp();

}  // namespace cachepawl::tools
