#include "store/latency_histogram.h"

#include <bit>

namespace cachepawl {

int LatencyHistogram::BucketOf(uint64_t ns) {
  if (ns < (1u << kSubBits)) return static_cast<int>(ns);
  const int log = 63 - std::countl_zero(ns);  // >= kSubBits
  const uint64_t sub = (ns >> (log - kSubBits)) & ((1u << kSubBits) - 1);
  const int b = ((log - kSubBits + 1) << kSubBits) + static_cast<int>(sub);
  return b < kBuckets ? b : kBuckets - 1;
}

double LatencyHistogram::BucketUpperUs(int bucket) {
  if (bucket < (1 << kSubBits)) return (bucket + 1) / 1000.0;
  const int log = (bucket >> kSubBits) + kSubBits - 1;
  const uint64_t sub = static_cast<uint64_t>(bucket & ((1 << kSubBits) - 1));
  const uint64_t lower = (uint64_t{1} << log) + (sub << (log - kSubBits));
  const uint64_t width = uint64_t{1} << (log - kSubBits);
  return static_cast<double>(lower + width) / 1000.0;
}

void LatencyHistogram::Record(std::chrono::nanoseconds d) {
  const uint64_t ns = d.count() < 0 ? 0 : static_cast<uint64_t>(d.count());
  buckets_[BucketOf(ns)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  uint64_t prev = max_ns_.load(std::memory_order_relaxed);
  while (ns > prev && !max_ns_.compare_exchange_weak(prev, ns, std::memory_order_relaxed)) {
  }
}

LatencySummary LatencyHistogram::Summary() const {
  LatencySummary s;
  std::array<uint64_t, kBuckets> snap;
  uint64_t total = 0;
  for (int i = 0; i < kBuckets; ++i) {
    snap[i] = buckets_[i].load(std::memory_order_relaxed);
    total += snap[i];
  }
  s.count = total;
  if (total == 0) return s;
  const double max_us = static_cast<double>(max_ns_.load(std::memory_order_relaxed)) / 1000.0;
  auto percentile = [&](double q) {
    const uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total - 1)) + 1;
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += snap[i];
      if (seen >= rank) return std::min(BucketUpperUs(i), max_us);
    }
    return max_us;
  };
  s.p50_us = percentile(0.50);
  s.p99_us = percentile(0.99);
  s.max_us = max_us;
  s.mean_us = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1000.0 /
              static_cast<double>(count_.load(std::memory_order_relaxed));
  return s;
}

}  // namespace cachepawl
