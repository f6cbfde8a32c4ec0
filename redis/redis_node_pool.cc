// Connections to one Redis node and its back-off (redis/redis_node_pool.h).
#include "redis/redis_node_pool.h"

#include <algorithm>

namespace cachepawl {
namespace {

constexpr uint32_t kMaxBackoffDoublings = 3;  // down_backoff x1, x2, x4, then x8

uint64_t Load(const std::atomic<uint64_t>& counter) {
  return counter.load(std::memory_order_relaxed);
}

}  // namespace

RedisClusterStats RedisCounters::Snapshot() const {
  RedisClusterStats s;
  s.commands = Load(commands);
  s.round_trips = Load(round_trips);
  s.moved = Load(moved);
  s.ask = Load(ask);
  s.redirect_limit = Load(redirect_limit);
  s.slot_map_refreshes = Load(slot_map_refreshes);
  s.slot_map_refresh_failures = Load(slot_map_refresh_failures);
  s.unrouted = Load(unrouted);
  s.connects = Load(connects);
  s.connect_failures = Load(connect_failures);
  s.auth_failures = Load(auth_failures);
  s.timeouts = Load(timeouts);
  s.broken_connections = Load(broken_connections);
  s.server_errors = Load(server_errors);
  s.skipped_down = Load(skipped_down);
  s.invalid_commands = Load(invalid_commands);
  return s;
}

RedisNodePool::RedisNodePool(RedisNode node, const RedisClusterOptions& options,
                             RedisCounters* counters)
    : node_(std::move(node)), options_(options), counters_(counters) {}

RedisNodePool::~RedisNodePool() = default;

std::string RedisNodePool::BackoffReasonLocked(Clock::time_point now) const {
  if (now >= down_until_) return {};
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(down_until_ - now);
  std::string why = "redis ";
  why += node_.ToString();
  why += " is skipped for ";
  why += std::to_string(left.count());
  why += " ms more (down_backoff) after: ";
  why += down_reason_;
  return why;
}

std::string RedisNodePool::BackoffReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return BackoffReasonLocked(Clock::now());
}

StatusOr<std::unique_ptr<RedisConnection>> RedisNodePool::Acquire(Clock::time_point deadline,
                                                                  size_t commands) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const Clock::time_point now = Clock::now();
    std::string down = BackoffReasonLocked(now);
    if (!down.empty()) {
      RedisCounters::Add(counters_->skipped_down, commands);
      return Status::Unavailable(down);
    }
    if (now >= deadline) {
      return Status::TimedOut("redis " + node_.ToString() + ": the deadline passed while all " +
                              std::to_string(options_.connections_per_node) +
                              " connections were busy");
    }
    if (!idle_.empty()) {
      std::unique_ptr<RedisConnection> connection = std::move(idle_.back());
      idle_.pop_back();
      return connection;
    }
    if (open_ < options_.connections_per_node) break;
    freed_.wait_until(lock, deadline);
  }
  ++open_;
  lock.unlock();

  auto opened = RedisConnection::Open(node_, options_, deadline);

  lock.lock();
  if (opened.ok()) {
    down_streak_ = 0;
    RedisCounters::Add(counters_->connects, 1);
    return opened;
  }
  --open_;
  const Status& s = opened.status();
  if (s.IsUnavailable()) {
    RedisCounters::Add(counters_->connect_failures, 1);
    const uint32_t doublings = std::min(down_streak_, kMaxBackoffDoublings);
    down_until_ = Clock::now() + options_.down_backoff * (1u << doublings);
    ++down_streak_;
    down_reason_ = s.message();
  } else if (s.IsFailedPrecondition()) {
    RedisCounters::Add(counters_->auth_failures, 1);
  }
  lock.unlock();
  freed_.notify_all();  // waiters see the back-off, or the free place
  return opened;
}

void RedisNodePool::Release(std::unique_ptr<RedisConnection> connection, const Status& status) {
  std::vector<std::unique_ptr<RedisConnection>> dropped;  // closed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (connection->reusable()) {
      idle_.push_back(std::move(connection));
    } else {
      dropped.push_back(std::move(connection));
      --open_;
    }
    if (status.IsIOError()) {
      open_ -= static_cast<uint32_t>(idle_.size());
      for (auto& c : idle_) dropped.push_back(std::move(c));
      idle_.clear();
    }
  }
  freed_.notify_all();
}

}  // namespace cachepawl
