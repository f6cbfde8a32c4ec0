#include "tools/bench/bench_store_tp.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>

#include "layouts/layout_tp.h"
#include "store/store.h"
#include "tools/bench/bench_store.h"
#include "tools/human_bytes.h"
#include "tools/rank_processes.h"
#include "tools/stall_watchdog.h"

namespace cachepawl::tools::bench_store {
namespace {

// A step's span on one rank (CLOCK_MONOTONIC ns).
struct Span {
  int64_t start = 0, end = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

class Run {
 public:
  Run(const TpBenchConfig& c, std::ostream& err) : c_(c), err_(err) {}

  // Sends `step` to ranks [0, n) at once and collects their spans. A rank that answers "err"
  // fails the step; one silent past the watchdog is a stall (stalled_ set, its threads printed).
  StatusOr<std::vector<Span>> Step(const std::string& step, size_t n) {
    for (size_t r = 0; r < n; ++r) CACHEPAWL_RETURN_IF_ERROR(ranks_.Send(r, step));
    std::vector<Span> spans(n);
    Status first;
    for (size_t r = 0; r < n; ++r) {
      auto line = ranks_.Read(r, c_.watchdog_seconds + 30);
      if (!line.ok()) {
        if (line.status().IsTimedOut()) {
          stalled_ = true;
          err_ << "bench store --tp-size: rank " << r << " (pid " << ranks_.pid(r)
               << ") did not answer '" << step << "' within " << c_.watchdog_seconds + 30
               << " s; its threads:\n"
               << DescribeThreadsOf(ranks_.pid(r));
        }
        return line.status().WithContext("step '" + step + "'");
      }
      std::istringstream in(*line);
      std::string word;
      in >> word >> spans[r].start >> spans[r].end;
      if (word != "ok" && first.ok()) {
        first = Status::Internal("rank " + std::to_string(r) + ", step '" + step + "': " + *line);
      }
    }
    Progress("tp step");
    if (!first.ok()) return first;
    return spans;
  }

  int Main(std::ostream& out);
  // One rank's answer to `step` (a line), for the steps that answer with other than a span.
  StatusOr<std::string> Line(const std::string& step, size_t r) {
    CACHEPAWL_RETURN_IF_ERROR(ranks_.Send(r, step));
    return ranks_.Read(r, c_.watchdog_seconds + 30);
  }

 private:
  Status StartRanks(const std::string& socket, uint64_t* bytes);

  const TpBenchConfig& c_;
  std::ostream& err_;
  RankProcesses ranks_;
  bool stalled_ = false;
};

Status Run::StartRanks(const std::string& socket, uint64_t* bytes) {
  for (uint32_t r = 0; r < c_.tp_size; ++r) {
    std::ostringstream spec;
    spec << r << "," << c_.tp_size << "," << c_.pages << "," << c_.device_bytes << ","
         << (c_.gpu ? 1 : 0) << "," << c_.seed << "," << std::max(0.0, c_.watchdog_seconds - 10)
         << "," << (c_.profile_stages ? 1 : 0) << "," << c_.load_split_pages << "," << socket;
    CACHEPAWL_RETURN_IF_ERROR(
        ranks_.Start(r, {c_.self, "bench", "store", "--tp-rank-worker", spec.str()},
                     c_.gpu ? GpuOfRank(r) : ""));
  }
  for (uint32_t r = 0; r < c_.tp_size; ++r) {
    CACHEPAWL_ASSIGN_OR_RETURN(std::string line, ranks_.Read(r, 600));
    if (line.rfind("ready ", 0) != 0) {
      return Status::Internal("rank " + std::to_string(r) + ": " + line);
    }
    *bytes = std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return Status::OK();
}

int Run::Main(std::ostream& out) {
  auto rank0 = ShardLayout(c_.whole, c_.tp_size, 0);
  if (!rank0.ok()) {
    err_ << "bench store --tp-size: " << rank0.status().ToString() << "\n";
    return 1;
  }
  auto group = GroupLayout(*rank0);
  if (!group.ok()) {
    err_ << "bench store --tp-size: " << group.status().ToString() << "\n";
    return 1;
  }
  const uint64_t per_round =
      c_.pages * (group->has_attention() ? group->RecordBytes(Kind::kKV) : 0) +
      (group->has_ssm() ? group->RecordBytes(Kind::kMamba) : 0);
  const uint64_t rounds = static_cast<uint64_t>(c_.iters) + 1;
  if (rounds * per_round > c_.host_bytes / 10 * 9) {
    err_ << "bench store --tp-size: --host-bytes " << HumanBytes(c_.host_bytes)
         << " holds fewer than " << rounds << " rounds of " << HumanBytes(per_round)
         << " (every rank's shares of " << c_.pages
         << " pages and a state); give more, or fewer --iters or --pages\n";
    return 2;
  }
  char tmpl[4096];
  std::snprintf(tmpl, sizeof(tmpl), "%s/cachepawl-bench-tp-XXXXXX", c_.dir.c_str());
  if (mkdtemp(tmpl) == nullptr) {
    err_ << "bench store --tp-size: mkdtemp under '" << c_.dir << "': " << std::strerror(errno)
         << "\n";
    return 1;
  }
  const std::string work = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{work};
  StoreOptions o;
  o.layout = *rank0;
  o.host_bytes = c_.host_bytes / 4096 * 4096;
  o.cuda_device = -1;  // the owner copies nothing to a GPU: the ranks do
  o.max_prompt_tokens = std::max<uint64_t>(o.max_prompt_tokens, c_.pages * rank0->page_size_tokens);
  ServeOptions so;
  so.socket_path = work + "/owner.sock";
  auto owner = Store::Serve(o, so);
  if (!owner.ok()) {
    err_ << "bench store --tp-size: " << owner.status().ToString() << "\n";
    return owner.status().IsInvalidArgument() ? 2 : 1;
  }
  uint64_t bytes = 0;
  if (Status s = StartRanks(so.socket_path, &bytes); !s.ok()) {
    err_ << "bench store --tp-size: " << s.ToString() << "\n";
    return 1;
  }
  // Per step: each rank's GB/s and the aggregate, per timed round.
  std::map<std::string, std::vector<std::vector<double>>> per_rank;
  std::map<std::string, std::vector<double>> aggregate;
  uint64_t wrong = 0;
  Status failed;
  profile::Totals owner_stages;
  std::map<std::string, std::vector<double>> rank0_stages;
  uint64_t profiled_loads = 0;
  if (c_.profile_stages) profile::SetEnabled(true);
  auto record = [&](const std::string& name, const std::vector<Span>& spans, bool timed) {
    if (!timed) return;
    int64_t lo = spans[0].start, hi = spans[0].end;
    auto& ranks = per_rank[name];
    ranks.resize(spans.size());
    for (size_t r = 0; r < spans.size(); ++r) {
      lo = std::min(lo, spans[r].start);
      hi = std::max(hi, spans[r].end);
      ranks[r].push_back(static_cast<double>(bytes) /
                         std::max<int64_t>(1, spans[r].end - spans[r].start));
    }
    aggregate[name].push_back(static_cast<double>(bytes) * spans.size() /
                              std::max<int64_t>(1, hi - lo));
  };
  for (uint64_t round = 0; round < rounds && failed.ok(); ++round) {
    const bool timed = round > 0;
    for (const char* step : {"limit load", "limit save"}) {
      auto alone = Step(step, 1);
      auto all = alone.ok() ? Step(step, c_.tp_size) : alone;
      if (!all.ok()) {
        failed = all.status();
        break;
      }
      record(std::string(step) + " alone", *alone, timed);
      record(step, *all, timed);
    }
    // Save (every rank at once), rank 0's Load alone (the others wait), every rank's Load at
    // once; then each rank checks what it loaded last.
    for (const char* step : {"save", "load alone", "load"}) {
      if (!failed.ok()) break;
      const bool alone = std::strcmp(step, "load alone") == 0;
      const bool profiled = c_.profile_stages && timed && alone;
      if (std::strcmp(step, "save") != 0) {  // the ranks' Loads start together, prepared
        if (auto prepared = Step("prep " + std::to_string(round), alone ? 1 : c_.tp_size);
            !prepared.ok()) {
          failed = prepared.status();
          break;
        }
      }
      if (profiled) {
        (void)Line("stages 1", 0);  // (what came before this Load, its preparation included)
        profile::Reset();
      }
      auto spans = Step(std::string(alone ? "load" : step) + " " + std::to_string(round),
                        alone ? 1 : c_.tp_size);
      if (!spans.ok()) {
        failed = spans.status();
        break;
      }
      record(step, *spans, timed);
      if (profiled) {
        owner_stages += profile::Snapshot();
        auto line = Line("stages 1", 0);
        std::istringstream in(line.ok() ? *line : "");
        std::string item;
        in >> item;  // "ok"
        while (in >> item) {
          const size_t eq = item.find('=');
          if (eq != std::string::npos) {
            rank0_stages[item.substr(0, eq)].push_back(std::atof(item.c_str() + eq + 1));
          }
        }
        ++profiled_loads;
      }
    }
    if (!failed.ok()) break;
    auto checked = Step("verify", c_.tp_size);
    if (!checked.ok()) {
      failed = checked.status();
      break;
    }
    for (const Span& s : *checked) wrong += static_cast<uint64_t>(s.start);
  }
  for (size_t r = 0; r < ranks_.size(); ++r) (void)ranks_.Send(r, "quit");

  out << "cachepawl bench store --tp-size " << c_.tp_size << ": " << c_.layout_name << ", "
      << c_.pages << " pages a request; " << c_.tp_size << " rank processes attached to one owner"
      << (c_.gpu ? " (rank r on the r-th visible GPU)" : " (CPU mode)") << "\n"
      << "host tier " << HumanBytes(c_.host_bytes) << " (the owner's), device pools "
      << HumanBytes(c_.device_bytes) << " per rank; " << HumanBytes(bytes)
      << " of records per rank and request; median of " << c_.iters << " rounds (+1 warm-up)\n"
      << "GB/s: bytes over the step's span (aggregate: every rank's bytes from the first start "
         "to the last end); limit: one contiguous copy of the same bytes per rank, all ranks at "
         "once; alone: rank 0's while the other ranks wait\n";
  for (Kind k : kAllKinds) {
    if (rank0->Stores(k) && rank0->TpShares(k) < c_.tp_size) {
      out << "shares: the ranks hold " << rank0->TpShares(k) << " distinct " << KindName(k)
          << " records of " << c_.tp_size
          << " (equal bytes kept once: a rank's Save of a share another rank copied copies "
             "nothing; save GB/s count every rank's bytes)\n";
    }
  }
  out << std::left << std::setw(6) << "op" << std::right;
  for (uint32_t r = 0; r < c_.tp_size; ++r) out << std::setw(9) << ("rank" + std::to_string(r));
  out << std::setw(11) << "aggregate" << std::setw(9) << "limit" << std::setw(8) << "/limit"
      << std::setw(13) << "limit alone" << std::setw(13) << "rank0 alone"
      << "\n";
  out << std::fixed << std::setprecision(2);
  for (const char* op : {"load", "save"}) {
    const std::string limit = std::string("limit ") + op;
    if (aggregate[op].empty()) continue;
    out << std::left << std::setw(6) << op << std::right;
    for (uint32_t r = 0; r < c_.tp_size; ++r) out << std::setw(9) << Median(per_rank[op][r]);
    const double agg = Median(aggregate[op]), lim = Median(aggregate[limit]);
    out << std::setw(11) << agg << std::setw(9) << lim << std::setw(8) << (lim > 0 ? agg / lim : 0)
        << std::setw(13) << Median(aggregate[limit + " alone"]);
    const auto alone = aggregate.find(std::string(op) + " alone");
    if (alone != aggregate.end()) out << std::setw(13) << Median(alone->second);
    out << "\n";
  }
  if (profiled_loads > 0) {
    out << "stages of rank 0's Load alone, us (median of " << profiled_loads
        << "): rank 0's process:";
    for (const auto& [name, us] : rank0_stages) out << " " << name << " " << Median(us);
    out << "\n  the owner's:";
    for (const auto& [name, us] : ToStagesPerOp(owner_stages, profiled_loads).us) {
      out << " " << name << " " << us;
    }
    out << "\n";
  }
  out << "wrong bytes: " << wrong << " records; errors: " << (failed.ok() ? 0 : 1) << "\n";
  if (!failed.ok()) err_ << "bench store --tp-size: " << failed.ToString() << "\n";
  if (stalled_) return kExitStalled;
  return failed.ok() && wrong == 0 ? 0 : 1;
}

}  // namespace

int RunTpBench(const TpBenchConfig& c, std::ostream& out, std::ostream& err) {
  Run run(c, err);
  return run.Main(out);
}

}  // namespace cachepawl::tools::bench_store
