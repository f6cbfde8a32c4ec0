// Command-line parsing shared by the `cachepawl` subcommands (CLI11).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/command.h"

namespace cachepawl::tools {

// Parses `args` (the words after the subcommand) into `app`. Returns nullopt when the command
// should go on, or the exit code to return: kExitOk after printing --help to io.out, kExitUsage
// after printing "<app name>: <what is wrong>" to io.err.
inline std::optional<int> ParseArgs(CLI::App& app, const std::vector<std::string>& args,
                                    CommandIo& io) {
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    io.out << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    io.err << app.get_name() << ": " << e.what() << "\n";
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace cachepawl::tools
