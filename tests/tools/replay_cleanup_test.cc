// A replay without --dir keeps its store in a temporary folder: it is removed however the process
// ends, a signal's default action or SIGKILL included (tools/replay/replay_setup.h,
// ReplayStoreDir).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tools/replay_test_layouts.h"
#include "vocab/model_layout.h"

namespace cachepawl::tools {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The cachepawl-replay-* folders in `dir`.
std::vector<fs::path> ReplayFolders(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind("cachepawl-replay-", 0) == 0) out.push_back(e.path());
  }
  return out;
}

bool NonEmpty(const fs::path& folder) {
  std::error_code ec;
  return fs::directory_iterator(folder, ec) != fs::directory_iterator();
}

// Starts the binary with TMPDIR=`tmp` (and, under ThreadSanitizer, the RocksDB suppressions).
pid_t Spawn(const std::vector<std::string>& args, const fs::path& tmp) {
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v(*e);
    if (v.rfind("TMPDIR=", 0) != 0 && v.rfind("TSAN_OPTIONS=", 0) != 0) env_text.push_back(v);
  }
  env_text.push_back("TMPDIR=" + tmp.string());
  const char* tsan = std::getenv("TSAN_OPTIONS");
  env_text.push_back("TSAN_OPTIONS=suppressions=" +
                     (fs::path(__FILE__).parent_path() / "rocksdb_tsan.supp").string() + " " +
                     (tsan ? tsan : ""));
  std::vector<char*> envp, argv;
  for (std::string& v : env_text) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string binary = CACHEPAWL_BINARY;
  argv.push_back(binary.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// SIGTERM used to leave the folder (4.1 GB each time) behind; SIGKILL can run no handler at all.
TEST(ReplayCleanupTest, AReplayKilledBySignalLeavesNoTemporaryFolder) {
  for (int sig : {SIGTERM, SIGKILL}) {
    SCOPED_TRACE(sig == SIGTERM ? "SIGTERM" : "SIGKILL");
    testing::TempDir tmp;
    const std::string layout = (tmp.path() / "small.json").string();
    std::ofstream(layout) << LayoutToJson(test_layouts::Small());
    const pid_t pid = Spawn({"replay", "--workload", "chat", "--soak", "60s", "--layout", layout,
                             "--block-size", "64", "--device-bytes", "512K", "--host-bytes", "1M",
                             "--disk-bytes", "32M", "--track-interval", "4"},
                            tmp.path());
    ASSERT_GT(pid, 0);
    // Wait (bounded) until the store has files in its folder: the reaper starts right after the
    // folder is made, before the store opens.
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    bool running = false;
    while (Clock::now() < deadline && !running) {
      for (const fs::path& f : ReplayFolders(tmp.path())) running = running || NonEmpty(f);
      if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(running) << "the replay made no store folder in 60 s";
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    // The reaper removes it once the process is gone (bounded wait).
    const auto gone_by = Clock::now() + std::chrono::seconds(30);
    while (!ReplayFolders(tmp.path()).empty() && Clock::now() < gone_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(ReplayFolders(tmp.path()).empty())
        << ReplayFolders(tmp.path()).front() << " was left behind";
  }
}

}  // namespace
}  // namespace cachepawl::tools
