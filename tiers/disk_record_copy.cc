#include "tiers/disk_record_copy.h"

#include <cstdlib>
#include <string>

#include "tiers/disk_record.h"
#include "tiers/host_memory.h"
#include "tiers/pread_all.h"

namespace cachepawl {

void DiskRecordCopy::FreeAligned::operator()(std::byte* p) const { std::free(p); }

std::span<const std::byte> DiskRecordCopy::payload(uint64_t payload_bytes) const {
  return record().subspan(static_cast<size_t>(kRecordHeaderBytes),
                          static_cast<size_t>(payload_bytes));
}

StatusOr<DiskRecordCopy> CopyDiskRecord(DiskTier& tier, const DiskKey& key) {
  auto begun = tier.BeginRead(key);
  if (!begun.ok()) return begun.status();
  const auto& [ticket, info] = *begun;
  DiskRecordCopy copy;
  copy.info_ = info;
  copy.size_ = static_cast<size_t>(info.extent.bytes);
  void* raw = nullptr;
  if (::posix_memalign(&raw, 4096, copy.size_) != 0) {
    tier.EndRead(ticket, true);
    return Status::NoSpace("disk record " + key.ToString() + ": no memory for " +
                           std::to_string(copy.size_) + " bytes");
  }
  copy.bytes_.reset(static_cast<std::byte*>(raw));
  Status read =
      PreadAll(tier.files().fd(info.extent.file), std::span(copy.bytes_.get(), copy.size_),
               info.extent.offset, "disk record " + key.ToString());
  if (!read.ok()) {
    tier.EndRead(ticket, true);  // the bytes may be fine: an I/O error is no verdict on them
    return read;
  }
  const ModelLayout& layout = tier.layout();
  RecordExpectation expect;
  expect.key = info.key;
  expect.fingerprint = tier.fingerprint();
  expect.payload_bytes = layout.RecordBytes(key.kind);
  expect.record_bytes = RecordSlotBytes(layout, key.kind);
  expect.checksum = info.checksum;
  expect.parent = info.parent;
  RecordFault fault = RecordFault::kNone;
  Status verified =
      expect.record_bytes <= copy.size_
          ? VerifyRecord(copy.record().first(static_cast<size_t>(expect.record_bytes)), expect,
                         &fault)
          : Status::Corruption("disk record " + key.ToString() + ": extent of " +
                               std::to_string(copy.size_) + " bytes, record of " +
                               std::to_string(expect.record_bytes));
  tier.EndRead(ticket, verified.ok());
  if (!verified.ok()) return verified.WithContext("disk record " + key.ToString());
  copy.size_ = static_cast<size_t>(expect.record_bytes);
  return copy;
}

}  // namespace cachepawl
