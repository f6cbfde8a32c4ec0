// RedisTestCluster: real redis-server processes for the tests of the Redis client and the remote
// tier (label `remote`). Start() runs N masters on free loopback ports (127.0.0.1 only) in a
// fresh temporary folder (cluster-enabled, no persistence: appendonly no, save "", one
// cluster-config-file per node), joins them with `redis-cli --cluster create ...
// --cluster-replicas 0 --cluster-yes` and waits (bounded) until every node reports
// cluster_state:ok with all 16384 slots ok; or, with `cluster = false`, N independent standalone
// servers.
//
// Cleanup: the destructor SIGKILLs and reaps every server and removes the folder, also when the
// test failed. Each server is started with PR_SET_PDEATHSIG=SIGKILL, so a test process that
// crashes or is killed leaves no server behind. (The death signal follows the thread that
// started the server: start and restart servers from the test's main thread.) Every child
// closes the test's file descriptors before exec (no client socket is held open by a server).
//
// Faults and cluster changes for the tests: Kill (SIGKILL) and Restart (same ports, same folder:
// its nodes.conf keeps its identity and slots, its data is gone), Pause (SIGSTOP) and Resume
// (SIGCONT), slot migration in steps (IMPORTING/MIGRATING, MIGRATE of the keys, SETSLOT NODE) to
// make the client see ASK during a migration and MOVED after it.
//
// Every wait is bounded; nothing listens beyond 127.0.0.1. Thread safety: none; use from the
// test's main thread. The admin connection (Command) is plain hiredis, independent of the client
// under test.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "redis/redis_cluster.h"
#include "tests/common/test_util.h"
#include "vocab/status.h"

namespace cachepawl::testing {

// A loopback port nothing listens on now (the kernel's pick for bind(0)).
StatusOr<uint16_t> FreeLoopbackPort();

struct RedisTestOptions {
  size_t masters = 3;       // a cluster needs at least 3 (redis-cli --cluster create)
  bool cluster = true;      // false: `masters` standalone servers, cluster mode off
  std::string requirepass;  // the default user's password ("": none); no spaces or quotes
  std::string acl_user;     // one more user with every right, and its password
  std::string acl_password;
  std::chrono::milliseconds node_timeout{1000};  // cluster-node-timeout
};

// In a test body or SetUp: skips the test when Redis is not installed (the message says what
// to install), except under CI, where that is a failure: CI never passes with the remote tests
// skipped.
#define CACHEPAWL_SKIP_WITHOUT_REDIS()                                                   \
  do {                                                                                   \
    if (const std::string why = ::cachepawl::testing::RedisTestCluster::MissingServer(); \
        !why.empty()) {                                                                  \
      if (::cachepawl::testing::RedisTestCluster::RequiredByCi()) {                      \
        GTEST_FAIL() << why << " (CI=true: tools/setup.sh must have installed it)";      \
      }                                                                                  \
      GTEST_SKIP() << why;                                                               \
    }                                                                                    \
  } while (false)

class RedisTestCluster {
 public:
  // Empty when redis-server and redis-cli are on PATH; else what is missing.
  static std::string MissingServer();
  // True under CI (the environment has CI=true): tools/setup.sh installed the servers, so their
  // absence fails the tests instead of skipping them.
  static bool RequiredByCi();

  // Starts the servers (and the cluster). The error names the step and shows the log's tail.
  static StatusOr<std::unique_ptr<RedisTestCluster>> Start(const RedisTestOptions& options);
  ~RedisTestCluster();
  RedisTestCluster(const RedisTestCluster&) = delete;
  RedisTestCluster& operator=(const RedisTestCluster&) = delete;

  size_t size() const { return nodes_.size(); }
  uint16_t port(size_t node) const { return nodes_[node].port; }
  RedisNode address(size_t node) const { return {"127.0.0.1", nodes_[node].port}; }
  // "redis://127.0.0.1:a,127.0.0.1:b,..." (every node), or one node's.
  std::string Seeds() const;
  std::string Seed(size_t node) const;

  // One command on one node over a fresh admin connection (AUTH with requirepass when set).
  // Error replies are FailedPrecondition with the server's text.
  StatusOr<RedisReply> Command(size_t node, const std::vector<std::string>& args) const;

  Status Kill(size_t node);     // SIGKILL, reaped
  Status Restart(size_t node);  // after Kill: same ports and folder; waits until it answers
  Status Pause(size_t node);    // SIGSTOP (waits until stopped)
  Status Resume(size_t node);   // SIGCONT

  // Every running, unpaused node: cluster_state:ok, cluster_slots_ok:16384, knows every node.
  Status WaitClusterOk(std::chrono::milliseconds limit = std::chrono::seconds(30)) const;

  // The node that serves each of the 16384 slots (SIZE_MAX: none), as node `asked` sees it
  // (CLUSTER SLOTS); one slot's.
  StatusOr<std::vector<size_t>> SlotOwners(size_t asked = 0) const;
  StatusOr<size_t> OwnerOf(uint16_t slot, size_t asked = 0) const;
  std::string NodeId(size_t node) const { return nodes_[node].id; }

  // Slot migration, in the steps Redis documents: `to` IMPORTING, `from` MIGRATING; keys
  // MIGRATEd (at most max_keys; returns how many); SETSLOT NODE on `to`, then on every other
  // running node. MoveSlot does all three.
  Status BeginSlotMigration(uint16_t slot, size_t from, size_t to);
  StatusOr<size_t> MigrateSlotKeys(uint16_t slot, size_t from, size_t to, size_t max_keys);
  Status FinishSlotMigration(uint16_t slot, size_t to);
  Status MoveSlot(uint16_t slot, size_t from, size_t to);

 private:
  struct Node {
    std::string dir;
    uint16_t port = 0;
    uint16_t bus_port = 0;
    pid_t pid = 0;  // 0: not running
    bool paused = false;
    std::string id;  // CLUSTER MYID
  };

  explicit RedisTestCluster(const RedisTestOptions& options);
  Status StartNode(size_t node);  // writes the config, starts, waits until it answers
  Status CreateCluster();
  std::string LogTail(size_t node) const;

  RedisTestOptions options_;
  std::string server_path_;
  std::string cli_path_;
  TempDir dir_;
  std::vector<Node> nodes_;
};

// The fixture of every test that needs one default cluster (3 masters): SetUp skips the test
// without Redis (fails it under CI) and starts the cluster; the cluster is stopped with the
// fixture, also when the test failed. A derived SetUp that adds steps calls this one first and
// returns when IsSkipped() or HasFatalFailure().
class RedisClusterFixture : public ::testing::Test {
 protected:
  void SetUp() override;

  std::unique_ptr<RedisTestCluster> cluster_;
};

}  // namespace cachepawl::testing
