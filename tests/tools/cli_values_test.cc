// The argument values of the `cachepawl` subcommands (tools/cli_values.h): what each accepts and
// how each names what it refuses. The commands that use them are tested end to end in
// cmd_hash_test.cc, cmd_bench_store_test.cc and replay_end_to_end_test.cc; tests/fuzz/
// fuzz_cli_args.cc feeds them arbitrary text.
#include "tools/cli_values.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace cachepawl::tools {
namespace {

TEST(CliValuesTest, TokenIdsAreUnsigned32BitDecimals) {
  EXPECT_EQ(*ParseTokenId("0", 0), 0u);
  EXPECT_EQ(*ParseTokenId("4294967295", 0), 4294967295u);
  EXPECT_EQ(*ParseTokenId("007", 0), 7u);
  for (const char* bad : {"", "4294967296", "-1", "+1", " 1", "1 ", "0x10", "1e3"}) {
    auto t = ParseTokenId(bad, 5);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().message(),
              std::string("token 5: '") + bad + "' (expected an unsigned 32-bit integer)");
  }
  EXPECT_FALSE(ParseTokenId(std::string("1\0", 2), 0).ok());
}

TEST(CliValuesTest, DurationsTakeSecondsMillisecondsMinutesAndHours) {
  EXPECT_EQ(*ParseDuration("90"), 90);
  EXPECT_EQ(*ParseDuration("90s"), 90);
  EXPECT_DOUBLE_EQ(*ParseDuration("1.5ms"), 1.5e-3);
  EXPECT_EQ(*ParseDuration("15m"), 900);
  EXPECT_EQ(*ParseDuration("15min"), 900);
  EXPECT_EQ(*ParseDuration("2h"), 7200);
  EXPECT_EQ(*ParseDuration("0"), 0);
  for (const char* bad : {"", "s", "-1s", "nan", "10d", "10 s", "1e999", "5sec"}) {
    EXPECT_FALSE(ParseDuration(bad).has_value()) << bad;
  }
  EXPECT_FALSE(ParseDuration(std::string("5\0s", 3)).has_value());
}

TEST(CliValuesTest, BoundedNumbersAreWholeAndInRange) {
  EXPECT_EQ(*ParseBoundedUint32("1", 1, 1024), 1u);
  EXPECT_EQ(*ParseBoundedUint32("1024", 1, 1024), 1024u);
  for (const char* bad : {"0", "1025", "", "-1", "+2", "2 ", "1.0", "99999999999"}) {
    EXPECT_FALSE(ParseBoundedUint32(bad, 1, 1024).has_value()) << bad;
  }
}

TEST(CliValuesTest, IntegerListsKeepOrderDropDuplicatesAndNameTheBadWord) {
  auto l = ParseIntegerList<uint32_t>("--threads", "4,1,4,16", 1, 256);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(*l, (std::vector<uint32_t>{4, 1, 16}));
  const std::pair<const char*, const char*> bad[] = {
      {"", "--threads: '' (expected comma-separated integers)"},
      {"16,", "--threads: '16,' (expected comma-separated integers)"},
      {"1,,16", "--threads: '' in '1,,16' (expected comma-separated integers from 1 to 256)"},
      {"-4", "--threads: '-4' in '-4'"},
      {"300", "--threads: '300' in '300'"},
      {"0", "--threads: '0' in '0'"},
      {"4x", "--threads: '4x' in '4x'"},
  };
  for (const auto& [text, expected] : bad) {
    auto parsed = ParseIntegerList<uint32_t>("--threads", text, 1, 256);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find(expected), std::string::npos)
        << parsed.status().message();
  }
  // A NUL byte ends no word early: "4\0x" is not 4.
  EXPECT_FALSE(ParseIntegerList<uint32_t>("--threads", std::string("4\0x", 3), 1, 256).ok());
}

}  // namespace
}  // namespace cachepawl::tools
