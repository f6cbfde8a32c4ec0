// The stress run's heartbeats and watchdog (tools/stress/stress.h).
//
// Each stress thread owns a StressHeartbeat: the operation it is in (and the step inside it)
// and since when, its last completed operation and when, its counts per operation and its
// longest operation. The owner writes it; the watchdog reads it, every field an atomic.
//
// StressWatchdog runs a thread that wakes every second (or every quarter of its limit, if that
// is shorter) and, when some heartbeat has been in one operation for longer than the limit,
// builds a report (every thread's state, then the store's Stats, fetched with a time limit
// since a deadlocked store may never answer) and hands it to `on_stall`, once.
//
// A pause of the whole process (the machine or its container frozen, a debugger) is no stall:
// when the watchdog itself wakes more than 5 s late, every operation counts from that moment on
// (a deadlock still fires one limit later). The longest such pause is reported.
//
// Thread safety: Heartbeat methods are called by their owner only; everything else may be
// called from any thread. The heartbeats must outlive the watchdog.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "tools/stress/stress.h"

namespace cachepawl::tools {

class StressHeartbeat {
 public:
  explicit StressHeartbeat(std::string name) : name_(std::move(name)) {}

  // The owner: an operation starts, reaches a step (a static string: "Load", "fence wait"), ends.
  void Begin(StressOp op);
  void Step(const char* step) { step_.store(step, std::memory_order_relaxed); }
  void End();

  const std::string& name() const { return name_; }
  uint64_t done(StressOp op) const {
    return done_[static_cast<int>(op)].load(std::memory_order_relaxed);
  }
  // The longest completed operation: seconds and which.
  double max_op_seconds() const;
  StressOp max_op() const { return static_cast<StressOp>(max_op_.load()); }
  // Seconds the current operation has run at `now`; negative between operations.
  double InOpSeconds(int64_t now_ns) const;
  StressOp current() const { return static_cast<StressOp>(op_.load()); }
  // "thread 3: in load (step: fence wait) for 61.2 s; last done: save 61.3 s ago; 1234 ops
  // (lookup 300, ...)".
  std::string Describe(int64_t now_ns) const;

  static int64_t NowNs();

 private:
  static constexpr int kIdle = -1;
  std::string name_;
  std::atomic<int> op_{kIdle};
  std::atomic<const char*> step_{""};
  std::atomic<int64_t> since_ns_{0};
  std::atomic<int> last_op_{kIdle};
  std::atomic<int64_t> last_done_ns_{0};
  std::array<std::atomic<uint64_t>, kNumStressOps> done_{};
  std::atomic<int64_t> max_op_ns_{0};
  std::atomic<int> max_op_{0};
};

class StressWatchdog {
 public:
  // `beats`: every thread's heartbeat (the deque is not changed while the watchdog runs).
  // `store_stats`: the store's Stats as text (called on a thread of its own, waited for 5 s).
  StressWatchdog(const std::deque<StressHeartbeat>* beats, double limit_seconds,
                 std::function<std::string()> store_stats,
                 std::function<void(const std::string&)> on_stall);
  ~StressWatchdog();  // Stop()
  StressWatchdog(const StressWatchdog&) = delete;
  StressWatchdog& operator=(const StressWatchdog&) = delete;

  void Start();
  void Stop();

  bool fired() const { return fired_.load(); }
  // The longest operation seen in flight by a check (seconds) and its name.
  double max_seen_seconds() const;
  std::string max_seen_op() const;
  // The longest time the watchdog itself did not run (seconds; 0 when it always woke in time).
  double longest_pause_seconds() const;

  // Every heartbeat's Describe, one line each.
  static std::string DescribeThreads(const std::deque<StressHeartbeat>& beats);

 private:
  void Loop();
  void Fire(const StressHeartbeat& stuck, double seconds);

  const std::deque<StressHeartbeat>& beats_;
  const double limit_seconds_;
  std::function<std::string()> store_stats_;
  std::function<void(const std::string&)> on_stall_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;         // guarded by mu_
  double max_seen_ = 0;       // guarded by mu_
  std::string max_seen_op_;   // guarded by mu_
  double longest_pause_ = 0;  // guarded by mu_
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

}  // namespace cachepawl::tools
