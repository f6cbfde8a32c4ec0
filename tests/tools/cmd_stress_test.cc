// `cachepawl stress`: its arguments, its report, and the watchdog aborting the real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tools/run_cli.h"

namespace cachepawl::tools {
namespace {

namespace fs = std::filesystem;

CliResult Stress(std::vector<std::string> args) {
  args.insert(args.begin(), "stress");
  return RunCli(args);
}

TEST(CmdStressTest, ArgumentErrorsExitTwoNamingTheOptionAndValue) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--threads", "0"}, "--threads: 0"},
      {{"--threads", "many"}, "--threads"},
      {{"--duration", "soon"}, "--duration: 'soon'"},
      {{"--duration", "0s"}, "--duration: '0s'"},
      {{"--watchdog", "-5s"}, "--watchdog: '-5s'"},
      {{"--write-policy", "sometimes"}, "--write-policy: 'sometimes'"},
      {{"--policy", "fifo"}, "--policy: 'fifo'"},
      {{"--layout", "no-such-model"}, "--layout: 'no-such-model'"},
      {{"--host-bytes", "12345"}, "--host-bytes: 12345"},
      {{"--host-bytes", "lots"}, "--host-bytes"},
      {{"--host-bytes", "-1"}, "--host-bytes: '-1' (expected a byte count"},
      {{"--disk-bytes", "-64M"}, "--disk-bytes: '-64M'"},
      {{"--threads", "-1"}, "--threads: '-1' (expected an unsigned integer"},
      {{"--device-bytes", "0"}, "--device-bytes: 0"},
      {{"--page-size", "0"}, "--page-size: 0"},
      {{"--no-such-flag"}, "--no-such-flag"},
  };
  for (const auto& [args, expected] : cases) {
    const CliResult r = Stress(args);
    EXPECT_EQ(r.code, kExitUsage) << args[0] << "\n" << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << expected << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(CmdStressTest, DevicePoolTooSmallIsAUsageError) {
  const CliResult r = Stress({"--device-bytes", "256K", "--duration", "5s"});
  EXPECT_EQ(r.code, kExitUsage) << r.err;
  EXPECT_NE(r.err.find("--device-bytes"), std::string::npos) << r.err;
}

TEST(CmdStressTest, JsonReportOfACleanRun) {
  testing::TempDir dir;
  const std::string store = (dir.path() / "store").string();
  const CliResult r = Stress({"--threads", "4", "--ops", "150", "--duration", "10m", "--host-bytes",
                              "2M", "--disk-bytes", "8M", "--write-policy", "selective", "--policy",
                              "lru", "--dir", store, "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key :
       {"layout", "threads", "gpu_mode", "elapsed_seconds", "ops", "allowed_errors",
        "unexpected_errors", "records_verified", "bytes_verified", "wrong_bytes", "evictions",
        "evictions_by_tier", "max_op_seconds", "stalled", "store", "ok"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["threads"], 4);
  EXPECT_EQ(j["layout"], "stress-hybrid");
  EXPECT_EQ(j["write_policy"], "write_through_selective");
  EXPECT_EQ(j["eviction_policy"], "lru");
  EXPECT_EQ(j["store_dir"], store);
  EXPECT_TRUE(fs::exists(store));  // --dir is kept
  EXPECT_EQ(j["wrong_bytes"], 0);
  EXPECT_EQ(j["ok"], true);
  EXPECT_GT(j["records_verified"].get<uint64_t>(), 0u);
}

TEST(CmdStressTest, TableReportSaysOk) {
  const CliResult r =
      Stress({"--threads", "2", "--ops", "100", "--host-bytes", "2M", "--disk-bytes", "0"});
  ASSERT_EQ(r.code, kExitOk) << r.err << r.out;
  for (const char* line :
       {"cachepawl stress: 2 threads, layout stress-hybrid", "operations: ", "unexpected errors: 0",
        "wrong bytes 0", "evictions: ", "longest operation: ", "result: OK"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

// The watchdog of the real binary aborts the process after printing every thread's state, so
// a deadlock fails CI instead of hanging it.
TEST(CmdStressTest, WatchdogAbortsTheProcessAfterPrintingEveryThread) {
  const BinaryResult run = RunBinary(
      CACHEPAWL_BINARY,
      {"stress", "--threads", "3", "--duration", "10m", "--watchdog", "1s", "--test-stuck-op"});
  const int status = run.status;
  const std::string& out = run.output;
  // popen's shell reports a child killed by SIGABRT as exit status 128 + 6, or the signal.
  const bool aborted = (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) ||
                       (WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGABRT);
  EXPECT_TRUE(aborted) << status << "\n" << out;
  EXPECT_NE(out.find("watchdog: thread 0 has been in stuck (test hook)"), std::string::npos) << out;
  for (const char* line : {"thread 1: ", "thread 2: ", "main thread: ", "store stats:",
                           "cachepawl stress: aborting (watchdog)"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  }
}

// A pause of the whole process (SIGSTOP for 8 s, longer than the 2 s watchdog) is no stall: the
// watchdog wakes late, notices, and counts operations from then on.
TEST(CmdStressTest, APauseOfTheWholeProcessIsNoStall) {
  const std::string command = std::string(CACHEPAWL_BINARY) +
                              " stress --threads 2 --duration 14s --watchdog 2s --json "
                              "--host-bytes 2M --disk-bytes 8M & pid=$!; sleep 3; kill -STOP "
                              "$pid; sleep 8; kill -CONT $pid; wait $pid";
  const BinaryResult run = RunBinary("sh", {"-c", command});
  ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output;
  const auto j = nlohmann::json::parse(run.output.substr(run.output.find("{\n")));
  EXPECT_EQ(j["stalled"], false);
  EXPECT_EQ(j["ok"], true);
  EXPECT_GT(j["longest_pause_seconds"].get<double>(), 5.0) << run.output;
}

}  // namespace
}  // namespace cachepawl::tools
