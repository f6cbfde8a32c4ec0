// Helpers shared by the test suites: temporary folders, deterministic random bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "vocab/model_layout.h"

namespace cachepawl::testing {

// A fresh folder under $TMPDIR (or /tmp) removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Fills `out` with bytes from a seeded generator (SplitMix64): same seed, same bytes.
void FillRandom(std::span<std::byte> out, uint64_t seed);

// The seed for randomized tests: $CACHEPAWL_TEST_SEED when set, else `fallback`.
uint64_t SeedFromEnv(uint64_t fallback);

// `layout` without its attention layers, named `model`: a pure SSM layout (as Mamba-2) whose SSM
// layers are decoder layers 0..n-1.
ModelLayout WithoutAttention(ModelLayout layout, const std::string& model);

}  // namespace cachepawl::testing
