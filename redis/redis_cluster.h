// RedisCluster: the client the remote tier (tiers/remote_tier.h) talks to Redis through. It
// speaks to a Redis Cluster (or to one standalone server, which owns every slot) with hiredis
// (Debian's libhiredis 0.14, blocking sockets with timeouts):
//
//   - routing by hash slot: CRC16 of the key (of its {hash tag} when there is one) mod 16384,
//     against a slot map read with CLUSTER SLOTS from the first node that answers (a server
//     with cluster mode off, "ERR This instance has cluster support disabled", owns all slots);
//   - MOVED <slot> <host:port>: the command is re-sent there and the slot map is refreshed;
//     ASK <slot> <host:port>: re-sent there, after ASKING, without changing the map; at most
//     kRedisMaxRedirects redirections per command, then it fails (Unavailable);
//   - pipelining: a batch's commands are grouped by node and each group is written in one go
//     and its replies read in order (one round trip per node per batch); the groups of
//     different nodes run in parallel, each on a connection taken from that node's pool
//     (connections_per_node; a thread that finds them all busy waits for one, within the
//     batch's deadline);
//   - failures: a connection that timed out or broke is closed (never reused mid-reply) and a
//     new one is made on next use; a node that refuses connections (or does not accept one
//     within connect_timeout) fails its commands with Unavailable at once for `down_backoff`
//     (doubling up to 8x while it stays down), so a dead master costs one connect attempt per
//     back-off period, not a timeout per command;
//   - deadlines: no call blocks past its deadline by more than io_timeout (every read and write
//     on a socket waits at most min(io_timeout, time left), a connect at most
//     min(connect_timeout, time left)). Host names are resolved with getaddrinfo, which has no
//     timeout: seeds given as addresses avoid it.
//
// Writes go out with sendmsg(MSG_NOSIGNAL) straight from the caller's bytes (hiredis 0.14 writes
// with write(2), which raises SIGPIPE on a socket the server closed: that would kill an engine
// that does not ignore SIGPIPE); replies are parsed by hiredis' reader into RedisReply directly.
//
// What it is not: no retries of a write whose reply was lost (the caller's records are
// idempotent: a SET of the same key and bytes), no Pub/Sub, no transactions, no replicas (reads
// go to masters), no TLS (Debian 12's hiredis 0.14 has no TLS support: sites that need it run a
// TLS proxy on loopback). An ACL user needs +cluster|slots and +asking besides its commands.
//
// Thread safety: every method may be called from any thread; a batch's commands run on the
// calling thread and on threads of an internal pool (at most kRedisMaxWorkerThreads, started on
// demand and shared by all calls). No thread waits on I/O while holding a lock that a command
// for another node needs. No exceptions escape (out of memory becomes an Internal status).
// Destroying the RedisCluster while a call runs is a bug of the caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vocab/status.h"

namespace cachepawl {

inline constexpr int kRedisMaxRedirects = 5;
inline constexpr size_t kRedisMaxWorkerThreads = 16;

struct RedisClusterOptions {
  // Seed nodes: "redis://host:port[,host:port...]" (host: a name or an IPv4/IPv6 address,
  // IPv6 in brackets; port 1-65535). At least one. No credentials here (user, password).
  std::string seeds;
  std::string user;      // ACL user; empty: AUTH with the password only (or no AUTH)
  std::string password;  // empty: no AUTH (then `user` must be empty too)
  std::chrono::milliseconds connect_timeout{500};  // 1 ms .. 60 s
  std::chrono::milliseconds io_timeout{2000};      // one read or write; 1 ms .. 600 s
  std::chrono::milliseconds down_backoff{1000};    // a refusing node is skipped; 0 .. 600 s
  uint32_t connections_per_node = 4;               // 1..64

  // Each field in range, `seeds` parses. The error names the field and the value (never the
  // password).
  Status Validate() const;
};

// InvalidArgument "<user_field>: '<user>' (given without a password: AUTH needs both)" for a
// user without a password (the rule of RedisClusterOptions::user); the password is never shown.
[[nodiscard]] Status CheckRedisAuth(std::string_view user_field, std::string_view user,
                                    std::string_view password);

// One node address.
struct RedisNode {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const;  // "host:port" ("[v6]:port")
  friend bool operator==(const RedisNode&, const RedisNode&) = default;
};

// Parses RedisClusterOptions::seeds. InvalidArgument naming the part at fault. Duplicates are
// dropped.
StatusOr<std::vector<RedisNode>> ParseRedisSeeds(std::string_view seeds);

// The cluster hash slot of a key (CRC16/XMODEM of the key or of its first non-empty {tag}).
uint16_t RedisKeySlot(std::string_view key);

// One command: its arguments (binary safe) and the key that routes it (usually args[1]; a
// command without a key routes by the empty key, slot 0).
struct RedisCommand {
  std::vector<std::string_view> args;  // the bytes must outlive Run()
  std::string_view key;
  // The last `last_arg_pieces` entries of `args` are sent as one argument, their bytes back to
  // back: a value held in several buffers (a record's header block and its payload) goes out
  // without a copy. 0 or 1: every entry is an argument of its own. More than args.size(): the
  // command is invalid.
  size_t last_arg_pieces = 1;
  // Where a bulk-string reply of exactly reply_into.size() bytes goes (a GET into the caller's
  // memory): its bytes are copied there as they are parsed, and the reply is a kString with
  // `into` set and `str` empty. Any other reply (a bulk string of another length, nil, an error,
  // another type) arrives as without a destination and the span is not written; so a caller
  // that sees a kString without `into` finds the length that came in str.size(). Empty (the
  // default): every reply as usual. A redirected command (MOVED/ASK) writes into the same span
  // when its answer comes. The memory must stay valid and untouched by others during Run();
  // the destinations of a batch's commands must not overlap (they may be written from
  // different threads). A command whose reply failed (a Status) may have written part of it.
  std::span<std::byte> reply_into;
};

// A command's reply.
struct RedisReply {
  // kError only inside an array (a command's own error reply is a Status).
  enum class Type { kNil, kString, kInteger, kStatus, kArray, kError };
  Type type = Type::kNil;
  std::string str;      // kString (empty when `into`), kStatus, kError
  bool into = false;    // kString: the bytes are in the command's reply_into, all of it
  int64_t integer = 0;  // kInteger
  std::vector<RedisReply> elements;  // kArray
};

struct RedisClusterStats {
  uint64_t commands = 0;        // commands sent (redirected ones count again; ASKING does not)
  uint64_t round_trips = 0;     // pipelines written and read (one per node per batch)
  uint64_t moved = 0, ask = 0;  // redirections followed
  uint64_t redirect_limit = 0;  // commands failed: more than kRedisMaxRedirects redirections
  uint64_t slot_map_refreshes = 0;
  uint64_t slot_map_refresh_failures = 0;  // no node answered CLUSTER SLOTS usefully
  uint64_t unrouted = 0;  // commands failed: the slot map names no master for their slot
  uint64_t connects = 0, connect_failures = 0;
  uint64_t auth_failures = 0;       // AUTH refused (the connection is closed, the node not skipped)
  uint64_t timeouts = 0;            // commands failed by io_timeout or the deadline (reads, writes,
                                    // waits for a connection, deadlines already past)
  uint64_t broken_connections = 0;  // closed by the server, reset, or a protocol error
  uint64_t server_errors = 0;       // error replies other than MOVED/ASK
  uint64_t skipped_down = 0;        // commands failed at once: their node is in back-off
  uint64_t invalid_commands = 0;    // commands without arguments, or last_arg_pieces too large

  // Name and value of every counter, in declaration order.
  std::vector<std::pair<const char*, uint64_t>> Fields() const;
};

class RedisCluster {
 public:
  // Connects to the first seed that answers, authenticates, reads the slot map. Unavailable
  // when no seed answers (the message names each seed and why); FailedPrecondition when a
  // seed answered but refused (AUTH, NOAUTH, NOPERM: the message names the seed, and the user,
  // never the password); InvalidArgument for options.
  //
  // `allow_unreachable`: when no seed answers (Unavailable), the client is returned anyway,
  // without a slot map. Each Run then first tries to read one (a node in back-off is skipped at
  // once, so a dead cluster costs one connect attempt per back-off period), and its commands fail
  // Unavailable until a seed answers. Refusals (FailedPrecondition) and bad options still fail.
  static StatusOr<std::unique_ptr<RedisCluster>> Connect(const RedisClusterOptions& options,
                                                         bool allow_unreachable = false);
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // Runs `commands` (any mix of nodes) pipelined per node, nodes in parallel, following
  // redirections. Result i is command i's reply, or: the server's error reply as
  // FailedPrecondition ("ERR ..."), Unavailable (node down or in back-off, no master for the
  // slot, too many redirections), TimedOut (io_timeout or `deadline`), IOError (connection
  // broke), InvalidArgument (no arguments). Never throws; one command's failure does not fail
  // the others.
  std::vector<StatusOr<RedisReply>> Run(std::span<const RedisCommand> commands,
                                        std::chrono::steady_clock::time_point deadline);

  // Re-reads the slot map from a known master or seed (Run does it after MOVED).
  Status RefreshSlotMap();
  // The masters the slot map names now, sorted by address.
  std::vector<RedisNode> Masters() const;
  // The master the slot map names now for `slot` (< kRedisSlotCount); nullopt when none does
  // (no slot map yet, or the slot is not covered).
  std::optional<RedisNode> MasterOf(uint16_t slot) const;
  RedisClusterStats stats() const;

 private:
  class Impl;
  explicit RedisCluster(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cachepawl
