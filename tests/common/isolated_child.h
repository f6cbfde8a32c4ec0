// Runs a test's scenario in a child process with a world of its own: a small tmpfs (a drive
// that fills up) or an unprivileged user (permission bits that apply, also when the tests run
// as root). Neither needs root.
//
// The child is this test binary re-executed (a fresh process: no threads or RocksDB thread
// pools inherited from earlier tests) with a filter naming the current test; in it the test
// body runs the scenario:
//
//   void Scenario(const std::string& dir) { ...GoogleTest assertions... }
//   TEST(Suite, Name) { testing::RunInIsolatedChild(testing::ChildWorld::kTmpfs, Scenario); }
//
// The scenario uses ordinary GoogleTest assertions. The child sends each failure (file, line,
// message) to the parent through a pipe; the parent reports them as failures of the test, and
// also a child that exited non-zero, was killed by a signal (an abort inside RocksDB), or never
// reached the scenario.
//
// When the world cannot be made (unshare or mount refused, no user to switch to), the parent's
// result is skipped with the call and errno named, or, with CI=true in the environment, the
// test fails: CI must run these scenarios.
//
// Thread safety: call from the test's thread only.
#pragma once

#include <cstdint>
#include <string>

namespace cachepawl::testing {

enum class ChildWorld {
  // New user and mount namespaces (the child maps its own uid to 0 there) with a tmpfs of
  // `tmpfs_bytes` mounted on `dir` (an existing, empty folder).
  kTmpfs,
  // As root: the child switches to uid and gid 65534 (nobody), `dir` and everything in it
  // handed to that user first. Not root: the child runs as this user (whose permission bits
  // apply already).
  kUnprivileged,
};

struct IsolatedWorld {
  ChildWorld kind = ChildWorld::kTmpfs;
  std::string dir;
  uint64_t tmpfs_bytes = 64ull << 20;
};

struct IsolatedRun {
  bool skipped = false;  // the world could not be made (and CI is not set)
  std::string skip_reason;
};

// In the parent: runs the current test in a child in `world` and waits for it. Failures are
// reported with ADD_FAILURE.
IsolatedRun RunIsolated(const IsolatedWorld& world);

// In the child: the world's folder (the tmpfs, or the folder now owned by the child's user);
// nullptr in the parent. The first call installs the pipe reporter.
const char* IsolatedChildDir();

// A whole test body: in the child, `scenario(folder)`; in the parent, RunIsolated on a fresh
// temporary folder, the test skipped (GTEST_SKIP) when the world cannot be made.
void RunInIsolatedChild(ChildWorld kind, void (*scenario)(const std::string& dir),
                        uint64_t tmpfs_bytes = 32ull << 20);

}  // namespace cachepawl::testing
