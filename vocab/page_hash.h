// PageHash: the 32-byte SHA-256 that names one page of tokens and everything before it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cachepawl {

struct PageHash {
  std::array<uint8_t, 32> bytes{};

  friend bool operator==(const PageHash&, const PageHash&) = default;
  friend auto operator<=>(const PageHash&, const PageHash&) = default;

  // Lower-case hex, 64 characters.
  std::string ToHex() const;
  // Parses 64 hex characters (either case); nullopt on any other input.
  static std::optional<PageHash> FromHex(std::string_view hex);
  // The all-zero hash, used as "no parent" for the first page of a chain.
  static PageHash Zero() { return PageHash{}; }
  // Four word loads, not 32 byte compares: a Lookup checks every hash of the prompt.
  bool IsZero() const {
    uint64_t w[4];
    std::memcpy(w, bytes.data(), sizeof(w));
    return (w[0] | w[1] | w[2] | w[3]) == 0;
  }
};

// A 64-bit digest of the (already uniformly random) SHA-256 bytes for hash tables.
struct PageHashHasher {
  size_t operator()(const PageHash& h) const noexcept {
    uint64_t v;
    std::memcpy(&v, h.bytes.data(), sizeof(v));
    return static_cast<size_t>(v);
  }
};

inline std::string PageHash::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(64, '0');
  for (size_t i = 0; i < 32; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

inline std::optional<PageHash> PageHash::FromHex(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  PageHash h;
  for (size_t i = 0; i < 32; ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    h.bytes[i] = static_cast<uint8_t>((hi << 4) | lo);
  }
  return h;
}

}  // namespace cachepawl

template <>
struct std::hash<cachepawl::PageHash> : cachepawl::PageHashHasher {};
