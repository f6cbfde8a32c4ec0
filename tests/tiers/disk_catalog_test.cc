#include "tiers/disk_catalog.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"

namespace cachepawl {
namespace {

using testing::TempDir;
using testing::TestCatalogRecord;
using testing::TestKey;

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
    const CatalogRecord r = TestCatalogRecord(kind, 5);
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

TEST(DiskCatalogTest, MetaEncodingRoundTripsAndRejectsDamage) {
  CatalogMeta meta;
  meta.fingerprint.fill(7);
  meta.paths = {"/mnt/a/data", "", std::string(4096, 'p')};
  const std::string value = EncodeCatalogMeta(meta);
  auto back = DecodeCatalogMeta(value, "/cat");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->format_version, meta.format_version);
  EXPECT_EQ(back->fingerprint, meta.fingerprint);
  EXPECT_EQ(back->paths, meta.paths);
  EXPECT_EQ(EncodeCatalogMeta(*back), value);
  for (const std::string& bad : {value.substr(0, value.size() - 1), value + "x", std::string()}) {
    auto decoded = DecodeCatalogMeta(bad, "/cat");
    ASSERT_FALSE(decoded.ok());
    EXPECT_TRUE(decoded.status().IsCorruption());
    EXPECT_NE(decoded.status().message().find("catalog '/cat'"), std::string::npos);
  }
  meta.paths.back().push_back('p');  // 4097 bytes: longer than a path may be
  EXPECT_FALSE(DecodeCatalogMeta(EncodeCatalogMeta(meta), "/cat").ok());
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
      puts.push_back(TestCatalogRecord(i % 2 ? Kind::kMamba : Kind::kKV, i));
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

TEST(DiskCatalogTest, ChainEncodingRoundTripsAndRejectsDamage) {
  const DiskKey state = TestKey(Kind::kMamba, 3);
  const std::vector<PageHash> chain = {TestKey(Kind::kKV, 0).hash, TestKey(Kind::kKV, 1).hash,
                                       TestKey(Kind::kKV, 2).hash};
  const std::string key = CatalogChainKey(state);
  const std::string value = EncodeCatalogChain(chain);
  EXPECT_EQ(key[0], kCatalogChainPrefix);
  EXPECT_EQ(value.size(), 5u + 3 * 32);
  auto back = DecodeCatalogChain(key, value);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->first.hash, state.hash);
  EXPECT_EQ(back->first.depth, state.depth);
  EXPECT_EQ(back->second, chain);
  auto empty = DecodeCatalogChain(key, EncodeCatalogChain({}));
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->second.empty());
  EXPECT_FALSE(DecodeCatalogChain(key, value.substr(0, value.size() - 1)).has_value());
  EXPECT_FALSE(DecodeCatalogChain(key, value + "x").has_value());
  std::string bad_version = value;
  bad_version[0] = 2;
  EXPECT_FALSE(DecodeCatalogChain(key, bad_version).has_value());
  EXPECT_FALSE(DecodeCatalogChain(CatalogRecordKey(state), value).has_value());  // not 'C'
  EXPECT_FALSE(DecodeCatalogChain(CatalogChainKey(TestKey(Kind::kKV, 3)), value).has_value());
}

TEST(DiskCatalogTest, ChainsArePutAndDeletedInTheBatchesOfTheirStates) {
  TempDir dir;
  const std::string path = (dir.path() / "cat").string();
  auto cat = DiskCatalog::Open(path, /*sync=*/false, /*chains=*/true);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  CatalogRecord a = TestCatalogRecord(Kind::kMamba, 1), b = TestCatalogRecord(Kind::kMamba, 2);
  a.chain = {TestKey(Kind::kKV, 10).hash};
  b.chain = {TestKey(Kind::kKV, 10).hash, TestKey(Kind::kKV, 11).hash};
  ASSERT_TRUE((*cat)->Apply(std::vector<CatalogRecord>{a, b}, {}).ok());
  // A put without a chain (a new access stamp) keeps the stored one.
  CatalogRecord restamped = a;
  restamped.chain.clear();
  restamped.stamp += 50;
  ASSERT_TRUE((*cat)->Apply(std::span<const CatalogRecord>(&restamped, 1), {}).ok());
  auto scan = [&] {
    std::map<std::string, CatalogRecord> seen;
    std::vector<std::string> bad;
    EXPECT_TRUE((*cat)
                    ->ForEach([&](const CatalogRecord& r) { seen[DiskKeyIdentity(r.key)] = r; },
                              [&](const std::string& raw) { bad.push_back(raw); })
                    .ok());
    return std::make_pair(seen, bad);
  };
  auto [seen, bad] = scan();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(bad.empty());
  EXPECT_EQ(seen[DiskKeyIdentity(a.key)].chain, a.chain);
  EXPECT_EQ(seen[DiskKeyIdentity(a.key)].stamp, restamped.stamp);
  EXPECT_EQ(seen[DiskKeyIdentity(b.key)].chain, b.chain);
  // Deleting a state deletes its chain in the same batch.
  const std::vector<DiskKey> dels = {a.key};
  ASSERT_TRUE((*cat)->Apply({}, dels).ok());
  std::tie(seen, bad) = scan();
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_TRUE(bad.empty());
  // A chain whose record went some other way is reported, to be deleted.
  const std::vector<std::string> raw = {CatalogRecordKey(b.key)};
  ASSERT_TRUE((*cat)->DeleteRaw(raw).ok());
  std::tie(seen, bad) = scan();
  EXPECT_TRUE(seen.empty());
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0], CatalogChainKey(b.key));
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
