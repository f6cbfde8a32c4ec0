// Fuzz target: the `cachepawl` subcommands' argument values (tools/cli_values.h,
// tools/parse_bytes.h) and the namespace and token words of `cachepawl hash`.
//
// Input: one byte choosing the page size, then the text. The text goes whole to every value
// parser (byte counts, durations, bounded numbers, integer lists, sweep fractions, token ids,
// dtype / kind / convention names); then its first line is a namespace (arbitrary bytes, as
// `--namespace` passes them) and the rest whitespace-separated token words, hashed as `cachepawl
// hash` does. Properties: no crash, no exception, errors are InvalidArgument naming the flag;
// accepted values are in their documented ranges; the page hashes are one per full page.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "index/page_hasher.h"
#include "layouts/layout_from_hf.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/cli_values.h"
#include "tools/parse_bytes.h"
#include "vocab/types.h"

namespace cachepawl::fuzz {
namespace {

void ValueParsers(const std::string& text) {
  auto bytes = tools::ParseBytes("--host-bytes", text);
  if (!bytes.ok()) {
    Check(bytes.status().message().rfind("--host-bytes: ", 0) == 0, "ParseBytes: flag not named");
  }
  if (auto seconds = tools::ParseDuration(text)) Check(*seconds >= 0, "a negative duration");
  if (auto n = tools::ParseBoundedUint32(text, 1, 1024)) {
    Check(*n >= 1 && *n <= 1024, "ParseBoundedUint32 out of range");
  }
  if (auto f = tools::ParseSweepFractions(text); f.ok()) {
    for (double v : *f) Check(v > 0 && v <= tools::kMaxSweepFraction, "a fraction out of range");
  } else {
    Check(f.status().IsInvalidArgument(), "ParseSweepFractions: not InvalidArgument");
  }
  if (auto l = tools::ParseIntegerList<uint32_t>("--threads", text, 1, 256); l.ok()) {
    Check(!l->empty(), "an empty list accepted");
    for (uint32_t v : *l) Check(v >= 1 && v <= 256, "a list value out of range");
  }
  (void)tools::ParseIntegerList<uint64_t>("--pages", text, 1, uint64_t{1} << 20);
  if (auto t = tools::ParseTokenId(text, 3); t.ok()) {
    Check(std::to_string(*t).size() <= text.size(), "a token id longer than its text");
  }
  (void)ParseDType(text);
  (void)ParseKind(text);
  (void)ParseStateConvention(text);
}

void HashCommand(const std::string& text, uint32_t page_size) {
  const size_t newline = text.find('\n');
  const std::string ns = text.substr(0, newline);
  std::vector<uint32_t> tokens;
  if (newline != std::string::npos) {
    std::istringstream words(text.substr(newline + 1));
    size_t i = 0;
    for (std::string w; words >> w; ++i) {
      auto t = tools::ParseTokenId(w, i);
      if (!t.ok()) return;  // `cachepawl hash` stops at the first bad word
      tokens.push_back(*t);
    }
  }
  auto hasher = PageHasher::Create(page_size);
  Check(hasher.ok(), "PageHasher::Create refused a page size > 0");
  Check(hasher->HashTokens(ns, tokens).size() == tokens.size() / page_size,
        "not one hash per full page");
}

}  // namespace
}  // namespace cachepawl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cachepawl::fuzz::FuzzInput in(data, size);
  const uint32_t page_size = 1 + in.Byte() % 32;
  const std::string text(in.Rest());
  cachepawl::fuzz::ValueParsers(text);
  cachepawl::fuzz::HashCommand(text, page_size);
  return 0;
}
