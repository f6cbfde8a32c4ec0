// `cachepawl bench store`: its report as one JSON object or as tables (bench_store_report.cc).
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>

#include "tools/bench/bench_store.h"

namespace cachepawl::tools::bench_store {

struct RunInfo {
  std::string command;  // the command line, as run
  std::string date;     // YYYY-MM-DD
  std::string device;   // the GPU, or "CPU mode (...why...)"
};

nlohmann::json ReportJson(const Config& c, const Report& r, const RunInfo& info);
void PrintTables(const Config& c, const Report& r, const RunInfo& info, std::ostream& out);
// One line per skipped case (grouped over pool forms and tiers).
void PrintSkips(const Report& r, std::ostream& out);

}  // namespace cachepawl::tools::bench_store
