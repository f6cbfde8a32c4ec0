// CompletionWorker: a one-thread task queue. The Store runs the bookkeeping of completed
// transfers on one (it waits for the store's mutex there, never on a device mover's or disk mover's
// completion thread, where a small Save's finish only try-locks it), submits disk writes on
// another (their checksums run there, never under the store's mutex), and evicts ahead on a
// third.
//
// Post() never blocks on the task. The destructor runs every task already posted, then joins.
// Thread safety: Post may be called from any thread, including from a task.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace cachepawl {

class CompletionWorker {
 public:
  CompletionWorker() : thread_([this] { Loop(); }) {}
  ~CompletionWorker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  CompletionWorker(const CompletionWorker&) = delete;
  CompletionWorker& operator=(const CompletionWorker&) = delete;

  void Post(std::function<void()> task) {
    // Notify under the lock: the task may be the store's last operation, after which Close()
    // destroys this worker; the destructor takes mu_ first, so it cannot overtake notify_one.
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    cv_.notify_one();
  }

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
  std::thread thread_;
};

}  // namespace cachepawl
