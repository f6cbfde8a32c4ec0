// Runs a `cachepawl` command line in-process and captures what it prints.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "tools/command.h"

namespace cachepawl::tools {

struct CliResult {
  int code;
  std::string out, err;
};

inline CliResult RunCli(const std::vector<std::string>& argv, const std::string& input = "") {
  std::istringstream in(input);
  std::ostringstream out, err;
  CommandIo io{in, out, err, false};
  const int code = RunCommandLine(argv, io);
  return {code, out.str(), err.str()};
}

}  // namespace cachepawl::tools
