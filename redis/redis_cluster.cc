// RedisCluster (redis/redis_cluster.h): the slot map, batches routed and pipelined per node,
// redirections, refreshes.
#include "redis/redis_cluster.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "redis/redis_connection.h"
#include "redis/redis_node_pool.h"
#include "redis/redis_slot_map.h"
#include "redis/worker_pool.h"

namespace cachepawl {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint16_t kNoOwner = 0xffff;

// Who serves each slot. Immutable once installed; replaced whole by a refresh.
struct SlotMap {
  std::vector<RedisNodePool*> masters;
  std::array<uint16_t, kRedisSlotCount> owner;  // index into masters, or kNoOwner

  RedisNodePool* Owner(uint16_t slot) const {
    const uint16_t i = owner[slot];
    return i == kNoOwner ? nullptr : masters[i];
  }
};

// One command's attempt in one round of a batch: where it goes and, after the round, what came
// back (a reply, or a status that is not OK).
struct Attempt {
  size_t index = 0;  // into the batch
  RedisNodePool* pool = nullptr;
  bool asking = false;
  int redirects = 0;
  std::optional<RedisReply> reply;
  Status status;
};

std::string NodePrefix(const RedisNode& node) {
  std::string out = "redis ";
  out += node.ToString();
  out += ": ";
  return out;
}

// A connection handed back to its pool however the scope ends.
class Lease {
 public:
  Lease(RedisNodePool& pool, std::unique_ptr<RedisConnection> connection)
      : pool_(pool), connection_(std::move(connection)) {}
  ~Lease() { pool_.Release(std::move(connection_), status_); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  RedisConnection& operator*() { return *connection_; }
  RedisConnection* operator->() { return connection_.get(); }
  void set_status(Status s) { status_ = std::move(s); }

 private:
  RedisNodePool& pool_;
  std::unique_ptr<RedisConnection> connection_;
  Status status_;
};

}  // namespace

class RedisCluster::Impl {
 public:
  Impl(const RedisClusterOptions& options, std::vector<RedisNode> seeds)
      : options_(options), seeds_(std::move(seeds)) {}

  // The first slot map, from the seeds only (Connect).
  Status Bootstrap() { return Refresh(std::nullopt, /*seeds_only=*/true); }
  // A new slot map from a master of the current one or a seed. `deadline`: the batch's
  // (after MOVED); none: each node tried gets connect_timeout + io_timeout.
  Status Refresh(std::optional<Clock::time_point> deadline, bool seeds_only);
  void Run(std::span<const RedisCommand> commands, Clock::time_point deadline,
           std::vector<StatusOr<RedisReply>>& results);
  std::vector<RedisNode> Masters() const;
  std::optional<RedisNode> MasterOf(uint16_t slot) const;
  RedisClusterStats stats() const { return counters_.Snapshot(); }

 private:
  RedisNodePool* PoolFor(const RedisNode& node);
  std::shared_ptr<const SlotMap> CurrentMap() const {
    std::lock_guard<std::mutex> lock(map_mu_);
    return map_;
  }
  StatusOr<std::shared_ptr<const SlotMap>> ReadSlotMap(RedisNodePool& pool,
                                                       Clock::time_point deadline);
  void RunGroup(RedisNodePool& pool, std::span<Attempt* const> group,
                std::span<const RedisCommand> commands, Clock::time_point deadline);
  void CountFailure(const Status& s, size_t commands);
  // One refresh after MOVED at a time: those that find one under way leave it to that one.
  void RefreshAfterMoved(Clock::time_point deadline);

  const RedisClusterOptions options_;
  const std::vector<RedisNode> seeds_;
  RedisCounters counters_;

  mutable std::mutex nodes_mu_;
  std::map<std::string, std::unique_ptr<RedisNodePool>> nodes_;  // never shrinks; guarded

  mutable std::mutex map_mu_;
  std::shared_ptr<const SlotMap> map_;  // guarded by map_mu_
  uint64_t map_ticket_ = 0;             // the installed map's refresh ticket; guarded by map_mu_
  std::atomic<uint64_t> next_ticket_{0};
  std::atomic<bool> refreshing_{false};

  WorkerPool workers_{kRedisMaxWorkerThreads};  // last: its threads stop first
};

RedisNodePool* RedisCluster::Impl::PoolFor(const RedisNode& node) {
  std::lock_guard<std::mutex> lock(nodes_mu_);
  std::unique_ptr<RedisNodePool>& pool = nodes_[node.ToString()];
  if (!pool) pool = std::make_unique<RedisNodePool>(node, options_, &counters_);
  return pool.get();
}

void RedisCluster::Impl::CountFailure(const Status& s, size_t commands) {
  if (s.IsTimedOut()) RedisCounters::Add(counters_.timeouts, commands);
  if (s.IsIOError()) RedisCounters::Add(counters_.broken_connections, 1);
  // Unavailable and FailedPrecondition (AUTH) from a pool were counted by the pool.
}

StatusOr<std::shared_ptr<const SlotMap>> RedisCluster::Impl::ReadSlotMap(
    RedisNodePool& pool, Clock::time_point deadline) {
  // Not a command: counts connections broken, not timeouts or skips.
  auto acquired = pool.Acquire(deadline, 0);
  if (!acquired.ok()) {
    CountFailure(acquired.status(), 0);
    return acquired.status();
  }
  Lease connection(pool, std::move(acquired).value());
  static constexpr std::array<std::string_view, 2> kArgs = {"CLUSTER", "SLOTS"};
  const RedisRequest request{kArgs, false};
  std::vector<RedisReply> replies;
  Status s = connection->Pipeline(std::span(&request, 1), deadline, &replies);
  connection.set_status(s);
  if (!s.ok()) {
    CountFailure(s, 0);
    return s;
  }
  auto map = std::make_shared<SlotMap>();
  map->owner.fill(kNoOwner);
  const RedisReply& reply = replies[0];
  if (reply.type == RedisReply::Type::kError) {
    if (!IsClusterDisabledError(reply.str)) {
      RedisCounters::Add(counters_.server_errors, 1);
      return Status::FailedPrecondition(NodePrefix(pool.node()) + "CLUSTER SLOTS: " + reply.str);
    }
    map->masters.push_back(&pool);  // a standalone server: every slot is its own
    map->owner.fill(0);
    return std::shared_ptr<const SlotMap>(std::move(map));
  }
  auto ranges = ParseClusterSlots(reply, pool.node());
  if (!ranges.ok()) return ranges.status().WithContext(NodePrefix(pool.node()) + "CLUSTER SLOTS");
  if (ranges->empty()) {
    return Status::Unavailable(NodePrefix(pool.node()) +
                               "CLUSTER SLOTS: no slot is served (is the cluster created?)");
  }
  for (const RedisSlotRange& range : *ranges) {
    RedisNodePool* master = PoolFor(range.master);
    auto it = std::find(map->masters.begin(), map->masters.end(), master);
    const auto index = static_cast<uint16_t>(it - map->masters.begin());
    if (it == map->masters.end()) map->masters.push_back(master);
    std::fill(map->owner.begin() + range.first, map->owner.begin() + range.last + 1, index);
  }
  return std::shared_ptr<const SlotMap>(std::move(map));
}

Status RedisCluster::Impl::Refresh(std::optional<Clock::time_point> deadline, bool seeds_only) {
  const uint64_t ticket = next_ticket_.fetch_add(1) + 1;
  std::vector<RedisNodePool*> candidates;
  if (!seeds_only) {
    if (auto map = CurrentMap()) candidates = map->masters;
  }
  for (const RedisNode& seed : seeds_) {
    RedisNodePool* pool = PoolFor(seed);
    if (std::find(candidates.begin(), candidates.end(), pool) == candidates.end()) {
      candidates.push_back(pool);
    }
  }
  std::string failures;
  std::optional<Status> refusal;  // a node that answered but refused (AUTH, NOAUTH, NOPERM)
  for (RedisNodePool* pool : candidates) {
    const Clock::time_point node_deadline =
        deadline.value_or(Clock::now() + options_.connect_timeout + options_.io_timeout);
    auto map = ReadSlotMap(*pool, node_deadline);
    if (map.ok()) {
      {
        std::lock_guard<std::mutex> lock(map_mu_);
        if (ticket > map_ticket_) {
          map_ = std::move(map).value();
          map_ticket_ = ticket;
        }
      }
      RedisCounters::Add(counters_.slot_map_refreshes, 1);
      return Status::OK();
    }
    if (!failures.empty()) failures += "; ";
    failures += map.status().message();
    if (map.status().IsFailedPrecondition() && !refusal) refusal = map.status();
    if (map.status().IsTimedOut() && deadline && Clock::now() >= *deadline) break;
  }
  RedisCounters::Add(counters_.slot_map_refresh_failures, 1);
  if (refusal) return *refusal;
  return Status::Unavailable(
      std::string(seeds_only ? "redis: no seed answered: " : "redis: no node gave a slot map: ") +
      failures);
}

void RedisCluster::Impl::RefreshAfterMoved(Clock::time_point deadline) {
  bool expected = false;
  if (!refreshing_.compare_exchange_strong(expected, true)) return;
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false); }
  } done{refreshing_};
  (void)Refresh(deadline, /*seeds_only=*/false);
}

void RedisCluster::Impl::RunGroup(RedisNodePool& pool, std::span<Attempt* const> group,
                                  std::span<const RedisCommand> commands,
                                  Clock::time_point deadline) {
  auto acquired = pool.Acquire(deadline, group.size());
  if (!acquired.ok()) {
    CountFailure(acquired.status(), group.size());
    for (Attempt* a : group) a->status = acquired.status();
    return;
  }
  Lease connection(pool, std::move(acquired).value());
  std::vector<RedisRequest> requests;
  requests.reserve(group.size());
  for (const Attempt* a : group) {
    const RedisCommand& command = commands[a->index];
    requests.push_back({command.args, a->asking, command.last_arg_pieces, command.reply_into});
  }
  std::vector<RedisReply> replies;
  Status s = connection->Pipeline(requests, deadline, &replies);
  connection.set_status(s);
  if (s.ok() || !connection->reusable()) {  // something was sent
    RedisCounters::Add(counters_.round_trips, 1);
    RedisCounters::Add(counters_.commands, group.size());
  }
  for (size_t i = 0; i < group.size(); ++i) {
    if (i < replies.size()) {
      group[i]->reply = std::move(replies[i]);
    } else {
      group[i]->status = s;
    }
  }
  if (!s.ok()) CountFailure(s, group.size() - replies.size());
}

void RedisCluster::Impl::Run(std::span<const RedisCommand> commands, Clock::time_point deadline,
                             std::vector<StatusOr<RedisReply>>& results) {
  std::shared_ptr<const SlotMap> map = CurrentMap();
  bool refreshed = false;
  std::vector<Attempt> pending;
  pending.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    const RedisCommand& command = commands[i];
    if (command.args.empty()) {
      RedisCounters::Add(counters_.invalid_commands, 1);
      results[i] = Status::InvalidArgument("redis command " + std::to_string(i) + ": no arguments");
      continue;
    }
    if (command.last_arg_pieces > command.args.size()) {
      RedisCounters::Add(counters_.invalid_commands, 1);
      results[i] =
          Status::InvalidArgument("redis command " + std::to_string(i) + ": last_arg_pieces " +
                                  std::to_string(command.last_arg_pieces) + " is more than its " +
                                  std::to_string(command.args.size()) + " arguments");
      continue;
    }
    const uint16_t slot = RedisKeySlot(command.key);
    RedisNodePool* pool = map ? map->Owner(slot) : nullptr;
    if (pool == nullptr && !refreshed) {  // a slot unknown to this map: ask once more
      refreshed = true;
      (void)Refresh(deadline, /*seeds_only=*/false);
      map = CurrentMap();
      pool = map ? map->Owner(slot) : nullptr;
    }
    if (pool == nullptr) {
      RedisCounters::Add(counters_.unrouted, 1);
      results[i] = Status::Unavailable("redis: no master serves slot " + std::to_string(slot) +
                                       " (command " + std::to_string(i) + ")");
      continue;
    }
    Attempt attempt;
    attempt.index = i;
    attempt.pool = pool;
    pending.push_back(std::move(attempt));
  }

  bool moved = false;
  while (!pending.empty()) {
    // Group by node, keeping the batch's order within each group.
    std::vector<RedisNodePool*> order;
    std::map<RedisNodePool*, std::vector<Attempt*>> groups;
    for (Attempt& a : pending) {
      std::vector<Attempt*>& group = groups[a.pool];
      if (group.empty()) order.push_back(a.pool);
      group.push_back(&a);
    }
    std::vector<std::function<void()>> tasks;
    tasks.reserve(order.size());
    for (RedisNodePool* pool : order) {
      const std::vector<Attempt*>& group = groups[pool];
      tasks.emplace_back([this, pool, &group, commands, deadline] {
        try {
          RunGroup(*pool, group, commands, deadline);
        } catch (const std::exception& e) {
          for (Attempt* a : group) {
            if (!a->reply && a->status.ok()) {
              a->status = Status::Internal(NodePrefix(pool->node()) + e.what());
            }
          }
        }
      });
    }
    workers_.RunAll(tasks);

    std::vector<Attempt> next;
    for (Attempt& a : pending) {
      const RedisNode& node = a.pool->node();
      if (!a.status.ok() || !a.reply) {
        results[a.index] =
            a.status.ok() ? Status::Internal(NodePrefix(node) + "no reply") : a.status;
        continue;
      }
      RedisReply& reply = *a.reply;
      if (reply.type != RedisReply::Type::kError) {
        results[a.index] = std::move(reply);
        continue;
      }
      const std::optional<RedisRedirect> redirect = ParseRedirect(reply.str, node);
      if (!redirect) {
        RedisCounters::Add(counters_.server_errors, 1);
        results[a.index] = Status::FailedPrecondition(NodePrefix(node) + reply.str);
        continue;
      }
      if (a.redirects >= kRedisMaxRedirects) {
        RedisCounters::Add(counters_.redirect_limit, 1);
        results[a.index] =
            Status::Unavailable(NodePrefix(node) + "more than " +
                                std::to_string(kRedisMaxRedirects) + " redirections for slot " +
                                std::to_string(redirect->slot) + ", the last: " + reply.str);
        continue;
      }
      RedisCounters::Add(redirect->ask ? counters_.ask : counters_.moved, 1);
      moved = moved || !redirect->ask;
      Attempt again;
      again.index = a.index;
      again.pool = PoolFor(redirect->target);
      again.asking = redirect->ask;
      again.redirects = a.redirects + 1;
      next.push_back(std::move(again));
    }
    pending = std::move(next);
  }
  if (moved) RefreshAfterMoved(deadline);
}

std::optional<RedisNode> RedisCluster::Impl::MasterOf(uint16_t slot) const {
  std::shared_ptr<const SlotMap> map = CurrentMap();
  if (map == nullptr || slot >= kRedisSlotCount) return std::nullopt;
  const RedisNodePool* pool = map->Owner(slot);
  if (pool == nullptr) return std::nullopt;
  return pool->node();
}

std::vector<RedisNode> RedisCluster::Impl::Masters() const {
  std::vector<RedisNode> masters;
  if (auto map = CurrentMap()) {
    for (const RedisNodePool* pool : map->masters) masters.push_back(pool->node());
  }
  std::sort(masters.begin(), masters.end(),
            [](const RedisNode& a, const RedisNode& b) { return a.ToString() < b.ToString(); });
  return masters;
}

// ---- RedisCluster ----

RedisCluster::RedisCluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisCluster::~RedisCluster() = default;

StatusOr<std::unique_ptr<RedisCluster>> RedisCluster::Connect(const RedisClusterOptions& options,
                                                              bool allow_unreachable) {
  try {
    CACHEPAWL_RETURN_IF_ERROR(options.Validate());
    CACHEPAWL_ASSIGN_OR_RETURN(std::vector<RedisNode> seeds, ParseRedisSeeds(options.seeds));
    auto impl = std::make_unique<Impl>(options, std::move(seeds));
    if (Status s = impl->Bootstrap(); !s.ok() && !(allow_unreachable && s.IsUnavailable())) {
      return s;
    }
    return std::unique_ptr<RedisCluster>(new RedisCluster(std::move(impl)));
  } catch (const std::exception& e) {
    return Status::Internal(std::string("redis: connect: ") + e.what());
  }
}

std::vector<StatusOr<RedisReply>> RedisCluster::Run(
    std::span<const RedisCommand> commands, std::chrono::steady_clock::time_point deadline) {
  std::vector<StatusOr<RedisReply>> results(
      commands.size(), StatusOr<RedisReply>(Status::Internal("redis: command not run")));
  try {
    impl_->Run(commands, deadline, results);
  } catch (const std::exception& e) {
    // Out of memory between rounds: what has no result yet fails. (Replies already moved into
    // `results` stay.)
    for (auto& r : results) {
      if (!r.ok() && r.status().IsInternal()) {
        r = Status::Internal(std::string("redis: ") + e.what());
      }
    }
  }
  return results;
}

Status RedisCluster::RefreshSlotMap() {
  try {
    return impl_->Refresh(std::nullopt, /*seeds_only=*/false);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("redis: refresh: ") + e.what());
  }
}

std::vector<RedisNode> RedisCluster::Masters() const {
  try {
    return impl_->Masters();
  } catch (const std::exception&) {
    return {};
  }
}

std::optional<RedisNode> RedisCluster::MasterOf(uint16_t slot) const {
  try {
    return impl_->MasterOf(slot);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

RedisClusterStats RedisCluster::stats() const { return impl_->stats(); }

}  // namespace cachepawl
