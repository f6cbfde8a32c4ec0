// Helpers shared by the prefix index's test cases: hashes and chains named by numbers, and an
// index made or the test failed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "index/prefix_index.h"
#include "tests/common/test_util.h"

namespace cachepawl::testing {

// A distinct, well-spread hash per number.
inline PageHash H(uint64_t n) {
  PageHash h;
  FillRandom(std::as_writable_bytes(std::span(h.bytes)), n * 7919 + 1);
  return h;
}

// The hashes of numbers first, first + 1, ..., first + n - 1.
inline std::vector<PageHash> Chain(uint64_t first, size_t n) {
  std::vector<PageHash> out;
  for (size_t i = 0; i < n; ++i) out.push_back(H(first + i));
  return out;
}

inline std::unique_ptr<PrefixIndex> MakeIndex(IndexOptions options = {}) {
  auto index = PrefixIndex::Create(options);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  return std::move(index).value();
}

}  // namespace cachepawl::testing
