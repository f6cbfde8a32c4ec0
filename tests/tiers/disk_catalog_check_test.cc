#include "tiers/disk_catalog_check.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/tiers/disk_test_util.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

using testing::SmallHybridLayout;
using testing::TestKey;

class DiskCatalogCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rules_.fingerprint = layout_.Fingerprint();
    rules_.files = {{"/d/a.data", 1 << 20}, {"/d/b.data", 1 << 20}};
    rules_.layout = &layout_;
  }

  // A KV record that keeps the rule: the layout's slot size, in file 1.
  CatalogRecord GoodKv() const {
    CatalogRecord r;
    r.key = TestKey(Kind::kKV, 1);
    r.fingerprint = layout_.Fingerprint();
    r.extent = {1, 8192, RecordSlotBytes(layout_, Kind::kKV)};
    return r;
  }

  ModelLayout layout_ = SmallHybridLayout();
  CatalogRecordRules rules_;
};

TEST_F(DiskCatalogCheckTest, ARecordThatFitsKeepsTheRule) {
  EXPECT_EQ(CatalogRecordFault(GoodKv(), rules_), std::nullopt);
  CatalogRecord state = GoodKv();
  state.key = TestKey(Kind::kMamba, 2);
  state.extent = {0, 0, RecordSlotBytes(layout_, Kind::kMamba)};
  EXPECT_EQ(CatalogRecordFault(state, rules_), std::nullopt);
  // A record that ends exactly at the end of its file fits.
  CatalogRecord last = GoodKv();
  last.extent.offset = (1 << 20) - last.extent.bytes;
  EXPECT_EQ(CatalogRecordFault(last, rules_), std::nullopt);
}

TEST_F(DiskCatalogCheckTest, EachFaultNamesTheFieldAndTheValue) {
  CatalogRecord r = GoodKv();
  r.fingerprint[0] ^= 1;
  EXPECT_EQ(CatalogRecordFault(r, rules_), "layout fingerprint differs from the catalog's");

  r = GoodKv();
  r.extent.file = 2;
  EXPECT_EQ(CatalogRecordFault(r, rules_), "extent in file 2 of 2");

  r = GoodKv();
  r.extent.offset = 8192 + 512;
  EXPECT_EQ(CatalogRecordFault(r, rules_), "extent /d/b.data @8704 +12288 is not 4 KiB-aligned");
  r = GoodKv();
  r.extent.bytes = 12288 + 1;
  EXPECT_EQ(CatalogRecordFault(r, rules_), "extent /d/b.data @8192 +12289 is not 4 KiB-aligned");
  r = GoodKv();
  r.extent.bytes = 0;  // shorter than a record header
  EXPECT_EQ(CatalogRecordFault(r, rules_), "extent /d/b.data @8192 +0 is not 4 KiB-aligned");

  r = GoodKv();
  r.extent.offset = (1 << 20) - 8192;
  EXPECT_EQ(CatalogRecordFault(r, rules_),
            "extent /d/b.data @1040384 +12288 ends past the file's 1048576 bytes");

  r = GoodKv();
  r.key = TestKey(Kind::kWindowKV, 3);
  EXPECT_EQ(CatalogRecordFault(r, rules_),
            "a window record in the store of a layout without sliding-window layers");

  r = GoodKv();
  r.extent.bytes = RecordSlotBytes(layout_, Kind::kMamba);
  EXPECT_EQ(CatalogRecordFault(r, rules_),
            "extent of 16384 bytes (a kv record of this layout takes 12288)");
}

TEST_F(DiskCatalogCheckTest, WhatIsNotKnownIsNotChecked) {
  // A file whose size is unknown (unreadable): an extent past any size passes that check.
  rules_.files[1].size = std::nullopt;
  CatalogRecord r = GoodKv();
  r.extent.offset = uint64_t{1} << 40;
  EXPECT_EQ(CatalogRecordFault(r, rules_), std::nullopt);
  // A file of 0 bytes (created by this open) holds no record.
  rules_.files[1].size = 0;
  EXPECT_EQ(CatalogRecordFault(GoodKv(), rules_),
            "extent /d/b.data @8192 +12288 ends past the file's 0 bytes");
  // Without a layout, neither the kind nor the record size is checked.
  rules_.files[1].size = 1 << 20;
  rules_.layout = nullptr;
  r = GoodKv();
  r.key = TestKey(Kind::kWindowKV, 3);
  r.extent.bytes = 4096;
  EXPECT_EQ(CatalogRecordFault(r, rules_), std::nullopt);
}

TEST(DiskCatalogCheck, ExtentTextNamesPathOffsetAndLength) {
  EXPECT_EQ(CatalogExtentText("/x/y", DiskExtent{0, 4096, 8192}), "/x/y @4096 +8192");
}

// One verdict on the meta entry for the disk tier and the dump; each acts on it (the header's
// table), neither compares the version itself.
TEST(DiskCatalogCheck, MetaVerdictFollowsTheFormatVersion) {
  EXPECT_EQ(CheckCatalogMeta(std::nullopt), CatalogMetaVerdict::kMissing);
  CatalogMeta meta;  // this build's format by default
  EXPECT_EQ(CheckCatalogMeta(meta), CatalogMetaVerdict::kCurrent);
  meta.format_version = kDiskFormatVersion + 1;
  EXPECT_EQ(CheckCatalogMeta(meta), CatalogMetaVerdict::kNewer);
  meta.format_version = 0;
  EXPECT_EQ(CheckCatalogMeta(meta), CatalogMetaVerdict::kInvalid);
  // Between 0 and this build's: none yet while kDiskFormatVersion is 1.
  for (uint32_t older = 1; older < kDiskFormatVersion; ++older) {
    meta.format_version = older;
    EXPECT_EQ(CheckCatalogMeta(meta), CatalogMetaVerdict::kOlder) << older;
  }
}

}  // namespace
}  // namespace cachepawl
