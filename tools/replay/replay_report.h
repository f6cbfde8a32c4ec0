// What `cachepawl replay` measures and prints: per-request outcomes, their totals, and the final
// report (a table for people, JSON for machines; the keys are listed by ReplayJsonKeysHelp()).
//
// Thread safety: plain values; not synchronized.
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/replay/replay_ceiling.h"
#include "vocab/store_stats.h"
#include "vocab/types.h"

namespace cachepawl::tools {

// Latency samples of one kind of call, in microseconds.
class LatencySamples {
 public:
  void Add(double us) { us_.push_back(us); }
  void Merge(const LatencySamples& other) {
    us_.insert(us_.end(), other.us_.begin(), other.us_.end());
  }
  size_t count() const { return us_.size(); }
  const std::vector<double>& samples() const { return us_; }
  // Nearest-rank percentiles over every sample (zeros when there are none).
  LatencySummary Summarize() const;

 private:
  std::vector<double> us_;
};

// What one request (or, summed, a whole replay) did and found.
struct ReplayTotals {
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t pages = 0;                                // full prompt pages
  std::array<uint64_t, kNumTiers> hit_pages{};       // reused pages by the tier that served them
  std::array<uint64_t, kNumTiers> hit_states{};      // reused Mamba states by tier
  uint64_t computed_pages = 0, computed_states = 0;  // "prefilled" by the replay
  uint64_t saved_pages = 0, saved_states = 0;        // handed to Store::Save
  uint64_t loaded_pages = 0, loaded_states = 0;      // brought back by Store::Load
  uint64_t loaded_bytes = 0, saved_bytes = 0;        // record bytes of the above
  // Sliding-window layers: of the pages above, those whose windowed KV was saved / loaded
  // (the others moved their full-attention layers' KV only).
  uint64_t saved_window_pages = 0, loaded_window_pages = 0;
  uint64_t lost_races = 0;  // Lookup promised a prefix that Lock or Load then could not give
  uint64_t refused = 0;     // Lock/Load/Save refused for now (NoSpace, Busy): a miss
  std::vector<std::string> refusals_seen;  // the first few
  uint64_t store_errors = 0;  // calls that failed otherwise (each kept in `errors`, up to 10)
  std::vector<std::string> errors;
  uint64_t verified_records = 0, verified_bytes = 0;  // every reused record is compared
  uint64_t wrong_records = 0, wrong_bytes = 0;
  std::vector<std::string> wrong_records_seen;     // the first few descriptions
  std::array<uint64_t, kNumKinds> l1_evictions{};  // the engine's own device pool
  LatencySamples lookup_us, load_us, save_us;

  uint64_t hit_pages_total() const {
    return hit_pages[0] + hit_pages[1] + hit_pages[2] + hit_pages[3];
  }
  void Merge(const ReplayTotals& other);
  void AddError(std::string message);
};

// Everything the final report shows.
struct ReplayReport {
  std::string source;  // trace path or "workload NAME"
  std::string layout;  // preset name or path
  uint32_t page_size_tokens = 0;
  uint32_t block_size_tokens = 0;
  uint32_t track_interval_pages = 0;
  uint64_t device_bytes = 0, host_bytes = 0, disk_bytes = 0;
  std::string eviction_policy;  // EvictionPolicyName of the store's (--policy)
  uint64_t kv_page_bytes = 0, state_bytes = 0;
  // Layouts with sliding-window layers: the per-page records of each kind and the window.
  uint64_t full_record_bytes = 0, window_record_bytes = 0;
  uint32_t window_pages = 0;
  std::string store_dir;
  double wall_seconds = 0;
  uint32_t concurrency = 1;        // requests in flight at once (--concurrency)
  uint64_t crashes = 0;            // --crash-every: store processes killed and reopened
  uint64_t owner_losses = 0;       // --attach: store processes that found the owner gone
  uint64_t kills_during_open = 0;  // of those, killed while opening the store
  uint64_t reopens = 0;            // store processes that opened a killed one's folder
  uint64_t bad_trace_lines = 0;
  Ceiling ceiling;
  ReplayTotals totals;
  StoreStats store;  // summed over store processes (crash mode: their last reports)

  // Why the replay is not a pass, or "" when it is: a wrong byte, a failed store call, no
  // request replayed at all, or (crash mode) kills after which nothing was verified. The JSON's
  // "ok" and the exit status follow it, so a gate on them never passes on a run that did nothing.
  std::string Failure() const;
};

// The final table.
void PrintReplayTable(const ReplayReport& report, std::ostream& out);
// One JSON object (keys: ReplayJsonKeysHelp()), as text and as a value.
std::string ReplayReportJson(const ReplayReport& report);
nlohmann::json ReplayReportJsonValue(const ReplayReport& report);
// The report's "ceiling" object: {blocks, kv_tokens, kv_pages, hybrid_tokens, hybrid_pages}.
nlohmann::json CeilingJson(const Ceiling& ceiling);
// The documentation of every JSON key, for `cachepawl replay --help`.
std::string ReplayJsonKeysHelp();

// Lossless JSON round trip of totals (how a crash-mode child reports to its parent).
nlohmann::json ReplayTotalsToJson(const ReplayTotals& totals);
ReplayTotals ReplayTotalsFromJson(const nlohmann::json& json);

// Sums two store snapshots (counters add; latency summaries keep the larger max and the
// count-weighted means and percentiles, an approximation stated in the help).
StoreStats AddStoreStats(const StoreStats& a, const StoreStats& b);

}  // namespace cachepawl::tools
