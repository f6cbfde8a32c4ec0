// Reading one disk record whole into memory, outside the DiskMover: for the few callers that
// need a record's bytes somewhere else than a host slot, now, on their own thread (the remote
// tier's write-on-evict of a record leaving the disk, the last local tier). It pins the record
// (DiskTier::BeginRead), reads it with pread from the O_DIRECT data file into a 4 KiB-aligned
// buffer, verifies header and checksum against the catalog (VerifyRecord), and unpins
// (EndRead; a record that fails verification is dropped, as on any read).
//
// It blocks the calling thread on the read: callers must not hold a lock the data path needs.
// Thread safety: as DiskTier (any thread); a DiskRecordCopy is one owner's.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "tiers/disk_tier.h"
#include "vocab/status.h"

namespace cachepawl {

// A verified record: [header block][payload, padded], RecordSlotBytes(layout, kind) bytes.
class DiskRecordCopy {
 public:
  DiskRecordCopy() = default;
  const DiskRecordInfo& info() const { return info_; }
  std::span<const std::byte> record() const { return {bytes_.get(), size_}; }
  // The payload: layout.RecordBytes(kind) bytes after the header block.
  std::span<const std::byte> payload(uint64_t payload_bytes) const;

 private:
  friend StatusOr<DiskRecordCopy> CopyDiskRecord(DiskTier& tier, const DiskKey& key);
  struct FreeAligned {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, FreeAligned> bytes_;
  size_t size_ = 0;
  DiskRecordInfo info_;
};

// Errors: NotFound (not on disk, or its write is pending), IOError (the read failed or came
// short), Corruption (it did not verify: it is dropped from the catalog), NoSpace (no memory for
// the buffer), FailedPrecondition (the tier is closed).
StatusOr<DiskRecordCopy> CopyDiskRecord(DiskTier& tier, const DiskKey& key);

}  // namespace cachepawl
