#include "vocab/store_stats.h"

#include <nlohmann/json.hpp>
#include <sstream>

namespace cachepawl {
namespace {

using Matrix = std::array<std::array<uint64_t, kNumKinds>, kNumLocalTiers>;

nlohmann::json MatrixJson(const Matrix& m) {
  nlohmann::json j = nlohmann::json::object();
  for (int t = 0; t < kNumLocalTiers; ++t) {
    for (int k = 0; k < kNumKinds; ++k) {
      j[std::string(TierName(static_cast<Tier>(t)))][std::string(KindName(static_cast<Kind>(k)))] =
          m[t][k];
    }
  }
  return j;
}

nlohmann::json LatencyJson(const LatencySummary& l) {
  return {{"count", l.count},
          {"p50_us", l.p50_us},
          {"p99_us", l.p99_us},
          {"max_us", l.max_us},
          {"mean_us", l.mean_us}};
}

void PromMatrix(std::ostringstream& o, const char* name, const char* help, const Matrix& m) {
  o << "# HELP cachepawl_" << name << " " << help << "\n# TYPE cachepawl_" << name
    << (std::string(name).find("resident") == std::string::npos ? " counter\n" : " gauge\n");
  for (int t = 0; t < kNumLocalTiers; ++t) {
    for (int k = 0; k < kNumKinds; ++k) {
      o << "cachepawl_" << name << "{tier=\"" << TierName(static_cast<Tier>(t)) << "\",kind=\""
        << KindName(static_cast<Kind>(k)) << "\"} " << m[t][k] << "\n";
    }
  }
}

void PromScalar(std::ostringstream& o, const char* name, const char* type, const char* help,
                double v) {
  o << "# HELP cachepawl_" << name << " " << help << "\n# TYPE cachepawl_" << name << " " << type
    << "\ncachepawl_" << name << " " << v << "\n";
}

void PromLatency(std::ostringstream& o, const char* name, const LatencySummary& l) {
  o << "# HELP cachepawl_" << name << "_latency_us " << name << " latency in microseconds\n"
    << "# TYPE cachepawl_" << name << "_latency_us summary\n"
    << "cachepawl_" << name << "_latency_us{quantile=\"0.5\"} " << l.p50_us << "\n"
    << "cachepawl_" << name << "_latency_us{quantile=\"0.99\"} " << l.p99_us << "\n"
    << "cachepawl_" << name << "_latency_us{quantile=\"1\"} " << l.max_us << "\n"
    << "cachepawl_" << name << "_latency_us_sum " << l.mean_us * static_cast<double>(l.count)
    << "\n"
    << "cachepawl_" << name << "_latency_us_count " << l.count << "\n";
}

}  // namespace

// RemoteStats' counters in declaration order, with their names: the one list Fields and Add use.
struct RemoteCounter {
  const char* name;
  uint64_t RemoteStats::*field;
};
constexpr RemoteCounter kRemoteCounters[] = {
    {"writes_queued", &RemoteStats::writes_queued},
    {"writes", &RemoteStats::writes},
    {"write_failures", &RemoteStats::write_failures},
    {"writes_dropped", &RemoteStats::writes_dropped},
    {"writes_skipped", &RemoteStats::writes_skipped},
    {"disk_copies", &RemoteStats::disk_copies},
    {"disk_copy_failures", &RemoteStats::disk_copy_failures},
    {"queued_now", &RemoteStats::queued_now},
    {"lookup_pages", &RemoteStats::lookup_pages},
    {"loaded", &RemoteStats::loaded},
    {"load_failures", &RemoteStats::load_failures},
    {"put_bytes", &RemoteStats::put_bytes},
    {"get_bytes", &RemoteStats::get_bytes},
    {"missing_parts", &RemoteStats::missing_parts},
    {"wrong_size", &RemoteStats::wrong_size},
    {"header_mismatches", &RemoteStats::header_mismatches},
    {"checksum_failures", &RemoteStats::checksum_failures},
    {"transport_errors", &RemoteStats::transport_errors},
    {"deleted_bad", &RemoteStats::deleted_bad},
};

std::vector<std::pair<const char*, uint64_t>> RemoteStats::Fields() const {
  std::vector<std::pair<const char*, uint64_t>> fields;
  for (const RemoteCounter& c : kRemoteCounters) fields.emplace_back(c.name, this->*c.field);
  return fields;
}

void RemoteStats::Add(const RemoteStats& o) {
  enabled = enabled || o.enabled;
  for (const RemoteCounter& c : kRemoteCounters) this->*c.field += o.*c.field;
  queued_now = o.queued_now;  // a level, not a count: the later snapshot's
}

std::vector<std::pair<const char*, uint64_t>> ServeStats::Fields() const {
  return {{"clients_now", clients_now},
          {"attaches", attaches},
          {"refused", refused},
          {"clients_gone", clients_gone},
          {"locks_released", locks_released},
          {"copies_failed", copies_failed},
          {"reclaim_max_us", reclaim_max_us},
          {"bad_messages", bad_messages},
          {"calls", calls}};
}

std::string StoreStats::ToJson() const {
  nlohmann::json j = {
      {"lookups", lookups},
      {"lookup_pages", lookup_pages},
      {"hit_pages", hit_pages},
      {"kv_only_hit_pages", kv_only_hit_pages},
      {"loaded_entries", MatrixJson(loaded_entries)},
      {"loaded_bytes", MatrixJson(loaded_bytes)},
      {"resident_entries", MatrixJson(resident_entries)},
      {"resident_bytes", MatrixJson(resident_bytes)},
      {"evictions", MatrixJson(evictions)},
      {"bytes_device_to_host", bytes_device_to_host},
      {"bytes_host_to_device", bytes_host_to_device},
      {"bytes_host_to_disk", bytes_host_to_disk},
      {"bytes_disk_to_host", bytes_disk_to_host},
      {"gbps_device_to_host", gbps_device_to_host},
      {"gbps_host_to_device", gbps_host_to_device},
      {"checksum_failures", checksum_failures},
      {"io_errors", io_errors},
      {"no_space_errors", no_space_errors},
      {"disk_dropped_at_open", disk_dropped_at_open},
      {"evicted_ahead", evicted_ahead},
      {"disk_admission_refused", disk_admission_refused},
      {"evict_write_failures", evict_write_failures},
      {"tp_partial_entries", tp_partial_entries},
      {"tp_partials_dropped", tp_partials_dropped},
      {"disk_records_recovered", disk_records_recovered},
      {"disk_unreachable_at_open", disk_unreachable_at_open},
      {"failed_operations", failed_operations},
      {"saves", saves},
      {"saved_pages", saved_pages},
      {"saved_states", saved_states},
      {"saved_window_pages", saved_window_pages},
      {"refreshed_pages", refreshed_pages},
      {"loads", loads},
      {"prefetches", prefetches},
      {"in_flight_operations", in_flight_operations},
      {"disk_queue_depth", disk_queue_depth},
      {"index_entries", index_entries},
      {"lookup_latency", LatencyJson(lookup_latency)},
      {"load_latency", LatencyJson(load_latency)},
      {"save_latency", LatencyJson(save_latency)},
  };
  nlohmann::json r = {{"enabled", remote.enabled}};
  for (const auto& [name, value] : remote.Fields()) r[name] = value;
  j["remote"] = std::move(r);
  nlohmann::json sv = {{"enabled", serve.enabled}};
  for (const auto& [name, value] : serve.Fields()) sv[name] = value;
  j["serve"] = std::move(sv);
  return j.dump();
}

std::string StoreStats::ToPrometheus() const {
  std::ostringstream o;
  PromScalar(o, "lookups_total", "counter", "Lookup calls", static_cast<double>(lookups));
  PromScalar(o, "lookup_pages_total", "counter", "full pages asked for by Lookup",
             static_cast<double>(lookup_pages));
  PromScalar(o, "hit_pages_total", "counter", "pages reusable under the hybrid rule",
             static_cast<double>(hit_pages));
  PromScalar(o, "kv_only_hit_pages_total", "counter",
             "pages whose KV existed without a usable Mamba state",
             static_cast<double>(kv_only_hit_pages));
  PromMatrix(o, "loaded_entries_total", "entries served by Load per source tier", loaded_entries);
  PromMatrix(o, "loaded_bytes_total", "bytes served by Load per source tier", loaded_bytes);
  PromMatrix(o, "resident_entries", "entries held per tier", resident_entries);
  PromMatrix(o, "resident_bytes", "bytes held per tier", resident_bytes);
  PromMatrix(o, "evictions_total", "entries evicted per tier", evictions);
  PromScalar(o, "bytes_device_to_host_total", "counter", "bytes copied device to host",
             static_cast<double>(bytes_device_to_host));
  PromScalar(o, "bytes_host_to_device_total", "counter", "bytes copied host to device",
             static_cast<double>(bytes_host_to_device));
  PromScalar(o, "bytes_host_to_disk_total", "counter", "bytes written to disk",
             static_cast<double>(bytes_host_to_disk));
  PromScalar(o, "bytes_disk_to_host_total", "counter", "bytes read from disk",
             static_cast<double>(bytes_disk_to_host));
  PromScalar(o, "checksum_failures_total", "counter", "disk records dropped by verification",
             static_cast<double>(checksum_failures));
  PromScalar(o, "io_errors_total", "counter", "I/O errors", static_cast<double>(io_errors));
  PromScalar(o, "no_space_errors_total", "counter", "operations refused for lack of space",
             static_cast<double>(no_space_errors));
  PromScalar(o, "disk_dropped_at_open", "gauge",
             "disk records the last open could not keep (truncated or recreated data file...)",
             static_cast<double>(disk_dropped_at_open));
  PromScalar(o, "evicted_ahead_total", "counter",
             "host entries evicted ahead of demand to keep the free target",
             static_cast<double>(evicted_ahead));
  PromScalar(o, "disk_admission_refused_total", "counter",
             "host victims the hybrid policy did not write to disk",
             static_cast<double>(disk_admission_refused));
  PromScalar(o, "evict_write_failures_total", "counter",
             "write-on-evict disk writes that failed (the entries leave host memory unwritten)",
             static_cast<double>(evict_write_failures));
  PromScalar(o, "tp_partial_entries", "gauge",
             "tensor-parallel entries some ranks saved and others not yet",
             static_cast<double>(tp_partial_entries));
  PromScalar(o, "tp_partials_dropped_total", "counter",
             "tensor-parallel partial entries dropped (timed out, or freed for room)",
             static_cast<double>(tp_partials_dropped));
  PromScalar(o, "disk_records_recovered", "gauge", "disk records the store opened with",
             static_cast<double>(disk_records_recovered));
  PromScalar(o, "disk_unreachable_at_open", "gauge",
             "disk records reclaimed at open: no lookup could reach them",
             static_cast<double>(disk_unreachable_at_open));
  PromScalar(o, "failed_operations_total", "counter", "operations whose fence fired an error",
             static_cast<double>(failed_operations));
  PromScalar(o, "in_flight_operations", "gauge", "operations in flight",
             static_cast<double>(in_flight_operations));
  PromScalar(o, "index_entries", "gauge", "pages the prefix index holds",
             static_cast<double>(index_entries));
  PromLatency(o, "lookup", lookup_latency);
  PromLatency(o, "load", load_latency);
  PromLatency(o, "save", save_latency);
  if (remote.enabled) {
    o << "# HELP cachepawl_remote the remote tier's counters (see RemoteStats)\n"
      << "# TYPE cachepawl_remote untyped\n";
    for (const auto& [name, value] : remote.Fields()) {
      o << "cachepawl_remote{counter=\"" << name << "\"} " << value << "\n";
    }
  }
  if (serve.enabled) {
    o << "# HELP cachepawl_serve the shared store's attached processes (see ServeStats)\n"
      << "# TYPE cachepawl_serve untyped\n";
    for (const auto& [name, value] : serve.Fields()) {
      o << "cachepawl_serve{counter=\"" << name << "\"} " << value << "\n";
    }
  }
  return o.str();
}

}  // namespace cachepawl
