// RawRedis: the peer of `cachepawl bench remote` (tools/bench/cmd_bench_remote.cc): plain hiredis,
// one value per record, pipelined per node (every node's requests sent before any reply is
// read, so the nodes work at once), routed by the cluster's slot map (CLUSTER SLOTS; a
// server with cluster mode off holds every slot). Nothing is checked beyond the reply's type and
// length, nothing copied out of hiredis' reply: what Redis and the socket give at best.
//
// Thread safety: thread `t` (0..threads-1) uses its own connections; calls for different `t`
// may run concurrently, calls for one `t` may not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "redis/redis_cluster.h"
#include "vocab/status.h"

namespace cachepawl::tools {

class RawRedis {
 public:
  // Reads the slot map from the first seed that answers and connects `threads` x masters.
  static StatusOr<std::unique_ptr<RawRedis>> Connect(const RedisClusterOptions& options,
                                                     size_t threads);
  ~RawRedis();
  RawRedis(const RawRedis&) = delete;
  RawRedis& operator=(const RawRedis&) = delete;

  // SET keys[i] values[i], pipelined per node. Returns how many failed.
  uint64_t Set(size_t thread, std::span<const std::string> keys,
               std::span<const std::vector<std::byte>> values);
  // GET keys, pipelined per node; a reply that is not a string of `bytes` bytes fails. Returns
  // how many failed.
  uint64_t Get(size_t thread, std::span<const std::string> keys, uint64_t bytes);
  // DEL keys (on thread 0's connections). Returns how many failed.
  uint64_t Delete(std::span<const std::string> keys);

 private:
  struct Impl;
  explicit RawRedis(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cachepawl::tools
