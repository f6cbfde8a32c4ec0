// `cachepawl serve`: bad arguments and options end with exit status 2 and a message naming the
// argument and its value, before anything is served (the serving path itself runs as a process
// in tests/ipc and in ReplayCliTest's --kill-owner runs).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tools/run_cli.h"

namespace cachepawl::tools {
namespace {

TEST(CmdServeTest, ArgumentErrorsExitTwoNamingTheValue) {
  testing::TempDir dir;
  const std::string d = dir.str();
  const std::vector<std::string> good = {"serve",      "--dir",        d,    "--layout",
                                         "jamba-v0.1", "--host-bytes", "64M"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--write-policy", "sometimes"}, "--write-policy: 'sometimes'"},
      {{"--host-bytes", "12x"}, "--host-bytes"},
      {{"--poll-spin-us", "100001"}, "ServeOptions.poll_spin_us: 100001"},
      {{"--inflight-spin-us", "100001"}, "ServeOptions.inflight_spin_us: 100001"},
      {{"--max-clients", "0"}, "ServeOptions.max_clients: 0"},
      {{"--socket-group", "no-such-group-cachepawl"}, "'no-such-group-cachepawl' (no such group)"},
      {{"--frobnicate"}, "--frobnicate"},
      {{"--tp-size", "3"}, "--tp-size 3: InvalidArgument: attention_layers[0].num_kv_heads: 8"},
      {{"--tp-size", "0"}, "tp_size: 0"},
  };
  for (const auto& [extra, want] : cases) {
    std::vector<std::string> args = good;
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = RunCli(args);
    EXPECT_EQ(r.code, 2) << extra[0] << ": " << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << extra[0] << ": " << r.err;
  }
  const CliResult missing = RunCli({"serve", "--layout", "jamba-v0.1", "--host-bytes", "64M"});
  EXPECT_EQ(missing.code, 2) << missing.err;
  EXPECT_NE(missing.err.find("--dir"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace cachepawl::tools
