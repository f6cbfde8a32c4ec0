// Disk records: the on-disk form of one KV page or one Mamba state, which is also the form a
// host slot holds (tiers/host_memory.h), so a record moves between host and disk in one
// contiguous O_DIRECT I/O.
//
//   [ header block: kRecordHeaderBytes (4 KiB) ][ payload: layout.RecordBytes(kind), padded ]
//
// The header block starts with a fixed, little-endian header (offsets below; the rest of the
// block is zero):
//
//   off  size  field
//     0     8  magic "CPAWLREC"
//     8     4  format version (kDiskFormatVersion)
//    12     1  kind (0 KV, 1 Mamba); 13..15 zero
//    16    32  page hash (the full SHA-256)
//    48    32  parent page hash (all zero for the first page of a chain)
//    80     8  depth in tokens (KV: tokens through the end of this page; Mamba: tokens consumed)
//    88    32  layout fingerprint (ModelLayout::Fingerprint())
//   120     8  payload length in bytes (unpadded)
//   128     8  record length in bytes (header block + padded payload = RecordSlotBytes)
//   136     8  checksum: XXH3-64 over header bytes [0, 136) followed by the payload
//   144     8  header check: XXH3-64 over header bytes [0, 144)
//
// Invariant 1 rests on VerifyRecord and RecordVerifier (the same checks, the first over a whole
// buffer, the second over a record that lands in pieces): a record is returned only when every
// field matches what the reader asked for and both checksums hold.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "vocab/page_hash.h"
#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {

inline constexpr std::array<char, 8> kDiskRecordMagic = {'C', 'P', 'A', 'W', 'L', 'R', 'E', 'C'};
inline constexpr uint32_t kDiskFormatVersion = 1;
inline constexpr size_t kDiskRecordHeaderUsedBytes = 152;

using LayoutFingerprint = std::array<uint8_t, 32>;

// What names a disk record. KV: kind + page hash (a page hash fixes its depth, so `depth` is
// recorded and checked but is not part of the identity). Mamba: kind + hash + depth (a state
// is valid only at the exact depth it was taken).
struct DiskKey {
  Kind kind = Kind::kKV;
  PageHash hash;
  uint64_t depth = 0;

  // Same identity (depth ignored for KV).
  bool SameIdentity(const DiskKey& other) const;
  // "kv:<hash hex>" or "mamba:<hash hex>@<depth>".
  std::string ToString() const;
};

// The identity of a key as bytes: kind byte, 32 hash bytes and, for Mamba, 8 depth bytes
// (big-endian). Used as the catalog key (after a one-byte namespace) and as a map key.
std::string DiskKeyIdentity(const DiskKey& key);
// Parses DiskKeyIdentity() output; nullopt on any other input. KV keys come back with depth 0.
std::optional<DiskKey> ParseDiskKeyIdentity(std::string_view bytes);

// The header fields of a record.
struct RecordHeader {
  Kind kind = Kind::kKV;
  PageHash hash;
  PageHash parent;
  uint64_t depth = 0;
  LayoutFingerprint fingerprint{};
  uint64_t payload_bytes = 0;
  uint64_t record_bytes = 0;
  uint64_t checksum = 0;
};

// Encodes `header` into record[0, kRecordHeaderBytes) (zeroing the rest of the block), computes
// the checksum over the header fields and record[kRecordHeaderBytes, +payload_bytes), stores it
// and returns it. `record` must be at least header.record_bytes long and record_bytes must be
// kRecordHeaderBytes + payload_bytes rounded up to 4 KiB (checked by the caller).
uint64_t WriteRecordHeader(std::span<std::byte> record, const RecordHeader& header);
// The same, for a header block kept apart from its payload (the remote tier sends them as
// separate values): `header_block` is kRecordHeaderBytes long, `payload` header.payload_bytes.
uint64_t WriteRecordHeader(std::span<std::byte> header_block, const RecordHeader& header,
                           std::span<const std::byte> payload);

// Why a record failed verification (for the counters).
enum class RecordFault : uint8_t {
  kNone = 0,
  kHeader,    // bad magic, version, header check, or a field that differs from what was asked
  kChecksum,  // header fine, payload (or header) does not match the checksum
};

// What the reader expects of a record.
struct RecordExpectation {
  DiskKey key;  // kind, hash and depth must all match (for KV too: the catalog knows the depth)
  LayoutFingerprint fingerprint{};
  uint64_t payload_bytes = 0;
  uint64_t record_bytes = 0;
  std::optional<uint64_t> checksum;  // the catalog's copy, when known
  std::optional<PageHash> parent;    // the catalog's copy, when known
};

// Checks a record read from disk: magic, version, header check, kind, hash, depth, parent,
// fingerprint, lengths, checksum. OK, or Corruption naming the first field that differs (and
// `*fault` says which counter to bump). On success `*out` (if non-null) gets the header.
Status VerifyRecord(std::span<const std::byte> record, const RecordExpectation& expect,
                    RecordFault* fault, RecordHeader* out = nullptr);

// Verifies a record that lands in pieces, in order: the DiskMover reads a large record as
// several requests and checks each piece as it lands, so the checksum overlaps the rest of the
// read. The same checks, verdicts and messages as VerifyRecord (which is built on it); the
// checksum is the same XXH3-64 stream over header bytes [0, 136) and the payload, however the
// record is cut (the on-disk format does not depend on the pieces).
//
//   RecordVerifier v;
//   Status s = v.Begin(record.first(kRecordHeaderBytes), expect, &fault);  // the header
//   v.Update(piece 0); v.Update(piece 1); ...  // every byte from offset 0, in order
//   if (s.ok()) s = v.Finish(&fault);
//
// Not thread-safe: one record at a time, from one thread at a time (or ordered by the caller).
class RecordVerifier {
 public:
  RecordVerifier();

  // Checks the header block (magic, version, header check, kind, hash, depth, parent,
  // fingerprint, lengths, the catalog's checksum) and starts the checksum. OK, or Corruption
  // naming the first field that differs (`*fault` = kHeader); then Update and Finish must not
  // be called.
  Status Begin(std::span<const std::byte> header_block, const RecordExpectation& expect,
               RecordFault* fault);
  // Feeds the record's next bytes: every call continues where the previous one ended, the first
  // at offset 0 (the header block: its fields were hashed by Begin). Bytes past the payload
  // (padding) are not hashed.
  void Update(std::span<const std::byte> bytes);
  // Once the record's first kRecordHeaderBytes + payload bytes were fed: OK when the checksum
  // matches (`*fault` = kNone, `*out` gets the header if non-null), else Corruption
  // (`*fault` = kChecksum).
  Status Finish(RecordFault* fault, RecordHeader* out = nullptr);

 private:
  static constexpr size_t kStateBytes = 640;  // >= sizeof(XXH3_state_t), checked in the .cc
  alignas(64) unsigned char state_[kStateBytes];
  RecordHeader header_;  // from Begin
  DiskKey key_;          // for messages
  uint64_t fed_ = 0;
  bool begun_ = false;
};

// Parses the header block without any expectation (for tools): OK when magic, version and the
// header check hold. Does not read the payload.
StatusOr<RecordHeader> ParseRecordHeader(std::span<const std::byte> header_block);

}  // namespace cachepawl
