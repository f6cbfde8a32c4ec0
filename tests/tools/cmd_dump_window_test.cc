// `cachepawl dump` on stores with window records (Kind::kWindowKV: the sliding-window layers'
// part of a page), written by the disk tier directly: a layout with full-attention and windowed
// layers (window records stand beside their KV pages), and one whose attention layers are all
// windowed (no KV records: states carry their chains, as in a pure SSM store, and window records
// stand beside the pages the chains name). Counts, listing, the tree, verification, orphans.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tools/run_cli.h"
#include "tiers/disk_record.h"
#include "tiers/disk_tier.h"
#include "tiers/host_memory.h"

namespace cachepawl::tools {
namespace {

using nlohmann::json;

constexpr uint32_t kPage = 16;

// Attention layer 0 (full attention unless `all_windowed`), SSM layer 1, attention layer 2
// with a 32-token window (2 pages).
ModelLayout WindowLayout(bool all_windowed) {
  ModelLayout l;
  l.model = all_windowed ? "test/all-windowed" : "test/some-windowed";
  l.num_layers = 3;
  l.page_size_tokens = kPage;
  l.attention_layers = {{0, 2, 64, DType::kBf16, all_windowed ? 32u : 0u},
                        {2, 2, 64, DType::kBf16, 32}};
  l.ssm_layers = {{1, "mamba2", {64, 3}, DType::kBf16, {2, 64, 16}, DType::kFp32}};
  return l;
}

PageHash Hash(uint64_t n) {
  PageHash h;
  testing::FillRandom(std::span<std::byte>(reinterpret_cast<std::byte*>(h.bytes.data()), 32),
                      n + 77);
  return h;
}

struct Rec {
  DiskKey key;
  PageHash parent;
  std::vector<PageHash> chain;
};

// Writes `records` (header, payload and checksum, as the store's disk mover does) and closes.
void WriteStore(const std::string& dir, const ModelLayout& layout, const std::vector<Rec>& recs) {
  DiskTierOptions o;
  o.dir = dir;
  o.capacity_bytes = 4 << 20;
  auto tier = DiskTier::Open(o, layout);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  DiskTier& t = **tier;
  std::vector<DiskTier::TicketPtr> tickets;
  std::vector<uint64_t> sums;
  for (const Rec& r : recs) {
    auto plan = t.BeginWrite(r.key, r.parent, r.chain);
    ASSERT_TRUE(plan.ok()) << r.key.ToString() << ": " << plan.status().ToString();
    const uint64_t bytes = plan->extent.bytes;
    std::unique_ptr<std::byte, decltype(&std::free)> buf(
        static_cast<std::byte*>(std::aligned_alloc(kDirectIoAlignment, bytes)), &std::free);
    std::span<std::byte> record(buf.get(), bytes);
    RecordHeader h;
    h.kind = r.key.kind;
    h.hash = r.key.hash;
    h.parent = r.parent;
    h.depth = r.key.depth;
    h.fingerprint = t.fingerprint();
    h.payload_bytes = t.payload_bytes(r.key.kind);
    h.record_bytes = bytes;
    testing::FillRandom(record.subspan(kRecordHeaderBytes, h.payload_bytes), r.key.depth + 5);
    sums.push_back(WriteRecordHeader(record, h));
    ASSERT_EQ(::pwrite(t.files().fd(plan->extent.file), buf.get(), bytes,
                       static_cast<off_t>(plan->extent.offset)),
              static_cast<ssize_t>(bytes));
    tickets.push_back(plan->ticket);
  }
  ASSERT_TRUE(t.CommitWrites(tickets, sums).ok());
  ASSERT_TRUE(t.Close().ok());
}

json RunJson(const std::vector<std::string>& argv, int want_code = 0) {
  CliResult r = RunCli(argv);
  EXPECT_EQ(r.code, want_code) << r.out << r.err;
  return json::parse(r.out);
}

TEST(DumpWindowTest, WindowRecordsStandBesideTheirKvPages) {
  testing::TempDir tmp;
  const std::string dir = (tmp.path() / "store").string();
  const ModelLayout layout = WindowLayout(false);
  // Pages 0..3 (KV), the window records of the two pages before the state at page 3, a state,
  // and a window record of a page that is not on disk.
  std::vector<Rec> recs;
  for (uint64_t i = 0; i < 4; ++i) {
    recs.push_back({{Kind::kKV, Hash(i), (i + 1) * kPage}, i ? Hash(i - 1) : PageHash{}, {}});
  }
  for (uint64_t i : {2, 3}) {
    recs.push_back({{Kind::kWindowKV, Hash(i), (i + 1) * kPage}, Hash(i - 1), {}});
  }
  recs.push_back({{Kind::kMamba, Hash(3), 4 * kPage}, Hash(2), {}});
  recs.push_back({{Kind::kWindowKV, Hash(9), 2 * kPage}, Hash(8), {}});
  WriteStore(dir, layout, recs);
  const std::string layout_file = (tmp.path() / "layout.json").string();
  std::ofstream(layout_file) << LayoutToJson(layout);

  const json s = RunJson({"dump", dir, "--json", "--layout", layout_file});
  EXPECT_EQ(s["chained"], false);
  EXPECT_EQ(s["pure_ssm"], false);
  EXPECT_EQ(s["window_pages"], 2);
  EXPECT_EQ(s["records"]["kv"]["count"], 4);
  EXPECT_EQ(s["records"]["mamba"]["count"], 1);
  EXPECT_EQ(s["records"]["window"]["count"], 3);
  EXPECT_EQ(s["records"]["window"]["bytes"], 3 * RecordSlotBytes(layout, Kind::kWindowKV));
  EXPECT_EQ(s["tree"]["chains"], 1);  // the window records are no pages of the tree
  EXPECT_EQ(s["tree"]["leaves"], 1);
  EXPECT_EQ(s["tree"]["orphan_pages"], 0);
  EXPECT_EQ(s["tree"]["orphan_window"], 1);
  uint64_t window = 0;
  for (const json& b : s["tree"]["window_by_depth"]) window += b["count"].get<uint64_t>();
  EXPECT_EQ(window, 3u);

  const json list = RunJson({"dump", dir, "--list", "--kind", "window", "--json"});
  ASSERT_EQ(list.size(), 3u);
  for (const json& r : list) {
    EXPECT_EQ(r["kind"], "window");
    EXPECT_TRUE(r["parent"].is_string());  // a window record names its page's parent
    EXPECT_TRUE(r["chain"].is_null());
    EXPECT_EQ(r["bytes"], RecordSlotBytes(layout, Kind::kWindowKV));
  }
  CliResult text = RunCli({"dump", dir});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("3 window records"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 orphan window records"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("window records by depth (pages):"), std::string::npos) << text.out;

  // Every record verifies against the layout's window record size; the stray one is a warning.
  const json v =
      RunJson({"dump", dir, "--verify", "--json", "--no-free-space-scan", "--layout", layout_file});
  EXPECT_EQ(v["corrupt"], 0);
  EXPECT_EQ(v["catalog_problems"], 0);
  EXPECT_EQ(v["records_checked"], recs.size());
  EXPECT_EQ(v["orphans"], 1);
  ASSERT_EQ(v["problems"].size(), 1u);
  EXPECT_NE(v["problems"][0]["detail"].get<std::string>().find("no KV page " + Hash(9).ToHex() +
                                                               " at depth 32"),
            std::string::npos)
      << v["problems"];
  EXPECT_NE(v["problems"][0]["record"].get<std::string>().find("window:"), std::string::npos);
}

TEST(DumpWindowTest, AllWindowedStoresChainTheirStatesLikePureSsm) {
  testing::TempDir tmp;
  const std::string dir = (tmp.path() / "store").string();
  const ModelLayout layout = WindowLayout(true);
  ASSERT_FALSE(layout.Stores(Kind::kKV));
  // A state at page 2 (chain: pages 0 and 1) and the window records of pages 1 and 2.
  const std::vector<Rec> recs = {
      {{Kind::kMamba, Hash(2), 3 * kPage}, Hash(1), {Hash(0), Hash(1)}},
      {{Kind::kWindowKV, Hash(1), 2 * kPage}, Hash(0), {}},
      {{Kind::kWindowKV, Hash(2), 3 * kPage}, Hash(1), {}},
  };
  WriteStore(dir, layout, recs);

  // The layout is no preset: chained is inferred (states, no KV), so is the page size.
  const json s = RunJson({"dump", dir, "--json"});
  EXPECT_EQ(s["chained"], true);
  EXPECT_EQ(s["pure_ssm"], false);
  EXPECT_EQ(s["page_size_tokens"], kPage);
  EXPECT_EQ(s["records"]["kv"]["count"], 0);
  EXPECT_EQ(s["records"]["window"]["count"], 2);
  uint64_t pages = 0;
  for (const json& b : s["tree"]["pages_by_depth"]) pages += b["count"].get<uint64_t>();
  EXPECT_EQ(pages, 3u);  // the pages the state's chain names
  EXPECT_EQ(s["tree"]["orphan_window"], 0);
  EXPECT_EQ(s["tree"]["orphan_states"], 0);

  const json list = RunJson({"dump", dir, "--list", "--kind", "mamba", "--json"});
  ASSERT_EQ(list.size(), 1u);
  ASSERT_TRUE(list[0]["chain"].is_array());
  EXPECT_EQ(list[0]["chain"].size(), 2u);

  CliResult text = RunCli({"dump", dir});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("no full-attention layers"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("chain pages by depth"), std::string::npos) << text.out;

  const std::string layout_file = (tmp.path() / "layout.json").string();
  std::ofstream(layout_file) << LayoutToJson(layout);
  const json v =
      RunJson({"dump", dir, "--verify", "--json", "--no-free-space-scan", "--layout", layout_file});
  EXPECT_EQ(v["corrupt"], 0);
  EXPECT_EQ(v["catalog_problems"], 0);
  EXPECT_EQ(v["orphans"], 0) << v["problems"];
  EXPECT_EQ(v["records_checked"], 3);
}

TEST(DumpWindowTest, ListKindNamesWindow) {
  CliResult r = RunCli({"dump", "/nonexistent", "--list", "--kind", "pages"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("expected kv, mamba or window"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cachepawl::tools
