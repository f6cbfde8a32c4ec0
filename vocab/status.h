// Status: the result of everything in Cachepawl that can fail. No exceptions cross the API.
//
// A Status is either OK or carries a code and a message that names the field and the value at
// fault ("layout.page_size: 0 (must be > 0)"). StatusOr<T> carries a value or a non-OK Status.
// Both are cheap to move, copyable, and thread-compatible (const methods are safe to share).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace cachepawl {

class [[nodiscard]] Status {
 public:
  enum class Code : int {
    kOk = 0,
    kInvalidArgument = 1,     // bad argument, config, file content or trace line
    kNotFound = 2,            // a key, file or entry that is not there (a miss is not an error)
    kCorruption = 3,          // bytes on disk or in a catalog that fail verification
    kIOError = 4,             // the OS said no (errno is in the message)
    kNoSpace = 5,             // a tier is full of locked or in-flight entries
    kBusy = 6,                // the entry is locked or in flight
    kUnavailable = 7,         // a facility is missing (no GPU, no io_uring)
    kFailedPrecondition = 8,  // the object is in the wrong state (closed, not open)
    kTimedOut = 9,            // a wait ran out of time
    kAborted = 10,            // cancelled, or abandoned because the store is closing
    kInternal = 11,           // a broken invariant: a bug in Cachepawl
    kIncompatible = 12,       // on-disk layout or format that this build or layout cannot use
  };

  Status() = default;  // OK
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view msg) { return {Code::kInvalidArgument, msg}; }
  static Status NotFound(std::string_view msg) { return {Code::kNotFound, msg}; }
  static Status Corruption(std::string_view msg) { return {Code::kCorruption, msg}; }
  static Status IOError(std::string_view msg) { return {Code::kIOError, msg}; }
  // An IOError whose message ends with strerror(err) and the errno name.
  static Status FromErrno(std::string_view context, int err);
  // A status of `code` (as another process of this build sent it); an unknown code is Internal.
  static Status FromCode(int code, std::string_view msg);
  static Status NoSpace(std::string_view msg) { return {Code::kNoSpace, msg}; }
  static Status Busy(std::string_view msg) { return {Code::kBusy, msg}; }
  static Status Unavailable(std::string_view msg) { return {Code::kUnavailable, msg}; }
  static Status FailedPrecondition(std::string_view msg) {
    return {Code::kFailedPrecondition, msg};
  }
  static Status TimedOut(std::string_view msg) { return {Code::kTimedOut, msg}; }
  static Status Aborted(std::string_view msg) { return {Code::kAborted, msg}; }
  static Status Internal(std::string_view msg) { return {Code::kInternal, msg}; }
  static Status Incompatible(std::string_view msg) { return {Code::kIncompatible, msg}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsIOError() const { return code_ == Code::kIOError; }
  bool IsNoSpace() const { return code_ == Code::kNoSpace; }
  bool IsBusy() const { return code_ == Code::kBusy; }
  bool IsUnavailable() const { return code_ == Code::kUnavailable; }
  bool IsTimedOut() const { return code_ == Code::kTimedOut; }
  bool IsAborted() const { return code_ == Code::kAborted; }
  bool IsIncompatible() const { return code_ == Code::kIncompatible; }
  bool IsFailedPrecondition() const { return code_ == Code::kFailedPrecondition; }
  bool IsInternal() const { return code_ == Code::kInternal; }

  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;
  // A copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  Status(Code code, std::string_view msg) : code_(code), message_(msg) {}
  Code code_ = Code::kOk;
  std::string message_;
};

const char* StatusCodeName(Status::Code code);

// A value or the Status that says why there is none. Constructing from an OK Status is a bug
// and becomes an Internal error.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) status_ = Status::Internal("StatusOr constructed from an OK Status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace cachepawl

// Returns early from the enclosing function when `expr` (a Status) is not OK.
#define CACHEPAWL_RETURN_IF_ERROR(expr)      \
  do {                                       \
    ::cachepawl::Status _cp_status = (expr); \
    if (!_cp_status.ok()) return _cp_status; \
  } while (0)

#define CACHEPAWL_CONCAT_INNER(a, b) a##b
#define CACHEPAWL_CONCAT(a, b) CACHEPAWL_CONCAT_INNER(a, b)
// `CACHEPAWL_ASSIGN_OR_RETURN(auto x, Foo());` declares x from a StatusOr or returns its Status.
#define CACHEPAWL_ASSIGN_OR_RETURN(lhs, expr)            \
  auto CACHEPAWL_CONCAT(_cp_or_, __LINE__) = (expr);     \
  if (!CACHEPAWL_CONCAT(_cp_or_, __LINE__).ok())         \
    return CACHEPAWL_CONCAT(_cp_or_, __LINE__).status(); \
  lhs = std::move(CACHEPAWL_CONCAT(_cp_or_, __LINE__)).value()
