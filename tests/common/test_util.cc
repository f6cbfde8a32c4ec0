#include "tests/common/test_util.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

namespace cachepawl::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/cachepawl-test-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed for " + templ + ": " + std::strerror(errno));
  }
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void FillRandom(std::span<std::byte> out, uint64_t seed) {
  uint64_t state = seed;
  size_t i = 0;
  while (i < out.size()) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const size_t n = std::min<size_t>(8, out.size() - i);
    std::memcpy(out.data() + i, &z, n);
    i += n;
  }
}

uint64_t SeedFromEnv(uint64_t fallback) {
  const char* s = std::getenv("CACHEPAWL_TEST_SEED");
  if (s == nullptr || *s == '\0') return fallback;
  return std::strtoull(s, nullptr, 0);
}

ModelLayout WithoutAttention(ModelLayout layout, const std::string& model) {
  layout.model = model;
  layout.attention_layers.clear();
  layout.num_layers = static_cast<uint32_t>(layout.ssm_layers.size());
  for (size_t i = 0; i < layout.ssm_layers.size(); ++i) {
    layout.ssm_layers[i].layer_index = static_cast<uint32_t>(i);
  }
  return layout;
}

}  // namespace cachepawl::testing
