#include "tiers/disk_record.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>
#if defined(__x86_64__)
// libxxhash's runtime-dispatched entry points pick AVX2 / AVX-512 when the CPU has them (several
// times the SSE2 default: docs/PERFORMANCE.md, "The checksum's instruction set"). Same function,
// same values.
#include <xxh_x86dispatch.h>
#define CACHEPAWL_XXH3_UPDATE XXH3_64bits_update_dispatch
#else
#define CACHEPAWL_XXH3_UPDATE XXH3_64bits_update
#endif

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>

#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the disk record format is little-endian; this build assumes a little-endian host");

// Field offsets in the header block.
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 8;
constexpr size_t kOffKind = 12;
constexpr size_t kOffHash = 16;
constexpr size_t kOffParent = 48;
constexpr size_t kOffDepth = 80;
constexpr size_t kOffFingerprint = 88;
constexpr size_t kOffPayloadBytes = 120;
constexpr size_t kOffRecordBytes = 128;
constexpr size_t kOffChecksum = 136;
constexpr size_t kOffHeaderCheck = 144;
static_assert(kOffHeaderCheck + 8 == kDiskRecordHeaderUsedBytes);

template <typename T>
void Put(std::byte* base, size_t off, T v) {
  std::memcpy(base + off, &v, sizeof(T));
}
template <typename T>
T Get(const std::byte* base, size_t off) {
  T v;
  std::memcpy(&v, base + off, sizeof(T));
  return v;
}

static_assert(sizeof(XXH3_state_t) <= 640 && alignof(XXH3_state_t) <= 64,
              "RecordVerifier::kStateBytes too small for this xxhash");

uint64_t ComputeChecksum(const std::byte* header, const std::byte* payload,
                         uint64_t payload_bytes) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  CACHEPAWL_XXH3_UPDATE(&state, header, kOffChecksum);
  CACHEPAWL_XXH3_UPDATE(&state, payload, payload_bytes);
  return XXH3_64bits_digest(&state);
}

std::string Hex8(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string FingerprintHex(const LayoutFingerprint& f) {
  PageHash h;
  h.bytes = f;
  return h.ToHex();
}

}  // namespace

bool DiskKey::SameIdentity(const DiskKey& other) const {
  if (kind != other.kind || hash != other.hash) return false;
  return kind == Kind::kKV || depth == other.depth;
}

std::string DiskKey::ToString() const {
  std::string s(KindName(kind));
  s += ':';
  s += hash.ToHex();
  if (kind == Kind::kMamba) s += '@' + std::to_string(depth);
  return s;
}

std::string DiskKeyIdentity(const DiskKey& key) {
  std::string out;
  out.reserve(41);
  out.push_back(static_cast<char>(key.kind));
  out.append(reinterpret_cast<const char*>(key.hash.bytes.data()), key.hash.bytes.size());
  if (key.kind == Kind::kMamba) {
    for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((key.depth >> (8 * i)) & 0xff));
  }
  return out;
}

std::optional<DiskKey> ParseDiskKeyIdentity(std::string_view bytes) {
  if (bytes.size() < 33) return std::nullopt;
  const auto raw_kind = static_cast<uint8_t>(bytes[0]);
  if (!IsValidKind(raw_kind)) return std::nullopt;
  DiskKey key;
  key.kind = static_cast<Kind>(raw_kind);
  const size_t want = key.kind == Kind::kMamba ? 41 : 33;
  if (bytes.size() != want) return std::nullopt;
  std::memcpy(key.hash.bytes.data(), bytes.data() + 1, 32);
  if (key.kind == Kind::kMamba) {
    for (size_t i = 0; i < 8; ++i)
      key.depth = (key.depth << 8) | static_cast<uint8_t>(bytes[33 + i]);
  }
  return key;
}

uint64_t WriteRecordHeader(std::span<std::byte> record, const RecordHeader& h) {
  return WriteRecordHeader(record.first(kRecordHeaderBytes), h,
                           std::span<const std::byte>(record.data() + kRecordHeaderBytes,
                                                      static_cast<size_t>(h.payload_bytes)));
}

uint64_t WriteRecordHeader(std::span<std::byte> header_block, const RecordHeader& h,
                           std::span<const std::byte> payload) {
  std::byte* b = header_block.data();
  std::memset(b, 0, kRecordHeaderBytes);
  std::memcpy(b + kOffMagic, kDiskRecordMagic.data(), kDiskRecordMagic.size());
  Put<uint32_t>(b, kOffVersion, kDiskFormatVersion);
  Put<uint8_t>(b, kOffKind, static_cast<uint8_t>(h.kind));
  std::memcpy(b + kOffHash, h.hash.bytes.data(), 32);
  std::memcpy(b + kOffParent, h.parent.bytes.data(), 32);
  Put<uint64_t>(b, kOffDepth, h.depth);
  std::memcpy(b + kOffFingerprint, h.fingerprint.data(), 32);
  Put<uint64_t>(b, kOffPayloadBytes, h.payload_bytes);
  Put<uint64_t>(b, kOffRecordBytes, h.record_bytes);
  const uint64_t checksum = ComputeChecksum(b, payload.data(), h.payload_bytes);
  Put<uint64_t>(b, kOffChecksum, checksum);
  Put<uint64_t>(b, kOffHeaderCheck, XXH3_64bits(b, kOffHeaderCheck));
  return checksum;
}

StatusOr<RecordHeader> ParseRecordHeader(std::span<const std::byte> block) {
  if (block.size() < kDiskRecordHeaderUsedBytes) {
    return Status::Corruption("record header: " + std::to_string(block.size()) + " bytes (need " +
                              std::to_string(kDiskRecordHeaderUsedBytes) + ")");
  }
  const std::byte* b = block.data();
  if (std::memcmp(b + kOffMagic, kDiskRecordMagic.data(), kDiskRecordMagic.size()) != 0) {
    return Status::Corruption("record header: bad magic (not a cachepawl record)");
  }
  const auto version = Get<uint32_t>(b, kOffVersion);
  if (version != kDiskFormatVersion) {
    return Status::Corruption("record header: format version " + std::to_string(version) +
                              " (this build reads " + std::to_string(kDiskFormatVersion) + ")");
  }
  const auto stored_check = Get<uint64_t>(b, kOffHeaderCheck);
  const auto check = XXH3_64bits(b, kOffHeaderCheck);
  if (stored_check != check) {
    return Status::Corruption("record header: header check " + Hex8(stored_check) +
                              " != computed " + Hex8(check));
  }
  const auto raw_kind = Get<uint8_t>(b, kOffKind);
  if (!IsValidKind(raw_kind)) {
    return Status::Corruption("record header: kind " + std::to_string(raw_kind));
  }
  RecordHeader h;
  h.kind = static_cast<Kind>(raw_kind);
  std::memcpy(h.hash.bytes.data(), b + kOffHash, 32);
  std::memcpy(h.parent.bytes.data(), b + kOffParent, 32);
  h.depth = Get<uint64_t>(b, kOffDepth);
  std::memcpy(h.fingerprint.data(), b + kOffFingerprint, 32);
  h.payload_bytes = Get<uint64_t>(b, kOffPayloadBytes);
  h.record_bytes = Get<uint64_t>(b, kOffRecordBytes);
  h.checksum = Get<uint64_t>(b, kOffChecksum);
  return h;
}

RecordVerifier::RecordVerifier() = default;

Status RecordVerifier::Begin(std::span<const std::byte> block, const RecordExpectation& expect,
                             RecordFault* fault) {
  *fault = RecordFault::kHeader;
  begun_ = false;
  fed_ = 0;
  if (expect.record_bytes < kRecordHeaderBytes ||
      expect.payload_bytes > expect.record_bytes - kRecordHeaderBytes) {
    return Status::Corruption("record: expected lengths " + std::to_string(expect.payload_bytes) +
                              "/" + std::to_string(expect.record_bytes) + " are not a record's");
  }
  auto parsed = ParseRecordHeader(block);
  if (!parsed.ok()) return parsed.status();
  const RecordHeader& h = *parsed;
  // Messages name the key; built only on failure (this runs once per record read).
  auto who = [&] { return expect.key.ToString(); };
  if (h.kind != expect.key.kind) {
    return Status::Corruption("record " + who() + ": kind " + std::string(KindName(h.kind)));
  }
  if (h.hash != expect.key.hash) {
    return Status::Corruption("record " + who() + ": page hash " + h.hash.ToHex());
  }
  if (h.depth != expect.key.depth) {
    return Status::Corruption("record " + who() + ": depth " + std::to_string(h.depth) +
                              " (asked for " + std::to_string(expect.key.depth) + ")");
  }
  if (expect.parent && h.parent != *expect.parent) {
    return Status::Corruption("record " + who() + ": parent " + h.parent.ToHex() +
                              " (catalog says " + expect.parent->ToHex() + ")");
  }
  if (h.fingerprint != expect.fingerprint) {
    return Status::Corruption("record " + who() + ": layout fingerprint " +
                              FingerprintHex(h.fingerprint) + " (this store's layout is " +
                              FingerprintHex(expect.fingerprint) + ")");
  }
  if (h.payload_bytes != expect.payload_bytes || h.record_bytes != expect.record_bytes) {
    return Status::Corruption("record " + who() + ": lengths " + std::to_string(h.payload_bytes) +
                              "/" + std::to_string(h.record_bytes) + " (expected " +
                              std::to_string(expect.payload_bytes) + "/" +
                              std::to_string(expect.record_bytes) + ")");
  }
  if (expect.checksum && h.checksum != *expect.checksum) {
    return Status::Corruption("record " + who() + ": header checksum " + Hex8(h.checksum) +
                              " (catalog says " + Hex8(*expect.checksum) + ")");
  }
  header_ = h;
  key_ = expect.key;
  auto* state = reinterpret_cast<XXH3_state_t*>(state_);
  XXH3_64bits_reset(state);
  CACHEPAWL_XXH3_UPDATE(state, block.data(), kOffChecksum);
  begun_ = true;
  *fault = RecordFault::kNone;
  return Status::OK();
}

void RecordVerifier::Update(std::span<const std::byte> bytes) {
  if (!begun_) return;
  // The part of [fed_, fed_ + size) inside the payload [kRecordHeaderBytes, +payload_bytes).
  const uint64_t begin = fed_, end = fed_ + bytes.size();
  fed_ = end;
  const uint64_t lo = std::max<uint64_t>(begin, kRecordHeaderBytes);
  const uint64_t hi = std::min<uint64_t>(end, kRecordHeaderBytes + header_.payload_bytes);
  if (lo >= hi) return;
  CACHEPAWL_XXH3_UPDATE(reinterpret_cast<XXH3_state_t*>(state_), bytes.data() + (lo - begin),
                        hi - lo);
}

Status RecordVerifier::Finish(RecordFault* fault, RecordHeader* out) {
  *fault = RecordFault::kChecksum;
  if (!begun_) return Status::Corruption("record: header not verified");
  const uint64_t need = kRecordHeaderBytes + header_.payload_bytes;
  if (fed_ < need) {
    return Status::Corruption("record " + key_.ToString() + ": " + std::to_string(fed_) + " of " +
                              std::to_string(need) + " bytes verified");
  }
  const uint64_t computed = XXH3_64bits_digest(reinterpret_cast<XXH3_state_t*>(state_));
  if (computed != header_.checksum) {
    return Status::Corruption("record " + key_.ToString() + ": checksum " + Hex8(computed) +
                              " != stored " + Hex8(header_.checksum));
  }
  *fault = RecordFault::kNone;
  if (out != nullptr) *out = header_;
  return Status::OK();
}

Status VerifyRecord(std::span<const std::byte> record, const RecordExpectation& expect,
                    RecordFault* fault, RecordHeader* out) {
  *fault = RecordFault::kHeader;
  if (record.size() < expect.record_bytes || expect.record_bytes < kRecordHeaderBytes ||
      expect.payload_bytes > expect.record_bytes - kRecordHeaderBytes) {
    return Status::Corruption("record: buffer of " + std::to_string(record.size()) +
                              " bytes cannot hold a record of " +
                              std::to_string(expect.record_bytes));
  }
  RecordVerifier v;
  CACHEPAWL_RETURN_IF_ERROR(v.Begin(record.first(kRecordHeaderBytes), expect, fault));
  v.Update(record.first(expect.record_bytes));
  return v.Finish(fault, out);
}

}  // namespace cachepawl
