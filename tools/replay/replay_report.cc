#include "tools/replay/replay_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "tools/human_bytes.h"

namespace cachepawl::tools {
namespace {

using nlohmann::json;

constexpr size_t kKeptMessages = 10;

// ReplayTotals' plain counters and their JSON keys: the one list that Merge, a replica's totals
// (ReplayTotalsToJson / FromJson) and the report's JSON use. `in_report`: the report shows it
// under its key (the others it shows in other forms, or not at all).
struct TotalsCounter {
  const char* key;
  uint64_t ReplayTotals::*field;
  bool in_report;
};
constexpr TotalsCounter kTotalsCounters[] = {
    {"requests", &ReplayTotals::requests, true},
    {"prompt_tokens", &ReplayTotals::prompt_tokens, true},
    {"pages", &ReplayTotals::pages, true},
    {"computed_pages", &ReplayTotals::computed_pages, true},
    {"computed_states", &ReplayTotals::computed_states, true},
    {"saved_pages", &ReplayTotals::saved_pages, true},
    {"saved_states", &ReplayTotals::saved_states, true},
    {"loaded_pages", &ReplayTotals::loaded_pages, true},
    {"loaded_states", &ReplayTotals::loaded_states, true},
    {"loaded_bytes", &ReplayTotals::loaded_bytes, false},
    {"saved_bytes", &ReplayTotals::saved_bytes, false},
    {"saved_window_pages", &ReplayTotals::saved_window_pages, false},
    {"loaded_window_pages", &ReplayTotals::loaded_window_pages, false},
    {"lost_races", &ReplayTotals::lost_races, true},
    {"refused", &ReplayTotals::refused, true},
    {"store_errors", &ReplayTotals::store_errors, true},
    {"verified_records", &ReplayTotals::verified_records, true},
    {"verified_bytes", &ReplayTotals::verified_bytes, true},
    {"wrong_records", &ReplayTotals::wrong_records, true},
    {"wrong_bytes", &ReplayTotals::wrong_bytes, true},
};

void AppendKept(std::vector<std::string>* to, const std::vector<std::string>& from) {
  for (const std::string& s : from) {
    if (to->size() >= kKeptMessages) return;
    to->push_back(s);
  }
}

std::string Percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%5.1f%%", 100.0 * x);
  return buf;
}

std::string Fixed(double v, int width, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%*.*f", width, decimals, v);
  return buf;
}

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

double Rate(uint64_t hits, uint64_t total) { return Ceiling::Rate(hits, total); }

double PerSecond(uint64_t count, double seconds) {
  return seconds > 0 ? static_cast<double>(count) / seconds : 0.0;
}

double Gbps(uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

json LatencyJson(const LatencySummary& l) {
  return {{"count", l.count},
          {"p50", l.p50_us},
          {"p99", l.p99_us},
          {"max", l.max_us},
          {"mean", l.mean_us}};
}

LatencySummary AddLatency(const LatencySummary& a, const LatencySummary& b) {
  const uint64_t n = a.count + b.count;
  if (n == 0) return {};
  auto weighted = [&](double x, double y) {
    return (x * static_cast<double>(a.count) + y * static_cast<double>(b.count)) /
           static_cast<double>(n);
  };
  return {n, weighted(a.p50_us, b.p50_us), weighted(a.p99_us, b.p99_us),
          std::max(a.max_us, b.max_us), weighted(a.mean_us, b.mean_us)};
}

double BytesWeighted(double ga, uint64_t ba, double gb, uint64_t bb) {
  const uint64_t n = ba + bb;
  return n == 0 ? 0.0
                : (ga * static_cast<double>(ba) + gb * static_cast<double>(bb)) /
                      static_cast<double>(n);
}

// KV bytes per kind that the replay's pages moved (saved, loaded), and what whole pages (every
// attention layer of every page) would have moved: the saving of keeping windowed KV apart.
struct WindowedKv {
  uint64_t saved_full = 0, saved_window = 0, saved_whole = 0;
  uint64_t loaded_full = 0, loaded_window = 0, loaded_whole = 0;
};

WindowedKv WindowedKvOf(const ReplayReport& r) {
  const ReplayTotals& t = r.totals;
  WindowedKv w;
  w.saved_full = t.saved_pages * r.full_record_bytes;
  w.saved_window = t.saved_window_pages * r.window_record_bytes;
  w.saved_whole = t.saved_pages * r.kv_page_bytes;
  w.loaded_full = t.loaded_pages * r.full_record_bytes;
  w.loaded_window = t.loaded_window_pages * r.window_record_bytes;
  w.loaded_whole = t.loaded_pages * r.kv_page_bytes;
  return w;
}

nlohmann::json WindowedKvJson(const ReplayReport& r) {
  if (r.window_pages == 0) return nullptr;
  const WindowedKv w = WindowedKvOf(r);
  return {{"window_pages", r.window_pages},
          {"saved", {{"full", w.saved_full}, {"window", w.saved_window}, {"whole", w.saved_whole}}},
          {"loaded",
           {{"full", w.loaded_full}, {"window", w.loaded_window}, {"whole", w.loaded_whole}}}};
}

}  // namespace

LatencySummary LatencySamples::Summarize() const {
  LatencySummary s;
  if (us_.empty()) return s;
  std::vector<double> sorted = us_;
  std::sort(sorted.begin(), sorted.end());
  auto rank = [&](double q) {
    const size_t idx = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    return sorted[std::min(sorted.size() - 1, idx == 0 ? 0 : idx - 1)];
  };
  s.count = sorted.size();
  s.p50_us = rank(0.50);
  s.p99_us = rank(0.99);
  s.max_us = sorted.back();
  double sum = 0;
  for (double v : sorted) sum += v;
  s.mean_us = sum / static_cast<double>(sorted.size());
  return s;
}

void ReplayTotals::AddError(std::string message) {
  ++store_errors;
  if (errors.size() < kKeptMessages) errors.push_back(std::move(message));
}

void ReplayTotals::Merge(const ReplayTotals& o) {
  for (const TotalsCounter& c : kTotalsCounters) this->*c.field += o.*c.field;
  for (int t = 0; t < kNumTiers; ++t) {
    hit_pages[t] += o.hit_pages[t];
    hit_states[t] += o.hit_states[t];
  }
  for (const std::string& r : o.refusals_seen) {
    if (refusals_seen.size() < 3) refusals_seen.push_back(r);
  }
  AppendKept(&errors, o.errors);
  AppendKept(&wrong_records_seen, o.wrong_records_seen);
  for (int k = 0; k < kNumKinds; ++k) l1_evictions[k] += o.l1_evictions[k];
  lookup_us.Merge(o.lookup_us);
  load_us.Merge(o.load_us);
  save_us.Merge(o.save_us);
}

json ReplayTotalsToJson(const ReplayTotals& t) {
  json j = {{"hit_pages", t.hit_pages},
            {"hit_states", t.hit_states},
            {"refusals_seen", t.refusals_seen},
            {"errors", t.errors},
            {"wrong_records_seen", t.wrong_records_seen},
            {"l1_evictions", t.l1_evictions},
            {"lookup_us", t.lookup_us.samples()},
            {"load_us", t.load_us.samples()},
            {"save_us", t.save_us.samples()}};
  for (const TotalsCounter& c : kTotalsCounters) j[c.key] = t.*c.field;
  return j;
}

ReplayTotals ReplayTotalsFromJson(const json& j) {
  ReplayTotals t;
  for (const TotalsCounter& c : kTotalsCounters) t.*c.field = j.value(c.key, uint64_t{0});
  t.hit_pages = j.at("hit_pages").get<std::array<uint64_t, kNumTiers>>();
  t.hit_states = j.at("hit_states").get<std::array<uint64_t, kNumTiers>>();
  t.refusals_seen = j.at("refusals_seen").get<std::vector<std::string>>();
  t.errors = j.at("errors").get<std::vector<std::string>>();
  t.wrong_records_seen = j.at("wrong_records_seen").get<std::vector<std::string>>();
  t.l1_evictions = j.at("l1_evictions").get<std::array<uint64_t, kNumKinds>>();
  for (double v : j.at("lookup_us")) t.lookup_us.Add(v);
  for (double v : j.at("load_us")) t.load_us.Add(v);
  for (double v : j.at("save_us")) t.save_us.Add(v);
  return t;
}

StoreStats AddStoreStats(const StoreStats& a, const StoreStats& b) {
  StoreStats s = a;
  s.lookups += b.lookups;
  s.lookup_pages += b.lookup_pages;
  s.hit_pages += b.hit_pages;
  s.kv_only_hit_pages += b.kv_only_hit_pages;
  for (int t = 0; t < kNumLocalTiers; ++t) {
    for (int k = 0; k < kNumKinds; ++k) {
      s.loaded_entries[t][k] += b.loaded_entries[t][k];
      s.loaded_bytes[t][k] += b.loaded_bytes[t][k];
      s.resident_entries[t][k] = b.resident_entries[t][k];  // "now": the latest snapshot
      s.resident_bytes[t][k] = b.resident_bytes[t][k];
      s.evictions[t][k] += b.evictions[t][k];
    }
  }
  s.gbps_device_to_host = BytesWeighted(a.gbps_device_to_host, a.bytes_device_to_host,
                                        b.gbps_device_to_host, b.bytes_device_to_host);
  s.gbps_host_to_device = BytesWeighted(a.gbps_host_to_device, a.bytes_host_to_device,
                                        b.gbps_host_to_device, b.bytes_host_to_device);
  s.bytes_device_to_host += b.bytes_device_to_host;
  s.bytes_host_to_device += b.bytes_host_to_device;
  s.bytes_host_to_disk += b.bytes_host_to_disk;
  s.bytes_disk_to_host += b.bytes_disk_to_host;
  s.checksum_failures += b.checksum_failures;
  s.io_errors += b.io_errors;
  s.no_space_errors += b.no_space_errors;
  s.evicted_ahead += b.evicted_ahead;
  s.disk_admission_refused += b.disk_admission_refused;
  s.evict_write_failures += b.evict_write_failures;
  s.disk_records_recovered += b.disk_records_recovered;  // crash mode: over every reopen
  s.disk_dropped_at_open += b.disk_dropped_at_open;
  s.disk_unreachable_at_open += b.disk_unreachable_at_open;
  s.failed_operations += b.failed_operations;
  s.saves += b.saves;
  s.saved_pages += b.saved_pages;
  s.saved_states += b.saved_states;
  s.saved_window_pages += b.saved_window_pages;
  s.refreshed_pages += b.refreshed_pages;
  s.loads += b.loads;
  s.prefetches += b.prefetches;
  s.in_flight_operations = b.in_flight_operations;
  s.disk_queue_depth = b.disk_queue_depth;
  s.index_entries = b.index_entries;
  s.lookup_latency = AddLatency(a.lookup_latency, b.lookup_latency);
  s.load_latency = AddLatency(a.load_latency, b.load_latency);
  s.save_latency = AddLatency(a.save_latency, b.save_latency);
  s.remote.Add(b.remote);
  return s;
}

std::string ReplayJsonKeysHelp() {
  return R"(JSON keys (--json prints one object):
  ok                     true when no byte was wrong, no store call failed, at least one
                         request was replayed and (crash mode) something was verified
  failure                why ok is false ("" when it is true)
  source, layout         the trace path or "workload NAME"; the layout preset or file
  page_size_tokens, block_size_tokens, track_interval_pages
  device_bytes, host_bytes, disk_bytes, store_dir
  eviction_policy        the store's eviction policy: "lru" or "hybrid" (--policy)
  kv_page_bytes, mamba_state_bytes   record sizes of the layout
  requests, prompt_tokens, pages     replayed requests, their prompt tokens and full pages
  concurrency            requests in flight at once (--concurrency)
  wall_seconds, requests_per_second, tokens_per_second   over the run's wall time;
                         tokens_per_second counts prompt tokens
  crashes                store processes SIGKILLed and reopened (--crash-every)
  kills_during_open      of those, killed while opening the store (--kill-during-open)
  reopens                store processes that opened the folder a killed one left
  owner_losses           --attach: store processes that found the owner gone (started again)
  disk_records_recovered, disk_dropped_at_open, disk_unreachable_at_open   what the
                         store's opens recovered from disk, dropped (did not verify or fit)
                         and reclaimed (no lookup could reach them), summed over processes
  bad_trace_lines        lines skipped by --skip-bad-lines
  hit_rate.tokens, hit_rate.pages    reused / all, token- and page-weighted (hybrid rule)
  hit_rate_by_tier.{device,host,disk,remote}.{tokens,pages}   the same split by the serving tier
                         (device = the replay engine's own L1 pool)
  state_hits_by_tier.{device,host,disk,remote}   Mamba states reused, by tier
  remote                 with --remote: the remote tier's counters (StoreStats::remote)
  ceiling.blocks         infinite-cache prefix hit rate by trace block (traces/README.md)
  ceiling.{kv_tokens,kv_pages}         infinite cache, attention-only rule
  ceiling.{hybrid_tokens,hybrid_pages} infinite cache, hybrid rule, states where the
                         engine saves them: the rate this replay can reach
  hit_rate_of_ceiling    hit_rate.pages / ceiling.hybrid_pages
  computed_pages, computed_states, saved_pages, saved_states, loaded_pages, loaded_states
  kv_by_kind             layouts with sliding-window layers: KV bytes saved and loaded per
                         kind (full, window) against whole pages (every layer, every page)
  bytes.{device_to_host,host_to_device,host_to_disk,disk_to_host}   from the store's counters
  gbps_wall.{...}        the same bytes over wall_seconds, in GB/s (1e9 bytes), per direction
  gbps_busy.{device_to_host,host_to_device}   the store's own figures (over its busy time)
  latency_us.{lookup,load,save}.{count,p50,p99,max,mean}   as the engine sees them: Lookup
                         call; Load call to fence; Save call to fence
  store_latency_us.{lookup,load,save}.{...}   the store's histograms (crash mode: count-
                         weighted over store processes, an approximation)
  evictions.l1.{kv,mamba}             the engine's L1 evictions
  evictions.{host,disk}.{kv,mamba}    the store's
  checksum_failures, io_errors        from the store's counters
  verified_records, verified_bytes    every reused record is compared byte for byte
  wrong_records, wrong_bytes          records and bytes that differed (must be 0)
  wrong_records_seen     descriptions of the first wrong records
  lost_races             Lookup hits that Lock or Load then reported gone (a miss)
  refused                Lock, Load or Save refused for now (NoSpace, Busy): a miss, or
                         pages not saved; not an error
  refusals_seen          the first few refusals' messages
  store_errors, errors   failed store calls, and the first messages
)";
}

json CeilingJson(const Ceiling& c) {
  return {{"blocks", c.block_rate()},
          {"kv_tokens", c.kv_token_rate()},
          {"kv_pages", c.kv_page_rate()},
          {"hybrid_tokens", c.hybrid_token_rate()},
          {"hybrid_pages", c.hybrid_page_rate()}};
}

std::string ReplayReportJson(const ReplayReport& r) { return ReplayReportJsonValue(r).dump(2); }

std::string ReplayReport::Failure() const {
  const ReplayTotals& t = totals;
  std::string why;
  auto add = [&why](const std::string& reason) { why += (why.empty() ? "" : "; ") + reason; };
  if (t.wrong_bytes > 0) add(std::to_string(t.wrong_bytes) + " wrong bytes");
  if (t.store_errors > 0) add(std::to_string(t.store_errors) + " failed store calls");
  if (t.requests == 0) add("no request was replayed");
  if (crashes > 0 && t.verified_records == 0) {
    add("nothing was verified after " + std::to_string(crashes) + " kills");
  }
  return why;
}

json ReplayReportJsonValue(const ReplayReport& r) {
  const ReplayTotals& t = r.totals;
  const uint32_t p = r.page_size_tokens;
  auto tier_json = [&](int tier) {
    return json{{"tokens", Rate(t.hit_pages[tier] * p, t.prompt_tokens)},
                {"pages", Rate(t.hit_pages[tier], t.pages)}};
  };
  const StoreStats& s = r.store;
  auto kinds = [](const std::array<uint64_t, kNumKinds>& a) {
    return json{{"kv", a[0]}, {"mamba", a[1]}};
  };
  const double page_rate = Rate(t.hit_pages_total(), t.pages);
  json j = {
      {"ok", r.Failure().empty()},
      {"failure", r.Failure()},
      {"source", r.source},
      {"layout", r.layout},
      {"page_size_tokens", r.page_size_tokens},
      {"block_size_tokens", r.block_size_tokens},
      {"track_interval_pages", r.track_interval_pages},
      {"device_bytes", r.device_bytes},
      {"host_bytes", r.host_bytes},
      {"disk_bytes", r.disk_bytes},
      {"eviction_policy", r.eviction_policy},
      {"store_dir", r.store_dir},
      {"kv_page_bytes", r.kv_page_bytes},
      {"mamba_state_bytes", r.state_bytes},
      {"concurrency", r.concurrency},
      {"wall_seconds", r.wall_seconds},
      {"requests_per_second", PerSecond(t.requests, r.wall_seconds)},
      {"tokens_per_second", PerSecond(t.prompt_tokens, r.wall_seconds)},
      {"crashes", r.crashes},
      {"owner_losses", r.owner_losses},
      {"kills_during_open", r.kills_during_open},
      {"reopens", r.reopens},
      {"disk_records_recovered", r.store.disk_records_recovered},
      {"disk_dropped_at_open", r.store.disk_dropped_at_open},
      {"disk_unreachable_at_open", r.store.disk_unreachable_at_open},
      {"bad_trace_lines", r.bad_trace_lines},
      {"hit_rate",
       {{"tokens", Rate(t.hit_pages_total() * p, t.prompt_tokens)}, {"pages", page_rate}}},
      {"hit_rate_by_tier",
       {{"device", tier_json(0)},
        {"host", tier_json(1)},
        {"disk", tier_json(2)},
        {"remote", tier_json(3)}}},
      {"state_hits_by_tier",
       {{"device", t.hit_states[0]},
        {"host", t.hit_states[1]},
        {"disk", t.hit_states[2]},
        {"remote", t.hit_states[3]}}},
      {"ceiling", CeilingJson(r.ceiling)},
      {"hit_rate_of_ceiling",
       r.ceiling.hybrid_page_rate() > 0 ? page_rate / r.ceiling.hybrid_page_rate() : 0.0},
      {"kv_by_kind", WindowedKvJson(r)},
      {"bytes",
       {{"device_to_host", s.bytes_device_to_host},
        {"host_to_device", s.bytes_host_to_device},
        {"host_to_disk", s.bytes_host_to_disk},
        {"disk_to_host", s.bytes_disk_to_host}}},
      {"gbps_wall",
       {{"device_to_host", Gbps(s.bytes_device_to_host, r.wall_seconds)},
        {"host_to_device", Gbps(s.bytes_host_to_device, r.wall_seconds)},
        {"host_to_disk", Gbps(s.bytes_host_to_disk, r.wall_seconds)},
        {"disk_to_host", Gbps(s.bytes_disk_to_host, r.wall_seconds)}}},
      {"gbps_busy",
       {{"device_to_host", s.gbps_device_to_host}, {"host_to_device", s.gbps_host_to_device}}},
      {"latency_us",
       {{"lookup", LatencyJson(t.lookup_us.Summarize())},
        {"load", LatencyJson(t.load_us.Summarize())},
        {"save", LatencyJson(t.save_us.Summarize())}}},
      {"store_latency_us",
       {{"lookup", LatencyJson(s.lookup_latency)},
        {"load", LatencyJson(s.load_latency)},
        {"save", LatencyJson(s.save_latency)}}},
      {"evictions",
       {{"l1", kinds(t.l1_evictions)},
        {"host", kinds(s.evictions[static_cast<int>(Tier::kHost)])},
        {"disk", kinds(s.evictions[static_cast<int>(Tier::kDisk)])}}},
      {"checksum_failures", s.checksum_failures},
      {"io_errors", s.io_errors},
  };
  for (const TotalsCounter& c : kTotalsCounters) {
    if (c.in_report) j[c.key] = t.*c.field;
  }
  j["wrong_records_seen"] = t.wrong_records_seen;
  j["refusals_seen"] = t.refusals_seen;
  j["errors"] = t.errors;
  if (r.store.remote.enabled) {
    json remote = json::object();
    for (const auto& [name, value] : r.store.remote.Fields()) remote[name] = value;
    j["remote"] = std::move(remote);
  }
  return j;
}

void PrintReplayTable(const ReplayReport& r, std::ostream& out) {
  const ReplayTotals& t = r.totals;
  const StoreStats& s = r.store;
  const uint32_t p = r.page_size_tokens;
  out << "cachepawl replay: " << r.source << ": " << t.requests << " requests, " << t.prompt_tokens
      << " prompt tokens in " << Fixed(r.wall_seconds, 0, 1) << " s, "
      << (r.concurrency == 1 ? std::string("one request at a time")
                             : std::to_string(r.concurrency) + " requests in flight");
  if (r.crashes > 0) out << ", " << r.crashes << " store crashes";
  out << "\n";
  if (r.crashes > 0) {
    out << "crash mode: " << r.crashes << " kills (" << r.kills_during_open
        << " while the store opened), " << r.reopens << " reopens recovered "
        << r.store.disk_records_recovered << " disk records, dropped "
        << r.store.disk_dropped_at_open << " that did not verify or fit and reclaimed "
        << r.store.disk_unreachable_at_open << " no lookup could reach\n";
  }
  out << "throughput: " << Fixed(PerSecond(t.requests, r.wall_seconds), 0, 1) << " requests/s, "
      << Fixed(PerSecond(t.prompt_tokens, r.wall_seconds), 0, 0) << " prompt tokens/s\n";
  out << "layout " << r.layout << ": page " << p << " tokens, KV page "
      << HumanBytes(r.kv_page_bytes);
  if (r.state_bytes > 0) out << ", Mamba state " << HumanBytes(r.state_bytes);
  out << "; trace block " << r.block_size_tokens << " tokens";
  if (r.state_bytes > 0) out << ", Mamba checkpoint every " << r.track_interval_pages << " pages";
  out << "\n";
  out << "tiers: device (engine L1) " << HumanBytes(r.device_bytes) << ", host "
      << HumanBytes(r.host_bytes) << ", disk "
      << (r.disk_bytes > 0 ? HumanBytes(r.disk_bytes) : std::string("off"));
  if (!r.store_dir.empty()) out << " in " << r.store_dir;
  if (!r.eviction_policy.empty()) out << "; eviction " << r.eviction_policy;
  out << "\n\n";

  out << "hit rate            tokens    pages   states\n";
  const char* names[] = {"  device (L1)", "  host", "  disk", "  remote"};
  for (int tier = 0; tier < kNumTiers; ++tier) {
    if (tier == static_cast<int>(Tier::kRemote) && !r.store.remote.enabled) continue;
    out << Pad(names[tier], 18) << Percent(Rate(t.hit_pages[tier] * p, t.prompt_tokens)) << "   "
        << Percent(Rate(t.hit_pages[tier], t.pages)) << "   " << t.hit_states[tier] << "\n";
  }
  const double page_rate = Rate(t.hit_pages_total(), t.pages);
  out << Pad("  total", 18) << Percent(Rate(t.hit_pages_total() * p, t.prompt_tokens)) << "   "
      << Percent(page_rate) << "\n";
  out << Pad("  ceiling", 18) << Percent(r.ceiling.hybrid_token_rate()) << "   "
      << Percent(r.ceiling.hybrid_page_rate()) << "   (infinite cache, same save points; "
      << Percent(r.ceiling.hybrid_page_rate() > 0 ? page_rate / r.ceiling.hybrid_page_rate() : 0)
      << " of it reached)\n";
  out << "  trace ceiling by block " << Percent(r.ceiling.block_rate()) << ", KV-only by page "
      << Percent(r.ceiling.kv_page_rate()) << "\n\n";

  if (s.remote.enabled) {
    const RemoteStats& rs = s.remote;
    out << "remote tier: " << rs.loaded << " entries fetched (" << rs.load_failures
        << " missed at load), " << rs.writes << " written of " << rs.writes_queued << " queued ("
        << rs.write_failures << " failed, " << rs.writes_dropped << " dropped, "
        << rs.writes_skipped << " gone before their turn); bad values " << rs.checksum_failures
        << " checksum, " << rs.header_mismatches << " header, " << rs.wrong_size << " size, "
        << rs.missing_parts << " missing parts; transport errors " << rs.transport_errors << "\n\n";
  }
  out << "computed " << t.computed_pages << " pages and " << t.computed_states << " states; saved "
      << t.saved_pages << " pages and " << t.saved_states << " states; loaded " << t.loaded_pages
      << " pages and " << t.loaded_states << " states\n\n";

  if (r.window_pages > 0) {
    const WindowedKv w = WindowedKvOf(r);
    out << "KV by kind (window " << r.window_pages << " pages): saved full-attention "
        << HumanBytes(w.saved_full) << " + windowed " << HumanBytes(w.saved_window) << " = "
        << Percent(Rate(w.saved_full + w.saved_window, w.saved_whole)) << " of whole pages ("
        << HumanBytes(w.saved_whole) << "); loaded " << HumanBytes(w.loaded_full) << " + "
        << HumanBytes(w.loaded_window) << " = "
        << Percent(Rate(w.loaded_full + w.loaded_window, w.loaded_whole)) << " of "
        << HumanBytes(w.loaded_whole) << "\n\n";
  }

  out << "bytes moved         bytes          GB/s (wall)   GB/s (store busy)\n";
  auto row = [&](const char* name, uint64_t bytes, double busy) {
    out << Pad(name, 18) << Pad(HumanBytes(bytes), 15) << Fixed(Gbps(bytes, r.wall_seconds), 11, 2);
    if (busy >= 0) out << Fixed(busy, 16, 2);
    out << "\n";
  };
  row("  device->host", s.bytes_device_to_host, s.gbps_device_to_host);
  row("  host->device", s.bytes_host_to_device, s.gbps_host_to_device);
  row("  host->disk", s.bytes_host_to_disk, -1);
  row("  disk->host", s.bytes_disk_to_host, -1);
  if (s.remote.enabled) {
    row("  host->remote", s.remote.put_bytes, -1);
    row("  remote->host", s.remote.get_bytes, -1);
  }
  out << "\n";

  out << "latency (us)        p50        p99        max      count\n";
  auto lat = [&](const char* name, const LatencySamples& samples) {
    const LatencySummary l = samples.Summarize();
    out << Pad(name, 16) << Fixed(l.p50_us, 7, 0) << Fixed(l.p99_us, 11, 0)
        << Fixed(l.max_us, 11, 0) << Fixed(static_cast<double>(l.count), 11, 0) << "\n";
  };
  lat("  Lookup", t.lookup_us);
  lat("  Load", t.load_us);
  lat("  Save", t.save_us);
  out << "\n";

  const int host = static_cast<int>(Tier::kHost), disk = static_cast<int>(Tier::kDisk);
  out << "evictions: L1 " << t.l1_evictions[0] << " pages, " << t.l1_evictions[1]
      << " states; host " << s.evictions[host][0] << " pages, " << s.evictions[host][1]
      << " states; disk " << s.evictions[disk][0] << " pages, " << s.evictions[disk][1]
      << " states\n";
  out << "checksum failures " << s.checksum_failures << ", io errors " << s.io_errors
      << ", lost races " << t.lost_races << ", refused (no space, busy) " << t.refused
      << ", failed store calls " << t.store_errors << "\n";
  for (const std::string& e : t.refusals_seen) out << "  refused: " << e << "\n";
  for (const std::string& e : t.errors) out << "  error: " << e << "\n";
  out << "verified " << t.verified_records << " records (" << HumanBytes(t.verified_bytes)
      << "): wrong records " << t.wrong_records << ", wrong bytes " << t.wrong_bytes << "\n";
  for (const std::string& w : t.wrong_records_seen) out << "  WRONG: " << w << "\n";
  const std::string failure = r.Failure();
  out << (failure.empty() ? "OK" : "FAILED: " + failure) << "\n";
}

}  // namespace cachepawl::tools
