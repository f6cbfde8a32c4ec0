// One Redis connection: connect and AUTH, pipelined writes with sendmsg, replies through
// hiredis' reader (redis/redis_connection.h).
#include "redis/redis_connection.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace cachepawl {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr size_t kReadBufferBytes = 64 << 10;
// Arguments up to this size are copied next to their headers; larger ones are sent from the
// caller's memory.
constexpr size_t kInlineArgumentBytes = 2048;
constexpr std::string_view kAsking = "*1\r\n$6\r\nASKING\r\n";

// ---- hiredis reader object functions: replies are built as RedisReply directly. hiredis
// hands the root object back from redisReaderGetReply and frees only the root (freeObject) when
// a reply is abandoned; elements live inside their parent's `elements`. Nothing may throw
// through hiredis' C frames: a failed allocation returns nullptr, which hiredis reports as an
// out-of-memory reader error.

RedisReply* PlaceReply(const redisReadTask* task) noexcept {
  if (task->parent == nullptr) return new (std::nothrow) RedisReply();
  auto* parent = static_cast<RedisReply*>(task->parent->obj);
  if (task->idx < 0 || static_cast<size_t>(task->idx) >= parent->elements.size()) return nullptr;
  return &parent->elements[static_cast<size_t>(task->idx)];
}

void DropIfRoot(const redisReadTask* task, RedisReply* reply) noexcept {
  if (task->parent == nullptr) delete reply;
}

// The reader's privdata points at the connection's reply_into_: a top-level bulk string of
// exactly its size is copied there while it is still hot in cache (no std::string).
void* CreateString(const redisReadTask* task, char* str, size_t len) {
  RedisReply* reply = PlaceReply(task);
  if (reply == nullptr) return nullptr;
  const auto* into = static_cast<const std::span<std::byte>*>(task->privdata);
  if (task->parent == nullptr && task->type == REDIS_REPLY_STRING && into != nullptr &&
      !into->empty() && into->size() == len) {
    std::memcpy(into->data(), str, len);
    reply->type = RedisReply::Type::kString;
    reply->into = true;
    return reply;
  }
  try {
    reply->str.assign(str, len);
  } catch (...) {
    DropIfRoot(task, reply);
    return nullptr;
  }
  reply->type = task->type == REDIS_REPLY_ERROR    ? RedisReply::Type::kError
                : task->type == REDIS_REPLY_STATUS ? RedisReply::Type::kStatus
                                                   : RedisReply::Type::kString;
  return reply;
}

void* CreateArray(const redisReadTask* task, int elements) {
  RedisReply* reply = PlaceReply(task);
  if (reply == nullptr) return nullptr;
  try {
    reply->elements.resize(static_cast<size_t>(std::max(elements, 0)));
  } catch (...) {
    DropIfRoot(task, reply);
    return nullptr;
  }
  reply->type = RedisReply::Type::kArray;
  return reply;
}

void* CreateInteger(const redisReadTask* task, long long value) {
  RedisReply* reply = PlaceReply(task);
  if (reply == nullptr) return nullptr;
  reply->type = RedisReply::Type::kInteger;
  reply->integer = value;
  return reply;
}

void* CreateNil(const redisReadTask* task) {
  RedisReply* reply = PlaceReply(task);
  if (reply == nullptr) return nullptr;
  reply->type = RedisReply::Type::kNil;
  return reply;
}

void FreeReply(void* reply) { delete static_cast<RedisReply*>(reply); }

redisReplyObjectFunctions kReplyFunctions = {CreateString, CreateArray, CreateInteger, CreateNil,
                                             FreeReply};

void AppendDecimal(std::string* out, size_t value) { *out += std::to_string(value); }

std::string Prefix(const RedisNode& node) {
  std::string out = "redis ";
  out += node.ToString();
  out += ": ";
  return out;
}

timeval ToTimeval(microseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(t.count() % 1'000'000);
  return tv;
}

// Time left to `deadline`, capped at `cap`, at least 1 us (a zero socket timeout means never).
microseconds Budget(RedisConnection::Clock::time_point deadline, microseconds cap,
                    bool* deadline_bound) {
  const auto left = std::chrono::ceil<microseconds>(deadline - RedisConnection::Clock::now());
  *deadline_bound = left < cap;
  return std::max(std::min(left, cap), microseconds(1));
}

}  // namespace

StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Open(const RedisNode& node,
                                                                 const RedisClusterOptions& options,
                                                                 Clock::time_point deadline) {
  if (Clock::now() >= deadline) {
    return Status::TimedOut(Prefix(node) + "the deadline passed before connecting");
  }
  bool deadline_bound = false;
  const microseconds budget = Budget(deadline, options.connect_timeout, &deadline_bound);
  redisContext* context = redisConnectWithTimeout(node.host.c_str(), node.port, ToTimeval(budget));
  if (context == nullptr) return Status::Internal(Prefix(node) + "out of memory (hiredis)");
  if (context->err != 0) {
    std::string msg = Prefix(node) + "connect: ";
    msg += context->errstr;
    redisFree(context);
    if (deadline_bound && Clock::now() >= deadline) {
      // Cut short by the caller's deadline: says nothing about the node.
      return Status::TimedOut(msg + " (the deadline passed)");
    }
    if (!deadline_bound) {
      msg += " (connect_timeout ";
      msg += std::to_string(options.connect_timeout.count());
      msg += " ms)";
    }
    return Status::Unavailable(msg);
  }
  (void)fcntl(context->fd, F_SETFD, FD_CLOEXEC);
  (void)redisEnableKeepAlive(context);
  context->reader->fn = &kReplyFunctions;
  std::unique_ptr<RedisConnection> connection;
  try {
    connection.reset(new RedisConnection(node, context, options.io_timeout));
  } catch (...) {
    redisFree(context);
    return Status::Internal(Prefix(node) + "out of memory");
  }
  context->reader->privdata = &connection->reply_into_;
  if (options.password.empty()) return connection;

  std::vector<std::string_view> auth = {"AUTH"};
  if (!options.user.empty()) auth.push_back(options.user);
  auth.push_back(options.password);
  const RedisRequest request{auth, false};
  std::vector<RedisReply> replies;
  Status s = connection->Pipeline(std::span(&request, 1), deadline, &replies);
  if (!s.ok()) return s.WithContext("AUTH");
  if (replies[0].type == RedisReply::Type::kError) {
    std::string msg = Prefix(node) + "AUTH as ";
    msg += options.user.empty() ? std::string("the default user") : "user '" + options.user + "'";
    msg += " refused: ";
    msg += replies[0].str;
    return Status::FailedPrecondition(msg);
  }
  return connection;
}

RedisConnection::RedisConnection(RedisNode node, redisContext* context,
                                 std::chrono::milliseconds io_timeout)
    : node_(std::move(node)),
      context_(context),
      io_timeout_(io_timeout),
      read_buffer_(new char[kReadBufferBytes]) {}

RedisConnection::~RedisConnection() { redisFree(context_); }

Status RedisConnection::Failure(Status::Code code, std::string_view what) {
  std::string msg = Prefix(node_);
  msg.append(what);
  if (code == Status::Code::kTimedOut) {
    if (deadline_bound_) {
      msg += " (the deadline passed)";
    } else {
      msg += " (io_timeout ";
      msg += std::to_string(io_timeout_.count());
      msg += " ms)";
    }
    return Status::TimedOut(msg);
  }
  return Status::IOError(msg);
}

Status RedisConnection::SocketFailure(int err, const char* op) {
  if (err == EAGAIN || err == EWOULDBLOCK) {  // SO_RCVTIMEO / SO_SNDTIMEO ran out
    return Failure(Status::Code::kTimedOut, std::string(op) + " timed out");
  }
  return Status::FromErrno(Prefix(node_) + op, err);
}

Status RedisConnection::ArmTimeout(Clock::time_point deadline, const char* what) {
  if (Clock::now() >= deadline) {
    deadline_bound_ = true;
    return Failure(Status::Code::kTimedOut, std::string("no time left for the ") + what);
  }
  const microseconds t = Budget(deadline, io_timeout_, &deadline_bound_);
  if (t == armed_) return Status::OK();
  const timeval tv = ToTimeval(t);
  if (setsockopt(context_->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(context_->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return Status::FromErrno(Prefix(node_) + "setsockopt(SO_RCVTIMEO/SO_SNDTIMEO)", errno);
  }
  armed_ = t;
  return Status::OK();
}

Status RedisConnection::Write(std::span<const RedisRequest> requests, Clock::time_point deadline) {
  // Encode: headers and small arguments into scratch_, large arguments referenced in place.
  // Scratch pieces are recorded by offset (scratch_ may move while it grows).
  struct Piece {
    const char* external;  // nullptr: scratch_[offset, offset + size)
    size_t offset;
    size_t size;
  };
  std::vector<Piece> pieces;
  scratch_.clear();
  size_t run_start = 0;
  auto close_run = [&] {
    if (scratch_.size() > run_start) {
      pieces.push_back({nullptr, run_start, scratch_.size() - run_start});
    }
    run_start = scratch_.size();
  };
  for (const RedisRequest& request : requests) {
    if (request.asking) scratch_.append(kAsking);
    const size_t pieces_of_last = std::max<size_t>(request.last_arg_pieces, 1);
    const size_t whole = request.args.size() - pieces_of_last;  // arguments before the last
    scratch_ += '*';
    AppendDecimal(&scratch_, whole + 1);
    scratch_ += "\r\n";
    for (size_t a = 0; a < request.args.size(); ++a) {
      const std::string_view arg = request.args[a];
      if (a <= whole) {  // an argument begins: its length is that of all its pieces
        size_t bytes = arg.size();
        if (a == whole) {
          for (size_t b = a + 1; b < request.args.size(); ++b) bytes += request.args[b].size();
        }
        scratch_ += '$';
        AppendDecimal(&scratch_, bytes);
        scratch_ += "\r\n";
      }
      if (arg.size() <= kInlineArgumentBytes) {
        scratch_.append(arg);
      } else {
        close_run();
        pieces.push_back({arg.data(), 0, arg.size()});
      }
      if (a < whole || a + 1 == request.args.size()) scratch_ += "\r\n";
    }
  }
  close_run();
  std::vector<iovec> iov(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const char* base = pieces[i].external ? pieces[i].external : scratch_.data() + pieces[i].offset;
    iov[i].iov_base = const_cast<char*>(base);
    iov[i].iov_len = pieces[i].size;
  }

  size_t next = 0;
  while (next < iov.size()) {
    CACHEPAWL_RETURN_IF_ERROR(ArmTimeout(deadline, "write"));
    reusable_ = false;  // until every reply of this pipeline is read
    msghdr msg{};
    msg.msg_iov = &iov[next];
    msg.msg_iovlen = std::min<size_t>(IOV_MAX, iov.size() - next);
    const ssize_t n = sendmsg(context_->fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return SocketFailure(err, "write");
    }
    size_t sent = static_cast<size_t>(n);
    while (sent > 0 && next < iov.size()) {
      if (sent >= iov[next].iov_len) {
        sent -= iov[next].iov_len;
        ++next;
      } else {
        iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + sent;
        iov[next].iov_len -= sent;
        sent = 0;
      }
    }
    while (next < iov.size() && iov[next].iov_len == 0) ++next;
  }
  return Status::OK();
}

Status RedisConnection::ReadReply(Clock::time_point deadline, std::span<std::byte> into,
                                  RedisReply* reply) {
  redisReader* reader = context_->reader;
  reply_into_ = into;
  struct Reset {
    std::span<std::byte>& target;
    ~Reset() { target = {}; }
  } reset{reply_into_};
  for (;;) {
    void* object = nullptr;
    if (redisReaderGetReply(reader, &object) != REDIS_OK) {
      return Failure(Status::Code::kIOError, std::string("bad reply: ") + reader->errstr);
    }
    if (object != nullptr) {
      std::unique_ptr<RedisReply> owned(static_cast<RedisReply*>(object));
      *reply = std::move(*owned);
      return Status::OK();
    }
    CACHEPAWL_RETURN_IF_ERROR(ArmTimeout(deadline, "read"));
    const ssize_t n = recv(context_->fd, read_buffer_.get(), kReadBufferBytes, 0);
    if (n == 0) return Failure(Status::Code::kIOError, "the server closed the connection");
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return SocketFailure(err, "read");
    }
    if (redisReaderFeed(reader, read_buffer_.get(), static_cast<size_t>(n)) != REDIS_OK) {
      return Failure(Status::Code::kIOError, std::string("bad reply: ") + reader->errstr);
    }
  }
}

Status RedisConnection::Pipeline(std::span<const RedisRequest> requests, Clock::time_point deadline,
                                 std::vector<RedisReply>* replies) {
  replies->clear();
  replies->reserve(requests.size());
  CACHEPAWL_RETURN_IF_ERROR(Write(requests, deadline));
  for (const RedisRequest& request : requests) {
    RedisReply asking;
    if (request.asking) CACHEPAWL_RETURN_IF_ERROR(ReadReply(deadline, {}, &asking));
    RedisReply reply;
    CACHEPAWL_RETURN_IF_ERROR(ReadReply(deadline, request.reply_into, &reply));
    if (asking.type == RedisReply::Type::kError) reply = std::move(asking);
    replies->push_back(std::move(reply));
  }
  reusable_ = true;
  return Status::OK();
}

}  // namespace cachepawl
