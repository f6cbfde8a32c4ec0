// Disk faults made while the store is closed (docs/RELIABILITY.md):
//   - a data file truncated (to half, to 0, to a size not a multiple of 4096) or removed: the
//     reopened store drops the records past its end (StoreStats::disk_dropped_at_open counts
//     them exactly; their lookups miss) and serves every other record byte for byte;
//   - the catalog folder made read-only: Open fails with Unavailable naming the folder (the
//     store does not open read-only: it could not record what it saves or evicts), and opens
//     with everything once the mode is restored;
//   - the data file made unreadable: Open fails with an IOError naming the file.
// The permission scenarios run in a child as an unprivileged user (root ignores permission
// bits): tests/common/isolated_child.h.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "store/store.h"
#include "tests/common/isolated_child.h"
#include "tests/store/store_test_checks.h"
#include "tests/store/store_test_util.h"
#include "tiers/disk_catalog.h"

namespace cachepawl {
namespace {

constexpr int kPrompts = 40;

StoreOptions FaultOptions(const std::string& root) {
  return CpuStoreOptions(TinyHybrid(), 16 * 8192, 4 << 20, 16 << 20, root + "/store");
}

std::vector<uint32_t> Prompt(int i) { return Tokens(5000 + 1000 * i, 4 * 4); }

// Saves prompts [first, last) in a store opened on `o`, and closes it.
void SaveAndClose(const StoreOptions& o, int first, int last) {
  auto store = Store::Open(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (int i = first; i < last; ++i) SaveAll(store->get(), "", Prompt(i), true);
  ASSERT_TRUE((*store)->Close().ok());
}

// Where the catalog of the closed store of `o` says each record lies: (hash, kind) -> extent.
std::map<std::pair<PageHash, Kind>, DiskExtent> CatalogExtents(const StoreOptions& o) {
  std::map<std::pair<PageHash, Kind>, DiskExtent> out;
  auto catalog = DiskCatalog::Open(o.disk_dir + "/catalog", false);
  EXPECT_TRUE(catalog.ok()) << catalog.status().ToString();
  if (!catalog.ok()) return out;
  EXPECT_TRUE((*catalog)
                  ->ForEach(
                      [&](const CatalogRecord& r) {
                        out[{r.key.hash, r.key.kind}] = r.extent;
                      },
                      [](const std::string&) { ADD_FAILURE() << "undecodable entry"; })
                  .ok());
  return out;
}

// Whether every record of prompt `i` (its pages and its state) ends at or before `end`.
bool PromptWithin(Store* store, const std::map<std::pair<PageHash, Kind>, DiskExtent>& extents,
                  int i, uint64_t end) {
  const std::vector<PageHash> hashes = store->HashTokens("", Prompt(i));
  std::vector<std::pair<PageHash, Kind>> keys;
  for (const PageHash& h : hashes) keys.push_back({h, Kind::kKV});
  keys.push_back({hashes.back(), Kind::kMamba});
  for (const auto& k : keys) {
    auto it = extents.find(k);
    if (it == extents.end() || it->second.end() > end) return false;
  }
  return true;
}

// Reopens after the data file was cut to `size` bytes: exactly the records past the cut are
// dropped (counted), every prompt whose records all lie before it loads byte for byte, the
// others miss or load the right bytes, and the store saves again.
void ExpectReopenAfterTruncation(const StoreOptions& o, uint64_t size,
                                 const std::map<std::pair<PageHash, Kind>, DiskExtent>& extents) {
  uint64_t past = 0;
  for (const auto& [key, extent] : extents) past += extent.end() > size;
  auto store = Store::Open(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->Stats().disk_dropped_at_open, past) << "cut at " << size;
  int whole = 0;
  for (int i = 0; i < kPrompts; ++i) {
    auto m = (*store)->Lookup("", Prompt(i));
    ASSERT_TRUE(m.ok());
    if (PromptWithin(store->get(), extents, i, size)) {
      ++whole;
      EXPECT_EQ(m->reusable_pages, 4u) << "prompt " << i << ", cut at " << size;
    }
    if (m->reusable_pages > 0) {
      EXPECT_TRUE(LoadAndVerify(store->get(), *m).ok()) << "prompt " << i;
    }
  }
  // Neither side of the cut is empty (else the test checked less than it claims).
  EXPECT_GT(past, 0u);
  if (size == 0) {
    EXPECT_EQ(whole, 0);
  } else {
    EXPECT_GT(whole, 0);
  }
  struct stat st;
  ASSERT_EQ(::stat((o.disk_dir + "/cachepawl.data").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), o.disk_bytes) << "the file was not sized again";
  SaveAll(store->get(), "", Prompt(kPrompts), true);
  ASSERT_TRUE((*store)->Close().ok());
  auto again = Store::Open(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto m = (*again)->Lookup("", Prompt(kPrompts));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 4u);
  EXPECT_TRUE(LoadAndVerify(again->get(), *m).ok());
  EXPECT_TRUE((*again)->Close().ok());
}

// A closed store holding kPrompts prompts, and where its catalog says their records lie.
template <typename Base>
class SavedStore : public Base {
 protected:
  void SetUp() override {
    SaveAndClose(o_, 0, kPrompts);
    if (this->HasFatalFailure()) return;
    extents_ = CatalogExtents(o_);
    ASSERT_EQ(extents_.size(), kPrompts * 5u);
  }
  testing::TempDir dir_;
  const StoreOptions o_ = FaultOptions(dir_.str());
  std::map<std::pair<PageHash, Kind>, DiskExtent> extents_;
};

enum class Cut { kHalf, kZero, kOddBytes };

using TruncatedDataFileTest = SavedStore<::testing::TestWithParam<Cut>>;

TEST_P(TruncatedDataFileTest, RecordsPastTheEndMissTheRestServeByteExact) {
  uint64_t used = 0;
  for (const auto& [key, extent] : extents_) used = std::max(used, extent.end());
  uint64_t size = 0;
  switch (GetParam()) {
    case Cut::kHalf:
      size = used / 2 / 4096 * 4096;
      break;
    case Cut::kZero:
      break;
    case Cut::kOddBytes:
      size = used / 2 / 4096 * 4096 + 1000;  // inside a record
      break;
  }
  ASSERT_EQ(::truncate((o_.disk_dir + "/cachepawl.data").c_str(), static_cast<off_t>(size)), 0);
  ExpectReopenAfterTruncation(o_, size, extents_);
}

INSTANTIATE_TEST_SUITE_P(Cuts, TruncatedDataFileTest,
                         ::testing::Values(Cut::kHalf, Cut::kZero, Cut::kOddBytes),
                         [](const ::testing::TestParamInfo<Cut>& p) {
                           return p.param == Cut::kHalf   ? std::string("Half")
                                  : p.param == Cut::kZero ? std::string("Zero")
                                                          : std::string("OddBytes");
                         });

using StoreDiskFaultsTest = SavedStore<::testing::Test>;

TEST_F(StoreDiskFaultsTest, RemovedDataFileDropsEveryRecordAndStartsAgain) {
  ASSERT_EQ(::unlink((o_.disk_dir + "/cachepawl.data").c_str()), 0);
  // A file made anew holds none of the catalog's records: as a file cut to 0.
  ExpectReopenAfterTruncation(o_, 0, extents_);
}

void ReadOnlyCatalogAndUnreadableDataFile(const std::string& root) {
  const StoreOptions o = FaultOptions(root);
  SaveAndClose(o, 0, 5);
  if (::testing::Test::HasFatalFailure()) return;
  const std::string catalog = o.disk_dir + "/catalog";
  const std::string data = o.disk_dir + "/cachepawl.data";
  auto reopen_serves_all = [&] {
    auto store = Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int i = 0; i < 5; ++i) {
      auto m = (*store)->Lookup("", Prompt(i));
      ASSERT_TRUE(m.ok());
      EXPECT_EQ(m->reusable_pages, 4u) << "prompt " << i;
      EXPECT_TRUE(LoadAndVerify(store->get(), *m).ok());
    }
    EXPECT_TRUE((*store)->Close().ok());
  };

  // Open is refused with a status of `code` whose message holds `name` and `why`.
  auto expect_refused = [&](bool (Status::*code)() const, const std::string& name,
                            const std::string& why) {
    auto refused = Store::Open(o);
    ASSERT_FALSE(refused.ok()) << "opened despite the fault (" << why << "); running as root?";
    const std::string msg = refused.status().ToString();
    EXPECT_TRUE((refused.status().*code)()) << msg;
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
  };
  ASSERT_EQ(::chmod(catalog.c_str(), 0500), 0);
  expect_refused(&Status::IsUnavailable, "catalog '" + catalog + "'", "not writable");
  ASSERT_EQ(::chmod(catalog.c_str(), 0700), 0);
  reopen_serves_all();

  ASSERT_EQ(::chmod(data.c_str(), 0), 0);
  expect_refused(&Status::IsIOError, "data file '" + data + "'", "Permission denied");
  ASSERT_EQ(::chmod(data.c_str(), 0600), 0);
  reopen_serves_all();
}

TEST(StoreDiskPermissionsTest, ReadOnlyCatalogFolderAndUnreadableDataFileFailNamingThem) {
  testing::RunInIsolatedChild(testing::ChildWorld::kUnprivileged,
                              ReadOnlyCatalogAndUnreadableDataFile);
}

}  // namespace
}  // namespace cachepawl
