// `cachepawl info`: runs without a GPU, its JSON has every section, the layout capacities are
// those of tiers/tier_capacity.h, and every bad argument is a usage error naming the flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "layouts/layout_presets.h"
#include "tests/common/test_util.h"
#include "tests/tools/run_cli.h"
#include "tiers/tier_capacity.h"
#include "vocab/model_layout.h"

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
  // What Store::Open would accept for a host tier here: below MemAvailable.
  ASSERT_TRUE(j["pinned_memory"]["store_may_take_bytes"].is_number_unsigned());
  EXPECT_LT(j["pinned_memory"]["store_may_take_bytes"].get<uint64_t>(),
            j["pinned_memory"]["mem_available_bytes"].get<uint64_t>());
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

TEST(CmdInfoTest, WindowedLayoutsReportWindowRecords) {
  // Samba: every attention layer windowed (2048 tokens, 128 pages of 16): no full-attention
  // record; a window record is 9 layers x K and V x [16, 18, 128] bf16 = 1296 KiB (host slot
  // 1300 KiB).
  CliResult r = RunCli({"info", "--json", "--layout", "samba-1.3b", "--host-bytes", "8G",
                        "--disk-bytes", "100G", "--track-interval", "64"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto j = nlohmann::json::parse(r.out)["layout"];
  const ModelLayout samba = LayoutPreset("samba-1.3b").value();
  EXPECT_EQ(j["kv_page_bytes"], 1296u << 10);
  EXPECT_EQ(j["full_kv_record_bytes"], 0u);
  EXPECT_EQ(j["window_kv_record_bytes"], 1296u << 10);
  EXPECT_EQ(j["window_tokens"], 2048u);
  EXPECT_EQ(j["window_pages"], 128u);
  EXPECT_EQ(j["host"]["page_slot_bytes"], 0u);
  EXPECT_EQ(j["host"]["pages_only"], 0u);
  EXPECT_EQ(j["host"]["window_slot_bytes"], 1300u << 10);
  EXPECT_EQ(j["host"]["window_only"], (8ull << 30) / (1300 << 10));
  EXPECT_EQ(j["host"]["window_pages"], 128u);
  const TierCapacity disk = RecordTierCapacity(samba, 100ull << 30, 64);
  EXPECT_EQ(j["disk"]["window_only"], disk.window_only);
  EXPECT_EQ(j["disk"]["mixed_window"], disk.mixed_window);
  EXPECT_EQ(j["disk"]["mixed_states"], disk.mixed_states);
  EXPECT_EQ(disk.mixed_window, 64 * disk.mixed_states);  // a state every 64 pages < 128
  CliResult samba_text = RunCli({"info", "--layout", "samba-1.3b"});
  ASSERT_EQ(samba_text.code, kExitOk) << samba_text.err;
  EXPECT_NE(samba_text.out.find("a page is a window record of 1327104 B (every attention layer "
                                "is windowed)"),
            std::string::npos)
      << samba_text.out;

  // Hymba: global and windowed layers; the text names both records and the window.
  const ModelLayout hymba = LayoutPreset("hymba-1.5b").value();
  CliResult t = RunCli({"info", "--layout", "hymba-1.5b", "--host-bytes", "1G"});
  ASSERT_EQ(t.code, kExitOk) << t.err;
  for (const std::string& want :
       {std::string("full-attention record of ") + std::to_string(hymba.RecordBytes(Kind::kKV)) +
            " B",
        std::string("window record of ") + std::to_string(hymba.RecordBytes(Kind::kWindowKV)) +
            " B",
        std::string("the 64 window records before it"), std::string("window only"),
        std::string("pages + window records + states")}) {
    EXPECT_NE(t.out.find(want), std::string::npos) << want << " missing in:\n" << t.out;
  }
  // Without windowed layers the table keeps its columns.
  CliResult jamba = RunCli({"info", "--layout", "jamba-v0.1"});
  ASSERT_EQ(jamba.code, kExitOk) << jamba.err;
  EXPECT_EQ(jamba.out.find("window"), std::string::npos) << jamba.out;
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
