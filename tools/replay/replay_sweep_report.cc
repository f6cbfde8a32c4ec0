// `cachepawl replay --sweep`'s table and JSON (replay_sweep.h).
#include <cmath>
#include <cstdio>
#include <optional>
#include <ostream>
#include <string>

#include "tools/human_bytes.h"
#include "tools/replay/replay_sweep.h"

namespace cachepawl::tools {
namespace {

using nlohmann::json;

// What the table shows of one run.
struct RunFigures {
  uint64_t hit_tokens = 0;
  double hit_rate = 0;    // of prompt tokens
  double of_ceiling = 0;  // hit_rate_of_ceiling: the page hit rate over the ceiling's
  std::optional<double> disk_per_hit_token, loaded_per_hit_token;  // none without hits
};

RunFigures FiguresOf(const ReplayReport& r) {
  const ReplayTotals& t = r.totals;
  RunFigures f;
  f.hit_tokens = t.hit_pages_total() * r.page_size_tokens;
  f.hit_rate = Ceiling::Rate(f.hit_tokens, t.prompt_tokens);
  const double ceiling = r.ceiling.hybrid_page_rate();
  f.of_ceiling = ceiling > 0 ? Ceiling::Rate(t.hit_pages_total(), t.pages) / ceiling : 0.0;
  if (f.hit_tokens > 0) {
    const double hits = static_cast<double>(f.hit_tokens);
    f.disk_per_hit_token = static_cast<double>(r.store.bytes_host_to_disk) / hits;
    f.loaded_per_hit_token =
        static_cast<double>(r.store.bytes_host_to_device + r.store.bytes_disk_to_host) / hits;
  }
  return f;
}

static_assert(kNumSweepPolicies == 2 && kSweepPolicies[0] == EvictionPolicy::kLru &&
              kSweepPolicies[1] == EvictionPolicy::kHybrid);

// hybrid's token hit rate over lru's; none when either run failed or lru hit nothing.
std::optional<double> HybridOverLru(const SweepRow& row) {
  const SweepRun& lru = row.runs[0];
  const SweepRun& hybrid = row.runs[1];
  if (!lru.report || !hybrid.report) return std::nullopt;
  const double base = FiguresOf(*lru.report).hit_rate;
  if (base <= 0) return std::nullopt;
  return FiguresOf(*hybrid.report).hit_rate / base;
}

json Optional(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json TiersJson(const SweepTiers& t) {
  return {{"device_bytes", t.device}, {"host_bytes", t.host}, {"disk_bytes", t.disk}};
}

json RunJson(const SweepRun& run) {
  if (!run.report) {
    return {
        {"ok", false}, {"eviction_policy", EvictionPolicyName(run.policy)}, {"error", run.error}};
  }
  json j = ReplayReportJsonValue(*run.report);
  const RunFigures f = FiguresOf(*run.report);
  j["hit_tokens"] = f.hit_tokens;
  j["disk_write_bytes_per_hit_token"] = Optional(f.disk_per_hit_token);
  j["loaded_bytes_per_hit_token"] = Optional(f.loaded_per_hit_token);
  return j;
}

std::string Format(const char* fmt, double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Right(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string Left(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// Bytes per token: "0.5 B" below 1 KiB, else HumanBytes; "-" without hits.
std::string PerToken(const std::optional<double>& v) {
  if (!v) return "-";
  if (*v < 1024) return Format("%.1f B", *v);
  return HumanBytes(static_cast<uint64_t>(std::llround(*v)));
}

std::string TierCell(uint64_t bytes, bool clamped, bool off = false) {
  return Left(off ? std::string("off") : HumanBytes(bytes) + (clamped ? "*" : ""), 11);
}

constexpr size_t kRunWidth = 38;  // hit, of ceiling, disk/tok, load/tok

std::string RunCells(const SweepRun& run) {
  if (!run.report) return Right("FAILED", kRunWidth);
  const RunFigures f = FiguresOf(*run.report);
  std::string cells = Right(Format("%.1f%%", 100 * f.hit_rate), 7) +
                      Right(Format("%.1f%%", 100 * f.of_ceiling), 9) +
                      Right(PerToken(f.disk_per_hit_token), 11) +
                      Right(PerToken(f.loaded_per_hit_token), 11);
  return run.ok() ? cells : cells + " !";
}

std::string Dashes(const std::string& title) {
  const size_t side = (kRunWidth - 2 - title.size()) / 2;
  std::string s = std::string(side, '-') + " " + title + " ";
  return "  " + s + std::string(kRunWidth - 2 - s.size(), '-');
}

}  // namespace

void PrintSweepTable(const SweepResult& r, std::ostream& out) {
  const WorkingSet& w = r.working_set;
  out << "cachepawl replay --sweep: " << r.source << ", " << r.requests << " requests; layout "
      << r.layout << ", page " << r.page_size_tokens << " tokens\n";
  out << "working set " << HumanBytes(w.bytes) << ": " << w.pages << " pages x "
      << HumanBytes(w.page_bytes);
  if (w.state_bytes > 0) out << " + " << w.states << " states x " << HumanBytes(w.state_bytes);
  out << "\n  (what an infinite cache holds after the requests, same save points)\n";
  out << "ceiling " << Format("%.1f%%", 100 * r.ceiling.hybrid_token_rate())
      << " of prompt tokens. Size: the larger of host and disk as a fraction of the working set;\n"
      << "the other tiers keep the ratio device " << HumanBytes(r.given.device) << " : host "
      << HumanBytes(r.given.host) << " : disk "
      << (r.given.disk > 0 ? HumanBytes(r.given.disk) : std::string("off")) << "\n\n";

  out << std::string(41, ' ');
  for (EvictionPolicy p : kSweepPolicies) out << Dashes(EvictionPolicyName(p));
  out << "\n";
  out << "  size  device     host       disk       ";
  for (size_t p = 0; p < kNumSweepPolicies; ++p) out << "      hit  of ceil   disk/tok   load/tok";
  out << "  hybrid/lru\n";
  bool clamped = false, failed = false;
  for (const SweepRow& row : r.rows) {
    const SweepTiers& t = row.tiers;
    clamped = clamped || t.device_clamped || t.host_clamped || t.disk_clamped;
    out << Right(Format("%.4g%%", 100 * row.fraction), 6) << "  "
        << TierCell(t.device, t.device_clamped) << TierCell(t.host, t.host_clamped)
        << TierCell(t.disk, t.disk_clamped, r.given.disk == 0);
    for (const SweepRun& run : row.runs) {
      out << "  " << RunCells(run);
      failed = failed || !run.ok();
    }
    const std::optional<double> ratio = HybridOverLru(row);
    out << Right(ratio ? Format("%.3f", *ratio) : std::string("-"), 12) << "\n";
  }
  out << "\nhit: prompt tokens served from a cache tier; of ceil: page hit rate over the "
         "ceiling's;\n"
         "disk/tok: bytes written to disk per hit token; load/tok: bytes loaded (host->device +\n"
         "disk->host) per hit token; hybrid/lru: hybrid's token hit rate over lru's\n";
  if (clamped) {
    out << "*: raised to the least the replay needs (device " << HumanBytes(r.minimums.device)
        << ", host " << HumanBytes(r.minimums.host) << ", disk " << HumanBytes(r.minimums.disk)
        << ":\n   a --chunk-pages chunk and two states per request in flight)\n";
  }
  for (const SweepRow& row : r.rows) {
    for (const SweepRun& run : row.runs) {
      if (run.ok()) continue;
      out << "! " << Format("%.4g%%", 100 * row.fraction) << " " << EvictionPolicyName(run.policy)
          << ": ";
      if (!run.report) {
        out << run.error << "\n";
        continue;
      }
      const ReplayTotals& t = run.report->totals;
      out << t.wrong_bytes << " wrong bytes, " << t.store_errors << " failed store calls";
      if (!t.wrong_records_seen.empty()) out << "; first wrong: " << t.wrong_records_seen[0];
      if (!t.errors.empty()) out << "; first error: " << t.errors[0];
      out << "\n";
    }
  }
  out << (failed ? "FAILED" : "OK") << "\n";
}

json SweepJson(const SweepResult& r) {
  json rows = json::array();
  for (const SweepRow& row : r.rows) {
    json j = TiersJson(row.tiers);
    j["fraction"] = row.fraction;
    j["clamped"] = {{"device", row.tiers.device_clamped},
                    {"host", row.tiers.host_clamped},
                    {"disk", row.tiers.disk_clamped}};
    for (size_t p = 0; p < kNumSweepPolicies; ++p) {
      j[EvictionPolicyName(kSweepPolicies[p])] = RunJson(row.runs[p]);
    }
    j["hybrid_over_lru"] = Optional(HybridOverLru(row));
    rows.push_back(std::move(j));
  }
  json policies = json::array();
  for (EvictionPolicy p : kSweepPolicies) policies.push_back(EvictionPolicyName(p));
  const WorkingSet& w = r.working_set;
  return {{"ok", r.ok()},
          {"source", r.source},
          {"layout", r.layout},
          {"requests", r.requests},
          {"page_size_tokens", r.page_size_tokens},
          {"working_set",
           {{"bytes", w.bytes},
            {"pages", w.pages},
            {"states", w.states},
            {"page_bytes", w.page_bytes},
            {"state_bytes", w.state_bytes}}},
          {"ceiling", CeilingJson(r.ceiling)},
          {"given_tiers", TiersJson(r.given)},
          {"minimum_tiers", TiersJson(r.minimums)},
          {"policies", policies},
          {"rows", rows}};
}

std::string SweepHelp() {
  return R"(--sweep: the same requests over tiers sized at fractions of their working set
(--sweep-fractions, default 0.1,0.25,0.5,1), each size with --policy lru and hybrid, side by
side. The working set is what an infinite cache holds after the requests at the replay's save
points: distinct full pages x their KV records + saved states x the state record. At fraction f
the larger of the host and disk tiers is f x the working set, and the device pool, host and
disk keep their ratio to it as given (--device-bytes, --host-bytes, --disk-bytes; --disk-bytes
0 stays off); each is rounded up to whole MiB and raised to the least the replay needs (a
--chunk-pages chunk and two states per request in flight; marked *). The tiers keep records
in 4 KiB-padded slots, so at 100% they hold a little less than the working set. Each run opens
a fresh temporary store folder, removed after it. Not with --dir, --soak, --crash-every or
--policy. Exit status 1 when any run had a wrong byte or a failed store call.
Sweep JSON keys (--sweep --json prints one object):
  ok, source, layout, requests, page_size_tokens
  working_set.{bytes,pages,states,page_bytes,state_bytes}
  ceiling.{...}          as a plain replay's, over the same requests
  given_tiers, minimum_tiers   .{device_bytes,host_bytes,disk_bytes}
  policies               ["lru", "hybrid"]: the keys of each row's runs
  rows[].{fraction,device_bytes,host_bytes,disk_bytes,clamped.{device,host,disk}}
  rows[].{lru,hybrid}    that run's report (the keys above) plus hit_tokens,
                         disk_write_bytes_per_hit_token, loaded_bytes_per_hit_token (null
                         without hits); a run that failed: ok false, eviction_policy, error
  rows[].hybrid_over_lru hybrid's token hit rate over lru's (null when lru's is 0)
)";
}

}  // namespace cachepawl::tools
