// RawRedis (tools/bench/bench_remote_raw.h): plain hiredis, the peer of `cachepawl bench remote`.
#include "tools/bench/bench_remote_raw.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "redis/redis_slot_map.h"

namespace cachepawl::tools {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;

timeval ToTimeval(std::chrono::milliseconds ms) {
  return {static_cast<time_t>(ms.count() / 1000),
          static_cast<suseconds_t>(ms.count() % 1000 * 1000)};
}

StatusOr<Context> Open(const RedisNode& node, const RedisClusterOptions& o) {
  Context c(redisConnectWithTimeout(node.host.c_str(), node.port, ToTimeval(o.connect_timeout)));
  if (c == nullptr || c->err != 0) {
    return Status::Unavailable("raw: " + node.ToString() + ": " +
                               (c ? std::string(c->errstr) : std::string("out of memory")));
  }
  if (redisSetTimeout(c.get(), ToTimeval(o.io_timeout)) != REDIS_OK) {
    return Status::IOError("raw: " + node.ToString() + ": cannot set the timeout");
  }
  if (!o.password.empty()) {
    Reply r(static_cast<redisReply*>(
        o.user.empty() ? redisCommand(c.get(), "AUTH %b", o.password.data(), o.password.size())
                       : redisCommand(c.get(), "AUTH %b %b", o.user.data(), o.user.size(),
                                      o.password.data(), o.password.size())));
    if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
      return Status::FailedPrecondition("raw: " + node.ToString() + ": AUTH refused");
    }
  }
  return c;
}

}  // namespace

struct RawRedis::Impl {
  RedisClusterOptions options;
  std::vector<RedisNode> masters;
  std::array<uint16_t, kRedisSlotCount> owner{};  // slot -> index into masters
  std::vector<std::vector<Context>> conns;        // [thread][master]

  // Pipelines argv lists per node; `check(i, reply)` judges command i's reply. Failures counted.
  template <typename Check>
  uint64_t Run(size_t thread, const std::vector<std::vector<std::string_view>>& commands,
               std::span<const std::string> keys, Check check) {
    std::map<size_t, std::vector<size_t>> by_node;
    for (size_t i = 0; i < commands.size(); ++i) {
      by_node[owner[RedisKeySlot(keys[i])]].push_back(i);
    }
    // Every node's requests are sent before any reply is read, so the nodes work at once.
    uint64_t failed = 0;
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& [node, list] : by_node) {
      redisContext* c = conns[thread][node].get();
      for (size_t i : list) {
        argv.clear();
        lens.clear();
        for (std::string_view a : commands[i]) {
          argv.push_back(a.data());
          lens.push_back(a.size());
        }
        if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
            REDIS_OK) {
          ++failed;
        }
      }
      for (int done = 0; done == 0;) {
        if (redisBufferWrite(c, &done) != REDIS_OK) break;  // the reads below fail then
      }
    }
    for (const auto& [node, list] : by_node) {
      redisContext* c = conns[thread][node].get();
      for (size_t i : list) {
        void* raw = nullptr;
        if (redisGetReply(c, &raw) != REDIS_OK) {
          failed += 1;
          continue;
        }
        Reply r(static_cast<redisReply*>(raw));
        if (!check(i, *r)) ++failed;
      }
    }
    return failed;
  }
};

RawRedis::RawRedis(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RawRedis::~RawRedis() = default;

StatusOr<std::unique_ptr<RawRedis>> RawRedis::Connect(const RedisClusterOptions& options,
                                                      size_t threads) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  // The cluster's layout as the library's client reads it (CLUSTER SLOTS; a server with cluster
  // mode off holds every slot); only the data path below is plain hiredis.
  CACHEPAWL_ASSIGN_OR_RETURN(std::unique_ptr<RedisCluster> cluster, RedisCluster::Connect(options));
  impl->masters = cluster->Masters();
  for (uint32_t slot = 0; slot < kRedisSlotCount; ++slot) {
    const std::optional<RedisNode> master = cluster->MasterOf(static_cast<uint16_t>(slot));
    const auto it = master.has_value()
                        ? std::find(impl->masters.begin(), impl->masters.end(), *master)
                        : impl->masters.end();
    if (it == impl->masters.end()) {
      return Status::Unavailable("raw: slot " + std::to_string(slot) +
                                 " has no master in the cluster's slot map");
    }
    impl->owner[slot] = static_cast<uint16_t>(it - impl->masters.begin());
  }
  impl->conns.resize(threads);
  for (size_t t = 0; t < threads; ++t) {
    for (const RedisNode& m : impl->masters) {
      CACHEPAWL_ASSIGN_OR_RETURN(auto c, Open(m, options));
      impl->conns[t].push_back(std::move(c));
    }
  }
  return std::unique_ptr<RawRedis>(new RawRedis(std::move(impl)));
}

uint64_t RawRedis::Set(size_t thread, std::span<const std::string> keys,
                       std::span<const std::vector<std::byte>> values) {
  std::vector<std::vector<std::string_view>> commands;
  for (size_t i = 0; i < keys.size(); ++i) {
    commands.push_back(
        {"SET", keys[i], {reinterpret_cast<const char*>(values[i].data()), values[i].size()}});
  }
  return impl_->Run(thread, commands, keys,
                    [](size_t, const redisReply& r) { return r.type == REDIS_REPLY_STATUS; });
}

uint64_t RawRedis::Get(size_t thread, std::span<const std::string> keys, uint64_t bytes) {
  std::vector<std::vector<std::string_view>> commands;
  for (const std::string& k : keys) commands.push_back({"GET", k});
  return impl_->Run(thread, commands, keys, [bytes](size_t, const redisReply& r) {
    return r.type == REDIS_REPLY_STRING && r.len == bytes;
  });
}

uint64_t RawRedis::Delete(std::span<const std::string> keys) {
  std::vector<std::vector<std::string_view>> commands;
  for (const std::string& k : keys) commands.push_back({"DEL", k});
  return impl_->Run(0, commands, keys,
                    [](size_t, const redisReply& r) { return r.type == REDIS_REPLY_INTEGER; });
}

}  // namespace cachepawl::tools
