// The values of the `cachepawl` subcommands' arguments, parsed from their text: token ids
// (`hash`), durations (`replay --soak`), bounded whole numbers (`replay --concurrency`),
// comma-separated integer lists (`bench store --pages/--threads`) and sweep fractions
// (`replay --sweep-fractions`). Byte counts are parse_bytes.h's.
//
// Every function is pure and total: any text (empty, huge, any bytes) gives a value or an
// error, never an exception or a crash; tests/fuzz/fuzz_cli_args.cc holds them to that.
// Errors name the flag (or the token's position) and the text at fault.
// Thread safety: free functions without state.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/status.h"

namespace cachepawl::tools {

inline constexpr char kDefaultSweepFractions[] = "0.1,0.25,0.5,1";
inline constexpr double kMaxSweepFraction = 4.0;

// A decimal token id in [0, 2^32): "17" -> 17. InvalidArgument "token <position>: '<word>'
// (expected an unsigned 32-bit integer)" otherwise (no sign, no spaces, no other characters).
StatusOr<uint32_t> ParseTokenId(std::string_view word, size_t position);

// "90", "90s", "1.5ms", "15m", "15min", "2h" -> seconds: a number as strtod reads it (leading
// blanks, exponents, "inf" too) and one of these units or none; nullopt on anything else (another
// unit, a negative or NaN value, a value out of double's range, a NUL byte).
std::optional<double> ParseDuration(std::string_view text);

// A whole decimal number in [lo, hi] ("16" -> 16); nullopt otherwise (no sign, no spaces).
std::optional<uint32_t> ParseBoundedUint32(std::string_view text, uint32_t lo, uint32_t hi);

// "0.1,0.25,0.5,1" -> {0.1, 0.25, 0.5, 1}: each in (0, kMaxSweepFraction]. InvalidArgument
// naming --sweep-fractions, the text and the word at fault otherwise.
StatusOr<std::vector<double>> ParseSweepFractions(std::string_view text);

// "1,16,128" -> the values in [lo, hi], in order, duplicates dropped (T: an unsigned integer
// type holding hi; leading blanks of a word are skipped, as strtoull does). InvalidArgument
// naming `flag` and the text (empty, or a trailing comma), or the word and the range (an empty
// word, a sign, anything after the digits, a NUL byte included) otherwise.
template <typename T>
StatusOr<std::vector<T>> ParseIntegerList(const std::string& flag, std::string_view text, T lo,
                                          T hi) {
  if (text.empty() || text.back() == ',') {
    std::string message = flag;
    message.append(": '").append(text).append("' (expected comma-separated integers)");
    return Status::InvalidArgument(message);
  }
  std::vector<T> out;
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    const std::string word(
        text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at));
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(word.c_str(), &end, 10);
    if (word.empty() || word[0] == '-' || word[0] == '+' || end != word.c_str() + word.size() ||
        errno != 0 || v < lo || v > hi) {
      std::string message = flag;
      message.append(": '").append(word).append("' in '").append(text);
      message.append("' (expected comma-separated integers from ").append(std::to_string(lo));
      message.append(" to ").append(std::to_string(hi)).append(")");
      return Status::InvalidArgument(message);
    }
    bool seen = false;
    for (T x : out) seen = seen || x == static_cast<T>(v);
    if (!seen) out.push_back(static_cast<T>(v));
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace cachepawl::tools
