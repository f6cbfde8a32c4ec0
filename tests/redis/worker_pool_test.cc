// WorkerPool (redis/worker_pool.h): every task runs exactly once, the pool stays within its
// thread bound, callers finish their batches also when every pool thread is busy or there are
// none, and many callers share one pool.
#include "redis/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

namespace cachepawl {
namespace {

std::vector<std::function<void()>> CountingTasks(std::vector<std::atomic<int>>& runs) {
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < runs.size(); ++i) tasks.emplace_back([&runs, i] { ++runs[i]; });
  return tasks;
}

TEST(WorkerPoolTest, EveryTaskRunsOnceWithinTheThreadBound) {
  WorkerPool pool(3);
  for (size_t size : {0, 1, 2, 7, 50}) {
    std::vector<std::atomic<int>> runs(size);
    pool.RunAll(CountingTasks(runs));
    for (size_t i = 0; i < size; ++i) EXPECT_EQ(runs[i].load(), 1) << size << " " << i;
  }
  EXPECT_LE(pool.threads(), 3u);
}

TEST(WorkerPoolTest, ASingleTaskRunsOnTheCaller) {
  WorkerPool pool(4);
  std::thread::id ran_on;
  const std::vector<std::function<void()>> one = {[&] { ran_on = std::this_thread::get_id(); }};
  pool.RunAll(one);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(pool.threads(), 0u);
}

TEST(WorkerPoolTest, WithoutThreadsTheCallerRunsTheWholeBatch) {
  WorkerPool pool(0);
  std::set<std::thread::id> threads;
  std::vector<std::function<void()>> tasks(5, [&] { threads.insert(std::this_thread::get_id()); });
  pool.RunAll(tasks);
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(WorkerPoolTest, TasksOfOneBatchRunInParallel) {
  // Each of 3 tasks waits until all 3 have started: it completes only when they run at once
  // (2 pool threads and the caller). Bounded: a task gives up after 2000 checks of 5 ms.
  WorkerPool pool(2);
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  std::vector<std::function<void()>> tasks(3, [&] {
    ++started;
    for (int i = 0; i < 2000 && started.load() < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (started.load() == 3) ++met;
  });
  pool.RunAll(tasks);
  EXPECT_EQ(met.load(), 3);
}

TEST(WorkerPoolTest, ManyCallersShareAPoolSmallerThanTheirBatches) {
  WorkerPool pool(2);
  constexpr int kCallers = 8;
  constexpr int kRounds = 200;
  std::atomic<int> bad{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<std::atomic<int>> runs(5);
        pool.RunAll(CountingTasks(runs));
        for (auto& r : runs) {
          if (r.load() != 1) ++bad;
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(pool.threads(), 2u);
}

TEST(WorkerPoolTest, AThrowingTaskDoesNotStopTheBatch) {
  WorkerPool pool(2);
  std::vector<std::atomic<int>> runs(4);
  std::vector<std::function<void()>> tasks = CountingTasks(runs);
  tasks.emplace_back([] { throw std::runtime_error("task failed"); });
  pool.RunAll(tasks);
  for (auto& r : runs) EXPECT_EQ(r.load(), 1);
}

}  // namespace
}  // namespace cachepawl
