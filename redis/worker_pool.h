// WorkerPool: runs the tasks of a batch in parallel on a bounded set of threads, with the calling
// thread taking part. RedisCluster (redis/redis_cluster.h) runs one batch's node groups on it.
//
// RunAll(tasks) offers the batch to the pool's threads and runs tasks on the calling thread too:
// each task runs exactly once, on whichever thread claims it first, and RunAll returns when all
// have finished. Because the caller claims every task no pool thread has taken, a batch never
// waits for a pool thread to come free: when all are busy (other callers' batches) or none can
// be started, the caller runs its whole batch itself. Threads start on demand, at most
// `max_threads`, and stay until the pool is destroyed.
//
// Tasks must not throw (an exception is caught and dropped, so the batch still completes).
// Thread safety: RunAll may be called from any number of threads at once, but not from a task.
// The destructor must not run while a RunAll does.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace cachepawl {

class WorkerPool {
 public:
  explicit WorkerPool(size_t max_threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void RunAll(std::span<const std::function<void()>> tasks);

  // Threads started so far (at most max_threads).
  size_t threads() const;

 private:
  struct Batch;
  void Loop();
  static void Work(Batch& batch);

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Batch>> queue_;  // one entry per helper a batch may use; guarded
  std::vector<std::thread> threads_;          // guarded by mu_
  size_t idle_ = 0;                           // threads waiting for work; guarded by mu_
  bool stop_ = false;                         // guarded by mu_
};

}  // namespace cachepawl
