#include "tools/stress/stress_watchdog.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

namespace cachepawl::tools {
namespace {

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

// The store's Stats as text, or why there are none: asked on a thread of its own, given 5 s
// (a deadlocked store holds the mutex Stats needs). The thread is left behind if it does not
// answer: the process is about to abort, or the run is over anyway.
std::string StatsWithin5s(const std::function<std::string()>& store_stats) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string text;
  };
  auto shared = std::make_shared<Shared>();
  std::thread asker([shared, store_stats] {
    std::string text = store_stats();
    std::lock_guard lock(shared->mu);
    shared->text = std::move(text);
    shared->done = true;
    shared->cv.notify_all();
  });
  std::unique_lock lock(shared->mu);
  if (shared->cv.wait_for(lock, std::chrono::seconds(5), [&] { return shared->done; })) {
    lock.unlock();
    asker.join();
    return shared->text;
  }
  asker.detach();
  return "(Store::Stats did not return within 5 s: the store's mutex is probably held by a "
         "stuck thread)";
}

}  // namespace

int64_t StressHeartbeat::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void StressHeartbeat::Begin(StressOp op) {
  step_.store("", std::memory_order_relaxed);
  since_ns_.store(NowNs(), std::memory_order_relaxed);
  op_.store(static_cast<int>(op), std::memory_order_release);
}

void StressHeartbeat::End() {
  const int op = op_.load(std::memory_order_relaxed);
  if (op == kIdle) return;
  const int64_t now = NowNs();
  const int64_t took = now - since_ns_.load(std::memory_order_relaxed);
  if (took > max_op_ns_.load(std::memory_order_relaxed)) {
    max_op_.store(op, std::memory_order_relaxed);
    max_op_ns_.store(took, std::memory_order_relaxed);
  }
  done_[op].store(done_[op].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  last_op_.store(op, std::memory_order_relaxed);
  last_done_ns_.store(now, std::memory_order_relaxed);
  op_.store(kIdle, std::memory_order_release);
}

double StressHeartbeat::max_op_seconds() const {
  return static_cast<double>(max_op_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

double StressHeartbeat::InOpSeconds(int64_t now_ns) const {
  if (op_.load(std::memory_order_acquire) == kIdle) return -1;
  return static_cast<double>(now_ns - since_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

std::string StressHeartbeat::Describe(int64_t now_ns) const {
  std::ostringstream out;
  out << name_ << ": ";
  const int op = op_.load(std::memory_order_acquire);
  if (op == kIdle) {
    out << "between operations";
  } else {
    const char* step = step_.load(std::memory_order_relaxed);
    out << "in " << StressOpName(static_cast<StressOp>(op));
    if (step != nullptr && *step != '\0') out << " (step: " << step << ")";
    out << " for "
        << Seconds(static_cast<double>(now_ns - since_ns_.load(std::memory_order_relaxed)) * 1e-9);
  }
  const int last = last_op_.load(std::memory_order_relaxed);
  if (last == kIdle) {
    out << "; nothing done yet";
  } else {
    out << "; last done: " << StressOpName(static_cast<StressOp>(last)) << " "
        << Seconds(static_cast<double>(now_ns - last_done_ns_.load(std::memory_order_relaxed)) *
                   1e-9)
        << " ago";
  }
  uint64_t total = 0;
  std::string counts;
  for (int i = 0; i < kNumStressOps; ++i) {
    const uint64_t n = done_[i].load(std::memory_order_relaxed);
    total += n;
    if (n == 0) continue;
    counts += (counts.empty() ? "" : ", ") + std::string(StressOpName(static_cast<StressOp>(i))) +
              " " + std::to_string(n);
  }
  out << "; " << total << " ops (" << counts << ")";
  return out.str();
}

StressWatchdog::StressWatchdog(const std::deque<StressHeartbeat>* beats, double limit_seconds,
                               std::function<std::string()> store_stats,
                               std::function<void(const std::string&)> on_stall)
    : beats_(*beats),
      limit_seconds_(limit_seconds),
      store_stats_(std::move(store_stats)),
      on_stall_(std::move(on_stall)) {}

StressWatchdog::~StressWatchdog() { Stop(); }

void StressWatchdog::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void StressWatchdog::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

double StressWatchdog::max_seen_seconds() const {
  std::lock_guard lock(mu_);
  return max_seen_;
}

std::string StressWatchdog::max_seen_op() const {
  std::lock_guard lock(mu_);
  return max_seen_op_;
}

double StressWatchdog::longest_pause_seconds() const {
  std::lock_guard lock(mu_);
  return longest_pause_;
}

std::string StressWatchdog::DescribeThreads(const std::deque<StressHeartbeat>& beats) {
  const int64_t now = StressHeartbeat::NowNs();
  std::string out;
  for (const StressHeartbeat& beat : beats) out += "  " + beat.Describe(now) + "\n";
  return out;
}

void StressWatchdog::Loop() {
  const auto period = std::chrono::duration<double>(std::min(1.0, limit_seconds_ / 4));
  constexpr double kPauseSeconds = 5;
  int64_t last_tick = StressHeartbeat::NowNs();
  int64_t resumed = 0;  // operations count from here at the earliest (after a pause)
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period, [&] { return stop_; });
    if (stop_ || fired_.load()) continue;
    const int64_t now = StressHeartbeat::NowNs();
    const double late = static_cast<double>(now - last_tick) * 1e-9 - period.count();
    last_tick = now;
    if (late > kPauseSeconds) {
      resumed = now;
      longest_pause_ = std::max(longest_pause_, late);
    }
    const StressHeartbeat* stuck = nullptr;
    double stuck_for = 0;
    for (const StressHeartbeat& beat : beats_) {
      const double s = std::min(beat.InOpSeconds(now), static_cast<double>(now - resumed) * 1e-9);
      if (s > max_seen_) {
        max_seen_ = s;
        max_seen_op_ = StressOpName(beat.current());
      }
      if (s > limit_seconds_ && s > stuck_for) {
        stuck = &beat;
        stuck_for = s;
      }
    }
    if (stuck == nullptr) continue;
    lock.unlock();
    Fire(*stuck, stuck_for);
    lock.lock();
  }
}

void StressWatchdog::Fire(const StressHeartbeat& stuck, double seconds) {
  fired_.store(true);
  std::string report = "cachepawl stress: watchdog: " + stuck.name() + " has been in " +
                       StressOpName(stuck.current()) + " for " + Seconds(seconds) + " (limit " +
                       Seconds(limit_seconds_) + ")\nthreads:\n";
  report += DescribeThreads(beats_);
  report += "store stats:\n" + StatsWithin5s(store_stats_) + "\n";
  on_stall_(report);
}

}  // namespace cachepawl::tools
