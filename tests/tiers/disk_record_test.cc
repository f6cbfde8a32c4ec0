// The disk record format: every header field and every payload byte is verified.
#include "tiers/disk_record.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

using testing::FillRandom;
using testing::TestKey;

class DiskRecordTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kPayload = 10000;  // not a 4 KiB multiple: padding exists
  static constexpr uint64_t kRecord = kRecordHeaderBytes + 12288;

  void SetUp() override {
    record_.resize(kRecord);
    FillRandom(record_, 7);
    key_ = TestKey(Kind::kMamba, 3);
    header_.kind = key_.kind;
    header_.hash = key_.hash;
    header_.parent = TestKey(Kind::kMamba, 2).hash;
    header_.depth = key_.depth;
    header_.fingerprint.fill(0x42);
    header_.payload_bytes = kPayload;
    header_.record_bytes = kRecord;
    checksum_ = WriteRecordHeader(record_, header_);
    expect_.key = key_;
    expect_.fingerprint = header_.fingerprint;
    expect_.payload_bytes = kPayload;
    expect_.record_bytes = kRecord;
    expect_.checksum = checksum_;
    expect_.parent = header_.parent;
  }

  Status Verify(RecordFault* fault) { return VerifyRecord(record_, expect_, fault); }

  std::vector<std::byte> record_;
  DiskKey key_;
  RecordHeader header_;
  RecordExpectation expect_;
  uint64_t checksum_ = 0;
};

TEST_F(DiskRecordTest, GoodRecordVerifiesAndParses) {
  RecordFault fault = RecordFault::kHeader;
  RecordHeader out;
  ASSERT_TRUE(VerifyRecord(record_, expect_, &fault, &out).ok());
  EXPECT_EQ(fault, RecordFault::kNone);
  EXPECT_EQ(out.hash, key_.hash);
  EXPECT_EQ(out.parent, header_.parent);
  EXPECT_EQ(out.depth, key_.depth);
  EXPECT_EQ(out.checksum, checksum_);
  EXPECT_EQ(std::memcmp(record_.data(), "CPAWLREC", 8), 0);
  // The rest of the header block is zero.
  for (size_t i = kDiskRecordHeaderUsedBytes; i < kRecordHeaderBytes; ++i) {
    ASSERT_EQ(record_[i], std::byte{0}) << i;
  }
}

// The remote tier keeps the header block apart from the payload: the same header bytes.
TEST_F(DiskRecordTest, HeaderWrittenApartFromItsPayloadIsTheSame) {
  std::vector<std::byte> block(kRecordHeaderBytes, std::byte{0x5A});  // poisoned
  const std::span<const std::byte> payload(record_.data() + kRecordHeaderBytes, kPayload);
  EXPECT_EQ(WriteRecordHeader(block, header_, payload), checksum_);
  EXPECT_EQ(std::memcmp(block.data(), record_.data(), kRecordHeaderBytes), 0);
}

TEST_F(DiskRecordTest, EveryFlippedHeaderByteIsCaught) {
  for (size_t i = 0; i < kDiskRecordHeaderUsedBytes; ++i) {
    record_[i] ^= std::byte{0x01};
    RecordFault fault = RecordFault::kNone;
    const Status s = Verify(&fault);
    EXPECT_TRUE(s.IsCorruption()) << "byte " << i << ": " << s.ToString();
    EXPECT_NE(fault, RecordFault::kNone);
    record_[i] ^= std::byte{0x01};
  }
}

TEST_F(DiskRecordTest, EveryPayloadByteIsCoveredByTheChecksum) {
  // Every byte of the payload, stepping so the test stays fast, plus both ends.
  for (size_t i = 0; i < kPayload; i += (i < 64 || i > kPayload - 64) ? 1 : 97) {
    std::byte& b = record_[kRecordHeaderBytes + i];
    b ^= std::byte{0x80};
    RecordFault fault = RecordFault::kNone;
    EXPECT_TRUE(Verify(&fault).IsCorruption()) << "payload byte " << i;
    EXPECT_EQ(fault, RecordFault::kChecksum);
    b ^= std::byte{0x80};
  }
  // Padding after the payload is not part of the record.
  record_[kRecordHeaderBytes + kPayload + 5] ^= std::byte{0xff};
  RecordFault fault;
  EXPECT_TRUE(Verify(&fault).ok());
}

TEST_F(DiskRecordTest, MismatchedExpectationsAreHeaderFaults) {
  struct Case {
    const char* name;
    std::function<void(RecordExpectation&)> change;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"kind", [](RecordExpectation& e) { e.key.kind = Kind::kKV; }, "kind"},
      {"hash", [](RecordExpectation& e) { e.key.hash.bytes[31] ^= 1; }, "page hash"},
      {"depth", [](RecordExpectation& e) { e.key.depth += 16; }, "depth"},
      {"parent", [](RecordExpectation& e) { e.parent->bytes[0] ^= 1; }, "parent"},
      {"fingerprint", [](RecordExpectation& e) { e.fingerprint[5] ^= 1; }, "fingerprint"},
      {"payload", [](RecordExpectation& e) { e.payload_bytes -= 1; }, "lengths"},
      {"checksum", [](RecordExpectation& e) { *e.checksum ^= 1; }, "checksum"},
  };
  for (const Case& c : cases) {
    RecordExpectation e = expect_;
    c.change(e);
    RecordFault fault = RecordFault::kNone;
    const Status s = VerifyRecord(record_, e, &fault);
    EXPECT_TRUE(s.IsCorruption()) << c.name;
    EXPECT_EQ(fault, RecordFault::kHeader) << c.name;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.name << ": " << s.ToString();
  }
}

TEST_F(DiskRecordTest, ZeroedOrShortBuffersAreRejected) {
  std::vector<std::byte> zeros(kRecord);
  RecordFault fault;
  EXPECT_TRUE(VerifyRecord(zeros, expect_, &fault).IsCorruption());
  EXPECT_TRUE(
      VerifyRecord(std::span<const std::byte>(record_).first(100), expect_, &fault).IsCorruption());
  EXPECT_FALSE(ParseRecordHeader(std::span<const std::byte>(record_).first(10)).ok());
}

// Feeds the record to a RecordVerifier in pieces of `piece` bytes.
Status VerifyInPieces(std::span<const std::byte> record, const RecordExpectation& expect,
                      size_t piece, RecordFault* fault, RecordHeader* out = nullptr) {
  RecordVerifier v;
  CACHEPAWL_RETURN_IF_ERROR(v.Begin(record.first(kRecordHeaderBytes), expect, fault));
  for (size_t off = 0; off < record.size(); off += piece) {
    v.Update(record.subspan(off, std::min(piece, record.size() - off)));
  }
  return v.Finish(fault, out);
}

TEST_F(DiskRecordTest, VerifierFedInPiecesAgreesWithVerifyRecord) {
  for (size_t piece : {size_t{1}, size_t{100}, size_t{4096}, size_t{5000}, size_t{8192}, kRecord}) {
    RecordFault fault = RecordFault::kHeader;
    RecordHeader out;
    ASSERT_TRUE(VerifyInPieces(record_, expect_, piece, &fault, &out).ok()) << piece;
    EXPECT_EQ(fault, RecordFault::kNone);
    EXPECT_EQ(out.checksum, checksum_);
    // A payload byte flipped anywhere, whatever piece it falls in: a checksum fault, as for a
    // whole-buffer verification.
    for (size_t at : {size_t{0}, size_t{4095}, size_t{4096}, kPayload - 1}) {
      record_[kRecordHeaderBytes + at] ^= std::byte{0x04};
      const Status s = VerifyInPieces(record_, expect_, piece, &fault);
      EXPECT_TRUE(s.IsCorruption()) << piece << " " << at;
      EXPECT_EQ(fault, RecordFault::kChecksum);
      EXPECT_EQ(s.ToString(), Verify(&fault).ToString());
      record_[kRecordHeaderBytes + at] ^= std::byte{0x04};
    }
  }
}

TEST_F(DiskRecordTest, VerifierChecksTheHeaderFirstAndNeedsEveryPayloadByte) {
  RecordFault fault = RecordFault::kNone;
  record_[20] ^= std::byte{0x01};  // page hash
  RecordVerifier v;
  EXPECT_TRUE(
      v.Begin(std::span<const std::byte>(record_).first(kRecordHeaderBytes), expect_, &fault)
          .IsCorruption());
  EXPECT_EQ(fault, RecordFault::kHeader);
  record_[20] ^= std::byte{0x01};
  // Bytes missing at the end of the payload: never OK.
  ASSERT_TRUE(
      v.Begin(std::span<const std::byte>(record_).first(kRecordHeaderBytes), expect_, &fault).ok());
  v.Update(std::span<const std::byte>(record_).first(kRecordHeaderBytes + kPayload - 1));
  EXPECT_TRUE(v.Finish(&fault).IsCorruption());
  EXPECT_EQ(fault, RecordFault::kChecksum);
}

TEST(DiskKeyTest, IdentityRoundTripsAndIgnoresKvDepth) {
  for (Kind kind : {Kind::kKV, Kind::kMamba}) {
    const DiskKey k = TestKey(kind, 9);
    auto back = ParseDiskKeyIdentity(DiskKeyIdentity(k));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->kind, kind);
    EXPECT_EQ(back->hash, k.hash);
    EXPECT_EQ(back->depth, kind == Kind::kMamba ? k.depth : 0u);
  }
  DiskKey kv = TestKey(Kind::kKV, 1), kv2 = kv;
  kv2.depth += 1;
  EXPECT_EQ(DiskKeyIdentity(kv), DiskKeyIdentity(kv2));
  EXPECT_TRUE(kv.SameIdentity(kv2));
  DiskKey m = TestKey(Kind::kMamba, 1), m2 = m;
  m2.depth += 1;
  EXPECT_NE(DiskKeyIdentity(m), DiskKeyIdentity(m2));
  EXPECT_FALSE(m.SameIdentity(m2));
  EXPECT_FALSE(ParseDiskKeyIdentity("").has_value());
  EXPECT_FALSE(ParseDiskKeyIdentity(std::string(33, '\x07')).has_value());  // bad kind
  EXPECT_FALSE(ParseDiskKeyIdentity(std::string(40, '\x01')).has_value());  // Mamba, short
}

}  // namespace
}  // namespace cachepawl
