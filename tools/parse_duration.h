// ParseDuration: the durations of the tools' flags ("90", "90s", "500ms", "15m", "2h").
#pragma once

#include <string>

namespace cachepawl::tools {

// "90", "90s", "500ms", "15m", "15min", "2h" -> seconds (>= 0). False on anything else.
inline bool ParseDuration(const std::string& text, double* seconds) {
  if (text.empty()) return false;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return false;
  }
  const std::string unit = text.substr(used);
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
    return false;
  }
  if (!(v >= 0)) return false;
  *seconds = v * scale;
  return true;
}

}  // namespace cachepawl::tools
