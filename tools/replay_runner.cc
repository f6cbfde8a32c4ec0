#include "tools/replay_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <ostream>
#include <thread>
#include <type_traits>

#include "tools/replay_rng.h"

namespace cachepawl::tools {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The live progress line: redrawn in place at most 5 times a second.
class ProgressLine {
 public:
  explicit ProgressLine(std::ostream* out) : out_(out) {}

  void Update(const ReplayTotals& t, uint64_t crashes, Clock::time_point start) {
    if (out_ == nullptr) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double secs = SecondsSince(start);
    char line[200];
    std::snprintf(line, sizeof(line),
                  "\r\033[K%llu requests  %.1f req/s  hit %.1f%% of pages  verified %llu  "
                  "wrong bytes %llu%s",
                  static_cast<unsigned long long>(t.requests),
                  secs > 0 ? static_cast<double>(t.requests) / secs : 0.0,
                  100.0 * Ceiling::Rate(t.hit_pages_total(), t.pages),
                  static_cast<unsigned long long>(t.verified_records),
                  static_cast<unsigned long long>(t.wrong_bytes),
                  crashes > 0 ? ("  crashes " + std::to_string(crashes)).c_str() : "");
    *out_ << line << std::flush;
  }

  void Finish() {
    if (out_ != nullptr) *out_ << "\r\033[K" << std::flush;
  }

 private:
  std::ostream* out_;
  Clock::time_point last_{};
};

// A position in the request stream: pass, then index within the pass.
struct Cursor {
  uint64_t pass = 0;
  uint64_t index = 0;
};

// The requests, pass by pass (a pass is generated once, when first needed).
class Stream {
 public:
  Stream(const RequestSource& source, bool soak) : source_(source), soak_(soak) {}

  // The request at `c`, moving `c` to the next pass when its pass is exhausted. nullptr at the
  // end (no soak: after pass 0; soak: when a pass is empty).
  const TraceRequest* At(Cursor* c) {
    for (;;) {
      if (c->pass > 0 && !soak_) return nullptr;
      if (!loaded_ || pass_ != c->pass) {
        requests_ = source_(c->pass);
        pass_ = c->pass;
        loaded_ = true;
        pass_start_ = Clock::now();
      }
      if (requests_.empty()) return nullptr;
      if (c->index < requests_.size()) return &requests_[c->index];
      ++c->pass;
      c->index = 0;
    }
  }

  // Sleeps until the request's time at `speed` x real time (relative to its pass's start).
  void Pace(const TraceRequest& r, double speed) const {
    if (speed <= 0) return;
    const double offset_ms = (r.timestamp_ms - requests_.front().timestamp_ms) / speed;
    const auto due = pass_start_ + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double, std::milli>(offset_ms));
    std::this_thread::sleep_until(due);
  }

 private:
  const RequestSource& source_;
  bool soak_;
  bool loaded_ = false;
  uint64_t pass_ = 0;
  std::vector<TraceRequest> requests_;
  Clock::time_point pass_start_{};
};

bool PastDeadline(const ReplayRunOptions& o, Clock::time_point start) {
  return o.soak_seconds > 0 && SecondsSince(start) >= o.soak_seconds;
}

StatusOr<ReplayRunResult> RunInProcess(const StoreFactory& open_store,
                                       const ReplayEngineOptions& engine_options,
                                       const RequestSource& source,
                                       const ReplayRunOptions& options) {
  ReplayRunResult result;
  const auto start = Clock::now();
  CACHEPAWL_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, open_store());
  auto engine = ReplayEngine::Create(store.get(), engine_options);
  if (!engine.ok()) {
    (void)store->Close();
    return engine.status();
  }
  ProgressLine progress(options.progress);
  Stream stream(source, options.soak_seconds > 0);
  Status failure;
  for (Cursor c; !PastDeadline(options, start); ++c.index) {
    const TraceRequest* r = stream.At(&c);
    if (r == nullptr) break;
    stream.Pace(*r, options.speed);
    failure = (*engine)->Run(*r, &result.totals);
    if (!failure.ok()) break;
    result.replayed.push_back(*r);
    progress.Update(result.totals, 0, start);
  }
  progress.Finish();
  result.store = store->Stats();
  Status closed = store->Close();
  result.wall_seconds = SecondsSince(start);
  CACHEPAWL_RETURN_IF_ERROR(failure);
  if (!closed.ok()) result.totals.AddError("Close: " + closed.ToString());
  return result;
}

// ---- crash mode: child -> parent messages ----

static_assert(std::is_trivially_copyable_v<StoreStats>);

enum class MessageType : uint8_t { kFinished = 1, kFatal = 2, kDone = 3 };

struct MessageHeader {
  MessageType type;
  uint64_t pass;
  uint64_t index;
  uint32_t json_bytes;  // followed by JSON text (totals, or an error), then a StoreStats
};

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes; false at EOF (a message cut short by the kill) or on error.
bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void Send(int fd, MessageType type, Cursor c, const std::string& json, const StoreStats& stats) {
  MessageHeader h{type, c.pass, c.index, static_cast<uint32_t>(json.size())};
  if (!WriteAll(fd, &h, sizeof(h)) || !WriteAll(fd, json.data(), json.size()) ||
      !WriteAll(fd, &stats, sizeof(stats))) {
    _exit(4);  // the parent is gone
  }
}

[[noreturn]] void ChildMain(int fd, const StoreFactory& open_store,
                            const ReplayEngineOptions& engine_options, const RequestSource& source,
                            const ReplayRunOptions& options, Cursor c, Clock::time_point start) {
  auto fatal = [&](const Status& s) {
    // The status code travels in `pass`.
    Send(fd, MessageType::kFatal, Cursor{static_cast<uint64_t>(s.code()), 0}, s.message(),
         StoreStats{});
    _exit(3);
  };
  auto store = open_store();
  if (!store.ok()) fatal(store.status().WithContext("reopening the store"));
  auto engine = ReplayEngine::Create(store->get(), engine_options);
  if (!engine.ok()) fatal(engine.status());
  Stream stream(source, options.soak_seconds > 0);
  for (; !PastDeadline(options, start); ++c.index) {
    const TraceRequest* r = stream.At(&c);
    if (r == nullptr) break;
    ReplayTotals delta;
    Status s = (*engine)->Run(*r, &delta);
    if (!s.ok()) fatal(s);
    Send(fd, MessageType::kFinished, c, ReplayTotalsToJson(delta).dump(), (*store)->Stats());
  }
  const StoreStats final_stats = (*store)->Stats();
  Status closed = (*store)->Close();
  Send(fd, MessageType::kDone, c, closed.ok() ? "" : closed.ToString(), final_stats);
  _exit(0);
}

// A Status with the given code (as a child reported it) and message.
Status WithCode(Status::Code code, const std::string& message) {
  using C = Status::Code;
  switch (code) {
    case C::kInvalidArgument:
      return Status::InvalidArgument(message);
    case C::kNotFound:
      return Status::NotFound(message);
    case C::kCorruption:
      return Status::Corruption(message);
    case C::kIOError:
      return Status::IOError(message);
    case C::kNoSpace:
      return Status::NoSpace(message);
    case C::kBusy:
      return Status::Busy(message);
    case C::kUnavailable:
      return Status::Unavailable(message);
    case C::kFailedPrecondition:
      return Status::FailedPrecondition(message);
    case C::kTimedOut:
      return Status::TimedOut(message);
    case C::kAborted:
      return Status::Aborted(message);
    case C::kIncompatible:
      return Status::Incompatible(message);
    default:
      return Status::Internal(message);
  }
}

// Requests between kills: uniform in [1, 2 * mean - 1], so `mean` on average.
uint64_t RequestsUntilKill(SplitMix64& dice, uint64_t mean) {
  return dice.Between(1, 2 * mean - 1);
}

StatusOr<ReplayRunResult> RunWithCrashes(const StoreFactory& open_store,
                                         const ReplayEngineOptions& engine_options,
                                         const RequestSource& source,
                                         const ReplayRunOptions& options) {
  ReplayRunResult result;
  const auto start = Clock::now();
  ProgressLine progress(options.progress);
  Stream stream(source, options.soak_seconds > 0);  // the parent's copy, for `replayed`
  SplitMix64 dice(options.seed);
  Cursor next;
  for (;;) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
    CrashChildStart child;
    child.report_fd = fds[1];
    child.pass = next.pass;
    child.index = next.index;
    child.start_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
    StatusOr<pid_t> spawned = Status::Internal("no child");
    if (options.spawn_child) {
      spawned = options.spawn_child(child);
    } else {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        RunCrashChild(child, open_store, engine_options, source, options);
      }
      spawned = pid >= 0 ? StatusOr<pid_t>(pid) : Status::FromErrno("fork", errno);
    }
    if (!spawned.ok()) {
      ::close(fds[0]);
      ::close(fds[1]);
      progress.Finish();
      return spawned.status().WithContext("crash mode: starting a store process");
    }
    const pid_t pid = *spawned;
    ::close(fds[1]);
    const uint64_t kill_after = RequestsUntilKill(dice, options.crash_every);
    uint64_t finished_here = 0;
    bool killed = false, done = false;
    std::optional<Status> fatal;
    StoreStats last_stats;
    bool have_stats = false;
    for (;;) {
      MessageHeader h;
      if (!ReadAll(fds[0], &h, sizeof(h))) break;
      std::string json(h.json_bytes, '\0');
      StoreStats stats;
      if (!ReadAll(fds[0], json.data(), json.size()) || !ReadAll(fds[0], &stats, sizeof(stats))) {
        break;
      }
      if (h.type == MessageType::kFatal) {
        fatal = WithCode(static_cast<Status::Code>(h.pass), json);
        break;
      }
      last_stats = stats;
      have_stats = true;
      if (h.type == MessageType::kDone) {
        if (!json.empty()) result.totals.AddError("Close: " + json);
        done = true;
        break;
      }
      // kFinished
      auto parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) return Status::Internal("crash mode: unreadable child report");
      result.totals.Merge(ReplayTotalsFromJson(parsed));
      Cursor c{h.pass, h.index};
      if (const TraceRequest* r = stream.At(&c)) result.replayed.push_back(*r);
      next = Cursor{h.pass, h.index + 1};
      progress.Update(result.totals, result.crashes, start);
      if (++finished_here == kill_after && !killed) {
        const auto delay =
            std::chrono::duration<double, std::milli>(dice.Unit() * options.max_kill_delay_ms);
        std::this_thread::sleep_for(delay);
        ::kill(pid, SIGKILL);
        killed = true;
      }
    }
    ::close(fds[0]);
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (have_stats) result.store = AddStoreStats(result.store, last_stats);
    if (fatal.has_value()) {
      progress.Finish();
      return fatal->WithContext("crash mode, store process " + std::to_string(result.crashes + 1));
    }
    if (WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL && killed) {
      if (done) break;  // it had finished before the signal landed
      ++result.crashes;
      if (PastDeadline(options, start)) break;
      Cursor probe = next;
      if (stream.At(&probe) == nullptr) break;
      continue;
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 && done) break;
    progress.Finish();
    return Status::Internal("crash mode: the store process ended unexpectedly (" +
                            (WIFSIGNALED(wstatus)
                                 ? "signal " + std::to_string(WTERMSIG(wstatus))
                                 : "exit status " + std::to_string(WEXITSTATUS(wstatus))) +
                            ") after request " + std::to_string(result.totals.requests));
  }
  progress.Finish();
  result.wall_seconds = SecondsSince(start);
  return result;
}

}  // namespace

std::string CrashChildStart::ToString() const {
  return std::to_string(report_fd) + "," + std::to_string(pass) + "," + std::to_string(index) +
         "," + std::to_string(start_ns);
}

std::optional<CrashChildStart> CrashChildStart::Parse(std::string_view text) {
  CrashChildStart s;
  unsigned long long fd = 0, pass = 0, index = 0;
  long long start_ns = 0;
  char tail = 0;
  const std::string t(text);
  if (std::sscanf(t.c_str(), "%llu,%llu,%llu,%lld%c", &fd, &pass, &index, &start_ns, &tail) != 4 ||
      fd > 1u << 20) {
    return std::nullopt;
  }
  s.report_fd = static_cast<int>(fd);
  s.pass = pass;
  s.index = index;
  s.start_ns = start_ns;
  return s;
}

void RunCrashChild(const CrashChildStart& start, const StoreFactory& open_store,
                   const ReplayEngineOptions& engine_options, const RequestSource& source,
                   const ReplayRunOptions& options) {
  const Clock::time_point t0{
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(start.start_ns))};
  ChildMain(start.report_fd, open_store, engine_options, source, options,
            Cursor{start.pass, start.index}, t0);
}

Status ReplayRunOptions::Validate() const {
  if (!(speed >= 0) || !std::isfinite(speed)) {
    return Status::InvalidArgument("--speed: " + std::to_string(speed) + " (must be >= 0)");
  }
  if (!(soak_seconds >= 0) || !std::isfinite(soak_seconds)) {
    return Status::InvalidArgument("--soak: " + std::to_string(soak_seconds) +
                                   " seconds (must be >= 0)");
  }
  if (!(max_kill_delay_ms >= 0)) {
    return Status::InvalidArgument("max_kill_delay_ms: must be >= 0");
  }
  return Status::OK();
}

StatusOr<ReplayRunResult> RunReplay(const StoreFactory& open_store,
                                    const ReplayEngineOptions& engine_options,
                                    const RequestSource& source, const ReplayRunOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  if (options.crash_every > 0) return RunWithCrashes(open_store, engine_options, source, options);
  return RunInProcess(open_store, engine_options, source, options);
}

}  // namespace cachepawl::tools
