// `cachepawl dump` on a store the replay filled: summary, list, verify, damaged and foreign
// folders, and a store that is open meanwhile.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/tools/replay_test_layouts.h"
#include "tests/tools/run_cli.h"
#include "tiers/disk_catalog.h"
#include "tools/command.h"
#include "tools/replay/replay_runner.h"
#include "tools/replay/replay_workloads.h"

namespace cachepawl::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A small host tier (4 MiB) so that the replay writes to disk what dump then reads.
StoreOptions Options(const std::string& dir, const ModelLayout& layout) {
  return test_layouts::SmallStore(dir, layout, 4 << 20, 16 << 20);
}

// Each test gets a store of its own, filled by a replay (a copy would not do: the catalog names
// its data file by absolute path).
class DumpTest : public ::testing::Test {
 protected:
  // A fresh store folder, filled and closed.
  std::string FreshStore(const ModelLayout& layout = test_layouts::Small(),
                         const std::string& name = "store") {
    const std::string dir = (tmp_.path() / (name + std::to_string(stores_++))).string();
    const StoreOptions o = Options(dir, layout);
    ReplayEngineOptions e;
    e.block_size_tokens = 64;
    e.track_interval_pages = 4;
    RequestSource requests = [](uint64_t) {
      WorkloadOptions w;
      w.seed = 8;
      w.requests = 40;
      w.block_size_tokens = 64;
      return GenerateWorkload("system-prompt", w).value();
    };
    auto run = RunReplay([o] { return Store::Open(o); }, e, requests, {});
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    EXPECT_GT(run.ok() ? run->store.bytes_host_to_disk : 0, 0u);
    return dir;
  }

  // Every record `catalog` holds (a pure SSM layout's states with their chains).
  static std::vector<CatalogRecord> Records(DiskCatalog& catalog) {
    std::vector<CatalogRecord> records;
    EXPECT_TRUE(catalog
                    .ForEach([&](const CatalogRecord& r) { records.push_back(r); },
                             [](const std::string&) {})
                    .ok());
    return records;
  }

  json ListJson(const std::string& dir) {
    CliResult r = RunCli({"dump", dir, "--list", "--json"});
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(r.out);
  }

  testing::TempDir tmp_;
  int stores_ = 0;
};

TEST_F(DumpTest, SummaryCountsWhatTheListShows) {
  const std::string dir = FreshStore();
  const json list = ListJson(dir);
  size_t kv = 0, mamba = 0;
  for (const json& r : list) (r["kind"] == "kv" ? kv : mamba)++;
  ASSERT_GT(kv, 0u);
  ASSERT_GT(mamba, 0u);
  CliResult r = RunCli({"dump", dir, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json s = json::parse(r.out);
  EXPECT_EQ(s["format_version"], 1);
  EXPECT_EQ(s["fingerprint"], test_layouts::Small().FingerprintHex());
  EXPECT_TRUE(s["layout"].is_null());  // not a preset
  EXPECT_EQ(s["page_size_tokens"], 16);
  EXPECT_EQ(s["records"]["kv"]["count"], kv);
  EXPECT_EQ(s["records"]["mamba"]["count"], mamba);
  ASSERT_EQ(s["files"].size(), 1u);
  EXPECT_EQ(s["files"][0]["size"], 16 << 20);
  EXPECT_EQ(s["files"][0]["records"], kv + mamba);
  EXPECT_EQ(
      s["files"][0]["used_bytes"].get<uint64_t>() + s["files"][0]["free_bytes"].get<uint64_t>(),
      16u << 20);
  // System-prompt workload: at most 3 chains (one per prompt), branching where users differ.
  EXPECT_GE(s["tree"]["chains"].get<int>(), 1);
  EXPECT_LE(s["tree"]["chains"].get<int>(), 3);
  EXPECT_GT(s["tree"]["branching_points"].get<int>(), 0);
  uint64_t histogram_total = 0;
  for (const json& b : s["tree"]["pages_by_depth"]) histogram_total += b["count"].get<uint64_t>();
  EXPECT_EQ(histogram_total, kv);
  // With the layout given, the text summary names it.
  const std::string layout_file = (tmp_.path() / "layout.json").string();
  std::ofstream(layout_file) << LayoutToJson(test_layouts::Small());
  CliResult text = RunCli({"dump", dir, "--layout", layout_file});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("layout test/small-hybrid"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("not open by another process"), std::string::npos);
}

TEST_F(DumpTest, JsonOfAStoreWhosePathsAreNotUtf8) {
  // A Linux file name need not be UTF-8; the data file's path went into the JSON output as it
  // is and nlohmann's dump threw (an uncaught type_error ended the command).
  const std::string dir = FreshStore(test_layouts::Small(), "store-\xff\xfe-");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"dump", dir, "--json"},
        std::vector<std::string>{"dump", dir, "--list", "--json"},
        std::vector<std::string>{"dump", dir, "--verify", "--json", "--no-free-space-scan"}}) {
    CliResult r = RunCli(args);
    EXPECT_EQ(r.code, 0) << args[2] << ": " << r.err;
    EXPECT_TRUE(json::accept(r.out)) << r.out;
  }
  const json s = json::parse(RunCli({"dump", dir, "--json"}).out);
  EXPECT_NE(s["files"][0]["path"].get<std::string>().find("store-\xef\xbf\xbd\xef\xbf\xbd-"),
            std::string::npos);
}

TEST_F(DumpTest, ListFiltersByKindAndHashPrefix) {
  const std::string dir = FreshStore();
  const json all = ListJson(dir);
  CliResult states = RunCli({"dump", dir, "--list", "--kind", "mamba"});
  ASSERT_EQ(states.code, 0) << states.err;
  size_t lines = 0;
  std::istringstream in(states.out);
  for (std::string line; std::getline(in, line);) {
    EXPECT_EQ(line.rfind("mamba ", 0), 0u) << line;
    ++lines;
  }
  size_t mamba = 0;
  for (const json& r : all) mamba += r["kind"] == "mamba";
  EXPECT_EQ(lines, mamba);
  const std::string prefix = all[0]["hash"].get<std::string>().substr(0, 5);
  CliResult some = RunCli({"dump", dir, "--list", "--prefix", prefix, "--json"});
  ASSERT_EQ(some.code, 0);
  const json filtered = json::parse(some.out);
  ASSERT_GE(filtered.size(), 1u);
  for (const json& r : filtered) EXPECT_EQ(r["hash"].get<std::string>().substr(0, 5), prefix);
}

TEST_F(DumpTest, VerifyPassesAHealthyStoreAndNamesACorruptRecord) {
  const std::string dir = FreshStore();
  CliResult good = RunCli({"dump", dir, "--verify", "--json"});
  ASSERT_EQ(good.code, 0) << good.out << good.err;
  const json g = json::parse(good.out);
  EXPECT_EQ(g["ok"], true);
  EXPECT_EQ(g["records_checked"], g["records"]);
  EXPECT_EQ(g["corrupt"], 0);
  EXPECT_EQ(g["scanned_free_space"], true);

  // Flip one payload byte of one record and one header byte of another.
  const json list = ListJson(dir);
  ASSERT_GE(list.size(), 2u);
  auto flip = [&](const json& r, uint64_t at) {
    std::fstream f(r["file"].get<std::string>(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(r["offset"].get<uint64_t>() + at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x20);
    f.seekp(static_cast<std::streamoff>(r["offset"].get<uint64_t>() + at));
    f.write(&c, 1);
  };
  flip(list[0], 4096 + 100);  // payload
  flip(list[1], 20);          // inside the page hash of the header
  CliResult bad = RunCli({"dump", dir, "--verify"});
  EXPECT_EQ(bad.code, 1) << bad.out;
  const std::string key0 =
      list[0]["kind"].get<std::string>() + ":" + list[0]["hash"].get<std::string>();
  const std::string key1 =
      list[1]["kind"].get<std::string>() + ":" + list[1]["hash"].get<std::string>();
  EXPECT_NE(bad.out.find("WRONG corrupt " + key0), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("checksum"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("WRONG corrupt " + key1), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find(" 2 corrupt"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("\nFAILED\n"), std::string::npos);
}

TEST_F(DumpTest, CatalogDamageOrphansAndOverlapsAreReported) {
  const std::string dir = FreshStore();
  const json list = ListJson(dir);
  {
    auto catalog = DiskCatalog::Open(dir + "/catalog", false);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    const std::vector<CatalogRecord> records = Records(**catalog);
    // Remove a chain's first page: its children become orphans (warnings).
    const CatalogRecord* root = nullptr;
    for (const CatalogRecord& r : records) {
      if (r.key.kind == Kind::kKV && r.parent.IsZero()) root = &r;
    }
    ASSERT_NE(root, nullptr);
    // A second name for an existing extent (overlap), and an extent past the end of the file.
    CatalogRecord twin = records[0];
    twin.key.hash.bytes[0] ^= 1;
    CatalogRecord beyond = records[1];
    beyond.key.hash.bytes[0] ^= 1;
    beyond.extent.offset = 64ull << 20;
    const std::vector<CatalogRecord> puts = {twin, beyond};
    const std::vector<DiskKey> deletes = {root->key};
    ASSERT_TRUE((*catalog)->Apply(puts, deletes).ok());
  }
  CliResult r = RunCli({"dump", dir, "--verify", "--json", "--no-free-space-scan"});
  EXPECT_EQ(r.code, 1) << r.out;
  const json v = json::parse(r.out);
  EXPECT_EQ(v["ok"], false);
  EXPECT_GE(v["orphans"].get<int>(), 1);
  EXPECT_EQ(v["overlaps"], 1);
  EXPECT_EQ(v["catalog_problems"], 1);
  std::set<std::string> kinds;
  for (const json& p : v["problems"]) kinds.insert(p["kind"].get<std::string>());
  EXPECT_TRUE(kinds.contains("orphan") && kinds.contains("overlap") && kinds.contains("catalog"));
}

TEST_F(DumpTest, APureSsmStoreShowsItsStatesWithTheirChains) {
  const std::string dir = FreshStore(test_layouts::SmallPureSsm());
  const json list = ListJson(dir);
  ASSERT_GT(list.size(), 0u);
  std::set<std::string> chain_pages;
  size_t deepest = 0;
  for (const json& r : list) {
    ASSERT_EQ(r["kind"], "mamba");  // no KV records at all
    const json& chain = r["chain"];
    ASSERT_TRUE(chain.is_array());
    EXPECT_EQ(chain.size() + 1, r["depth_pages"].get<size_t>());
    EXPECT_EQ(r["parent"], chain.empty() ? json(PageHash::Zero().ToHex()) : chain.back());
    for (const json& h : chain) chain_pages.insert(h.get<std::string>());
    chain_pages.insert(r["hash"].get<std::string>());
    deepest = std::max(deepest, r["depth_pages"].get<size_t>());
  }
  CliResult text = RunCli({"dump", dir, "--list", "--kind", "mamba"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find(" chain "), std::string::npos) << text.out;

  CliResult summary = RunCli({"dump", dir, "--json"});
  ASSERT_EQ(summary.code, 0) << summary.err;
  const json s = json::parse(summary.out);
  EXPECT_EQ(s["pure_ssm"], true);
  EXPECT_EQ(s["page_size_tokens"], 16);  // inferred from the chains (the layout is no preset)
  EXPECT_EQ(s["records"]["kv"]["count"], 0);
  EXPECT_EQ(s["records"]["mamba"]["count"], list.size());
  uint64_t pages = 0;
  for (const json& b : s["tree"]["pages_by_depth"]) pages += b["count"].get<uint64_t>();
  EXPECT_EQ(pages, chain_pages.size());  // every page the chains name, once
  EXPECT_GE(s["tree"]["chains"].get<int>(), 1);
  EXPECT_EQ(s["tree"]["orphan_states"], 0);
  EXPECT_EQ(s["tree"]["longest"][0]["depth_pages"], deepest);
  CliResult good = RunCli({"dump", dir, "--verify", "--json", "--no-free-space-scan"});
  ASSERT_EQ(good.code, 0) << good.out << good.err;
  EXPECT_EQ(json::parse(good.out)["orphans"], 0);

  // A chain entry lost (its state cannot be reached) and a record lost (its chain is left
  // over): both warnings, reclaimed at the store's next open.
  {
    auto catalog = DiskCatalog::Open(dir + "/catalog", false, /*chains=*/true);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    const std::vector<CatalogRecord> records = Records(**catalog);
    ASSERT_GE(records.size(), 2u);
    size_t deep = 0;  // a state past the first page has a chain entry that can go
    while (deep < records.size() && records[deep].chain.empty()) ++deep;
    ASSERT_LT(deep, records.size());
    const CatalogRecord& other = records[deep == 0 ? 1 : 0];
    const std::vector<std::string> raw = {CatalogChainKey(records[deep].key),
                                          CatalogRecordKey(other.key)};
    ASSERT_TRUE((*catalog)->DeleteRaw(raw).ok());
  }
  CliResult r = RunCli({"dump", dir, "--verify", "--json", "--no-free-space-scan"});
  const json v = json::parse(r.out);
  EXPECT_EQ(v["orphans"], 2) << r.out;
  std::string details;
  for (const json& p : v["problems"]) details += p["detail"].get<std::string>() + "\n";
  EXPECT_NE(details.find("does not lead to its depth and parent"), std::string::npos) << details;
  EXPECT_NE(details.find("a chain entry whose state's record is gone"), std::string::npos)
      << details;
}

TEST_F(DumpTest, NotAStoreOrANewerFormatExitsTwo) {
  CliResult missing = RunCli({"dump", (tmp_.path() / "nope").string()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos) << missing.err;
  const std::string empty = (tmp_.path() / "empty").string();
  fs::create_directories(empty);
  CliResult not_store = RunCli({"dump", empty});
  EXPECT_EQ(not_store.code, 2);
  EXPECT_NE(not_store.err.find("is not a Cachepawl store: no catalog"), std::string::npos);
  const std::string file = (tmp_.path() / "file").string();
  std::ofstream(file) << "x";
  EXPECT_EQ(RunCli({"dump", file}).code, 2);

  const std::string dir = FreshStore();
  {
    auto catalog = DiskCatalog::Open(dir + "/catalog", false);
    ASSERT_TRUE(catalog.ok());
    auto meta = (*catalog)->ReadMeta();
    ASSERT_TRUE(meta.ok() && meta->has_value());
    CatalogMeta newer = **meta;
    newer.format_version = kDiskFormatVersion + 1;
    ASSERT_TRUE((*catalog)->WriteMeta(newer).ok());
  }
  CliResult newer = RunCli({"dump", dir});
  EXPECT_EQ(newer.code, 2);
  EXPECT_NE(newer.err.find("format version 2, newer than this cachepawl reads (1)"),
            std::string::npos)
      << newer.err;
}

TEST_F(DumpTest, MissingOrDamagedCatalogAndUnreadableDataExitOne) {
  {
    const std::string dir = FreshStore();
    fs::remove_all(dir + "/catalog");
    CliResult r = RunCli({"dump", dir});
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("catalog (" + dir + "/catalog) is missing"), std::string::npos) << r.err;
    fs::remove_all(dir);
  }
  {
    const std::string dir = FreshStore();
    fs::remove(dir + "/catalog/CURRENT");
    CliResult r = RunCli({"dump", dir});
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("CURRENT file is missing"), std::string::npos) << r.err;
    fs::remove_all(dir);
  }
  {
    const std::string dir = FreshStore();
    for (const auto& entry : fs::directory_iterator(dir + "/catalog")) {
      if (entry.path().filename().string().rfind("MANIFEST", 0) == 0) {
        std::ofstream(entry.path(), std::ios::trunc) << "not a manifest";
      }
    }
    CliResult r = RunCli({"dump", dir});
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.err.find("catalog '" + dir + "/catalog' cannot be opened"), std::string::npos)
        << r.err;
    fs::remove_all(dir);
  }
  {
    const std::string dir = FreshStore();
    fs::remove(dir + "/cachepawl.data");
    fs::create_directory(dir + "/cachepawl.data");
    CliResult summary = RunCli({"dump", dir});
    EXPECT_EQ(summary.code, 1);
    EXPECT_NE(summary.err.find("cachepawl.data cannot be read: not a regular file"),
              std::string::npos)
        << summary.err;
    CliResult verify = RunCli({"dump", dir, "--verify"});
    EXPECT_EQ(verify.code, 1);
    EXPECT_NE(verify.out.find("WRONG file"), std::string::npos) << verify.out;
  }
}

TEST_F(DumpTest, ReadsAStoreThatIsOpen) {
  const std::string dir = FreshStore();
  auto store = Store::Open(Options(dir, test_layouts::Small()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  CliResult summary = RunCli({"dump", dir, "--json"});
  ASSERT_EQ(summary.code, 0) << summary.err;
  EXPECT_GT(json::parse(summary.out)["records"]["kv"]["count"].get<int>(), 0);
  CliResult verify = RunCli({"dump", dir, "--verify", "--no-free-space-scan"});
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  ASSERT_TRUE((*store)->Close().ok());
}

TEST_F(DumpTest, BadArgumentsExitTwo) {
  const std::string dir = FreshStore();
  for (const std::vector<std::string>& argv : {std::vector<std::string>{"dump"},
                                               {"dump", dir, "--list", "--verify"},
                                               {"dump", dir, "--kind", "kv"},
                                               {"dump", dir, "--list", "--kind", "page"},
                                               {"dump", dir, "--list", "--prefix", "xyz"},
                                               {"dump", dir, "--layout", "no-such-model"}}) {
    CliResult r = RunCli(argv);
    EXPECT_EQ(r.code, 2) << argv.back() << ": " << r.err;
    EXPECT_FALSE(r.err.empty());
  }
}

}  // namespace
}  // namespace cachepawl::tools
