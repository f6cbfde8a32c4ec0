// cachepawl hash [--page-size P] [--namespace NS] TOKEN...   (or tokens on stdin)
// Prints one hex page hash per full page, one per line.
#include <CLI/CLI.hpp>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "index/page_hasher.h"
#include "tools/cli_args.h"
#include "tools/cli_values.h"
#include "tools/command.h"

namespace cachepawl::tools {
namespace {

int RunHash(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Prints the SHA-256 chain hash of every full page of tokens, one per line.\n"
      "Tokens come from the arguments, or from standard input (whitespace-separated)\n"
      "when none are given.",
      "cachepawl hash"};
  uint32_t page_size = 16;
  std::string ns;
  std::vector<std::string> words;
  app.add_option("--page-size,-p", page_size, "tokens per page (default 16)");
  app.add_option("--namespace,-n", ns, "namespace that seeds the chain (default: empty)");
  app.add_option("tokens", words, "token ids (unsigned 32-bit)");
  if (auto exit = ParseArgs(app, args, io)) return *exit;
  if (page_size == 0) {
    io.err << "cachepawl hash: --page-size: 0 (must be > 0)\n";
    return kExitUsage;
  }
  if (words.empty()) {
    for (std::string w; io.in >> w;) words.push_back(w);
  }
  std::vector<uint32_t> tokens;
  tokens.reserve(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    auto t = ParseTokenId(words[i], i);
    if (!t.ok()) {
      io.err << "cachepawl hash: " << t.status().message() << "\n";
      return kExitUsage;
    }
    tokens.push_back(*t);
  }
  auto hasher = PageHasher::Create(page_size);
  if (!hasher.ok()) {
    io.err << "cachepawl hash: " << hasher.status().ToString() << "\n";
    return kExitUsage;
  }
  for (const PageHash& h : hasher->HashTokens(ns, tokens)) io.out << h.ToHex() << "\n";
  return kExitOk;
}

const CommandRegistration kRegistration("hash", "print the page hash chain of tokens", &RunHash);

}  // namespace
}  // namespace cachepawl::tools
