// SplitMix64: the small seeded generator behind the replay's workloads and kill points. The same
// seed gives the same numbers on every platform (no std distributions).
#pragma once

#include <cstdint>
#include <vector>

namespace cachepawl::tools {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi] (lo <= hi).
  uint64_t Between(uint64_t lo, uint64_t hi) {
    const unsigned __int128 range = static_cast<unsigned __int128>(hi - lo) + 1;
    return lo + static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * range) >> 64);
  }
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // An index drawn with probability proportional to weights[i] (weights not empty).
  size_t Weighted(const std::vector<double>& weights) {
    double total = 0;
    for (double w : weights) total += w;
    double x = Unit() * total;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (x < weights[i]) return i;
      x -= weights[i];
    }
    return weights.size() - 1;
  }

 private:
  uint64_t state_;
};

}  // namespace cachepawl::tools
