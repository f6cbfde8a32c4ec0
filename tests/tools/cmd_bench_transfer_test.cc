// `cachepawl bench transfer` on a machine without a GPU: bad arguments and mover options are
// refused with exit 2 and a message naming them before anything else; valid ones say that a
// GPU is needed (exit 1). The benchmark itself runs on the GPU machine (docs/PERFORMANCE.md).
#include <gtest/gtest.h>

#include "cuda/gpu_runtime.h"
#include "tests/tools/run_cli.h"

namespace cachepawl::tools {
namespace {

#if CACHEPAWL_HAVE_CUDA

TEST(CmdBenchTransferTest, BadArgumentsAndOptionsAreRefusedByName) {
  CliResult r = RunCli({"bench", "transfer", "--scenarios", "llama-kv,gpt-kv"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--scenarios: unknown 'gpt-kv'"), std::string::npos) << r.err;
  r = RunCli({"bench", "transfer", "--paths", "ours,teleport"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--paths: unknown 'teleport'"), std::string::npos) << r.err;
  r = RunCli({"bench", "transfer", "--staging-chunks", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--staging-chunks"), std::string::npos) << r.err;
  // 1 MiB in 64 chunks of 16 KiB cannot hold the mover's 64 KiB tiles.
  r = RunCli({"bench", "transfer", "--staging-mib", "1", "--staging-chunks", "64"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("device_mover.staging_bytes: 1048576"), std::string::npos) << r.err;
  r = RunCli({"bench", "transfer", "--period-ms", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--period-ms"), std::string::npos) << r.err;
  r = RunCli({"bench", "transfer", "--watchdog", "a while"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--watchdog: 'a while'"), std::string::npos) << r.err;
}

TEST(CmdBenchTransferTest, WithoutAGpuItSaysSo) {
  if (cuda::GpuAvailable()) GTEST_SKIP() << "a GPU is present: the benchmark would run";
  const CliResult r = RunCli({"bench", "transfer", "--scenarios", "jamba-kv"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("needs a GPU"), std::string::npos) << r.err;
}

#else

TEST(CmdBenchTransferTest, BuiltWithoutCudaItSaysSo) {
  const CliResult r = RunCli({"bench", "transfer"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("built without CUDA"), std::string::npos) << r.err;
}

#endif

}  // namespace
}  // namespace cachepawl::tools
