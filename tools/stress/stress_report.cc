// The stress run's report: a table for people, JSON for machines (tools/stress/stress.h).
#include <iomanip>
#include <ostream>

#include "tools/human_bytes.h"
#include "tools/stress/stress.h"

namespace cachepawl::tools {
namespace {

constexpr const char* kTierNames[3] = {"device", "host", "disk"};

}  // namespace

void PrintStressTable(const StressReport& r, std::ostream& out) {
  out << "cachepawl stress: " << r.threads << " threads, layout " << r.layout_name << ", "
      << (r.gpu_mode ? "GPU" : "CPU") << " mode\n";
  out << "  tiers: device pool " << HumanBytes(r.device_bytes) << ", host "
      << HumanBytes(r.host_bytes) << ", disk " << HumanBytes(r.disk_bytes) << " (working set "
      << HumanBytes(r.working_set_bytes) << "); write policy " << r.write_policy << ", eviction "
      << r.eviction_policy << ", seed " << r.seed << "\n";
  if (!r.store_dir.empty()) out << "  store folder: " << r.store_dir << " (kept)\n";
  out << std::fixed << std::setprecision(1);
  out << "  elapsed: " << r.elapsed_seconds << " s (asked " << r.duration_seconds << " s)\n";
  uint64_t total = 0;
  for (int op = 0; op < kNumRandomStressOps; ++op) total += r.ops[op];
  out << "operations: " << total << " ("
      << (r.elapsed_seconds > 0 ? static_cast<double>(total) / r.elapsed_seconds : 0.0)
      << " per second)\n";
  for (int op = 0; op < kNumStressOps; ++op) {
    if (r.ops[op] == 0 && op >= kNumRandomStressOps) continue;
    out << "  " << std::left << std::setw(12) << StressOpName(static_cast<StressOp>(op))
        << std::right << std::setw(12) << r.ops[op] << "\n";
  }
  out << "  lookups that found nothing to load, lock or prefetch: " << r.load_misses << "\n";
  out << "  loads of a locked, confirmed hit: " << r.strict_locked_loads << "\n";
  out << "errors allowed under races (per call and code):";
  if (r.allowed_errors.empty()) out << " none";
  out << "\n";
  for (const auto& [key, n] : r.allowed_errors) out << "  " << key << ": " << n << "\n";
  out << "unexpected errors: " << r.unexpected_errors << "\n";
  for (const std::string& s : r.unexpected_seen) out << "  " << s << "\n";
  out << "verified: " << r.records_verified << " records, " << HumanBytes(r.bytes_verified)
      << "; wrong records " << r.wrong_records << ", wrong bytes " << r.wrong_bytes << "\n";
  for (const std::string& s : r.wrong_seen) out << "  " << s << "\n";
  out << "evictions: " << r.evictions << " (";
  for (int t = 0; t < 3; ++t) {
    out << (t > 0 ? ", " : "") << kTierNames[t] << " " << r.evictions_by_tier[t];
  }
  out << ")\n";
  out << std::setprecision(3) << "longest operation: " << r.max_op_seconds << " s ("
      << (r.max_op.empty() ? "none" : r.max_op) << "); watchdog limit " << std::setprecision(1)
      << r.watchdog_seconds << " s\n";
  if (r.longest_pause_seconds > 0) {
    out << "the process was paused (the watchdog woke late) for up to " << r.longest_pause_seconds
        << " s\n";
  }
  if (r.stalled) out << "watchdog fired:\n" << r.stall_report;
  out << "result: " << (r.ok() ? "OK" : "FAILED") << "\n";
}

nlohmann::json StressJson(const StressReport& r) {
  nlohmann::json j;
  j["layout"] = r.layout_name;
  j["threads"] = r.threads;
  j["gpu_mode"] = r.gpu_mode;
  j["device_bytes"] = r.device_bytes;
  j["host_bytes"] = r.host_bytes;
  j["disk_bytes"] = r.disk_bytes;
  j["working_set_bytes"] = r.working_set_bytes;
  j["write_policy"] = r.write_policy;
  j["eviction_policy"] = r.eviction_policy;
  j["seed"] = r.seed;
  j["store_dir"] = r.store_dir;
  j["duration_seconds"] = r.duration_seconds;
  j["elapsed_seconds"] = r.elapsed_seconds;
  nlohmann::json ops = nlohmann::json::object();
  for (int op = 0; op < kNumStressOps; ++op)
    ops[StressOpName(static_cast<StressOp>(op))] = r.ops[op];
  j["ops"] = ops;
  j["load_misses"] = r.load_misses;
  j["strict_locked_loads"] = r.strict_locked_loads;
  j["allowed_errors"] = r.allowed_errors;
  j["unexpected_errors"] = r.unexpected_errors;
  j["unexpected_seen"] = r.unexpected_seen;
  j["records_verified"] = r.records_verified;
  j["bytes_verified"] = r.bytes_verified;
  j["wrong_records"] = r.wrong_records;
  j["wrong_bytes"] = r.wrong_bytes;
  j["wrong_seen"] = r.wrong_seen;
  j["evictions"] = r.evictions;
  nlohmann::json by_tier = nlohmann::json::object();
  for (int t = 0; t < 3; ++t) by_tier[kTierNames[t]] = r.evictions_by_tier[t];
  j["evictions_by_tier"] = by_tier;
  j["max_op_seconds"] = r.max_op_seconds;
  j["max_op"] = r.max_op;
  j["watchdog_seconds"] = r.watchdog_seconds;
  j["longest_pause_seconds"] = r.longest_pause_seconds;
  j["stalled"] = r.stalled;
  j["stall_report"] = r.stall_report;
  j["store"] = nlohmann::json::parse(r.store.ToJson());
  j["ok"] = r.ok();
  return j;
}

std::string StressJsonKeysHelp() {
  return "--json keys: layout, threads, gpu_mode, device_bytes, host_bytes, disk_bytes,\n"
         "working_set_bytes, write_policy, eviction_policy, seed, store_dir, duration_seconds,\n"
         "elapsed_seconds, ops (per operation), load_misses, strict_locked_loads, allowed_errors\n"
         "(\"Call: Code\" -> count), unexpected_errors, unexpected_seen, records_verified,\n"
         "bytes_verified, wrong_records, wrong_bytes, wrong_seen, evictions, evictions_by_tier,\n"
         "max_op_seconds, max_op, watchdog_seconds, longest_pause_seconds, stalled, stall_report,\n"
         "store (Store::Stats), ok.";
}

}  // namespace cachepawl::tools
