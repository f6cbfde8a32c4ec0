// ParseBytes: the byte counts of the tools' flags ("512M", "32G", "4096").
#pragma once

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>

#include "vocab/status.h"

namespace cachepawl::tools {

// "512M", "1G", "32GiB", "4096" -> bytes (K, M, G, T: powers of 1024; an optional "i", "B").
inline StatusOr<uint64_t> ParseBytes(const std::string& flag, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::string unit = text.substr(digits);
  for (char& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  int shift = -1;
  const std::pair<const char*, int> units[] = {{"|b", 0},
                                               {"k|kb|ki|kib", 10},
                                               {"m|mb|mi|mib", 20},
                                               {"g|gb|gi|gib", 30},
                                               {"t|tb|ti|tib", 40}};
  for (const auto& [names, bits] : units) {
    std::stringstream ss(names);
    for (std::string n; std::getline(ss, n, '|');) {
      if (n == unit) shift = bits;
    }
  }
  errno = 0;
  const unsigned long long v =
      digits > 0 ? std::strtoull(text.substr(0, digits).c_str(), nullptr, 10) : 0;
  if (digits == 0 || shift < 0 || errno != 0 || (shift > 0 && v > (~0ull >> shift))) {
    return Status::InvalidArgument(flag + ": '" + text +
                                   "' (expected a byte count such as 4096, 512M, 32G)");
  }
  return uint64_t{v} << shift;
}

}  // namespace cachepawl::tools
