// cachepawl bench transfer [--scenarios LIST] [--paths LIST] [--iters N] [--matmuls N]
//                          [--period-ms MS] [--ctas N] [--priority P] [--no-coalesce]
//                          [--staging-mib N] [--staging-chunks N] [--json]
//
// The device<->host data path on a GPU, in one run, per scenario (a layout and a kind: KV pages
// of Llama-3.1-8B and Jamba with 16-token pages; Mamba states of 1, 16 and 128 MiB), with units
// scattered at random over layer-first device pools:
//   ours           DeviceMover, default path (gather/scatter kernel + staged copy engines)
//   ours_block     DeviceMover on a block-contiguous pool (whole records, copy engines only)
//   memcpy_piece   one cudaMemcpyAsync per page (or state) per layer per K/V (conv/SSM) piece
//   memcpy_batch   cudaMemcpyBatchAsync of the same pieces
//   contiguous     one cudaMemcpyAsync of the same total bytes: the link's limit
// each device->host (d2h), host->device (h2d) and both at once (both); GB/s, the ratio to the
// contiguous limit measured in the same run, and the slowdown of a bf16 8192x8192 matrix-product
// loop on another stream while the path moves data both ways (cuBLAS, loaded with dlopen; a
// tiled kernel without tensor cores when cuBLAS cannot be loaded, said in the output).
// Every timed iteration starts from poisoned destinations, sources are random, and after the
// last iteration of every path and direction every destination byte is compared (exit 1 on a
// mismatch). Without a GPU it says so and exits 1.
//
// This file is the command (flags, the loop over scenarios, paths and directions, the report);
// tools/bench/bench_transfer_scenario.h sets each scenario up and runs one iteration of a path,
// tools/bench/bench_transfer_interference.h measures the matrix-product slowdown.
#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/gpu_runtime.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "transfer/device_mover.h"

#if CACHEPAWL_HAVE_CUDA
#include "tools/bench/bench_transfer_interference.h"
#include "tools/bench/bench_transfer_scenario.h"
#include "tools/stall_watchdog.h"
#endif

namespace cachepawl::tools {
namespace {

#if CACHEPAWL_HAVE_CUDA

struct Row {
  std::string scenario, path, direction;
  uint64_t unit_bytes = 0, units = 0, bytes = 0;
  double gbps = 0, ratio = 0;
  bool has_slowdown = false;  // both only
  double matmul_slowdown_pct = 0;
  double matmul_noise_pct = 0;
  double transfer_gbps_during_matmul = 0;
  bool verified = false;
};

struct Settings {
  std::vector<int> chosen;         // indices into AllScenarios()
  std::vector<std::string> paths;  // "contiguous" last
  DeviceMoverOptions mover;
  int iters = 5;
  int matmuls = 800;  // 0: no interference measurement
  double period_s = 0.04;
  bool progress = true;  // a line on stderr per scenario
};

struct Measurement {
  std::vector<Row> rows;  // per scenario and path: d2h, h2d, both
  std::string mismatch;   // the first path and direction whose bytes differ, or ""
  std::string matmul_backend;
  double matmul_alone_s = 0;
};

// The rows of one scenario: every path in every direction, timed `iters` times after a warm-up
// and then verified, and (with matmuls) the slowdown of the matrix-product loop while the path
// moves data both ways.
StatusOr<std::vector<Row>> MeasureScenario(const ScenarioSpec& spec, Scenario& sc,
                                           const Settings& settings, Matmul& mm,
                                           std::string* mismatch) {
  double limit[3] = {0, 0, 0};
  std::vector<Row> rows;
  for (const std::string& path : settings.paths) {
    for (int d = 0; d < 3; ++d) {
      const bool d2h = d != 1, h2d = d != 0;
      CACHEPAWL_RETURN_IF_ERROR(sc.Poison(path, d2h, h2d));
      CACHEPAWL_RETURN_IF_ERROR(sc.Run(path, d2h, h2d).status());  // warm-up
      std::vector<double> t;
      for (int i = 0; i < settings.iters; ++i) {
        CACHEPAWL_RETURN_IF_ERROR(sc.Poison(path, d2h, h2d));
        CACHEPAWL_ASSIGN_OR_RETURN(const double seconds, sc.Run(path, d2h, h2d));
        t.push_back(seconds);
        Progress("a timed iteration of bench transfer");
      }
      CACHEPAWL_ASSIGN_OR_RETURN(const std::string bad, sc.Verify(path, d2h, h2d));
      if (!bad.empty() && mismatch->empty()) *mismatch = spec.name + ": " + bad;
      Row r;
      r.scenario = spec.name;
      r.path = path;
      r.direction = d == 0 ? "d2h" : d == 1 ? "h2d" : "both";
      r.unit_bytes = sc.record_bytes();
      r.units = spec.units;
      r.bytes = sc.bytes() * (d == 2 ? 2 : 1);
      r.gbps = static_cast<double>(r.bytes) / Median(t) / 1e9;
      r.verified = bad.empty();
      if (path == "contiguous") limit[d] = r.gbps;
      rows.push_back(r);
    }
    if (settings.matmuls > 0) {
      Mover mover(
          [&]() -> StatusOr<Mover::Wait> {
            CACHEPAWL_ASSIGN_OR_RETURN(Scenario::InFlight f, sc.Start(path, true, true));
            auto in_flight = std::make_shared<Scenario::InFlight>(std::move(f));
            return Mover::Wait([in_flight] { return in_flight->Wait(); });
          },
          2 * sc.bytes());
      CACHEPAWL_ASSIGN_OR_RETURN(
          const Interference in,
          MeasureInterference(mm, mover, settings.matmuls, settings.period_s));
      if (in.with_products == 0 || in.alone_products == 0) {
        return Status::Internal(
            "interference: no product ran wholly inside an on- or off-period "
            "(raise --matmuls or --period-ms)");
      }
      for (Row& r : rows) {
        if (r.path == path && r.direction == "both") {
          r.has_slowdown = true;
          r.matmul_slowdown_pct = in.slowdown_pct;
          r.matmul_noise_pct = in.noise_pct;
          r.transfer_gbps_during_matmul = in.gbps;
        }
      }
    }
  }
  for (Row& r : rows) {
    const int d = r.direction == "d2h" ? 0 : r.direction == "h2d" ? 1 : 2;
    r.ratio = limit[d] > 0 ? r.gbps / limit[d] : 0;
  }
  return rows;
}

// Every chosen scenario on GPU 0, after timing the matrix product alone.
Status Measure(const Settings& settings, CommandIo& io, Measurement* m) {
  CACHEPAWL_RETURN_IF_ERROR(cuda::SetDevice(0).WithContext("device"));
  CACHEPAWL_ASSIGN_OR_RETURN(std::unique_ptr<Matmul> mm, Matmul::Create(8192));
  m->matmul_backend = mm->backend();
  if (settings.matmuls > 0) {
    CACHEPAWL_RETURN_IF_ERROR(mm->Run(5).status());  // warm-up
    std::vector<double> alone;
    for (int i = 0; i < 3; ++i) {
      CACHEPAWL_ASSIGN_OR_RETURN(const double seconds, mm->Run(50));
      alone.push_back(seconds / 50);
    }
    m->matmul_alone_s = Median(alone);
  }
  const auto specs = AllScenarios();
  for (int si : settings.chosen) {
    const ScenarioSpec& spec = specs[si];
    CACHEPAWL_ASSIGN_OR_RETURN(std::unique_ptr<Scenario> sc,
                               Scenario::Create(spec, settings.mover, 1234 + si));
    CACHEPAWL_ASSIGN_OR_RETURN(std::vector<Row> rows,
                               MeasureScenario(spec, *sc, settings, *mm, &m->mismatch));
    m->rows.insert(m->rows.end(), rows.begin(), rows.end());
    if (settings.progress)
      io.err << "[bench transfer] " << spec.name << " done (host arena pinned in "
             << sc->pin_seconds() << " s)\n";
  }
  return Status::OK();
}

int RunBenchTransfer(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Benchmarks the device mover (device<->host) against per-page copies, "
      "cudaMemcpyBatchAsync and the link's contiguous limit, with a matrix-product "
      "interference loop.",
      "cachepawl bench transfer"};
  std::string scenarios = "all";
  const DeviceMoverOptions defaults;
  int iters = 5, matmuls = 800;
  double period_ms = 40;
  uint32_t ctas = defaults.kernel_ctas;
  uint64_t staging_mib = defaults.staging_bytes >> 20;
  bool json = false;
  bool no_coalesce = false;
  std::string path_list = "all";
  app.add_option("--scenarios", scenarios,
                 "comma-separated subset of: llama-kv, jamba-kv, mamba-1, mamba-16, mamba-128 "
                 "(default all)");
  app.add_option("--iters", iters, "timed iterations per path and direction (median; default 5)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--matmuls", matmuls,
                 "products in each interference measurement (default 800; 0: skip)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--period-ms", period_ms,
                 "interference: the path is switched on and off every this many ms (default 40)")
      ->check(CLI::Range(5.0, 10000.0));
  app.add_option("--ctas", ctas,
                 "gather/scatter kernel CTAs (default: the mover's, " +
                     std::to_string(defaults.kernel_ctas) + ")")
      ->check(CLI::Range(0u, 65535u));
  app.add_option("--staging-mib", staging_mib,
                 "staging MiB per direction (default: the mover's, " +
                     std::to_string(defaults.staging_bytes >> 20) + ")")
      ->check(CLI::Range(uint64_t{1}, uint64_t{16384}));
  uint32_t staging_chunks = defaults.staging_chunks;
  app.add_option("--staging-chunks", staging_chunks,
                 "staging ring chunks per direction (default: the mover's, " +
                     std::to_string(defaults.staging_chunks) + ")")
      ->check(CLI::Range(2u, 64u));
  app.add_flag("--json", json, "print rows as JSON");
  std::string watchdog_text = kWatchdogDefault;
  app.add_option("--watchdog", watchdog_text, kWatchdogHelp);
  app.add_option("--paths", path_list,
                 "comma-separated subset of: ours, ours_block, memcpy_piece, memcpy_batch "
                 "(contiguous always runs; default all)");
  int priority = defaults.load_priority;
  app.add_option("--priority", priority,
                 "CUDA priority of the mover's streams (default: the mover's, " +
                     std::to_string(defaults.load_priority) +
                     "; 0 is the lowest, -5 the highest on an H100)")
      ->check(CLI::Range(-100, 100));
  app.add_flag("--no-coalesce", no_coalesce,
               "mover option coalesce_copies = false (one copy per record piece)");
  if (auto exit = ParseArgs(app, args, io)) return *exit;
  std::map<std::string, int> names = {
      {"llama-kv", 0}, {"jamba-kv", 1}, {"mamba-1", 2}, {"mamba-16", 3}, {"mamba-128", 4}};
  std::vector<int> chosen;
  if (scenarios == "all") {
    chosen = {0, 1, 2, 3, 4};
  } else {
    std::stringstream ss(scenarios);
    for (std::string w; std::getline(ss, w, ',');) {
      auto it = names.find(w);
      if (it == names.end()) {
        io.err << "cachepawl bench transfer: --scenarios: unknown '" << w << "'\n";
        return kExitUsage;
      }
      chosen.push_back(it->second);
    }
  }
  DeviceMoverOptions eo;
  eo.mode = DeviceMoverOptions::Mode::kOn;
  eo.kernel_ctas = ctas;
  eo.staging_bytes = staging_mib << 20;
  eo.staging_chunks = staging_chunks;
  if (Status v = eo.Validate(); !v.ok()) {
    io.err << "cachepawl bench transfer: " << v.ToString() << "\n";
    return kExitUsage;
  }
  eo.coalesce_copies = !no_coalesce;
  eo.save_priority = eo.load_priority = priority;
  std::vector<std::string> paths;
  if (path_list == "all") {
    paths = {"ours", "ours_block", "memcpy_piece", "memcpy_batch"};
  } else {
    std::stringstream ss(path_list);
    for (std::string w; std::getline(ss, w, ',');) {
      if (w != "ours" && w != "ours_block" && w != "memcpy_piece" && w != "memcpy_batch") {
        io.err << "cachepawl bench transfer: --paths: unknown '" << w << "'\n";
        return kExitUsage;
      }
      paths.push_back(w);
    }
  }
  const auto watchdog_limit = ParseWatchdogLimit(watchdog_text);
  if (!watchdog_limit.ok()) {
    io.err << "cachepawl bench transfer: " << watchdog_limit.status().message() << "\n";
    return kExitUsage;
  }
  if (!cuda::GpuAvailable()) {
    io.err << "cachepawl bench transfer: needs a GPU (" << cuda::DescribeDevice(0) << ")\n";
    return kExitFailure;
  }
  std::optional<StallWatchdog> watchdog;
  if (*watchdog_limit > 0) watchdog.emplace("cachepawl bench transfer", *watchdog_limit);
  paths.push_back("contiguous");
  Settings settings;
  settings.chosen = chosen;
  settings.paths = paths;
  settings.mover = eo;
  settings.iters = iters;
  settings.matmuls = matmuls;
  settings.period_s = period_ms / 1e3;
  settings.progress = !json;
  Measurement m;
  if (Status st = Measure(settings, io, &m); !st.ok()) {
    io.err << "cachepawl bench transfer: " << st.message() << "\n";
    return kExitFailure;
  }
  const std::vector<Row>& rows = m.rows;
  const std::string& mismatch = m.mismatch;
  const std::string& matmul_backend = m.matmul_backend;
  const double matmul_alone_s = m.matmul_alone_s;
  if (json) {
    nlohmann::json out;
    out["device"] = cuda::DescribeDevice(0);
    out["matmul"] = matmul_backend;
    out["matmul_alone_ms"] = matmul_alone_s * 1e3;
    out["interference_products"] = matmuls;
    out["interference_period_ms"] = period_ms;
    out["priority"] = priority;
    out["kernel_ctas"] = ctas;
    out["staging_mib"] = staging_mib;
    out["staging_chunks"] = staging_chunks;
    out["rows"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j = {{"scenario", r.scenario},   {"path", r.path},
                          {"direction", r.direction}, {"unit_bytes", r.unit_bytes},
                          {"units", r.units},         {"bytes", r.bytes},
                          {"gbps", r.gbps},           {"ratio_to_limit", r.ratio},
                          {"verified", r.verified}};
      if (r.has_slowdown) {
        j["matmul_slowdown_pct"] = r.matmul_slowdown_pct;
        j["matmul_noise_pct"] = r.matmul_noise_pct;
        j["gbps_during_matmul"] = r.transfer_gbps_during_matmul;
      }
      out["rows"].push_back(j);
    }
    io.out << out.dump(1) << "\n";
  } else {
    io.out << "device: " << cuda::DescribeDevice(0) << "\nmatrix product: " << matmul_backend
           << ", 8192x8192x8192, " << std::fixed << std::setprecision(3) << matmul_alone_s * 1e3
           << " ms each alone\n";
    io.out << "GB/s (ratio to the contiguous limit of the same run); slowdown: matrix-product loop "
              "while the path moves data both ways, +- the same comparison between alone "
              "periods (GB/s moved meanwhile)\n";
    io.out << std::left << std::setw(17) << "scenario" << std::setw(14) << "path" << std::right
           << std::setw(16) << "d2h" << std::setw(16) << "h2d" << std::setw(16) << "both"
           << std::setw(26) << "matmul slowdown"
           << "\n";
    for (size_t i = 0; i + 2 < rows.size(); i += 3) {
      auto cell = [](const Row& r) {
        std::ostringstream s;
        s << std::fixed << std::setprecision(1) << r.gbps << " (" << std::setprecision(2) << r.ratio
          << ")";
        return s.str();
      };
      std::ostringstream slow;
      if (rows[i + 2].has_slowdown) {
        slow << std::fixed << std::setprecision(1) << rows[i + 2].matmul_slowdown_pct << "% +-"
             << std::abs(rows[i + 2].matmul_noise_pct) << " ("
             << rows[i + 2].transfer_gbps_during_matmul << ")";
      }
      io.out << std::left << std::setw(17) << rows[i].scenario << std::setw(14) << rows[i].path
             << std::right << std::setw(16) << cell(rows[i]) << std::setw(16) << cell(rows[i + 1])
             << std::setw(16) << cell(rows[i + 2]) << std::setw(26) << slow.str() << "\n";
    }
  }
  if (!mismatch.empty()) {
    io.err << "cachepawl bench transfer: WRONG BYTES: " << mismatch << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

#else  // !CACHEPAWL_HAVE_CUDA

int RunBenchTransfer(const std::vector<std::string>& args, CommandIo& io) {
  (void)args;
  io.err << "cachepawl bench transfer: built without CUDA\n";
  return kExitFailure;
}

#endif

CommandRegistration reg("bench transfer",
                        "the device mover (device<->host) vs per-page copies and the link's limit",
                        &RunBenchTransfer);

}  // namespace
}  // namespace cachepawl::tools
