// `cachepawl bench store`: the report, as JSON (--json) or as tables (tools/bench/bench_store.h,
// docs/PERFORMANCE.md "Store path" lists every key).
#include "tools/bench/bench_store_report.h"

#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>

#include "tools/human_bytes.h"
#include "vocab/internal/stage_profile.h"

namespace cachepawl::tools::bench_store {
namespace {

nlohmann::json OrNull(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::optional<double> Ratio(double a, const std::optional<double>& b) {
  if (!b || *b <= 0) return std::nullopt;
  return a / *b;
}

std::string Fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

std::string Fixed(const std::optional<double>& v, int digits) {
  return v ? Fixed(*v, digits) : "-";
}

}  // namespace

nlohmann::json ReportJson(const Config& c, const Report& r, const RunInfo& info) {
  nlohmann::json j = {{"command", info.command},
                      {"date", info.date},
                      {"mode", c.gpu ? "gpu" : "cpu"},
                      {"device", info.device},
                      {"quick", c.quick},
                      {"host_bytes", c.host_bytes},
                      {"device_bytes", c.device_bytes},
                      {"pool_bytes", PoolBytes(c)},
                      {"disk_bytes", c.disk_bytes},
                      {"dir", c.dir},
                      {"iters", c.iters},
                      {"disk_iters", c.disk_iters},
                      {"lookup_iters", c.lookup_iters},
                      {"pages", c.pages},
                      {"threads", c.threads},
                      {"pools", c.pools},
                      {"mover_polling", c.mover_polling},
                      {"seconds", r.seconds}};
  j["layouts"] = nlohmann::json::array();
  for (size_t i = 0; i < c.layouts.size(); ++i) {
    const Sizes s = SizesOf(c.layouts[i]);
    j["layouts"].push_back({{"name", c.layout_names[i]},
                            {"model", c.layouts[i].model},
                            {"page_size_tokens", c.layouts[i].page_size_tokens},
                            {"kv_page_bytes", s.page_record},
                            {"window_kv_bytes", s.window_record},
                            {"window_pages", s.window_pages},
                            {"state_bytes", s.state_record}});
  }
  j["rows"] = nlohmann::json::array();
  auto stages_json = [](const std::optional<StagesPerOp>& st) {
    if (!st) return nlohmann::json(nullptr);
    nlohmann::json us = nlohmann::json::object(), counts = nlohmann::json::object();
    for (const auto& [name, v] : st->us) us[name] = v;
    for (const auto& [name, v] : st->counts) counts[name] = v;
    return nlohmann::json{{"ops", st->ops}, {"us_per_op", us}, {"counts_per_op", counts}};
  };
  for (const Row& row : r.rows) {
    j["rows"].push_back({{"layout", row.layout},
                         {"pool", row.pool},
                         {"tier", row.tier},
                         {"op", row.op},
                         {"pages", row.pages},
                         {"threads", row.threads},
                         {"state", row.state},
                         {"bytes", row.bytes},
                         {"iters", row.iters},
                         {"p50_us", row.p50_us},
                         {"p99_us", row.p99_us},
                         {"gbps", row.gbps},
                         {"load_gbps", row.load_gbps},
                         {"save_gbps", row.save_gbps},
                         {"mover_p50_us", OrNull(row.mover_p50_us)},
                         {"mover_gbps", OrNull(row.mover_gbps)},
                         {"limit_gbps", OrNull(row.limit_gbps)},
                         {"store_vs_mover", OrNull(Ratio(row.gbps, row.mover_gbps))},
                         {"store_vs_limit", OrNull(Ratio(row.gbps, row.limit_gbps))},
                         {"verified_loads", row.verified_loads},
                         {"mismatches", row.mismatches}});
    if (row.stages || row.mover_stages) {
      j["rows"].back()["stages"] = stages_json(row.stages);
      j["rows"].back()["mover_stages"] = stages_json(row.mover_stages);
    }
  }
  j["lookups"] = nlohmann::json::array();
  for (const LookupRow& l : r.lookups) {
    j["lookups"].push_back({{"layout", l.layout},
                            {"op", l.op},
                            {"threads", l.threads},
                            {"prompt_pages", l.prompt_pages},
                            {"hit_pages", l.hit_pages},
                            {"calls", l.calls},
                            {"p50_us", l.p50_us},
                            {"p99_us", l.p99_us},
                            {"calls_per_s", l.calls_per_s}});
    if (l.stages) j["lookups"].back()["stages"] = stages_json(l.stages);
  }
  j["skipped"] = nlohmann::json::array();
  for (const Skip& s : r.skips) {
    j["skipped"].push_back({{"layout", s.layout},
                            {"pool", s.pool},
                            {"tier", s.tier},
                            {"pages", s.pages},
                            {"threads", s.threads},
                            {"reason", s.reason}});
  }
  j["mismatches"] = r.mismatches.size();
  j["mismatch_details"] = r.mismatches;
  j["errors"] = r.errors;
  return j;
}

StagesPerOp ToStagesPerOp(const profile::Totals& t, uint64_t ops) {
  StagesPerOp out;
  out.ops = ops;
  const double n = ops == 0 ? 1.0 : static_cast<double>(ops);
  for (size_t i = 0; i < t.stages.size(); ++i) {
    if (t.stages[i].count == 0) continue;
    out.us.emplace_back(std::string(profile::StageName(static_cast<profile::Stage>(i))),
                        static_cast<double>(t.stages[i].nanos) / 1e3 / n);
  }
  for (size_t i = 0; i < t.counters.size(); ++i) {
    if (t.counters[i] == 0) continue;
    out.counts.emplace_back(std::string(profile::CounterName(static_cast<profile::Counter>(i))),
                            static_cast<double>(t.counters[i]) / n);
  }
  return out;
}

StagesPerOp TakeStages(uint64_t ops) {
  const profile::Totals t = profile::Snapshot();
  profile::Reset();
  return ToStagesPerOp(t, ops);
}

void PrintSkips(const Report& r, std::ostream& out) {
  // One line per (layout, pages, threads, reason), naming the pool forms and tiers it covers.
  std::map<std::tuple<std::string, uint32_t, uint64_t, std::string>, std::string> grouped;
  std::vector<std::tuple<std::string, uint32_t, uint64_t, std::string>> order;
  for (const Skip& s : r.skips) {
    auto key = std::make_tuple(s.layout, s.threads, s.pages, s.reason);
    auto [it, fresh] = grouped.try_emplace(key, "");
    if (fresh) order.push_back(key);
    it->second += (it->second.empty() ? "" : ", ") + s.pool + " " + s.tier;
  }
  for (const auto& key : order) {
    out << "  skipped: " << std::get<0>(key) << " " << std::get<2>(key) << " pages x "
        << std::get<1>(key) << " threads (" << grouped[key] << "): " << std::get<3>(key) << "\n";
  }
}

void PrintTables(const Config& c, const Report& r, const RunInfo& info, std::ostream& out) {
  out << "cachepawl bench store: " << info.device << ", " << info.date << "\n"
      << "host tier " << HumanBytes(c.host_bytes) << ", device pools " << HumanBytes(PoolBytes(c))
      << " each (--device-bytes " << HumanBytes(c.device_bytes) << "), disk tier "
      << (c.disk_bytes > 0 ? HumanBytes(c.disk_bytes) + " under " + c.dir : std::string("none"))
      << "; " << c.iters << " rounds per figure (disk loads: " << c.disk_iters << ")\n"
      << "GB/s: threads x record bytes per request / median round (both: the two directions "
         "together); mover, limit: the DeviceMover alone and the contiguous copy, same units, "
         "same run; /mover, /limit: the store's GB/s over theirs\n";
  for (size_t li = 0; li < c.layouts.size(); ++li) {
    const std::string& name = c.layout_names[li];
    const Sizes s = SizesOf(c.layouts[li]);
    out << "\n"
        << name << " (" << c.layouts[li].model << "): KV page " << HumanBytes(s.page_record)
        << " of " << c.layouts[li].page_size_tokens << " tokens, "
        << (s.ssm ? "state " + HumanBytes(s.state_record) : std::string("no state"));
    if (s.window_pages > 0) {
      // What "bytes/req" then counts: a Load's windowed KV is the last pages' only.
      out << "; windowed layers' KV " << HumanBytes(s.window_record)
          << " a page, loaded for the last " << s.window_pages << " pages of a request, saved for "
          << (s.window_every_page ? "every page" : "those")
          << " (bytes/req: a Save's for save rows, "
          << "a Load's otherwise)";
    }
    out << "\n";
    out << std::left << std::setw(11) << "pool" << std::setw(5) << "tier" << std::setw(5) << "op"
        << std::right << std::setw(6) << "pages" << std::setw(4) << "thr" << std::setw(11)
        << "bytes/req" << std::setw(11) << "p50 us" << std::setw(11) << "p99 us" << std::setw(8)
        << "GB/s" << std::setw(8) << "mover" << std::setw(8) << "limit" << std::setw(8) << "/mover"
        << std::setw(7) << "/limit" << std::setw(8) << "checked"
        << "  load+save\n";
    bool any = false;
    for (const Row& row : r.rows) {
      if (row.layout != name) continue;
      any = true;
      out << std::left << std::setw(11) << row.pool << std::setw(5) << row.tier << std::setw(5)
          << row.op << std::right << std::setw(6) << row.pages << std::setw(4) << row.threads
          << std::setw(11) << HumanBytes(row.bytes) << std::setw(11) << Fixed(row.p50_us, 1)
          << std::setw(11) << Fixed(row.p99_us, 1) << std::setw(8) << Fixed(row.gbps, 2)
          << std::setw(8) << Fixed(row.mover_gbps, 2) << std::setw(8) << Fixed(row.limit_gbps, 2)
          << std::setw(8) << Fixed(Ratio(row.gbps, row.mover_gbps), 2) << std::setw(7)
          << Fixed(Ratio(row.gbps, row.limit_gbps), 2) << std::setw(8) << row.verified_loads;
      if (row.op == "both")
        out << "  " << Fixed(row.load_gbps, 2) << "+" << Fixed(row.save_gbps, 2);
      if (row.mismatches > 0) out << "  " << row.mismatches << " WRONG";
      out << "\n";
      for (const auto* st : {&row.stages, &row.mover_stages}) {
        if (!*st) continue;
        out << "    " << (st == &row.stages ? "store" : "mover") << " per op (" << (*st)->ops
            << " ops):";
        for (const auto& [name, v] : (*st)->us) out << " " << name << " " << Fixed(v, 1) << "us";
        for (const auto& [name, v] : (*st)->counts) out << " " << name << " " << Fixed(v, 1);
        out << "\n";
      }
    }
    if (!any) out << "  (no case fits the budgets)\n";
    bool lookups = false;
    for (const LookupRow& l : r.lookups) {
      if (l.layout != name) continue;
      if (!lookups) {
        out << std::left << std::setw(15) << "lookups" << std::right << std::setw(4) << "thr"
            << std::setw(8) << "prompt" << std::setw(6) << "hits" << std::setw(8) << "calls"
            << std::setw(10) << "p50 us" << std::setw(10) << "p99 us" << std::setw(11)
            << "calls/s\n";
        lookups = true;
      }
      out << std::left << std::setw(15) << l.op << std::right << std::setw(4) << l.threads
          << std::setw(8) << l.prompt_pages << std::setw(6) << l.hit_pages << std::setw(8)
          << l.calls << std::setw(10) << Fixed(l.p50_us, 1) << std::setw(10) << Fixed(l.p99_us, 1)
          << std::setw(10) << Fixed(l.calls_per_s, 0) << "\n";
    }
    Report mine;
    for (const Skip& k : r.skips) {
      if (k.layout == name) mine.skips.push_back(k);
    }
    PrintSkips(mine, out);
  }
  out << "\n"
      << r.rows.size() << " rows in " << Fixed(r.seconds, 1)
      << " s; wrong bytes: " << r.mismatches.size() << "; errors: " << r.errors.size() << "\n";
}

}  // namespace cachepawl::tools::bench_store
