// Injected faults: every one ends in a clear error or a miss, never a crash, never wrong bytes,
// and the rest of the tier keeps working.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/transfer/disk_mover_fixture.h"

namespace cachepawl {
namespace {

using testing::FaultInjectingBlockIo;
using testing::TestKey;
using Action = FaultInjectingBlockIo::Action;

class DiskFaultTest : public testing::DiskMoverFixture {
 protected:
  // Everything else still works: the records written before read back, and new ones write.
  void ExpectTheRestWorks(DiskMover& e, const std::vector<uint64_t>& good_kv) {
    for (uint64_t n : good_kv) EXPECT_TRUE(ReadOne(e, Kind::kKV, n).ok()) << n;
    WriteOk(e, Kind::kKV, 500, 3);
    for (uint64_t n = 500; n < 503; ++n) EXPECT_TRUE(ReadOne(e, Kind::kKV, n).ok()) << n;
  }

  // Overwrites one byte of record `n`'s extent in its data file (through a buffered fd).
  void CorruptOnDisk(DiskMover& e, Kind kind, uint64_t n, uint64_t offset_in_record) {
    auto info = e.tier().Lookup(TestKey(kind, n));
    ASSERT_TRUE(info.has_value());
    const std::string& path = e.tier().files().path(info->extent.file);
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char b = 0;
    const off_t at = static_cast<off_t>(info->extent.offset + offset_in_record);
    ASSERT_EQ(::pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    ASSERT_EQ(::pwrite(fd, &b, 1, at), 1);
    ::fsync(fd);
    ::close(fd);
  }
};

TEST_F(DiskFaultTest, EioOnWriteFailsThatRecordOnly) {
  auto e = OpenMover(true);
  faults_->AddRule({BlockIoOp::kWrite, Action::kError, EIO, 0, /*skip=*/2, 1});
  auto r = Write(*e, Kind::kKV, 0, 5);
  for (size_t i = 0; i < 5; ++i) {
    if (i == 2) {
      EXPECT_TRUE(r->records[i].status.IsIOError()) << r->records[i].status.ToString();
      EXPECT_NE(r->records[i].status.message().find("Input/output error"), std::string::npos);
    } else {
      EXPECT_TRUE(r->records[i].status.ok());
    }
  }
  EXPECT_FALSE(e->tier().Contains(TestKey(Kind::kKV, 2)));
  EXPECT_EQ(e->stats().write_io_errors, 1u);
  EXPECT_EQ(e->stats().bytes_used, 4 * RecordSlotBytes(layout_, Kind::kKV));  // extent freed
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 2).IsNotFound());
  ExpectTheRestWorks(*e, {0, 1, 3, 4});
  WriteOk(*e, Kind::kKV, 2, 1);  // a retry succeeds
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 2).ok());
}

TEST_F(DiskFaultTest, EnospcOnWriteIsNoSpace) {
  auto e = OpenMover(true);
  faults_->AddRule({BlockIoOp::kWrite, Action::kError, ENOSPC, 0, 0, 1});
  auto r = Write(*e, Kind::kMamba, 0, 2);
  EXPECT_TRUE(r->records[0].status.IsNoSpace()) << r->records[0].status.ToString();
  EXPECT_TRUE(r->records[1].status.ok());
  EXPECT_EQ(e->stats().no_space, 1u);
  EXPECT_FALSE(e->tier().Contains(TestKey(Kind::kMamba, 0)));
  ExpectTheRestWorks(*e, {});
}

TEST_F(DiskFaultTest, ShortWriteIsAnErrorAndNeverPublished) {
  auto e = OpenMover(true);
  faults_->AddRule({BlockIoOp::kWrite, Action::kShort, 0, /*bytes=*/4096, 0, 1});
  auto r = Write(*e, Kind::kKV, 0, 2);
  EXPECT_TRUE(r->records[0].status.IsIOError());
  EXPECT_NE(r->records[0].status.message().find("short write"), std::string::npos);
  EXPECT_EQ(e->stats().short_writes, 1u);
  EXPECT_FALSE(e->tier().Contains(TestKey(Kind::kKV, 0)));
  ExpectTheRestWorks(*e, {1});
}

TEST_F(DiskFaultTest, TornWriteOverAnOldRecordIsCaughtOnRead) {
  // One extent's worth of space: the torn record lands on the extent of a deleted one, so
  // its header is new but its payload is the old record's bytes.
  options_.tier.data_paths.clear();
  options_.tier.capacity_bytes = RecordSlotBytes(layout_, Kind::kMamba);
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kKV, 0, 1);
  ASSERT_TRUE(e->tier().Remove(TestKey(Kind::kKV, 0)).ok());
  faults_->AddRule({BlockIoOp::kWrite, Action::kTorn, 0, /*bytes=*/4096, 0, 1});
  WriteOk(*e, Kind::kKV, 1, 1);  // the drive claimed success
  ASSERT_TRUE(e->tier().Contains(TestKey(Kind::kKV, 1)));
  const Status s = ReadOne(*e, Kind::kKV, 1);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.ToString();
  EXPECT_EQ(e->stats().checksum_failures, 1u);
  EXPECT_EQ(e->stats().dropped_on_read, 1u);
  EXPECT_FALSE(e->tier().Contains(TestKey(Kind::kKV, 1)));
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 1).IsNotFound());
  WriteOk(*e, Kind::kKV, 2, 1);
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 2).ok());
}

TEST_F(DiskFaultTest, TornWriteWhereNothingLandedIsAHeaderMismatch) {
  options_.tier.data_paths.clear();
  options_.tier.capacity_bytes = RecordSlotBytes(layout_, Kind::kMamba);
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kKV, 0, 1);
  ASSERT_TRUE(e->tier().Remove(TestKey(Kind::kKV, 0)).ok());
  faults_->AddRule({BlockIoOp::kWrite, Action::kTorn, 0, /*bytes=*/0, 0, 1});
  WriteOk(*e, Kind::kKV, 1, 1);  // the old record 0 is still on the extent
  const Status s = ReadOne(*e, Kind::kKV, 1);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("page hash"), std::string::npos) << s.ToString();
  EXPECT_EQ(e->stats().header_mismatches, 1u);
}

TEST_F(DiskFaultTest, EioOnReadIsAnErrorAndDropsTheRecord) {
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kKV, 0, 3);
  faults_->AddRule({BlockIoOp::kRead, Action::kError, EIO, 0, 0, 1});
  const Status s = ReadOne(*e, Kind::kKV, 1);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(e->stats().read_io_errors, 1u);
  EXPECT_FALSE(e->tier().Contains(TestKey(Kind::kKV, 1)));
  ExpectTheRestWorks(*e, {0, 2});
}

TEST_F(DiskFaultTest, ShortReadIsCorruption) {
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kMamba, 0, 2);
  faults_->AddRule({BlockIoOp::kRead, Action::kShort, 0, /*bytes=*/8192, 0, 1});
  const Status s = ReadOne(*e, Kind::kMamba, 0);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("short read"), std::string::npos);
  EXPECT_EQ(e->stats().short_reads, 1u);
  EXPECT_TRUE(ReadOne(*e, Kind::kMamba, 1).ok());
}

TEST_F(DiskFaultTest, BytesFlippedInFlightAreCaught) {
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kKV, 0, 4);
  // Payload byte, then a header byte (inside the page hash), then the header check itself.
  faults_->AddRule({BlockIoOp::kRead, Action::kFlip, 0, 4096 + 1234, 0, 1});
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 0).IsCorruption());
  EXPECT_EQ(e->stats().checksum_failures, 1u);
  faults_->AddRule({BlockIoOp::kRead, Action::kFlip, 0, 20, 0, 1});
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 1).IsCorruption());
  faults_->AddRule({BlockIoOp::kRead, Action::kFlip, 0, 150, 0, 1});
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 2).IsCorruption());
  EXPECT_EQ(e->stats().header_mismatches, 2u);
  EXPECT_EQ(e->stats().dropped_on_read, 3u);
  ExpectTheRestWorks(*e, {3});
}

TEST_F(DiskFaultTest, BytesFlippedOnDiskAreCaughtAndTheKeyCanBeRewritten) {
  auto e = OpenMover();
  WriteOk(*e, Kind::kKV, 0, 3);
  WriteOk(*e, Kind::kMamba, 0, 2);
  CorruptOnDisk(*e, Kind::kKV, 1, 4096 + 7);  // payload
  CorruptOnDisk(*e, Kind::kMamba, 1, 90);     // header: fingerprint
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 1).IsCorruption());
  EXPECT_TRUE(ReadOne(*e, Kind::kMamba, 1).IsCorruption());
  EXPECT_EQ(e->stats().checksum_failures, 1u);
  EXPECT_EQ(e->stats().header_mismatches, 1u);
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 0).ok());
  EXPECT_TRUE(ReadOne(*e, Kind::kMamba, 0).ok());
  WriteOk(*e, Kind::kKV, 1, 1);
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 1).ok());
}

TEST_F(DiskFaultTest, DataFileTruncatedUnderAnOpenTier) {
  options_.tier.data_paths.clear();
  auto e = OpenMover();
  WriteOk(*e, Kind::kKV, 0, 6);
  // Cut the file in the middle of the records: those past the cut read short.
  ASSERT_EQ(::truncate(e->tier().files().path(0).c_str(), 3 * RecordSlotBytes(layout_, Kind::kKV)),
            0);
  size_t ok = 0, corrupt = 0;
  for (uint64_t n = 0; n < 6; ++n) {
    const Status s = ReadOne(*e, Kind::kKV, n);
    if (s.ok())
      ++ok;
    else if (s.IsCorruption())
      ++corrupt;
    else
      ADD_FAILURE() << s.ToString();
  }
  EXPECT_EQ(ok, 3u);
  EXPECT_EQ(corrupt, 3u);
  EXPECT_EQ(e->stats().short_reads, 3u);
  ExpectTheRestWorks(*e, {});
}

TEST_F(DiskFaultTest, DataFileDeletedOrTruncatedBetweenRuns) {
  {
    auto e = OpenMover();
    WriteOk(*e, Kind::kKV, 0, 8);  // striped: 4 in each file
    WriteOk(*e, Kind::kMamba, 0, 2);
  }
  std::filesystem::remove(options_.tier.data_paths[0]);
  auto e = OpenMover();
  ASSERT_NE(e, nullptr);
  const DiskTierStats s = e->stats();
  EXPECT_EQ(s.records_kv + s.records_mamba, 5u);
  EXPECT_EQ(s.dropped_at_open, 5u);
  size_t ok = 0;
  for (uint64_t n = 0; n < 8; ++n) {
    const Status st = ReadOne(*e, Kind::kKV, n);
    EXPECT_TRUE(st.ok() || st.IsNotFound()) << st.ToString();
    ok += st.ok();
  }
  EXPECT_EQ(ok, 4u);
  ExpectTheRestWorks(*e, {});
}

TEST_F(DiskFaultTest, CatalogThatCannotBeOpenedFailsTheOpen) {
  { auto e = OpenMover(); }
  std::ofstream(options_.tier.CatalogDir() + "/CURRENT", std::ios::trunc) << "nonsense\n";
  auto e = DiskMover::Open(options_, layout_, host_.get());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(options_.tier.CatalogDir()), std::string::npos)
      << e.status().ToString();
  // And a catalog folder that is a file.
  std::filesystem::remove_all(options_.tier.CatalogDir());
  std::ofstream(options_.tier.CatalogDir()) << "x";
  auto e2 = DiskMover::Open(options_, layout_, host_.get());
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.status().message().find("catalog"), std::string::npos) << e2.status().ToString();
}

TEST_F(DiskFaultTest, EioOnOnePieceOfAMultiRequestRecord) {
  options_.max_io_bytes = 4096;
  auto e = OpenMover(true);
  faults_->AddRule({BlockIoOp::kWrite, Action::kError, EIO, 0, /*skip=*/1, 1});  // 2nd piece
  auto r = Write(*e, Kind::kKV, 0, 2);
  EXPECT_TRUE(r->records[0].status.IsIOError());
  EXPECT_TRUE(r->records[1].status.ok());
  faults_->AddRule({BlockIoOp::kRead, Action::kError, EIO, 0, /*skip=*/2, 1});  // last piece
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 1).IsIOError());
  EXPECT_FALSE(e->tier().Contains(TestKey(Kind::kKV, 1)));
}

}  // namespace
}  // namespace cachepawl
