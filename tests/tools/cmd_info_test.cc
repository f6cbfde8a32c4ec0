// `cachepawl info`: runs without a GPU, its JSON has every section, the layout capacities are
// those of tiers/tier_capacity.h, and every bad argument is a usage error naming the flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "store/model_layout.h"
#include "tests/common/test_util.h"
#include "tests/tools/run_cli.h"
#include "tiers/tier_capacity.h"

namespace cachepawl::tools {
namespace {

TEST(CmdInfoTest, TextNamesEverySection) {
  testing::TempDir dir;
  CliResult r = RunCli({"info", "--dir", dir.str()});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* section :
       {"build:", "GPUs:", "pinned memory:", "huge pages:", "io_uring:", "disk folder:"}) {
    EXPECT_NE(r.out.find(section), std::string::npos) << section << " missing in:\n" << r.out;
  }
  EXPECT_NE(r.out.find(dir.str()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("layout:"), std::string::npos) << "no --layout, no layout section";
}

TEST(CmdInfoTest, JsonCarriesTheProbesAndTheLayoutCapacities) {
  testing::TempDir dir;
  CliResult r =
      RunCli({"info", "--json", "--dir", dir.str(), "--layout", "jamba-v0.1", "--host-bytes", "8G",
              "--disk-bytes", "100G", "--device-bytes", "4G", "--track-interval", "4"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["gpus"].is_array());
  EXPECT_TRUE(j["io_uring"]["available"].is_boolean());
  EXPECT_EQ(j["dir"]["path"], dir.str());
  EXPECT_GT(j["pinned_memory"]["mem_total_bytes"].get<uint64_t>(), 0u);
  const ModelLayout l = LayoutPreset("jamba-v0.1").value();
  const TierCapacity host = RecordTierCapacity(l, 8ull << 30, 4);
  const TierCapacity disk = RecordTierCapacity(l, 100ull << 30, 4);
  const TierCapacity device = DevicePoolCapacity(l, 4ull << 30, 4);
  EXPECT_EQ(j["layout"]["model"], "ai21labs/Jamba-v0.1");
  EXPECT_EQ(j["layout"]["kv_page_bytes"], 262144u);
  EXPECT_EQ(j["layout"]["state_bytes"], 16056320u);
  EXPECT_EQ(j["layout"]["host"]["pages_only"], host.pages_only);
  EXPECT_EQ(j["layout"]["host"]["mixed_states"], host.mixed_states);
  EXPECT_EQ(j["layout"]["disk"]["states_only"], disk.states_only);
  EXPECT_EQ(j["layout"]["device_pool"]["pages_only"], device.pages_only);
  // By hand: a host slot of a Jamba page is 4 KiB of header + 256 KiB; 8 GiB / 260 KiB.
  EXPECT_EQ(j["layout"]["host"]["page_slot_bytes"], 260u << 10);
  EXPECT_EQ(j["layout"]["host"]["pages_only"], (8ull << 30) / (260 << 10));
  // A store-owned pool cuts 4 GiB into 256 KiB units: 16384 pages.
  EXPECT_EQ(j["layout"]["device_pool"]["pages_only"], 16384u);
}

TEST(CmdInfoTest, TextTableHasARowPerTier) {
  CliResult r = RunCli({"info", "--layout", "recurrentgemma-2b", "--host-bytes", "1G"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* row : {"\n  host ", "\n  disk ", "\n  device "}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << " missing in:\n" << r.out;
  }
}

TEST(CmdInfoTest, AMissingDirIsReportedNotFatal) {
  testing::TempDir dir;
  CliResult r = RunCli({"info", "--dir", dir.str() + "/missing"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("--dir " + dir.str() + "/missing"), std::string::npos) << r.out;
}

TEST(CmdInfoTest, BadArgumentsAreUsageErrorsNamingTheFlag) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"info", "--host-bytes", "12X"}, "--host-bytes: '12X'"},
      {{"info", "--disk-bytes", "-1"}, "--disk-bytes: '-1'"},
      {{"info", "--device-bytes", ""}, "--device-bytes: ''"},
      {{"info", "--layout", "no-such-model"}, "--layout: "},
      {{"info", "--track-interval", "0"}, "--track-interval: 0"},
      {{"info", "--page-size", "0"}, "--page-size: 0"},
      {{"info", "--bogus"}, "bogus"},
  };
  for (const auto& [argv, message] : cases) {
    CliResult r = RunCli(argv);
    EXPECT_EQ(r.code, kExitUsage) << argv[1] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << "'" << message << "' not in: " << r.err;
  }
}

}  // namespace
}  // namespace cachepawl::tools
