// A bounded pool whose callers take part in their own batches (redis/worker_pool.h).
#include "redis/worker_pool.h"

#include <atomic>
#include <system_error>

namespace cachepawl {

// A batch as its helpers see it. `tasks` is only read for indices below its size while the
// caller waits in RunAll, so a helper that dequeues the batch after it completed touches
// nothing but the counters.
struct WorkerPool::Batch {
  std::span<const std::function<void()>> tasks;
  std::atomic<size_t> next{0};  // the next task to claim
  std::mutex mu;
  std::condition_variable done_cv;
  size_t done = 0;  // guarded by mu
};

WorkerPool::WorkerPool(size_t max_threads) : max_threads_(max_threads) {}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

size_t WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

void WorkerPool::Work(Batch& batch) {
  const size_t count = batch.tasks.size();
  for (;;) {
    const size_t i = batch.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= count) return;
    try {
      batch.tasks[i]();
    } catch (...) {
    }
    std::lock_guard<std::mutex> lock(batch.mu);
    if (++batch.done == count) batch.done_cv.notify_all();
  }
}

void WorkerPool::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    --idle_;
    if (stop_) return;
    std::shared_ptr<Batch> batch = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Work(*batch);
    batch.reset();
    lock.lock();
  }
}

void WorkerPool::RunAll(std::span<const std::function<void()>> tasks) {
  if (tasks.empty()) return;
  std::shared_ptr<Batch> batch;
  if (tasks.size() > 1 && max_threads_ > 0) {
    try {
      batch = std::make_shared<Batch>();
      batch->tasks = tasks;
      std::unique_lock<std::mutex> lock(mu_);
      const size_t helpers = tasks.size() - 1;
      for (size_t i = 0; i < helpers; ++i) queue_.push_back(batch);
      // Start threads for the entries no idle thread will take (bounded by max_threads).
      size_t waiting = queue_.size();
      size_t takers = idle_;
      while (waiting > takers && threads_.size() < max_threads_) {
        threads_.emplace_back([this] { Loop(); });
        ++takers;
      }
      lock.unlock();
      wake_.notify_all();
    } catch (...) {
      // No memory or no thread: whatever was queued is claimed below by this thread anyway.
    }
  }
  if (!batch) {
    for (const auto& task : tasks) {
      try {
        task();
      } catch (...) {
      }
    }
    return;
  }
  Work(*batch);
  std::unique_lock<std::mutex> lock(batch->mu);
  batch->done_cv.wait(lock, [&] { return batch->done == tasks.size(); });
}

}  // namespace cachepawl
