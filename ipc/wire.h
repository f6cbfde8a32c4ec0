// The byte encoding of the owner <-> client messages (ipc/protocol.h): little-endian integers,
// length-prefixed strings and arrays. A Reader never reads past its input: a short or oversized
// field makes it fail, naming the field, and every later read returns zeros.
//
// Thread safety: a Writer or Reader is used by one thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/page_hash.h"
#include "vocab/status.h"

namespace cachepawl::ipc {

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void I64(int64_t v) { Raw(&v, sizeof(v)); }
  void F64(double v) { Raw(&v, sizeof(v)); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void Hashes(std::span<const PageHash> h) {
    static_assert(sizeof(PageHash) == 32);
    U32(static_cast<uint32_t>(h.size()));
    Raw(h.data(), h.size() * sizeof(PageHash));  // (an array of 32-byte values, no padding)
  }
  void U64s(std::span<const uint64_t> v) {
    U32(static_cast<uint32_t>(v.size()));
    Raw(v.data(), v.size() * sizeof(uint64_t));
  }
  void StatusOf(const Status& s) {
    U8(static_cast<uint8_t>(s.code()));
    Str(s.message());
  }
  // (An empty array's data() may be null: nothing is appended.)
  void Raw(const void* p, size_t n) {
    if (n > 0) out_.append(static_cast<const char*>(p), n);
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  uint8_t U8(const char* field) {
    uint8_t v = 0;
    Raw(field, &v, 1);
    return v;
  }
  // A flag: 0 or 1; any other byte fails the reader naming `field` and the value.
  bool Bool(const char* field) {
    const uint8_t v = U8(field);
    if (v > 1) Fail(field, std::to_string(v) + " (a flag is 0 or 1)");
    return v == 1;
  }
  uint32_t U32(const char* field) {
    uint32_t v = 0;
    Raw(field, &v, sizeof(v));
    return v;
  }
  uint64_t U64(const char* field) {
    uint64_t v = 0;
    Raw(field, &v, sizeof(v));
    return v;
  }
  int64_t I64(const char* field) {
    int64_t v = 0;
    Raw(field, &v, sizeof(v));
    return v;
  }
  double F64(const char* field) {
    double v = 0;
    Raw(field, &v, sizeof(v));
    return v;
  }
  // A string of at most `max` bytes.
  std::string Str(const char* field, size_t max) {
    const uint32_t n = U32(field);
    if (!Fits(field, n, 1, max)) return {};
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // At most `max` hashes.
  std::vector<PageHash> Hashes(const char* field, size_t max) {
    const uint32_t n = U32(field);
    if (!Fits(field, n, 32, max)) return {};
    std::vector<PageHash> out(n);
    Raw(field, out.data(), n * sizeof(PageHash));
    return out;
  }
  std::vector<uint64_t> U64s(const char* field, size_t max) {
    const uint32_t n = U32(field);
    if (!Fits(field, n, 8, max)) return {};
    std::vector<uint64_t> out(n);
    Raw(field, out.data(), n * sizeof(uint64_t));
    return out;
  }
  Status StatusOf(const char* field) {
    const uint8_t code = U8(field);
    std::string msg = Str(field, 1 << 16);
    return Status::FromCode(code, msg);
  }
  void Raw(const char* field, void* p, size_t n) {
    if (n == 0) return;  // (an empty array's data() may be null)
    if (!error_.ok() || n > in_.size() - pos_) {
      Fail(field, "truncated");
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  // OK when every read fit and nothing is left over; else InvalidArgument naming the field.
  Status Finish() {
    if (error_.ok() && pos_ != in_.size()) {
      error_ = Status::InvalidArgument(std::to_string(in_.size() - pos_) +
                                       " bytes after the last field");
    }
    return error_;
  }
  const Status& status() const { return error_; }
  // Fails the reader with `why` (a field that decoded but is out of range), unless it failed.
  void Invalidate(const Status& why) {
    if (error_.ok()) error_ = why;
    pos_ = in_.size();
  }

 private:
  bool Fits(const char* field, uint64_t n, uint64_t each, size_t max) {
    if (!error_.ok()) return false;
    if (n > max) {
      Fail(field, std::to_string(n) + " items (at most " + std::to_string(max) + ")");
      return false;
    }
    if (n * each > in_.size() - pos_) {
      Fail(field, "truncated");
      return false;
    }
    return true;
  }
  void Fail(const char* field, const std::string& why) {
    if (error_.ok()) error_ = Status::InvalidArgument(std::string(field) + ": " + why);
    pos_ = in_.size();
  }
  std::string_view in_;
  size_t pos_ = 0;
  Status error_;
};

}  // namespace cachepawl::ipc
