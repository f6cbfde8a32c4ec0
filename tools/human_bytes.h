// HumanBytes: "512 B", "1.5 KiB", "3.0 GiB" for the tools' tables.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace cachepawl::tools {

inline std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace cachepawl::tools
