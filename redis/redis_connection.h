// RedisConnection: one TCP connection to one Redis node, for RedisCluster
// (redis/redis_cluster.h). hiredis 0.14 makes the connection (redisConnectWithTimeout) and
// parses replies (its reader, with object functions that build RedisReply directly: one copy of
// a value, from the socket buffer into the reply). Requests are encoded here and sent with
// sendmsg(MSG_NOSIGNAL) from the caller's bytes: no copy of large arguments and no SIGPIPE.
//
// The socket is blocking with SO_RCVTIMEO/SO_SNDTIMEO set to min(io_timeout, time left to the
// deadline) before each read or write, so no call blocks past its deadline by more than
// io_timeout, and never longer than the deadline while io_timeout is the longer of the two.
// The socket is close-on-exec (an engine that starts a child does not hand it our sockets).
//
// After a Pipeline that failed once it had begun to send, the connection is in an unknown place
// of the reply stream and must be destroyed (reusable() says so). Thread safety: none; one thread
// at a time (the pool in redis/redis_node_pool.h hands a connection to one thread).
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis/redis_cluster.h"
#include "vocab/status.h"

struct redisContext;

namespace cachepawl {

// One command to send: its arguments, and whether ASKING goes first (an ASK redirection).
// `last_arg_pieces` and `reply_into` as in RedisCommand (last_arg_pieces at most args.size(),
// checked by the caller; reply_into applies to the command's reply, never to ASKING's).
struct RedisRequest {
  std::span<const std::string_view> args;
  bool asking = false;
  size_t last_arg_pieces = 1;
  std::span<std::byte> reply_into;
};

class RedisConnection {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects within min(options.connect_timeout, time left), then sends AUTH when
  // options.password is set. Unavailable: no connection (refused, connect_timeout ran out,
  // unknown host); TimedOut: the deadline came first; FailedPrecondition: AUTH refused (the
  // message names the node and the user, never the password); TimedOut or IOError: AUTH's
  // reply did not come.
  static StatusOr<std::unique_ptr<RedisConnection>> Open(const RedisNode& node,
                                                         const RedisClusterOptions& options,
                                                         Clock::time_point deadline);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Writes every request, then reads one reply per request, in order, into `replies` (cleared
  // first). An error reply is a reply of type kError; for an ASKING request whose ASKING was
  // refused, that refusal is the reply. OK when every reply arrived; otherwise TimedOut or
  // IOError naming the node, `replies` holds those that arrived, and the connection is broken.
  Status Pipeline(std::span<const RedisRequest> requests, Clock::time_point deadline,
                  std::vector<RedisReply>* replies);

  const RedisNode& node() const { return node_; }
  // False once a Pipeline failed after it began to send: the reply stream is out of step.
  // (A Pipeline that found no time left before its first byte leaves the connection reusable.)
  bool reusable() const { return reusable_; }

 private:
  RedisConnection(RedisNode node, redisContext* context, std::chrono::milliseconds io_timeout);

  // Sets the socket's timeouts for the next read or write; TimedOut when the deadline passed.
  Status ArmTimeout(Clock::time_point deadline, const char* what);
  Status Write(std::span<const RedisRequest> requests, Clock::time_point deadline);
  // Reads one reply; a top-level bulk string of exactly into.size() bytes goes into `into`.
  Status ReadReply(Clock::time_point deadline, std::span<std::byte> into, RedisReply* reply);
  Status Failure(Status::Code code, std::string_view what);
  // A failed send or recv: TimedOut for the socket's timeout, else IOError with errno.
  Status SocketFailure(int err, const char* op);

  RedisNode node_;
  redisContext* context_;
  std::chrono::milliseconds io_timeout_;
  std::chrono::microseconds armed_{-1};  // the socket's timeout now (-1: not set yet)
  bool deadline_bound_ = false;          // the armed timeout is the deadline's, not io_timeout
  bool reusable_ = true;
  std::string scratch_;  // encoded headers and small arguments
  std::unique_ptr<char[]> read_buffer_;
  // The destination of the reply being read (ReadReply sets it; the reader's object functions
  // reach it through the reader's privdata).
  std::span<std::byte> reply_into_;
};

}  // namespace cachepawl
