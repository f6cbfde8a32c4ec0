#include "vocab/internal/json_text.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <vector>

namespace cachepawl::json_text {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxRenderedValue = 60;

// "line L, column C" (1-based) of the 1-based byte position nlohmann reports for a parse error:
// the last character it read, which is the end of the offending token.
std::string LineAndColumn(std::string_view text, size_t byte) {
  size_t offset = std::min(byte == 0 ? 0 : byte - 1, text.size());
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1);
}

// The part of a nlohmann parse_error message after its own (unreliable) position.
std::string ParseErrorDetail(const std::string& what) {
  size_t column = what.find("column ");
  size_t colon = column == std::string::npos ? std::string::npos : what.find(": ", column);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

// Finds the first key that appears twice in one object (nlohmann keeps the last silently)
// and names its path. Fed by the parser callback, which sees every event in document order.
// Keeps one frame per open container (the depth is bounded by CheckJsonDepth before parsing)
// and builds a path only for the duplicate it reports, so its memory is that of the keys.
class DuplicateKeyFinder {
 public:
  void OnEvent(Json::parse_event_t event, const Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        CountElement();
        frames_.push_back({event == Json::parse_event_t::array_start, 0, "", {}});
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!frames_.empty()) frames_.pop_back();
        break;
      case Json::parse_event_t::key: {
        if (frames_.empty()) break;
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second && duplicate_.empty()) duplicate_ = Path();
        break;
      }
      case Json::parse_event_t::value:
        CountElement();
        break;
    }
  }
  // Empty when every key was unique.
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool is_array;
    size_t elements;  // arrays: the elements started so far
    std::string key;  // objects: the key read last
    std::set<std::string> keys;
  };

  // An element (a value or a container) starts inside the innermost container.
  void CountElement() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().elements;
  }

  // "a.b[2].c": the path of the key read last, through every open container.
  std::string Path() const {
    std::string path;
    for (const Frame& f : frames_) {
      if (f.is_array) {
        path.append("[").append(std::to_string(f.elements == 0 ? 0 : f.elements - 1)).append("]");
      } else {
        if (!path.empty()) path.append(".");
        path.append(f.key);
      }
    }
    return path;
  }

  std::vector<Frame> frames_;
  std::string duplicate_;
};

}  // namespace

size_t FindTooDeep(std::string_view text, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

std::string TooDeepMessage(size_t max_depth) {
  return "arrays and objects nested deeper than " + std::to_string(max_depth) + " levels";
}

Status CheckJsonDepth(std::string_view text, size_t max_depth) {
  const size_t at = FindTooDeep(text, max_depth);
  if (at == std::string_view::npos) return Status::OK();
  return Status::InvalidArgument(LineAndColumn(text, at + 1) + ": " + TooDeepMessage(max_depth));
}

StatusOr<nlohmann::json> ParseJson(std::string_view text, bool reject_duplicate_keys) {
  CACHEPAWL_RETURN_IF_ERROR(CheckJsonDepth(text, kMaxJsonDepth));
  DuplicateKeyFinder finder;
  Json::parser_callback_t callback = [&finder](int, Json::parse_event_t event, Json& parsed) {
    finder.OnEvent(event, parsed);
    return true;
  };
  Json doc;
  try {
    doc = reject_duplicate_keys ? Json::parse(text.begin(), text.end(), callback)
                                : Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return Status::InvalidArgument(LineAndColumn(text, e.byte) + ": " + ParseErrorDetail(e.what()));
  } catch (const Json::exception& e) {
    // Number overflow and invalid UTF-8 come without a position.
    return Status::InvalidArgument(std::string("invalid JSON: ") + e.what());
  }
  if (!finder.duplicate().empty()) {
    return Status::InvalidArgument(finder.duplicate() +
                                   ": duplicate key (each key may appear once in an object)");
  }
  return doc;
}

std::string Render(const Json& value) {
  // Appended rather than `"'" + str + "'"`: GCC 12 at -O2 and above reports a false
  // -Wrestrict in operator+(const char*, std::string&&) (GCC bug 105651).
  std::string s = value.is_string() ? std::string("'").append(value.get<std::string>()).append("'")
                                    : value.dump();
  if (s.size() > kMaxRenderedValue) s = s.substr(0, kMaxRenderedValue) + "...";
  return s;
}

Status ReadSmallFile(const std::string& path, uint64_t max_bytes, std::string_view what,
                     std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("open: no such file");
    return Status::FromErrno("open", err);
  }
  struct stat st {};
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = Status::FromErrno("fstat", errno);
  } else if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) {
    status = Status::InvalidArgument(std::to_string(st.st_size) + " bytes (" + std::string(what) +
                                     " is at most " + std::to_string(max_bytes) + " bytes)");
  } else {
    out->clear();
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = Status::FromErrno("read", errno);
        break;
      }
      if (n == 0) break;
      out->append(buf, static_cast<size_t>(n));
      if (out->size() > max_bytes) {
        status = Status::InvalidArgument("more than " + std::to_string(max_bytes) + " bytes (not " +
                                         std::string(what) + ")");
        break;
      }
    }
  }
  ::close(fd);
  return status;
}

}  // namespace cachepawl::json_text
