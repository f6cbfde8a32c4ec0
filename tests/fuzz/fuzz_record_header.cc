// Fuzz target: the disk record header (tiers/disk_record.h), what a data file hands back.
//
// Input: one flags byte, then the bytes of a record as read from disk. The flags can re-encode
// the header from the input's own field bytes (WriteRecordHeader), so the fuzzer gets past the
// header check and checksum to the field comparisons, and then flip one byte. Properties:
// ParseRecordHeader, VerifyRecord and RecordVerifier never crash or read past the buffer;
// VerifyRecord and a RecordVerifier fed in pieces of a fuzz-chosen size agree on every verdict;
// a record WriteRecordHeader encoded (and not flipped) verifies against its own header; and
// ParseDiskKeyIdentity accepts exactly what DiskKeyIdentity writes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "tiers/disk_record.h"
#include "tiers/host_memory.h"

namespace cachepawl::fuzz {
namespace {

enum Flags : uint8_t {
  kReencode = 1,        // write the header from the input's field bytes
  kExactLength = 2,     // ... with record_bytes = the slot size of its payload
  kFlip = 4,            // then flip one byte (position and mask from the input's last bytes)
  kExpectChecksum = 8,  // expect the catalog's checksum (the header's)
  kExpectParent = 16,   // expect the catalog's parent (the header's)
  kMismatch = 32,       // expect a depth one more than the header's
};

template <typename T>
T Field(const std::vector<std::byte>& b, size_t off) {
  T v{};
  if (off + sizeof(T) <= b.size()) std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

// The header fields at their offsets in `b` (tiers/disk_record.h), whatever they hold.
RecordHeader RawFields(const std::vector<std::byte>& b) {
  RecordHeader h;
  h.kind = static_cast<Kind>(Field<uint8_t>(b, 12) % 3);
  for (size_t i = 0; i < 32; ++i) {
    h.hash.bytes[i] = Field<uint8_t>(b, 16 + i);
    h.parent.bytes[i] = Field<uint8_t>(b, 48 + i);
    h.fingerprint[i] = Field<uint8_t>(b, 88 + i);
  }
  h.depth = Field<uint64_t>(b, 80);
  h.payload_bytes = Field<uint64_t>(b, 120);
  h.record_bytes = Field<uint64_t>(b, 128);
  return h;
}

void CheckKeyIdentity(std::string_view bytes) {
  auto key = ParseDiskKeyIdentity(bytes);
  if (!key) return;
  Check(DiskKeyIdentity(*key) == bytes, "ParseDiskKeyIdentity accepted what it does not write");
  Check(!key->ToString().empty(), "DiskKey::ToString is empty");
}

void VerifyBothWays(const std::vector<std::byte>& record, const RecordExpectation& expect,
                    size_t piece) {
  RecordFault fault = RecordFault::kNone;
  RecordHeader out;
  const Status whole = VerifyRecord(record, expect, &fault, &out);
  if (record.size() < expect.record_bytes || expect.record_bytes < kRecordHeaderBytes ||
      expect.payload_bytes > expect.record_bytes - kRecordHeaderBytes) {
    Check(!whole.ok() && fault == RecordFault::kHeader, "VerifyRecord took impossible lengths");
    return;
  }
  // The same record through RecordVerifier, in pieces of `piece` bytes.
  RecordVerifier v;
  RecordFault piece_fault = RecordFault::kNone;
  Status pieces = v.Begin(std::span(record).first(kRecordHeaderBytes), expect, &piece_fault);
  if (pieces.ok()) {
    for (size_t at = 0; at < expect.record_bytes; at += piece) {
      v.Update(std::span(record).subspan(at, std::min<size_t>(piece, expect.record_bytes - at)));
    }
    pieces = v.Finish(&piece_fault);
  }
  Check(whole.ok() == pieces.ok() && fault == piece_fault,
        "VerifyRecord and RecordVerifier in pieces disagree");
  Check(whole.ok() == (fault == RecordFault::kNone), "fault does not match the verdict");
  if (whole.ok()) {
    Check(out.hash == expect.key.hash && out.depth == expect.key.depth &&
              out.payload_bytes == expect.payload_bytes,
          "VerifyRecord returned another header than expected");
  }
}

}  // namespace
}  // namespace cachepawl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachepawl;        // NOLINT(google-build-using-namespace)
  using namespace cachepawl::fuzz;  // NOLINT(google-build-using-namespace)
  FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const size_t piece = 1 + in.Take<uint16_t>() % 8192;
  const std::string_view rest = in.Rest();
  CheckKeyIdentity(rest);
  std::vector<std::byte> record(rest.size());
  if (!rest.empty()) std::memcpy(record.data(), rest.data(), rest.size());

  bool encoded = false;
  RecordHeader written;
  if ((flags & kReencode) != 0) {
    written = RawFields(record);
    if (record.size() < kRecordHeaderBytes) record.resize(kRecordHeaderBytes);
    written.payload_bytes %= record.size() - kRecordHeaderBytes + 1;
    if ((flags & kExactLength) != 0) {
      written.record_bytes = kRecordHeaderBytes + (written.payload_bytes + 4095) / 4096 * 4096;
      record.resize(std::max<size_t>(record.size(), written.record_bytes));
    }
    written.checksum = WriteRecordHeader(record, written);
    encoded = true;
  }
  bool flipped = false;
  if ((flags & kFlip) != 0 && rest.size() >= 3) {
    const auto mask = static_cast<std::byte>(rest[rest.size() - 1] | 1);
    const size_t at = (static_cast<uint8_t>(rest[rest.size() - 2]) |
                       static_cast<size_t>(static_cast<uint8_t>(rest[rest.size() - 3])) << 8) %
                      std::min<size_t>(record.size(), kDiskRecordHeaderUsedBytes + 64);
    record[at] ^= mask;
    flipped = true;
  }

  auto parsed = ParseRecordHeader(record);
  if (!parsed.ok()) {
    Check(!parsed.status().message().empty(), "a parse error without a message");
    return 0;
  }
  const RecordHeader& h = *parsed;
  if (encoded && !flipped) {
    Check(h.hash == written.hash && h.parent == written.parent && h.depth == written.depth &&
              h.fingerprint == written.fingerprint && h.payload_bytes == written.payload_bytes &&
              h.record_bytes == written.record_bytes && h.checksum == written.checksum &&
              h.kind == written.kind,
          "ParseRecordHeader does not read back what WriteRecordHeader wrote");
  }
  RecordExpectation expect;
  expect.key = {h.kind, h.hash, h.depth};
  expect.fingerprint = h.fingerprint;
  expect.payload_bytes = h.payload_bytes;
  expect.record_bytes = h.record_bytes;
  if ((flags & kExpectChecksum) != 0) expect.checksum = h.checksum;
  if ((flags & kExpectParent) != 0) expect.parent = h.parent;
  if ((flags & kMismatch) != 0) expect.key.depth += 1;
  VerifyBothWays(record, expect, piece);
  if (encoded && !flipped && (flags & kExactLength) != 0 && (flags & kMismatch) == 0) {
    RecordFault fault = RecordFault::kNone;
    Check(VerifyRecord(record, expect, &fault).ok(),
          "a record WriteRecordHeader encoded fails verification");
  }
  return 0;
}
