// TaskQueue: tasks run in the background by a fixed set of threads. With one thread (the
// default) tasks run one at a time in the order posted: a serial executor. The Store keeps four:
//
//   completion     (1 thread)  the bookkeeping of completed transfers: it waits for the store's
//                              mutex there, never on a device or disk mover's completion thread
//   disk submitter (1 thread)  disk writes and removals: checksums and catalog writes run
//                              there, never under the store's mutex
//   evictor        (1 thread)  evict-ahead passes
//   remote readers (RemoteOptions::reader_threads)  remote fetches of Load and StartPrefetch,
//                              several calls' fetches at once
//
// Post() never blocks on a task. The destructor runs every task already posted, then joins.
// Thread safety: Post may be called from any thread, including from a task.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cachepawl {

class TaskQueue {
 public:
  explicit TaskQueue(size_t threads = 1) {
    for (size_t i = 0; i < (threads == 0 ? 1 : threads); ++i) {
      threads_.emplace_back([this] { Loop(); });
    }
  }
  ~TaskQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  void Post(std::function<void()> task) {
    // Notify under the lock: the task may be the store's last operation, after which Close()
    // destroys this queue; the destructor takes mu_ first, so it cannot overtake notify_one.
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    cv_.notify_one();
  }

  size_t threads() const { return threads_.size(); }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_ and drained
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;         // set by the constructor; constant after
};

}  // namespace cachepawl
