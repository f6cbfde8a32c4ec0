// The watchdog of the long-running commands (bench store, bench transfer, bench disk, replay):
// when the command makes no progress for its limit, it prints what it last did and what every
// thread of the process is waiting on (tools/thread_dump.h) to stderr and ends the process with
// exit code kExitStalled, so that a stalled benchmark tells why instead of hanging its caller.
//
// Progress is reported with Progress("what"): two relaxed atomic stores, cheap enough for every
// iteration of a timed loop. The command calls it where it completes a unit of work (an
// iteration, a row, a request batch). While no StallWatchdog runs, Progress only records.
//
// A pause of the whole process (the machine or its container frozen) is no stall: when the
// watchdog's own check wakes more than 5 s late, the time since the last progress counts from
// that moment.
//
// A process whose threads sit in an uninterruptible kernel call (state D: a driver) cannot end
// until the call returns; the report, printed first, says which thread and where.
//
// Thread safety: Progress may be called from any thread. One StallWatchdog at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "vocab/status.h"

namespace cachepawl::tools {

inline constexpr int kExitStalled = 3;  // the watchdog ended a command that stopped progressing

// `what` (a static string) is the work just completed.
void Progress(const char* what);

// The --watchdog option of the commands that have one.
inline constexpr char kWatchdogDefault[] = "300s";
inline constexpr char kWatchdogHelp[] =
    "print what every thread waits on and end the run (exit 3) after this long without "
    "progress (default 300s; 0: no watchdog)";
// "300s", "5m", "0" (off) -> seconds; InvalidArgument naming --watchdog and the text otherwise.
StatusOr<double> ParseWatchdogLimit(const std::string& text);

class StallWatchdog {
 public:
  // `command` names the command in the report ("cachepawl bench store"); `limit_seconds` > 0.
  // `on_stall` (tests): called with the report instead of printing it and ending the process.
  StallWatchdog(std::string command, double limit_seconds);
  StallWatchdog(std::string command, double limit_seconds,
                std::function<void(const std::string&)> on_stall);
  ~StallWatchdog();  // stops the watchdog's thread
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  // The report the watchdog prints when it fires (also for tests): the command, the limit, the
  // last progress and how long ago, then DumpThreads().
  std::string Report(double stalled_seconds) const;

 private:
  void Loop();

  const std::string command_;
  const double limit_seconds_;
  std::function<void(const std::string&)> on_stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace cachepawl::tools
