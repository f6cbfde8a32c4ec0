// RwLock: a reader-writer lock under which a waiting writer goes before readers that arrive
// after it. glibc's default rwlock (and so std::shared_mutex on Linux) prefers readers: a steady
// stream of Match calls from engine threads could hold off InsertKv, SetLocation and the
// transfer completions that update locations for as long as the stream lasts (docs/PERFORMANCE.md,
// Index: a test of matching threads beside one writer, with either lock).
//
// Meets the SharedMutex requirements (std::unique_lock, std::shared_lock). Not recursive: a
// thread holding it shared must not take it shared again (with a writer waiting in between, the
// second acquisition waits for the writer, which waits for the first). Thread-safe.
#pragma once

#include <pthread.h>

#include <cstdio>
#include <cstdlib>

namespace cachepawl::index_internal {

class RwLock {
 public:
  RwLock() {
    pthread_rwlockattr_t attr;
    Check(pthread_rwlockattr_init(&attr), "pthread_rwlockattr_init");
    Check(pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP),
          "pthread_rwlockattr_setkind_np");
    Check(pthread_rwlock_init(&lock_, &attr), "pthread_rwlock_init");
    pthread_rwlockattr_destroy(&attr);
  }
  ~RwLock() { pthread_rwlock_destroy(&lock_); }
  RwLock(const RwLock&) = delete;
  RwLock& operator=(const RwLock&) = delete;

  void lock() { Check(pthread_rwlock_wrlock(&lock_), "pthread_rwlock_wrlock"); }
  bool try_lock() { return pthread_rwlock_trywrlock(&lock_) == 0; }
  void unlock() { Check(pthread_rwlock_unlock(&lock_), "pthread_rwlock_unlock"); }
  void lock_shared() { Check(pthread_rwlock_rdlock(&lock_), "pthread_rwlock_rdlock"); }
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&lock_) == 0; }
  void unlock_shared() { Check(pthread_rwlock_unlock(&lock_), "pthread_rwlock_unlock"); }

 private:
  // These fail only on misuse (a lock not held, a deadlock detected, too many readers): a bug,
  // not an input error, and continuing would corrupt the index.
  static void Check(int err, const char* what) {
    if (err != 0) {
      std::fprintf(stderr, "cachepawl: %s failed with error %d\n", what, err);
      std::abort();
    }
  }

  pthread_rwlock_t lock_;
};

}  // namespace cachepawl::index_internal
