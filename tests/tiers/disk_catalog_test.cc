#include "tiers/disk_catalog.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"

namespace cachepawl {
namespace {

using testing::TempDir;
using testing::TestKey;

CatalogRecord MakeRecord(Kind kind, uint64_t n) {
  CatalogRecord r;
  r.key = TestKey(kind, n);
  r.parent = TestKey(kind, n + 100).hash;
  r.extent = {static_cast<uint32_t>(n % 3), n * 8192, 8192};
  r.checksum = 0x1234567890abcdefull ^ n;
  r.fingerprint.fill(static_cast<uint8_t>(n));
  r.stamp = 1000 + n;
  return r;
}

void ExpectSame(const CatalogRecord& a, const CatalogRecord& b) {
  EXPECT_EQ(a.key.kind, b.key.kind);
  EXPECT_EQ(a.key.hash, b.key.hash);
  EXPECT_EQ(a.key.depth, b.key.depth);
  EXPECT_EQ(a.parent, b.parent);
  EXPECT_EQ(a.extent, b.extent);
  EXPECT_EQ(a.checksum, b.checksum);
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(a.stamp, b.stamp);
}

TEST(DiskCatalogTest, ValueEncodingRoundTripsAndRejectsDamage) {
  for (Kind kind : {Kind::kKV, Kind::kMamba}) {
    const CatalogRecord r = MakeRecord(kind, 5);
    const std::string key = CatalogRecordKey(r.key);
    const std::string value = EncodeCatalogValue(r);
    auto back = DecodeCatalogRecord(key, value);
    ASSERT_TRUE(back.has_value());
    ExpectSame(*back, r);
    EXPECT_FALSE(DecodeCatalogRecord(key, value.substr(1)).has_value());
    EXPECT_FALSE(DecodeCatalogRecord(key, value + "x").has_value());
    std::string bad_version = value;
    bad_version[0] = 9;
    EXPECT_FALSE(DecodeCatalogRecord(key, bad_version).has_value());
    std::string bad_prefix = key;
    bad_prefix[0] = 'X';
    EXPECT_FALSE(DecodeCatalogRecord(bad_prefix, value).has_value());
  }
}

TEST(DiskCatalogTest, ApplyIsOneBatchAndSurvivesReopen) {
  TempDir dir;
  const std::string path = (dir.path() / "cat").string();
  std::map<std::string, CatalogRecord> want;
  {
    auto cat = DiskCatalog::Open(path, /*sync=*/false);
    ASSERT_TRUE(cat.ok()) << cat.status().ToString();
    auto meta = (*cat)->ReadMeta();
    ASSERT_TRUE(meta.ok());
    EXPECT_FALSE(meta->has_value());
    CatalogMeta m;
    m.fingerprint.fill(7);
    m.paths = {"/a/b", "/c"};
    ASSERT_TRUE((*cat)->WriteMeta(m).ok());
    std::vector<CatalogRecord> puts;
    for (uint64_t i = 0; i < 20; ++i)
      puts.push_back(MakeRecord(i % 2 ? Kind::kMamba : Kind::kKV, i));
    ASSERT_TRUE((*cat)->Apply(puts, {}).ok());
    // Delete two and re-put one with a new extent in the same batch.
    std::vector<DiskKey> dels = {puts[3].key, puts[4].key};
    CatalogRecord moved = puts[4];
    moved.extent.offset += 1 << 20;
    ASSERT_TRUE((*cat)->Apply(std::span<const CatalogRecord>(&moved, 1), dels).ok());
    for (const auto& r : puts) want[DiskKeyIdentity(r.key)] = r;
    want.erase(DiskKeyIdentity(puts[3].key));
    want[DiskKeyIdentity(moved.key)] = moved;
  }
  auto cat = DiskCatalog::Open(path, false);
  ASSERT_TRUE(cat.ok());
  auto meta = (*cat)->ReadMeta();
  ASSERT_TRUE(meta.ok() && meta->has_value());
  EXPECT_EQ((*meta)->paths, (std::vector<std::string>{"/a/b", "/c"}));
  EXPECT_EQ((*meta)->fingerprint[0], 7);
  size_t seen = 0;
  ASSERT_TRUE((*cat)
                  ->ForEach(
                      [&](const CatalogRecord& r) {
                        ++seen;
                        auto it = want.find(DiskKeyIdentity(r.key));
                        ASSERT_NE(it, want.end());
                        ExpectSame(r, it->second);
                      },
                      [&](const std::string&) { ADD_FAILURE() << "bad entry"; })
                  .ok());
  EXPECT_EQ(seen, want.size());
}

TEST(DiskCatalogTest, SecondOpenOfTheSameFolderFailsClearly) {
  TempDir dir;
  const std::string path = (dir.path() / "cat").string();
  auto first = DiskCatalog::Open(path, false);
  ASSERT_TRUE(first.ok());
  auto second = DiskCatalog::Open(path, false);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsIOError()) << second.status().ToString();
  EXPECT_NE(second.status().message().find(path), std::string::npos);
}

TEST(DiskCatalogTest, DamagedDatabaseFailsToOpenWithItsPath) {
  TempDir dir;
  const std::string path = (dir.path() / "cat").string();
  { ASSERT_TRUE(DiskCatalog::Open(path, false).ok()); }
  std::ofstream(path + "/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";
  auto cat = DiskCatalog::Open(path, false);
  ASSERT_FALSE(cat.ok());
  EXPECT_NE(cat.status().message().find(path), std::string::npos) << cat.status().ToString();
  ASSERT_TRUE(DiskCatalog::Destroy(path).ok());
}

}  // namespace
}  // namespace cachepawl
