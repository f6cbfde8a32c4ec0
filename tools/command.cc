#include "tools/command.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

namespace cachepawl::tools {
namespace {

struct Entry {
  std::string summary;
  CommandFn fn;
};

std::map<std::string, Entry>& Commands() {
  static auto* commands = new std::map<std::string, Entry>();
  return *commands;
}

std::vector<std::string> Words(const std::string& name) {
  std::istringstream in(name);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

void PrintUsage(std::ostream& out) {
  out << "usage: cachepawl COMMAND [ARGS...]\n\ncommands:\n";
  for (const auto& [name, entry] : Commands()) {
    out << "  " << name << std::string(name.size() < 18 ? 18 - name.size() : 1, ' ')
        << entry.summary << "\n";
  }
  out << "\n`cachepawl COMMAND --help` describes a command.\n";
}

}  // namespace

CommandRegistration::CommandRegistration(const char* name, const char* summary, CommandFn fn) {
  Commands()[name] = Entry{summary, fn};
}

int RunCommandLine(const std::vector<std::string>& argv, CommandIo& io) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    PrintUsage(argv.empty() ? io.err : io.out);
    return argv.empty() ? kExitUsage : kExitOk;
  }
  const Entry* best = nullptr;
  size_t best_words = 0;
  for (const auto& [name, entry] : Commands()) {
    auto words = Words(name);
    if (words.size() > argv.size() || words.size() <= best_words) continue;
    if (std::equal(words.begin(), words.end(), argv.begin())) {
      best = &entry;
      best_words = words.size();
    }
  }
  if (best == nullptr) {
    io.err << "cachepawl: unknown command '" << argv[0] << "'\n\n";
    PrintUsage(io.err);
    return kExitUsage;
  }
  std::vector<std::string> rest(argv.begin() + static_cast<long>(best_words), argv.end());
  return best->fn(rest, io);
}

void LogStoreToStderr(bool verbose) {
  auto logger = std::make_shared<spdlog::logger>(
      "cachepawl", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_level(verbose ? spdlog::level::info : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace cachepawl::tools
