#include "tools/replay/replay_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <utility>

#include "tiers/device_pool_arena.h"
#include "tiers/host_memory.h"

namespace cachepawl::tools {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

uint64_t RoundUpToMiB(uint64_t bytes) { return RoundUpToAlignment(bytes, kMiB); }

// Raises `*bytes` to `least`; true when it did.
bool Clamp(uint64_t least, uint64_t* bytes) {
  if (*bytes >= least) return false;
  *bytes = least;
  return true;
}

}  // namespace

WorkingSet WorkingSetOf(const Ceiling& ceiling, const ModelLayout& layout) {
  WorkingSet w;
  w.pages = ceiling.distinct_pages;
  w.states = ceiling.saved_states;
  w.page_bytes = layout.RecordBytes(Kind::kKV) + layout.RecordBytes(Kind::kWindowKV);
  w.state_bytes = layout.has_ssm() ? layout.RecordBytes(Kind::kMamba) : 0;
  w.bytes = w.pages * w.page_bytes + w.states * w.state_bytes;
  return w;
}

SweepTiers ReplayTierMinimums(const ModelLayout& layout, size_t chunk_pages, uint32_t concurrency) {
  const uint64_t requests = std::max<uint32_t>(concurrency, 1);
  const uint64_t states = layout.has_ssm() ? 2 : 0;
  const uint64_t pages = layout.has_attention() ? chunk_pages : 0;
  // The device pool: pages in units, a state in an aligned group of units (pages share groups).
  const DevicePoolGeometry g = DevicePoolGeometryFor(layout, 0);
  const uint64_t groups = (pages + g.group_units - 1) / g.group_units + states;
  SweepTiers least;
  least.device = RoundUpToMiB(requests * groups * g.group_units * g.unit_bytes);
  const uint64_t page_slots =
      StoredRecordSlotBytes(layout, Kind::kKV) + StoredRecordSlotBytes(layout, Kind::kWindowKV);
  const uint64_t records =
      pages * page_slots + states * StoredRecordSlotBytes(layout, Kind::kMamba);
  least.host = RoundUpToMiB(requests * records);
  least.disk = least.host;
  return least;
}

SweepTiers SweepTierSizes(double fraction, uint64_t working_set_bytes, const SweepTiers& given,
                          const SweepTiers& minimums) {
  const double largest = static_cast<double>(std::max(given.host, given.disk));
  const double target = fraction * static_cast<double>(working_set_bytes);
  auto scaled = [&](uint64_t bytes) -> uint64_t {
    if (bytes == 0 || largest <= 0) return 0;
    const double b = std::ceil(target * static_cast<double>(bytes) / largest);
    return RoundUpToMiB(static_cast<uint64_t>(b));
  };
  SweepTiers t;
  t.device = scaled(given.device);
  t.host = scaled(given.host);
  t.disk = scaled(given.disk);
  t.device_clamped = Clamp(minimums.device, &t.device);
  t.host_clamped = Clamp(minimums.host, &t.host);
  if (given.disk > 0) t.disk_clamped = Clamp(minimums.disk, &t.disk);
  return t;
}

bool SweepRun::ok() const { return report.has_value() && report->Failure().empty(); }

bool SweepResult::ok() const {
  for (const SweepRow& row : rows) {
    for (const SweepRun& run : row.runs) {
      if (!run.ok()) return false;
    }
  }
  return true;
}

StatusOr<SweepResult> RunSweep(const ReplaySetup& setup, const RequestSource& source,
                               const ReplayRunOptions& options,
                               const std::vector<double>& fractions) {
  const std::vector<TraceRequest> requests = source(0);
  SweepResult r;
  CACHEPAWL_ASSIGN_OR_RETURN(r.ceiling, ComputeCeiling(requests, setup.CeilingOptionsOf()));
  r.source = setup.source;
  r.layout = setup.layout_name;
  r.requests = requests.size();
  r.page_size_tokens = setup.page_size_tokens;
  r.working_set = WorkingSetOf(r.ceiling, setup.layout);
  r.given.device = setup.device_bytes;
  r.given.host = setup.host_bytes;
  r.given.disk = setup.disk_bytes;
  r.minimums = ReplayTierMinimums(setup.layout, setup.chunk_pages, options.concurrency);
  const RequestSource same = [&requests](uint64_t) { return requests; };
  const size_t runs = fractions.size() * kNumSweepPolicies;
  for (double fraction : fractions) {
    SweepRow row;
    row.fraction = fraction;
    row.tiers = SweepTierSizes(fraction, r.working_set.bytes, r.given, r.minimums);
    for (size_t p = 0; p < kNumSweepPolicies; ++p) {
      ReplaySetup s = setup;
      s.device_bytes = row.tiers.device;
      s.host_bytes = row.tiers.host;
      s.disk_bytes = row.tiers.disk;
      s.eviction_policy = kSweepPolicies[p];
      SweepRun& run = row.runs[p];
      run.policy = kSweepPolicies[p];
      auto report = RunReplayInTemporaryDir(s, same, options);
      if (report.ok()) {
        run.report = std::move(report).value();
      } else {
        run.error = report.status().ToString();
      }
      if (options.progress != nullptr) {
        char line[160];
        const size_t done = (r.rows.size() * kNumSweepPolicies) + p + 1;
        const ReplayTotals* t = run.report ? &run.report->totals : nullptr;
        std::snprintf(line, sizeof(line), "sweep: %zu/%zu: %g%% of the working set, %s: %s", done,
                      runs, 100 * fraction, EvictionPolicyName(run.policy),
                      t == nullptr ? "FAILED"
                      : run.ok()   ? "ok"
                                   : "WRONG BYTES OR FAILED STORE CALLS");
        *options.progress << line;
        if (t != nullptr) {
          std::snprintf(
              line, sizeof(line), ", hit %.1f%% of tokens, %.1f s",
              100 * Ceiling::Rate(t->hit_pages_total() * setup.page_size_tokens, t->prompt_tokens),
              run.report->wall_seconds);
          *options.progress << line;
        }
        *options.progress << "\n" << std::flush;
      }
    }
    r.rows.push_back(std::move(row));
  }
  return r;
}

}  // namespace cachepawl::tools
