// Command-line parsing shared by the `cachepawl` subcommands (CLI11).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/command.h"
#include "tools/parse_bytes.h"

namespace cachepawl::tools {

// A byte count flag's value ("512M", "32G", "4096"; parse_bytes.h), replaced by its decimal
// bytes before CLI11 converts it. Refuses a sign, a fraction and a value past 2^64 - 1.
inline CLI::Validator ByteCount() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        StatusOr<uint64_t> bytes = ParseBytes("", text);
        if (!bytes.ok()) return "'" + text + "' (expected a byte count such as 4096, 512M, 32G)";
        text = std::to_string(*bytes);
        return "";
      },
      "BYTES");
}

// CLI11 2.1 reads "-1" into an unsigned option as its largest value (strtoull wraps a sign):
// every unsigned option of `app` refuses a sign (and any blank before it) with the flag named.
inline void RefuseSignsOfUnsignedOptions(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_name().rfind("UINT", 0) != 0) continue;
    option->check(CLI::Validator(
        [](std::string& text) -> std::string {
          const size_t first = text.find_first_not_of(" \t\n\v\f\r");
          if (first != std::string::npos && (text[first] == '-' || text[first] == '+')) {
            return "'" + text + "' (expected an unsigned integer, without a sign)";
          }
          return "";
        },
        ""));
  }
}

// Parses `args` (the words after the subcommand) into `app`. Returns nullopt when the command
// should go on, or the exit code to return: kExitOk after printing --help to io.out, kExitUsage
// after printing "<app name>: <what is wrong>" to io.err.
inline std::optional<int> ParseArgs(CLI::App& app, const std::vector<std::string>& args,
                                    CommandIo& io) {
  RefuseSignsOfUnsignedOptions(app);
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
