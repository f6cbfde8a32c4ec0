// Reads in pieces (DiskMoverOptions::read_piece_bytes, read_pieces_in_flight): every piece is
// verified as it lands, and a fault in any piece (an error, a short piece, a flipped byte, a bad
// header) fails the record exactly as a fault in a whole-record read does.
#include <gtest/gtest.h>

#include "tests/transfer/disk_mover_fixture.h"

namespace cachepawl {
namespace {

using testing::FaultInjectingBlockIo;
using testing::PayloadMatchesKey;
using testing::TestKey;
using Action = FaultInjectingBlockIo::Action;

// Parameter: pieces in flight per record (1: one after the other; 4: a whole record at once).
class DiskPiecesTest : public testing::DiskMoverFixture,
                       public ::testing::WithParamInterface<uint32_t> {
 protected:
  void SetUp() override {
    DiskMoverFixture::SetUp();
    options_.read_piece_bytes = 4096;  // a 12 KiB KV record reads as 3 pieces, a Mamba one as 4
    options_.read_pieces_in_flight = GetParam();
  }
};

TEST_P(DiskPiecesTest, EveryByteOfBothKindsReadsBack) {
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kKV, 0, 8);
  WriteOk(*e, Kind::kMamba, 0, 4);
  for (uint64_t n = 0; n < 8; ++n) ASSERT_TRUE(ReadOne(*e, Kind::kKV, n).ok()) << n;
  for (uint64_t n = 0; n < 4; ++n) ASSERT_TRUE(ReadOne(*e, Kind::kMamba, n).ok()) << n;
  // A batch of several records, each in its own slot.
  std::vector<DiskRead> reads;
  for (uint64_t n = 0; n < 8; ++n) reads.push_back({TestKey(Kind::kKV, n), KvSlot(n)});
  DiskOp op = e->Load(reads);
  ASSERT_TRUE(op.fence.Wait().ok());
  for (uint64_t n = 0; n < 8; ++n) {
    EXPECT_TRUE(PayloadMatchesKey(reads[n].key, Payload(KvSlot(n), Kind::kKV))) << n;
  }
  EXPECT_EQ(e->stats().reads, 20u);
}

TEST_P(DiskPiecesTest, EioOnAMiddlePieceFailsTheRecordAndDropsIt) {
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kMamba, 0, 2);
  faults_->AddRule({BlockIoOp::kRead, Action::kError, EIO, 0, /*skip=*/1, 1});  // 2nd of 4
  const Status s = ReadOne(*e, Kind::kMamba, 0);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(e->stats().read_io_errors, 1u);
  EXPECT_FALSE(e->tier().Contains(TestKey(Kind::kMamba, 0)));
  EXPECT_TRUE(ReadOne(*e, Kind::kMamba, 1).ok());
}

TEST_P(DiskPiecesTest, ShortMiddlePieceIsAShortRead) {
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kKV, 0, 2);
  faults_->AddRule({BlockIoOp::kRead, Action::kShort, 0, /*bytes=*/1024, /*skip=*/1, 1});
  const Status s = ReadOne(*e, Kind::kKV, 0);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("short read"), std::string::npos) << s.ToString();
  EXPECT_EQ(e->stats().short_reads, 1u);
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 1).ok());
}

TEST_P(DiskPiecesTest, FlippedByteInTheLastPieceFailsTheChecksum) {
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kKV, 0, 3);
  faults_->AddRule({BlockIoOp::kRead, Action::kFlip, 0, /*bytes=*/100, /*skip=*/2, 1});
  const Status s = ReadOne(*e, Kind::kKV, 0);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.ToString();
  EXPECT_EQ(e->stats().checksum_failures, 1u);
  // The header lands in the first piece and is checked there; the other pieces still land.
  faults_->AddRule({BlockIoOp::kRead, Action::kFlip, 0, /*bytes=*/20, 0, 1});
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 1).IsCorruption());
  EXPECT_EQ(e->stats().header_mismatches, 1u);
  EXPECT_EQ(e->stats().dropped_on_read, 2u);
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 2).ok());
}

TEST_P(DiskPiecesTest, CloseWithPiecesInFlightFiresTheFence) {
  auto e = OpenMover(true);
  WriteOk(*e, Kind::kMamba, 0, 1);
  faults_->AddRule({BlockIoOp::kRead, Action::kHold, 0, 0, 0, 1});  // the first piece waits
  const DiskRead rd{TestKey(Kind::kMamba, 0), MambaSlot(0)};
  DiskOp op = e->Load(std::span<const DiskRead>(&rd, 1));
  EXPECT_FALSE(op.fence.Ready());
  ASSERT_TRUE(e->Close().ok());  // releases the held piece; the rest follow or are cancelled
  ASSERT_TRUE(op.fence.Ready());
  const Status s = op.result->records[0].status;
  EXPECT_TRUE(s.ok() || s.IsAborted()) << s.ToString();
}

INSTANTIATE_TEST_SUITE_P(InFlight, DiskPiecesTest, ::testing::Values(1u, 2u, 4u));

TEST(DiskPiecesOptionsTest, BadPieceOptionsAreRejected) {
  DiskMoverOptions o;
  o.tier.dir = "/tmp/x";
  o.tier.capacity_bytes = 1 << 20;
  ASSERT_TRUE(o.Validate().ok());
  o.read_piece_bytes = 5000;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o.read_piece_bytes = 0;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o.read_piece_bytes = 1u << 20;
  o.read_pieces_in_flight = 0;
  const Status s = o.Validate();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("read_pieces_in_flight"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace cachepawl
