#include <gtest/gtest.h>

#include <sstream>

#include "tools/command.h"

namespace cachepawl::tools {
namespace {

struct Result {
  int code;
  std::string out, err;
};

Result RunCli(std::vector<std::string> argv, const std::string& input = "") {
  std::istringstream in(input);
  std::ostringstream out, err;
  CommandIo io{in, out, err, false};
  int code = RunCommandLine(argv, io);
  return {code, out.str(), err.str()};
}

std::vector<std::string> Iota(int first, int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(std::to_string(first + i));
  return v;
}

// Expected values computed with Python hashlib (see tests/index/page_hasher_test.cc).
TEST(CmdHashTest, PrintsOneHashPerFullPage) {
  auto argv = Iota(1, 39);
  argv.insert(argv.begin(), "hash");
  Result r = RunCli(argv);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "77d735ce838418aa151bd96b5b1e78ee63860892e0a95c00fe34178442be9b07\n"
            "1170426cf2449cebf4d17f087ce5bb43b6a910ce91b3f40922868e913e8ee91d\n");
}

TEST(CmdHashTest, NamespaceAndStdin) {
  std::string input;
  for (int i = 1; i <= 32; ++i) input += std::to_string(i) + (i % 5 ? " " : "\n");
  Result r = RunCli({"hash", "--namespace", "tenant-a", "--page-size", "16"}, input);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "26dd70751f7ed4d8f62e7c40b01e36e0dbf33fee0ff205893881383fa6a7cd09\n"
            "2f29c92128e18a4c715bfe2afb56b8fc465c407161f4c06dc02362baab8a94c4\n");
}

TEST(CmdHashTest, BadArgumentsExitTwoWithAClearMessage) {
  Result bad_token = RunCli({"hash", "1", "2", "x3"});
  EXPECT_EQ(bad_token.code, 2);
  EXPECT_NE(bad_token.err.find("token 2: 'x3'"), std::string::npos) << bad_token.err;
  Result too_big = RunCli({"hash", "4294967296"});
  EXPECT_EQ(too_big.code, 2);
  EXPECT_NE(too_big.err.find("4294967296"), std::string::npos);
  Result zero_page = RunCli({"hash", "--page-size", "0", "1"});
  EXPECT_EQ(zero_page.code, 2);
  EXPECT_NE(zero_page.err.find("--page-size: 0"), std::string::npos);
  Result bad_option = RunCli({"hash", "--bogus"});
  EXPECT_EQ(bad_option.code, 2);
  Result unknown = RunCli({"frobnicate"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("unknown command 'frobnicate'"), std::string::npos);
}

}  // namespace
}  // namespace cachepawl::tools
