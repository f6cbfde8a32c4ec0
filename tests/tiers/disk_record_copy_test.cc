// CopyDiskRecord: a record written through the tier's write protocol is read back whole and
// verified; a record whose bytes changed on disk is Corruption and dropped from the catalog;
// an absent key is NotFound; the copy leaves no pin behind (the record can be removed).
#include "tiers/disk_record_copy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"
#include "tiers/disk_record.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

using testing::SmallHybridLayout;
using testing::TempDir;
using testing::TestKey;
using testing::TestParent;

struct FreeAligned {
  void operator()(std::byte* p) const { std::free(p); }
};

class DiskRecordCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = SmallHybridLayout();
    DiskTierOptions o;
    o.dir = (dir_.path() / "disk").string();
    o.capacity_bytes = 16 * RecordSlotBytes(layout_, Kind::kMamba);
    auto t = DiskTier::Open(o, layout_);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
  }

  // Writes `key`'s record (payload from FillPayloadForKey) with pwrite and commits it.
  DiskExtent Write(const DiskKey& key, const PageHash& parent) {
    auto plan = tier_->BeginWrite(key, parent);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    if (!plan.ok()) return {};
    const uint64_t bytes = RecordSlotBytes(layout_, key.kind);
    void* raw = nullptr;
    EXPECT_EQ(::posix_memalign(&raw, 4096, bytes), 0);
    std::unique_ptr<std::byte, FreeAligned> record(static_cast<std::byte*>(raw));
    std::span<std::byte> all(record.get(), bytes);
    std::memset(all.data(), 0, all.size());
    testing::FillPayloadForKey(key, all.subspan(kRecordHeaderBytes, layout_.RecordBytes(key.kind)));
    RecordHeader h;
    h.kind = key.kind;
    h.hash = key.hash;
    h.parent = parent;
    h.depth = key.depth;
    h.fingerprint = tier_->fingerprint();
    h.payload_bytes = layout_.RecordBytes(key.kind);
    h.record_bytes = bytes;
    const uint64_t sum = WriteRecordHeader(all, h);
    const DiskExtent& x = plan->extent;
    EXPECT_EQ(::pwrite(tier_->files().fd(x.file), all.data(), bytes, static_cast<off_t>(x.offset)),
              static_cast<ssize_t>(bytes));
    EXPECT_TRUE(tier_->CommitWrites(std::span(&plan->ticket, 1), std::span(&sum, 1)).ok());
    return x;
  }

  TempDir dir_;
  ModelLayout layout_;
  std::unique_ptr<DiskTier> tier_;
};

TEST_F(DiskRecordCopyTest, CopiesAVerifiedRecordWholeAndLeavesNoPin) {
  for (Kind kind : {Kind::kKV, Kind::kMamba}) {
    const DiskKey key = TestKey(kind, 3);
    Write(key, TestParent(kind, 3));
    auto copy = CopyDiskRecord(*tier_, key);
    ASSERT_TRUE(copy.ok()) << copy.status().ToString();
    EXPECT_EQ(copy->record().size(), RecordSlotBytes(layout_, kind));
    EXPECT_EQ(copy->info().parent, TestParent(kind, 3));
    EXPECT_EQ(copy->info().key.depth, key.depth);
    const uint64_t payload_bytes = layout_.RecordBytes(kind);
    EXPECT_TRUE(testing::PayloadMatchesKey(key, copy->payload(payload_bytes)));
    auto header = ParseRecordHeader(copy->record().first(kRecordHeaderBytes));
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    EXPECT_EQ(header->hash, key.hash);
    // No pin left: removing frees the extent at once (a write of the full capacity fits).
    EXPECT_TRUE(tier_->Remove(key).ok());
    EXPECT_FALSE(tier_->Contains(key));
  }
}

TEST_F(DiskRecordCopyTest, ChangedBytesAreCorruptionAndTheRecordIsDropped) {
  const DiskKey key = TestKey(Kind::kKV, 5);
  const DiskExtent x = Write(key, TestParent(Kind::kKV, 5));
  const std::byte flipped{0x5a};
  void* raw = nullptr;
  ASSERT_EQ(::posix_memalign(&raw, 4096, 4096), 0);
  std::unique_ptr<std::byte, FreeAligned> block(static_cast<std::byte*>(raw));
  const int fd = tier_->files().fd(x.file);
  const off_t at = static_cast<off_t>(x.offset + kRecordHeaderBytes);
  ASSERT_EQ(::pread(fd, block.get(), 4096, at), 4096);
  block.get()[100] ^= flipped;
  ASSERT_EQ(::pwrite(fd, block.get(), 4096, at), 4096);
  auto copy = CopyDiskRecord(*tier_, key);
  ASSERT_FALSE(copy.ok());
  EXPECT_TRUE(copy.status().IsCorruption()) << copy.status().ToString();
  EXPECT_NE(copy.status().ToString().find(key.ToString()), std::string::npos)
      << copy.status().ToString();
  EXPECT_FALSE(tier_->Contains(key));  // dropped, as any read that fails verification
}

TEST_F(DiskRecordCopyTest, AnAbsentRecordIsNotFound) {
  auto copy = CopyDiskRecord(*tier_, TestKey(Kind::kMamba, 9));
  ASSERT_FALSE(copy.ok());
  EXPECT_TRUE(copy.status().IsNotFound()) << copy.status().ToString();
}

}  // namespace
}  // namespace cachepawl
