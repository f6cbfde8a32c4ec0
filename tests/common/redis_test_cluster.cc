// Real Redis servers for the tests (tests/common/redis_test_cluster.h).
#include "tests/common/redis_test_cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace cachepawl::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kStartAttempts = 5;             // fresh ports each time a port was taken
constexpr milliseconds kReadyLimit{10'000};   // a server answers PING within this
constexpr milliseconds kCreateLimit{60'000};  // redis-cli --cluster create finishes within this
constexpr milliseconds kPoll{20};

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

}  // namespace

StatusOr<uint16_t> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(fd);
    return Status::FromErrno("bind 127.0.0.1:0", err);
  }
  close(fd);
  return static_cast<uint16_t>(ntohs(addr.sin_port));
}

namespace {

// Starts `argv` with stdout and stderr appended to `log`; the child dies with this thread.
// Everything the child does between fork and exec is async-signal-safe.
StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log,
                      const std::vector<std::string>& extra_env) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& e : extra_env) env_strings.push_back(e);
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);

  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) return Status::FromErrno("open " + log, errno);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(log_fd);
    return Status::FromErrno("fork", err);
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    if (close_range(3, ~0u, 0) != 0) {
      for (int fd = 3; fd < 4096; ++fd) close(fd);
    }
    execve(args[0], args.data(), env.data());
    _exit(127);
  }
  close(log_fd);
  return pid;
}

// Waits for `pid` until `limit`; SIGKILLs it after that. The exit status, or -1 when killed.
int WaitBounded(pid_t pid, milliseconds limit, bool* timed_out) {
  const Clock::time_point end = Clock::now() + limit;
  *timed_out = false;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0) return -1;
    if (Clock::now() >= end) {
      *timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

std::string Tail(const std::string& path, size_t bytes = 2000) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > bytes) text = "..." + text.substr(text.size() - bytes);
  return text;
}

RedisReply Convert(const redisReply& r) {
  RedisReply out;
  if (r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_STATUS || r.type == REDIS_REPLY_ERROR) {
    out.type = r.type == REDIS_REPLY_STRING   ? RedisReply::Type::kString
               : r.type == REDIS_REPLY_STATUS ? RedisReply::Type::kStatus
                                              : RedisReply::Type::kError;
    out.str.assign(r.str, r.len);
  } else if (r.type == REDIS_REPLY_INTEGER) {
    out.type = RedisReply::Type::kInteger;
    out.integer = r.integer;
  } else if (r.type == REDIS_REPLY_ARRAY) {
    out.type = RedisReply::Type::kArray;
    for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(Convert(*r.element[i]));
  }
  return out;
}

// hiredis writes with write(2): a server that closed the socket would raise SIGPIPE. Blocked
// for this thread while an admin command runs, and a pending one consumed.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeBlocked() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    const timespec zero{};
    while (sigtimedwait(&pipe, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
};

StatusOr<RedisReply> AdminCommand(uint16_t port, const std::string& password,
                                  const std::vector<std::string>& args, milliseconds timeout) {
  SigpipeBlocked blocked;
  const timeval tv{static_cast<time_t>(timeout.count() / 1000),
                   static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c == nullptr) return Status::Internal("redisConnectWithTimeout: out of memory");
  std::unique_ptr<redisContext, void (*)(redisContext*)> owned(c, redisFree);
  const std::string where = "127.0.0.1:" + std::to_string(port);
  if (c->err != 0) return Status::Unavailable(where + ": connect: " + c->errstr);
  if (redisSetTimeout(c, tv) != REDIS_OK) return Status::IOError(where + ": " + c->errstr);
  auto run = [&](const std::vector<std::string>& command) -> StatusOr<RedisReply> {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : command) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    void* raw = redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
    if (raw == nullptr) return Status::IOError(where + ": " + command[0] + ": " + c->errstr);
    RedisReply reply = Convert(*static_cast<redisReply*>(raw));
    freeReplyObject(raw);
    if (reply.type == RedisReply::Type::kError) {
      return Status::FailedPrecondition(where + ": " + command[0] + ": " + reply.str);
    }
    return reply;
  };
  if (!password.empty()) {
    auto auth = run({"AUTH", password});
    if (!auth.ok()) return auth.status();
  }
  return run(args);
}

}  // namespace

std::string RedisTestCluster::MissingServer() {
  for (const char* tool : {"redis-server", "redis-cli"}) {
    if (FindOnPath(tool).empty()) {
      return std::string(tool) +
             " is not on PATH (Debian: apt-get install redis-server redis-tools; tools/setup.sh "
             "installs them): the tests that start a real Redis cannot run";
    }
  }
  return {};
}

bool RedisTestCluster::RequiredByCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string_view(ci) == "true";
}

RedisTestCluster::RedisTestCluster(const RedisTestOptions& options)
    : options_(options),
      server_path_(FindOnPath("redis-server")),
      cli_path_(FindOnPath("redis-cli")) {}

RedisTestCluster::~RedisTestCluster() {
  for (Node& node : nodes_) {
    if (node.pid <= 0) continue;
    kill(node.pid, SIGKILL);
    int status = 0;
    waitpid(node.pid, &status, 0);
    node.pid = 0;
  }
  // dir_ (TempDir) removes the folder.
}

std::string RedisTestCluster::Seed(size_t node) const {
  return "redis://127.0.0.1:" + std::to_string(nodes_[node].port);
}

std::string RedisTestCluster::Seeds() const {
  std::string seeds = "redis://";
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i > 0) seeds += ',';
    seeds += "127.0.0.1:" + std::to_string(nodes_[i].port);
  }
  return seeds;
}

std::string RedisTestCluster::LogTail(size_t node) const {
  return Tail(nodes_[node].dir + "/redis.log");
}

StatusOr<RedisReply> RedisTestCluster::Command(size_t node,
                                               const std::vector<std::string>& args) const {
  return AdminCommand(nodes_[node].port, options_.requirepass, args, milliseconds(5000));
}

Status RedisTestCluster::StartNode(size_t i) {
  Node& node = nodes_[i];
  std::filesystem::create_directories(node.dir);
  const std::string config = node.dir + "/redis.conf";
  {
    std::ofstream out(config, std::ios::trunc);
    out << "bind 127.0.0.1\n"
        << "port " << node.port << "\n"
        << "dir " << node.dir << "\n"
        << "logfile " << node.dir << "/redis.log\n"
        << "daemonize no\n"
        << "appendonly no\n"
        << "save \"\"\n";
    if (options_.cluster) {
      out << "cluster-enabled yes\n"
          << "cluster-config-file nodes.conf\n"
          << "cluster-port " << node.bus_port << "\n"
          << "cluster-node-timeout " << options_.node_timeout.count() << "\n"
          << "cluster-require-full-coverage no\n";
    }
    if (!options_.requirepass.empty()) out << "requirepass \"" << options_.requirepass << "\"\n";
    if (!options_.acl_user.empty()) {
      out << "user " << options_.acl_user << " on >" << options_.acl_password << " ~* &* +@all\n";
    }
    if (!out) return Status::IOError("cannot write " + config);
  }
  CACHEPAWL_ASSIGN_OR_RETURN(node.pid, Spawn({server_path_, config}, node.dir + "/stdout.log", {}));
  const Clock::time_point end = Clock::now() + kReadyLimit;
  for (;;) {
    int status = 0;
    if (waitpid(node.pid, &status, WNOHANG) == node.pid) {
      node.pid = 0;
      return Status::Unavailable("redis-server on port " + std::to_string(node.port) +
                                 " exited at start; its log:\n" + LogTail(i) +
                                 Tail(node.dir + "/stdout.log"));
    }
    auto pong = Command(i, {"PING"});
    if (pong.ok()) return Status::OK();
    if (Clock::now() >= end) {
      return Status::TimedOut("redis-server on port " + std::to_string(node.port) +
                              " did not answer PING within 10 s (" + pong.status().ToString() +
                              "); its log:\n" + LogTail(i));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

StatusOr<std::unique_ptr<RedisTestCluster>> RedisTestCluster::Start(
    const RedisTestOptions& options) {
  std::unique_ptr<RedisTestCluster> c(new RedisTestCluster(options));
  if (c->server_path_.empty()) return Status::Unavailable(MissingServer());
  if (options.cluster && options.masters < 3) {
    return Status::InvalidArgument("a test cluster needs 3 masters or more");
  }
  c->nodes_.resize(options.masters);
  std::set<uint16_t> used;
  for (size_t i = 0; i < c->nodes_.size(); ++i) {
    Node& node = c->nodes_[i];
    node.dir = (c->dir_.path() / ("node-" + std::to_string(i))).string();
    Status started;
    for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
      CACHEPAWL_ASSIGN_OR_RETURN(node.port, FreeLoopbackPort());
      CACHEPAWL_ASSIGN_OR_RETURN(node.bus_port, FreeLoopbackPort());
      if (node.port == node.bus_port || used.count(node.port) || used.count(node.bus_port)) {
        continue;
      }
      started = c->StartNode(i);
      if (started.ok()) break;
      // Someone took the port between FreePort and the server's bind: try others.
      if (started.message().find("Address already in use") == std::string::npos) break;
    }
    CACHEPAWL_RETURN_IF_ERROR(started);
    used.insert(node.port);
    used.insert(node.bus_port);
  }
  if (options.cluster) {
    CACHEPAWL_RETURN_IF_ERROR(c->CreateCluster());
    for (size_t i = 0; i < c->nodes_.size(); ++i) {
      CACHEPAWL_ASSIGN_OR_RETURN(RedisReply id, c->Command(i, {"CLUSTER", "MYID"}));
      c->nodes_[i].id = id.str;
    }
  }
  return c;
}

Status RedisTestCluster::CreateCluster() {
  if (cli_path_.empty()) return Status::Unavailable("redis-cli is not on PATH (redis-tools)");
  std::vector<std::string> argv = {cli_path_, "--cluster", "create"};
  for (const Node& node : nodes_) argv.push_back("127.0.0.1:" + std::to_string(node.port));
  argv.insert(argv.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  std::vector<std::string> env;
  if (!options_.requirepass.empty()) env.push_back("REDISCLI_AUTH=" + options_.requirepass);
  const std::string log = dir_.str() + "/cluster-create.log";
  CACHEPAWL_ASSIGN_OR_RETURN(pid_t pid, Spawn(argv, log, env));
  bool timed_out = false;
  const int code = WaitBounded(pid, kCreateLimit, &timed_out);
  if (timed_out || code != 0) {
    return Status::Unavailable(std::string("redis-cli --cluster create ") +
                               (timed_out ? "ran past 60 s" : "failed") + "; its output:\n" +
                               Tail(log));
  }
  return WaitClusterOk();
}

Status RedisTestCluster::WaitClusterOk(milliseconds limit) const {
  const Clock::time_point end = Clock::now() + limit;
  const std::string known = "cluster_known_nodes:" + std::to_string(nodes_.size());
  std::string last;
  for (;;) {
    bool all_ok = true;
    for (size_t i = 0; i < nodes_.size() && all_ok; ++i) {
      if (nodes_[i].pid <= 0 || nodes_[i].paused) continue;
      auto info = Command(i, {"CLUSTER", "INFO"});
      if (!info.ok()) {
        last = info.status().ToString();
        all_ok = false;
        break;
      }
      const std::string& text = info->str;
      all_ok = text.find("cluster_state:ok") != std::string::npos &&
               text.find("cluster_slots_ok:16384") != std::string::npos &&
               text.find(known) != std::string::npos;
      if (!all_ok) last = "node " + std::to_string(i) + ":\n" + text;
    }
    if (all_ok) return Status::OK();
    if (Clock::now() >= end) {
      return Status::TimedOut(
          "the cluster did not reach cluster_state:ok with every slot ok "
          "in time; last seen: " +
          last);
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

Status RedisTestCluster::Kill(size_t i) {
  Node& node = nodes_[i];
  if (node.pid <= 0) return Status::FailedPrecondition("node " + std::to_string(i) + " is down");
  kill(node.pid, SIGKILL);
  int status = 0;
  waitpid(node.pid, &status, 0);
  node.pid = 0;
  node.paused = false;
  return Status::OK();
}

Status RedisTestCluster::Restart(size_t i) {
  if (nodes_[i].pid > 0) return Status::FailedPrecondition("node " + std::to_string(i) + " runs");
  return StartNode(i);
}

Status RedisTestCluster::Pause(size_t i) {
  Node& node = nodes_[i];
  if (node.pid <= 0 || kill(node.pid, SIGSTOP) != 0) {
    return Status::FailedPrecondition("node " + std::to_string(i) + " is not running");
  }
  // Stopped once /proc says so (state T), at most a few seconds.
  const std::string stat = "/proc/" + std::to_string(node.pid) + "/stat";
  const Clock::time_point end = Clock::now() + milliseconds(5000);
  while (Clock::now() < end) {
    std::ifstream in(stat);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'T') {
      node.paused = true;
      return Status::OK();
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  return Status::TimedOut("node " + std::to_string(i) + " did not stop after SIGSTOP");
}

Status RedisTestCluster::Resume(size_t i) {
  Node& node = nodes_[i];
  if (node.pid <= 0 || kill(node.pid, SIGCONT) != 0) {
    return Status::FailedPrecondition("node " + std::to_string(i) + " is not running");
  }
  node.paused = false;
  return Status::OK();
}

StatusOr<std::vector<size_t>> RedisTestCluster::SlotOwners(size_t asked) const {
  CACHEPAWL_ASSIGN_OR_RETURN(RedisReply slots, Command(asked, {"CLUSTER", "SLOTS"}));
  std::vector<size_t> owners(16384, SIZE_MAX);
  for (const RedisReply& range : slots.elements) {
    if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) {
      return Status::Corruption("CLUSTER SLOTS: a range without a master");
    }
    const int64_t port = range.elements[2].elements[1].integer;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].port != port) continue;
      for (int64_t slot = range.elements[0].integer;
           slot <= range.elements[1].integer && slot < 16384; ++slot) {
        owners[static_cast<size_t>(slot)] = i;
      }
    }
  }
  return owners;
}

StatusOr<size_t> RedisTestCluster::OwnerOf(uint16_t slot, size_t asked) const {
  CACHEPAWL_ASSIGN_OR_RETURN(std::vector<size_t> owners, SlotOwners(asked));
  if (slot >= owners.size() || owners[slot] == SIZE_MAX) {
    return Status::NotFound("no node serves slot " + std::to_string(slot));
  }
  return owners[slot];
}

Status RedisTestCluster::BeginSlotMigration(uint16_t slot, size_t from, size_t to) {
  const std::string s = std::to_string(slot);
  auto importing = Command(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", nodes_[from].id});
  if (!importing.ok()) return importing.status();
  auto migrating = Command(from, {"CLUSTER", "SETSLOT", s, "MIGRATING", nodes_[to].id});
  return migrating.ok() ? Status::OK() : migrating.status();
}

StatusOr<size_t> RedisTestCluster::MigrateSlotKeys(uint16_t slot, size_t from, size_t to,
                                                   size_t max_keys) {
  size_t moved = 0;
  // Bounded: every round moves at least one key or ends; the slot holds at most max_keys.
  while (moved < max_keys) {
    const size_t want = std::min<size_t>(100, max_keys - moved);
    CACHEPAWL_ASSIGN_OR_RETURN(
        RedisReply keys,
        Command(from, {"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), std::to_string(want)}));
    if (keys.elements.empty()) break;
    std::vector<std::string> migrate = {"MIGRATE", "127.0.0.1", std::to_string(nodes_[to].port),
                                        "",        "0",         "5000"};
    if (!options_.requirepass.empty()) {
      migrate.insert(migrate.end(), {"AUTH", options_.requirepass});
    }
    migrate.push_back("KEYS");
    for (const RedisReply& key : keys.elements) migrate.push_back(key.str);
    auto done = Command(from, migrate);
    if (!done.ok()) return done.status();
    moved += keys.elements.size();
  }
  return moved;
}

Status RedisTestCluster::FinishSlotMigration(uint16_t slot, size_t to) {
  const std::vector<std::string> args = {"CLUSTER", "SETSLOT", std::to_string(slot), "NODE",
                                         nodes_[to].id};
  auto first = Command(to, args);
  if (!first.ok()) return first.status();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i == to || nodes_[i].pid <= 0 || nodes_[i].paused) continue;
    auto r = Command(i, args);
    if (!r.ok()) return r.status();
  }
  return Status::OK();
}

Status RedisTestCluster::MoveSlot(uint16_t slot, size_t from, size_t to) {
  CACHEPAWL_RETURN_IF_ERROR(BeginSlotMigration(slot, from, to));
  auto moved = MigrateSlotKeys(slot, from, to, 1'000'000);
  if (!moved.ok()) return moved.status();
  return FinishSlotMigration(slot, to);
}

void RedisClusterFixture::SetUp() {
  CACHEPAWL_SKIP_WITHOUT_REDIS();
  auto cluster = RedisTestCluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  cluster_ = std::move(cluster).value();
}

}  // namespace cachepawl::testing
