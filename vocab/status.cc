#include "vocab/status.h"

#include <cstring>
#include <string>

namespace cachepawl {

const char* StatusCodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "InvalidArgument";
    case Status::Code::kNotFound:
      return "NotFound";
    case Status::Code::kCorruption:
      return "Corruption";
    case Status::Code::kIOError:
      return "IOError";
    case Status::Code::kNoSpace:
      return "NoSpace";
    case Status::Code::kBusy:
      return "Busy";
    case Status::Code::kUnavailable:
      return "Unavailable";
    case Status::Code::kFailedPrecondition:
      return "FailedPrecondition";
    case Status::Code::kTimedOut:
      return "TimedOut";
    case Status::Code::kAborted:
      return "Aborted";
    case Status::Code::kInternal:
      return "Internal";
    case Status::Code::kIncompatible:
      return "Incompatible";
  }
  return "Unknown";
}

Status Status::FromErrno(std::string_view context, int err) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  msg += " (errno ";
  msg += std::to_string(err);
  msg += ")";
  if (err == ENOSPC) return Status(Code::kNoSpace, msg);
  return Status(Code::kIOError, msg);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = StatusCodeName(code_);
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, msg);
}

Status Status::FromCode(int code, std::string_view msg) {
  if (code == 0) return OK();
  if (code < 0 || code > static_cast<int>(Code::kIncompatible)) {
    return Internal("status code " + std::to_string(code) + " (unknown): " + std::string(msg));
  }
  return Status(static_cast<Code>(code), msg);
}

}  // namespace cachepawl
