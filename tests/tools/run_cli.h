// Runs a `cachepawl` command line in-process and captures what it prints; or the real binary
// in a child process (RunBinary), for what must not happen inside the test process (a fork, an
// abort).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

struct BinaryResult {
  int status;          // as pclose returns it (a wait status; -1 when sh could not run)
  std::string output;  // stdout and stderr together
};

// Runs `binary` with `args` (each quoted) through sh. Under ThreadSanitizer the child uses the
// RocksDB suppressions beside this file.
inline BinaryResult RunBinary(const std::string& binary, const std::vector<std::string>& args) {
  const std::string supp =
      (std::filesystem::path(__FILE__).parent_path() / "rocksdb_tsan.supp").string();
  const char* tsan = std::getenv("TSAN_OPTIONS");
  std::string command = "TSAN_OPTIONS='suppressions=" + supp + " " + (tsan ? tsan : "") + "' ";
  command += binary;
  for (const std::string& a : args) command += " '" + a + "'";
  command += " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed: " + command};
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  return {::pclose(pipe), out};
}

}  // namespace cachepawl::tools
