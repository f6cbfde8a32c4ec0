// The `cachepawl` command line: subcommands register themselves here, one file each.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace cachepawl::tools {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and found something wrong
inline constexpr int kExitUsage = 2;    // bad arguments or input

struct CommandIo {
  std::istream& in;
  std::ostream& out;
  std::ostream& err;
  bool out_is_terminal = false;
};

// `args` excludes the program and the subcommand words ("bench index --json" gets {"--json"}).
using CommandFn = int (*)(const std::vector<std::string>& args, CommandIo& io);

// A static instance registers a subcommand; `name` may have several words ("bench disk").
class CommandRegistration {
 public:
  CommandRegistration(const char* name, const char* summary, CommandFn fn);
};

// Dispatches to the registered subcommand whose name matches the most leading words of `argv`.
// Prints usage (exit 2) when none does.
int RunCommandLine(const std::vector<std::string>& argv, CommandIo& io);

// Sends the store's log (spdlog's default logger) to stderr, so that stdout holds only the
// command's report: informational lines with `verbose`, warnings and errors only without.
void LogStoreToStderr(bool verbose);

}  // namespace cachepawl::tools
