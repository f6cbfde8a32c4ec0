// DiskExtent and DiskExtentAllocator: where records live inside the disk tier's data files.
//
// Each data file is an address space of 4 KiB units. A record occupies one extent: a
// contiguous, 4 KiB-aligned range of one file whose size is RecordSlotBytes(layout, kind), so
// KV pages and Mamba states share one byte budget without a static split. Allocation is best
// fit within a file, files taken round-robin (striping records across drives); freed ranges
// coalesce with their neighbours.
//
// Thread safety: none; the owner (DiskTier) serializes calls.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "vocab/status.h"

namespace cachepawl {

struct DiskExtent {
  uint32_t file = 0;
  uint64_t offset = 0;  // bytes, 4 KiB-aligned
  uint64_t bytes = 0;   // 4 KiB multiple

  // The id used as a Disk TierSlot (transfer/transfer_unit.h): file in the top 20 bits, the
  // offset in 4 KiB units below. Unique among live extents.
  uint64_t Id() const { return (static_cast<uint64_t>(file) << 44) | (offset >> 12); }
  uint64_t end() const { return offset + bytes; }
  std::string ToString() const;
  friend bool operator==(const DiskExtent&, const DiskExtent&) = default;
};

inline constexpr uint32_t kMaxDiskFiles = 1u << 20;
inline constexpr uint64_t kMaxDiskFileBytes = 1ull << 56;

class DiskExtentAllocator {
 public:
  // One entry per data file: its usable size in bytes (a 4 KiB multiple, < 2^56).
  explicit DiskExtentAllocator(std::vector<uint64_t> file_bytes);

  // A free extent of `bytes` (a 4 KiB multiple), or nullopt when no file has a free range that
  // large. Files are tried round-robin starting after the file of the previous allocation.
  std::optional<DiskExtent> Allocate(uint64_t bytes);

  // Marks `extent` used (recovery: the catalog names it). InvalidArgument when it lies outside
  // its file or is misaligned; Corruption when it overlaps an extent already marked.
  Status Reserve(const DiskExtent& extent);

  // Returns a used extent to the free space. The extent must be one that Allocate or Reserve
  // handed out and not yet freed.
  void Free(const DiskExtent& extent);

  uint64_t capacity_bytes() const { return capacity_; }
  uint64_t free_bytes() const { return free_; }
  uint64_t used_bytes() const { return capacity_ - free_; }
  // The largest free range in any file (what the next Allocate could satisfy at most).
  uint64_t LargestFree() const;
  size_t num_files() const { return files_.size(); }

 private:
  struct File {
    uint64_t bytes = 0;
    std::map<uint64_t, uint64_t> free_by_offset;           // offset -> length
    std::set<std::pair<uint64_t, uint64_t>> free_by_size;  // (length, offset)
  };
  void InsertFree(File& f, uint64_t offset, uint64_t length);
  void EraseFree(File& f, std::map<uint64_t, uint64_t>::iterator it);

  std::vector<File> files_;
  uint64_t capacity_ = 0;
  uint64_t free_ = 0;
  size_t next_file_ = 0;
};

}  // namespace cachepawl
