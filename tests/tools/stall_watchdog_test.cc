// The commands' watchdog (tools/stall_watchdog.h) and the thread dump it prints
// (tools/thread_dump.h): real threads blocked in a futex, in read() on a pipe, and with every
// signal blocked; the dump names each one's state, system call (with the file a descriptor
// is), and user stack; the watchdog fires only without progress and ends the process with
// exit code 3.
#include "tools/stall_watchdog.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "tools/thread_dump.h"

namespace cachepawl::tools {

// Exported (the test binary exports its symbols), so that the dump can name it.
__attribute__((noinline)) void StallWatchdogTestWaitsOnACondition(std::mutex& mu,
                                                                  std::condition_variable& cv,
                                                                  const bool& release) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return release; });
}

namespace {

pid_t Tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The dump's paragraph of thread `tid` (its line and the stack lines after it).
std::string Paragraph(const std::string& dump, pid_t tid) {
  const size_t at = dump.find("thread " + std::to_string(tid) + " ");
  if (at == std::string::npos) return "";
  const size_t next = dump.find("\nthread ", at + 1);
  return dump.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

TEST(ThreadDumpTest, NamesEachThreadsStateSystemCallAndStack) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<pid_t> waiter_tid{0}, reader_tid{0}, blocked_tid{0};
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread waiter([&] {
    waiter_tid = Tid();
    StallWatchdogTestWaitsOnACondition(mu, cv, release);
  });
  std::thread reader([&] {
    reader_tid = Tid();
    char byte;
    (void)::read(fds[0], &byte, 1);
  });
  std::atomic<bool> stop_blocked{false};
  std::thread blocked([&] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    blocked_tid = Tid();
    while (!stop_blocked) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  while (waiter_tid == 0 || reader_tid == 0 || blocked_tid == 0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all three blocked by now

  const std::string dump = DumpThreads();
  EXPECT_TRUE(Has(dump, "process " + std::to_string(::getpid()) + ": "));
  EXPECT_TRUE(Has(dump, "(this one: " + std::to_string(Tid()) + ")"));

  const std::string w = Paragraph(dump, waiter_tid);
  EXPECT_TRUE(Has(w, "state S (sleeping)")) << w;
  EXPECT_TRUE(Has(w, "syscall futex(")) << w;
  EXPECT_TRUE(Has(w, "StallWatchdogTestWaitsOnACondition")) << "its user stack names it:\n" << w;
  EXPECT_TRUE(Has(w, "    #0 ")) << w;

  const std::string r = Paragraph(dump, reader_tid);
  EXPECT_TRUE(Has(r, "syscall read(")) << r;
  EXPECT_TRUE(Has(r, "= fd " + std::to_string(fds[0]) + " -> pipe:[")) << r;

  const std::string b = Paragraph(dump, blocked_tid);
  EXPECT_TRUE(Has(b, "no user stack: the thread did not take the request in 250 ms")) << b;

  const std::string self = Paragraph(dump, Tid());
  EXPECT_TRUE(Has(self, "    #0 ")) << self;

  // A second dump works the same (the handler stays installed).
  EXPECT_TRUE(Has(Paragraph(DumpThreads(), waiter_tid), "StallWatchdogTestWaitsOnACondition"));

  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  stop_blocked = true;
  waiter.join();
  reader.join();
  blocked.join();
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(StallWatchdogTest, FiresWithoutProgressAndNamesTheLastOne) {
  std::mutex mu;
  std::condition_variable cv;
  std::string report;
  {
    StallWatchdog watchdog("cachepawl test", 0.3, [&](const std::string& text) {
      std::lock_guard<std::mutex> lock(mu);
      report = text;
      cv.notify_all();
    });
    Progress("the test's one step");
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return !report.empty(); }));
  }
  EXPECT_TRUE(Has(report, "cachepawl test: watchdog: no progress for ")) << report;
  EXPECT_TRUE(Has(report, "(limit 0.3 s); last progress: the test's one step")) << report;
  EXPECT_TRUE(Has(report, "threads (this one: ")) << report;
}

TEST(StallWatchdogTest, ProgressKeepsItQuiet) {
  std::atomic<bool> fired{false};
  {
    StallWatchdog watchdog("cachepawl test", 0.5, [&](const std::string&) { fired = true; });
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    while (std::chrono::steady_clock::now() < end) {
      Progress("a step");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  EXPECT_FALSE(fired.load()) << "steps every 50 ms under a 0.5 s limit";
}

TEST(StallWatchdogDeathTest, ItEndsAStalledProcessWithExitCodeThree) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StallWatchdog watchdog("cachepawl test", 0.2);
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      ::testing::ExitedWithCode(kExitStalled),
      "cachepawl test: watchdog: no progress for .*ending the process \\(exit 3\\)");
}

TEST(StallWatchdogTest, TheLimitIsADurationOrZero) {
  EXPECT_EQ(*ParseWatchdogLimit("300s"), 300.0);
  EXPECT_EQ(*ParseWatchdogLimit("5m"), 300.0);
  EXPECT_EQ(*ParseWatchdogLimit("0"), 0.0);
  for (const char* bad : {"", "-1s", "soon", "1y", "1e9"}) {
    auto l = ParseWatchdogLimit(bad);
    ASSERT_TRUE(l.status().IsInvalidArgument()) << bad;
    EXPECT_TRUE(Has(l.status().message(), std::string("--watchdog: '") + bad + "'"))
        << l.status().message();
  }
}

}  // namespace
}  // namespace cachepawl::tools
