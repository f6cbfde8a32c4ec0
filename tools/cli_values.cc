#include "tools/cli_values.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace cachepawl::tools {

StatusOr<uint32_t> ParseTokenId(std::string_view word, size_t position) {
  uint64_t value = 0;
  const char* end = word.data() + word.size();
  auto [ptr, ec] = std::from_chars(word.data(), end, value);
  if (word.empty() || ec != std::errc() || ptr != end || value > 0xFFFFFFFFull) {
    std::string message = "token " + std::to_string(position) + ": '";
    message.append(word).append("' (expected an unsigned 32-bit integer)");
    return Status::InvalidArgument(message);
  }
  return static_cast<uint32_t>(value);
}

std::optional<double> ParseDuration(std::string_view text) {
  // std::stod's grammar (strtod's: blanks, hex, "inf", "nan"), without its exceptions; the
  // number ends at the first character strtod does not take, the unit is the rest.
  const std::string s(text);
  if (s.empty() || s.size() != std::char_traits<char>::length(s.c_str())) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno == ERANGE) return std::nullopt;
  const std::string_view unit(end);
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "ms") {
    scale = 1e-3;
  } else if (unit == "m" || unit == "min") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else {
    return std::nullopt;
  }
  if (!(v >= 0)) return std::nullopt;
  return v * scale;
}

std::optional<uint32_t> ParseBoundedUint32(std::string_view text, uint32_t lo, uint32_t hi) {
  uint32_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < lo || v > hi) return std::nullopt;
  return v;
}

StatusOr<std::vector<double>> ParseSweepFractions(std::string_view text) {
  auto bad = [&](std::string_view word, const std::string& why) {
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive) on the same
    // message built with operator+ from a string_view.
    std::string message = "--sweep-fractions: '";
    message.append(text).append("' (");
    if (word != text) message.append("'").append(word).append("': ");
    message.append(why).append(")");
    return Status::InvalidArgument(message);
  };
  std::vector<double> fractions;
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    const std::string_view word =
        text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    double v = 0;
    const char* end = word.data() + word.size();
    auto [p, ec] = std::from_chars(word.data(), end, v);
    if (word.empty() || ec != std::errc() || p != end) {
      return bad(word, "expected numbers separated by commas, such as " +
                           std::string(kDefaultSweepFractions));
    }
    if (!(v > 0 && v <= kMaxSweepFraction)) {
      char max[16];
      std::snprintf(max, sizeof(max), "%g", kMaxSweepFraction);
      return bad(word, "a fraction of the working set must be in (0, " + std::string(max) + "]");
    }
    fractions.push_back(v);
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return fractions;
}

}  // namespace cachepawl::tools
