// Median: the statistic every bench (`cachepawl bench transfer | disk | remote`) reports for a
// row's repetitions, so that one slow or fast run does not move the figure.
#pragma once

#include <algorithm>
#include <vector>

namespace cachepawl::tools {

// The middle value of `v` (of an even count, the upper of the two middle ones); 0 when empty.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace cachepawl::tools
