// RedisNodePool: the connections RedisCluster (redis/redis_cluster.h) keeps to one node, and
// that node's back-off state; RedisCounters: the cluster's counters, shared by its pools.
//
//   - Acquire hands out an idle connection, or opens a new one while fewer than
//     connections_per_node exist, or waits (within the deadline) for one to come back;
//   - a connect that fails (refused, timed out, unknown host) puts the node in back-off:
//     down_backoff, doubled after each further failure up to 8x, reset by a connect that
//     succeeds. While in back-off, Acquire fails with Unavailable at once;
//   - Release takes a connection back; a broken one is destroyed (and, when it broke rather
//     than timed out, the idle ones with it: the node probably restarted).
//
// Thread safety: all methods may be called from any thread. The pool's mutex is never held
// while connecting or doing I/O. Connections handed out belong to the caller until Release.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "redis/redis_cluster.h"
#include "redis/redis_connection.h"

namespace cachepawl {

// RedisClusterStats as atomics (relaxed: they are counters, not synchronization).
struct RedisCounters {
  std::atomic<uint64_t> commands{0}, round_trips{0}, moved{0}, ask{0}, redirect_limit{0};
  std::atomic<uint64_t> slot_map_refreshes{0}, slot_map_refresh_failures{0}, unrouted{0};
  std::atomic<uint64_t> connects{0}, connect_failures{0}, auth_failures{0}, timeouts{0};
  std::atomic<uint64_t> broken_connections{0}, server_errors{0}, skipped_down{0};
  std::atomic<uint64_t> invalid_commands{0};

  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  RedisClusterStats Snapshot() const;
};

class RedisNodePool {
 public:
  using Clock = std::chrono::steady_clock;

  // `options` and `counters` must outlive the pool.
  RedisNodePool(RedisNode node, const RedisClusterOptions& options, RedisCounters* counters);
  ~RedisNodePool();
  RedisNodePool(const RedisNodePool&) = delete;
  RedisNodePool& operator=(const RedisNodePool&) = delete;

  // A connection for `commands` commands (the count feeds skipped_down). Unavailable: the
  // node is in back-off, or this connect failed (the node now is); TimedOut: none came free
  // before the deadline, or AUTH's reply did not come in time; IOError: the connection broke
  // during AUTH; FailedPrecondition: AUTH refused; Internal: no memory. Counts connects,
  // connect_failures, auth_failures and skipped_down; the caller counts the rest.
  StatusOr<std::unique_ptr<RedisConnection>> Acquire(Clock::time_point deadline, size_t commands);
  // Takes a connection back: kept for reuse when it is (RedisConnection::reusable), else
  // destroyed. `status` is what its last Pipeline returned: an IOError also drops the idle
  // connections (the node probably restarted: they are dead too).
  void Release(std::unique_ptr<RedisConnection> connection, const Status& status);

  const RedisNode& node() const { return node_; }
  // Empty when the node is not in back-off; else why it is ("connect: Connection refused,
  // retried in 800 ms").
  std::string BackoffReason() const;

 private:
  std::string BackoffReasonLocked(Clock::time_point now) const;

  const RedisNode node_;
  const RedisClusterOptions& options_;
  RedisCounters* const counters_;

  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;  // guarded by mu_
  uint32_t open_ = 0;               // idle + handed out + being opened; guarded by mu_
  Clock::time_point down_until_{};  // guarded by mu_
  uint32_t down_streak_ = 0;        // failed connects in a row; guarded by mu_
  std::string down_reason_;         // the last connect failure; guarded by mu_
};

}  // namespace cachepawl
