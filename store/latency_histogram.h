// LatencyHistogram: lock-free log-linear histogram of durations (internal to the Store).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "vocab/store_stats.h"

namespace cachepawl {

// 8 linear sub-buckets per power of two of nanoseconds, up to ~2^40 ns (18 minutes): about
// 12% relative error per percentile. Record() is wait-free; Summary() is a consistent-enough
// snapshot for monitoring.
class LatencyHistogram {
 public:
  void Record(std::chrono::nanoseconds d);
  LatencySummary Summary() const;

 private:
  static constexpr int kSubBits = 3;
  static constexpr int kBuckets = (41 << kSubBits);
  static int BucketOf(uint64_t ns);
  static double BucketUpperUs(int bucket);
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
  std::atomic<uint64_t> max_ns_{0};
};

}  // namespace cachepawl
