// Helpers shared by the fuzz targets (tests/fuzz/fuzz_*.cc): reading typed values off the front
// of a fuzz input, and a check that aborts with a message (a property the target holds the code
// to; libFuzzer and the corpus replay both report an abort as a failure).
// Thread safety: a FuzzInput is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace cachepawl::fuzz {

// Consumes an input front to back; past its end every read gives zeros / empty strings.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T Take() {
    T v{};
    const size_t n = sizeof(T) < size_ ? sizeof(T) : size_;
    if (n > 0) std::memcpy(&v, data_, n);
    Skip(n);
    return v;
  }
  uint8_t Byte() { return Take<uint8_t>(); }
  bool Bool() { return (Byte() & 1) != 0; }
  // A value in [0, n) (n > 0).
  uint32_t Below(uint32_t n) { return Take<uint32_t>() % n; }
  // A string of at most `max` bytes: its length first (one byte, or two when max > 255).
  std::string String(size_t max) {
    size_t len = max > 255 ? Take<uint16_t>() : Byte();
    len = len < max ? len : max;
    len = len < size_ ? len : size_;
    std::string s(reinterpret_cast<const char*>(data_), len);
    Skip(len);
    return s;
  }
  // Everything left.
  std::string_view Rest() {
    std::string_view s(reinterpret_cast<const char*>(data_), size_);
    Skip(size_);
    return s;
  }
  size_t left() const { return size_; }

 private:
  void Skip(size_t n) {
    data_ += n;
    size_ -= n;
  }
  const uint8_t* data_;
  size_t size_;
};

// Aborts with "fuzz check failed: <what>" unless `ok`.
inline void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz check failed: %s\n", what);
  std::abort();
}

}  // namespace cachepawl::fuzz
