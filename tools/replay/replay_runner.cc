#include "tools/replay/replay_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <sstream>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include "tools/replay/replay_rng.h"

namespace cachepawl::tools {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The progress line of long runs: one line to `out` every `interval_seconds` (the first one
// that long after the start), e.g.
//   replay: 1200/3000 requests, 41.2 req/s, hit 35.1%, 0 errors
// Not synchronized: the caller serializes Update calls.
class ProgressLine {
 public:
  ProgressLine(const ReplayRunOptions& options, Clock::time_point start)
      : out_(options.progress),
        interval_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(options.progress_interval_seconds))),
        soak_seconds_(options.soak_seconds),
        last_(start),
        start_(start) {}

  // `total`: the requests of the run when known (0: a soak, which loops until its deadline).
  // `extra`: appended to the line (the requests in flight, from the ticker).
  void Update(const ReplayTotals& t, uint64_t total, uint64_t crashes,
              const std::string& extra = "") {
    if (out_ == nullptr) return;
    const auto now = Clock::now();
    if (now - last_ < interval_) return;
    last_ = now;
    const double secs = SecondsSince(start_);
    std::string line = "replay: " + std::to_string(t.requests);
    if (soak_seconds_ > 0) {
      line += " requests (soak " + Fixed(secs) + " of " + Fixed(soak_seconds_) + " s)";
    } else {
      line += (total > 0 ? "/" + std::to_string(total) : std::string()) + " requests";
    }
    line += ", " + Fixed(secs > 0 ? static_cast<double>(t.requests) / secs : 0.0) + " req/s, hit " +
            Fixed(100.0 * Ceiling::Rate(t.hit_pages_total(), t.pages)) + "%, " +
            std::to_string(t.store_errors) + " errors";
    if (t.wrong_bytes > 0) line += ", " + std::to_string(t.wrong_bytes) + " WRONG BYTES";
    if (crashes > 0) line += ", " + std::to_string(crashes) + " crashes";
    *out_ << line << extra << "\n" << std::flush;
  }

 private:
  static std::string Fixed(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", v);
    return buf;
  }

  std::ostream* out_;
  Clock::duration interval_;
  double soak_seconds_;
  Clock::time_point last_, start_;
};

// A position in the request stream: pass, then index within the pass.
struct Cursor {
  uint64_t pass = 0;
  uint64_t index = 0;

  bool operator<(const Cursor& o) const { return pass != o.pass ? pass < o.pass : index < o.index; }
};

// The requests, pass by pass (a pass is generated once, when first needed). Not synchronized.
class Stream {
 public:
  Stream(const RequestSource& source, bool soak) : source_(source), soak_(soak) {}

  // The request at `c`, moving `c` to the next pass when its pass is exhausted. nullptr at the
  // end (no soak: after pass 0; soak: when a pass is empty). Valid until the next call.
  const TraceRequest* At(Cursor* c) {
    for (;;) {
      if (c->pass > 0 && !soak_) return nullptr;
      if (!loaded_ || pass_ != c->pass) {
        requests_ = source_(c->pass);
        if (c->pass == 0) first_pass_size_ = requests_.size();
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

  // When the request (of the pass At returned it from) is due at `speed` x real time, relative
  // to its pass's start; now when `speed` is 0.
  Clock::time_point Due(const TraceRequest& r, double speed) const {
    if (speed <= 0) return Clock::time_point::min();
    const double offset_ms = (r.timestamp_ms - requests_.front().timestamp_ms) / speed;
    return pass_start_ + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double, std::milli>(offset_ms));
  }

  // The requests of a run without soak (0 before pass 0 is loaded, and in a soak).
  uint64_t total() const { return soak_ ? 0 : first_pass_size_; }

 private:
  const RequestSource& source_;
  bool soak_;
  bool loaded_ = false;
  uint64_t pass_ = 0;
  uint64_t first_pass_size_ = 0;
  std::vector<TraceRequest> requests_;
  Clock::time_point pass_start_{};
};

bool PastDeadline(const ReplayRunOptions& o, Clock::time_point start) {
  return o.soak_seconds > 0 && SecondsSince(start) >= o.soak_seconds;
}

// The in-process run: `concurrency` engine threads, each taking the next request of the
// stream (in trace order) until the stream ends, the soak's deadline passes or a request
// fails, and adding what it did to the result. Thread-safe.
class InProcessRun {
 public:
  InProcessRun(ReplayEngine* engine, const RequestSource& source, const ReplayRunOptions& options,
               Clock::time_point start, ReplayRunResult* result)
      : engine_(*engine),
        options_(options),
        start_(start),
        result_(*result),
        stream_(source, options.soak_seconds > 0),
        progress_(options, start) {}

  // Runs the engine threads (the calling thread is one of them) until they are all done, and a
  // ticker that keeps the progress line coming while one long request runs.
  Status Run() {
    std::thread ticker;
    if (options_.progress != nullptr && options_.progress_interval_seconds > 0) {
      ticker = std::thread([this] { Tick(); });
    }
    std::vector<std::thread> threads;
    Status started;
    for (uint32_t i = 1; i < options_.concurrency; ++i) {
      try {
        threads.emplace_back([this] { Work(); });
      } catch (const std::system_error& e) {
        started = Status::Unavailable("--concurrency " + std::to_string(options_.concurrency) +
                                      ": starting engine thread " + std::to_string(i + 1) + ": " +
                                      e.what());
        Stop(started);
        break;
      }
    }
    Work();
    for (std::thread& t : threads) t.join();
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    ticked_.notify_all();
    if (ticker.joinable()) ticker.join();
    std::sort(finished_.begin(), finished_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [at, request] : finished_) result_.replayed.push_back(std::move(request));
    return failure_;
  }

 private:
  struct Taken {
    TraceRequest request;
    Cursor at;
    Clock::time_point due;
    uint64_t id = 0;  // its key in in_flight_
  };
  struct InFlight {
    Clock::time_point since;
    uint64_t blocks = 0;
  };

  void Work() {
    for (Taken taken; Take(&taken);) {
      if (options_.speed > 0) std::this_thread::sleep_until(taken.due);
      ReplayTotals delta;
      Status s = engine_.Run(taken.request, &delta);
      std::lock_guard lock(mu_);
      in_flight_.erase(taken.id);
      result_.totals.Merge(delta);
      if (!s.ok()) {
        StopLocked(s);
        return;
      }
      finished_.emplace_back(taken.at, std::move(taken.request));
      progress_.Update(result_.totals, stream_.total(), 0);
    }
  }

  bool Take(Taken* out) {
    std::lock_guard lock(mu_);
    if (stop_ || PastDeadline(options_, start_)) return false;
    const TraceRequest* r = stream_.At(&next_);
    if (r == nullptr) return false;
    out->request = *r;
    out->at = next_;
    out->due = stream_.Due(*r, options_.speed);
    out->id = next_id_++;
    in_flight_[out->id] = {Clock::now(), r->hash_ids.size()};
    ++next_.index;
    return true;
  }

  // Every progress interval while the run lasts: when no request finished in that time, the
  // progress line with the requests in flight ("1 in flight, the longest for 12.3 s, 2048
  // blocks"), so that one very long request is not minutes of silence.
  void Tick() {
    const auto interval = std::chrono::duration<double>(options_.progress_interval_seconds);
    std::unique_lock lock(mu_);
    while (!done_) {
      ticked_.wait_for(lock, interval);
      if (done_ || in_flight_.empty()) continue;
      auto oldest = in_flight_.begin();
      for (auto it = in_flight_.begin(); it != in_flight_.end(); ++it) {
        if (it->second.since < oldest->second.since) oldest = it;
      }
      if (Clock::now() - oldest->second.since < interval) continue;
      char text[128];
      std::snprintf(text, sizeof(text), "; %zu in flight, the longest for %.1f s (%llu blocks)",
                    in_flight_.size(), SecondsSince(oldest->second.since),
                    static_cast<unsigned long long>(oldest->second.blocks));
      progress_.Update(result_.totals, stream_.total(), 0, text);
    }
  }

  void Stop(const Status& why) {
    std::lock_guard lock(mu_);
    StopLocked(why);
  }
  void StopLocked(const Status& why) {
    stop_ = true;
    if (failure_.ok()) failure_ = why;
  }

  ReplayEngine& engine_;
  const ReplayRunOptions& options_;
  const Clock::time_point start_;
  ReplayRunResult& result_;  // totals guarded by mu_; replayed written after the threads end
  std::mutex mu_;
  Stream stream_;      // guarded by mu_
  Cursor next_;        // guarded by mu_
  bool stop_ = false;  // guarded by mu_
  Status failure_;     // guarded by mu_: the first request that failed
  std::vector<std::pair<Cursor, TraceRequest>> finished_;  // guarded by mu_
  ProgressLine progress_;                                  // guarded by mu_
  std::map<uint64_t, InFlight> in_flight_;                 // guarded by mu_
  uint64_t next_id_ = 0;                                   // guarded by mu_
  bool done_ = false;                                      // guarded by mu_
  std::condition_variable ticked_;                         // wakes the ticker at the end
};

StatusOr<ReplayRunResult> RunInProcess(const StoreFactory& open_store,
                                       const ReplayEngineOptions& engine_options,
                                       const RequestSource& source,
                                       const ReplayRunOptions& options) {
  ReplayRunResult result;
  result.concurrency = options.concurrency;
  const auto start = Clock::now();
  CACHEPAWL_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, open_store());
  auto engine = ReplayEngine::Create(store.get(), engine_options);
  if (!engine.ok()) {
    (void)store->Close();
    return engine.status();
  }
  Status failure = InProcessRun(engine->get(), source, options, start, &result).Run();
  result.store = store->Stats();
  Status closed = store->Close();
  result.wall_seconds = SecondsSince(start);
  CACHEPAWL_RETURN_IF_ERROR(failure);
  if (!closed.ok()) result.totals.AddError("Close: " + closed.ToString());
  return result;
}

// ---- crash mode: child -> parent messages ----

static_assert(std::is_trivially_copyable_v<StoreStats>);

enum class MessageType : uint8_t { kOpened = 0, kFinished = 1, kFatal = 2, kDone = 3 };

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
  const auto opening = Clock::now();
  auto store = open_store();
  if (!store.ok() && store.status().IsUnavailable()) _exit(kReplayExitOwnerGone);
  if (!store.ok()) fatal(store.status().WithContext("reopening the store"));
  auto engine = ReplayEngine::Create(store->get(), engine_options);
  if (!engine.ok()) fatal(engine.status());
  // The open's duration (microseconds) travels in `index`: the parent aims its kills during
  // open at it.
  const auto open_us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - opening);
  Send(fd, MessageType::kOpened, Cursor{0, static_cast<uint64_t>(open_us.count())}, "",
       (*store)->Stats());
  Stream stream(source, options.soak_seconds > 0);
  for (; !PastDeadline(options, start); ++c.index) {
    const TraceRequest* r = stream.At(&c);
    if (r == nullptr) break;
    ReplayTotals delta;
    Status s = (*engine)->Run(*r, &delta);
    // An attached store whose owner went: this request is redone by the next process.
    const bool owner_gone =
        s.IsUnavailable() ||
        std::any_of(delta.errors.begin(), delta.errors.end(), [](const std::string& e) {
          return e.find("Unavailable") != std::string::npos;
        });
    if (owner_gone) _exit(kReplayExitOwnerGone);
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
  ProgressLine progress(options, start);
  Stream stream(source, options.soak_seconds > 0);  // the parent's copy, for `replayed`
  SplitMix64 dice(options.seed);
  Cursor next;
  // Where kills during open aim, from the last store process that was not killed early: the time
  // from its start to the open's beginning, and the open's duration.
  double startup_ms = 0, open_ms = 20;
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
      return spawned.status().WithContext("crash mode: starting a store process");
    }
    const pid_t pid = *spawned;
    const auto spawned_at = Clock::now();
    ::close(fds[1]);
    const uint64_t kill_after = RequestsUntilKill(dice, options.crash_every);
    uint64_t finished_here = 0;
    bool killed = false, done = false, opened = false;
    if (dice.Unit() < options.kill_during_open_fraction) {
      // Somewhere in the open (catalog recovery, index rebuild), judging by the last one; the
      // messages it may have sent meanwhile wait in the pipe.
      const double delay_ms = startup_ms + dice.Unit() * open_ms;
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
      ::kill(pid, SIGKILL);
      killed = true;
    }
    const bool timing_open = !killed;
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
      if (h.type == MessageType::kOpened) {
        opened = true;
        if (timing_open) {
          const double child_open_ms = static_cast<double>(h.index) / 1000.0;
          const double since_spawn_ms =
              std::chrono::duration<double, std::milli>(Clock::now() - spawned_at).count();
          open_ms = child_open_ms;
          startup_ms = std::max(0.0, since_spawn_ms - child_open_ms);
        }
        if (result.crashes > 0) ++result.reopens;
        continue;
      }
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
      progress.Update(result.totals, stream.total(), result.crashes);
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
      return fatal->WithContext("crash mode, store process " + std::to_string(result.crashes + 1));
    }
    if (WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL && killed) {
      if (done) break;  // it had finished before the signal landed
      ++result.crashes;
      if (!opened) ++result.kills_during_open;
      if (PastDeadline(options, start)) break;
      Cursor probe = next;
      if (stream.At(&probe) == nullptr) break;
      continue;
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 && done) break;
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == kReplayExitOwnerGone && !done) {
      ++result.owner_losses;
      if (PastDeadline(options, start)) break;
      Cursor probe = next;
      if (stream.At(&probe) == nullptr) break;
      continue;
    }
    return Status::Internal("crash mode: the store process ended unexpectedly (" +
                            (WIFSIGNALED(wstatus)
                                 ? "signal " + std::to_string(WTERMSIG(wstatus))
                                 : "exit status " + std::to_string(WEXITSTATUS(wstatus))) +
                            ") after request " + std::to_string(result.totals.requests));
  }
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
  if (!(kill_during_open_fraction >= 0 && kill_during_open_fraction < 1)) {
    std::ostringstream text;
    text << "--kill-during-open: " << kill_during_open_fraction
         << " (must be a fraction from 0 to below 1: at 1 every store process is killed while "
            "it opens and no request is ever served)";
    return Status::InvalidArgument(text.str());
  }
  if (concurrency < 1 || concurrency > kMaxReplayConcurrency) {
    return Status::InvalidArgument("--concurrency: " + std::to_string(concurrency) +
                                   " (must be 1 to " + std::to_string(kMaxReplayConcurrency) + ")");
  }
  if (crash_every > 0 && concurrency > 1) {
    return Status::InvalidArgument("--concurrency " + std::to_string(concurrency) +
                                   " with --crash-every: crash mode runs one request at a time "
                                   "(use --concurrency 1)");
  }
  if (!(progress_interval_seconds >= 0) || !std::isfinite(progress_interval_seconds)) {
    return Status::InvalidArgument("progress_interval_seconds: " +
                                   std::to_string(progress_interval_seconds) + " (must be >= 0)");
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
