#include "tools/stall_watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "tools/cli_values.h"
#include "tools/thread_dump.h"

namespace cachepawl::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> g_last_ns{0};
std::atomic<const char*> g_last_what{"start"};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::string Seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g s", s);
  return text;
}

}  // namespace

StatusOr<double> ParseWatchdogLimit(const std::string& text) {
  const auto seconds = ParseDuration(text);
  if (!seconds || *seconds > 1e7) {
    return Status::InvalidArgument("--watchdog: '" + text +
                                   "' (expected a duration such as 300s or 10m, at most 10^7 s; "
                                   "0 turns it off)");
  }
  return *seconds;
}

void Progress(const char* what) {
  g_last_what.store(what, std::memory_order_relaxed);
  g_last_ns.store(NowNs(), std::memory_order_relaxed);
}

StallWatchdog::StallWatchdog(std::string command, double limit_seconds)
    : StallWatchdog(std::move(command), limit_seconds, nullptr) {}

StallWatchdog::StallWatchdog(std::string command, double limit_seconds,
                             std::function<void(const std::string&)> on_stall)
    : command_(std::move(command)), limit_seconds_(limit_seconds), on_stall_(std::move(on_stall)) {
  Progress("start");
  thread_ = std::thread([this] { Loop(); });
}

StallWatchdog::~StallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string StallWatchdog::Report(double stalled_seconds) const {
  return command_ + ": watchdog: no progress for " + Seconds(stalled_seconds) + " (limit " +
         Seconds(limit_seconds_) +
         "); last progress: " + g_last_what.load(std::memory_order_relaxed) + "\n" + DumpThreads();
}

void StallWatchdog::Loop() {
  const auto tick = std::chrono::duration<double>(std::min(1.0, limit_seconds_ / 4));
  std::unique_lock<std::mutex> lock(mu_);
  int64_t last_wake = NowNs();
  int64_t counted_from = 0;  // a pause of the whole process restarts the count here
  while (!cv_.wait_for(lock, tick, [this] { return stop_; })) {
    const int64_t now = NowNs();
    if (now - last_wake > 5'000'000'000) counted_from = now;
    last_wake = now;
    const int64_t since = std::max(g_last_ns.load(std::memory_order_relaxed), counted_from);
    const double stalled = static_cast<double>(now - since) / 1e9;
    if (stalled <= limit_seconds_) continue;
    const std::string report = Report(stalled);
    if (on_stall_) {
      on_stall_(report);
      return;
    }
    std::fputs(report.c_str(), stderr);
    std::fprintf(stderr, "%s: ending the process (exit %d)\n", command_.c_str(), kExitStalled);
    std::fflush(stderr);
    ::_exit(kExitStalled);
  }
}

}  // namespace cachepawl::tools
