// The Redis Cluster slot space as the client sees it: parsing a CLUSTER SLOTS reply into slot
// ranges and their masters, and parsing MOVED / ASK error replies. (RedisKeySlot, the slot of a
// key, is declared in redis/redis_cluster.h and defined in redis_slot_map.cc.)
//
// Pure functions over values: thread-safe, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "redis/redis_cluster.h"
#include "vocab/status.h"

namespace cachepawl {

inline constexpr uint32_t kRedisSlotCount = 16384;

// Slots first..last (inclusive) served by `master`.
struct RedisSlotRange {
  uint16_t first = 0;
  uint16_t last = 0;
  RedisNode master;
};

// Parses a CLUSTER SLOTS reply. A master whose host is empty, nil or "?" (Redis 7: endpoint
// unknown) is taken to be on `queried`'s host, as the command's documentation says. Corruption
// naming the element at fault when the reply is not shaped as documented.
StatusOr<std::vector<RedisSlotRange>> ParseClusterSlots(const RedisReply& reply,
                                                        const RedisNode& queried);

// True for the error a server with cluster mode off gives to CLUSTER commands ("ERR This
// instance has cluster support disabled"): it owns every slot.
bool IsClusterDisabledError(std::string_view error);

// A MOVED or ASK error reply: "MOVED <slot> <host>:<port>" (host empty: `from`'s host).
struct RedisRedirect {
  bool ask = false;  // ASK: this command only, after ASKING; MOVED: the slot moved
  uint16_t slot = 0;
  RedisNode target;
};
std::optional<RedisRedirect> ParseRedirect(std::string_view error, const RedisNode& from);

}  // namespace cachepawl
