#include "tiers/disk_extent_allocator.h"

#include <algorithm>
#include <cassert>

#include "tiers/host_memory.h"

namespace cachepawl {

std::string DiskExtent::ToString() const {
  return "file " + std::to_string(file) + " [" + std::to_string(offset) + ", " +
         std::to_string(end()) + ")";
}

DiskExtentAllocator::DiskExtentAllocator(std::vector<uint64_t> file_bytes) {
  files_.resize(file_bytes.size());
  for (size_t i = 0; i < file_bytes.size(); ++i) {
    files_[i].bytes = file_bytes[i];
    capacity_ += file_bytes[i];
    if (file_bytes[i] > 0) InsertFree(files_[i], 0, file_bytes[i]);
  }
  free_ = capacity_;
}

void DiskExtentAllocator::InsertFree(File& f, uint64_t offset, uint64_t length) {
  // Coalesce with the neighbours on both sides.
  auto next = f.free_by_offset.lower_bound(offset);
  if (next != f.free_by_offset.end() && next->first == offset + length) {
    length += next->second;
    next = std::next(next);
    EraseFree(f, std::prev(next));
  }
  if (next != f.free_by_offset.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      length += prev->second;
      EraseFree(f, prev);
    }
  }
  f.free_by_offset.emplace(offset, length);
  f.free_by_size.emplace(length, offset);
}

void DiskExtentAllocator::EraseFree(File& f, std::map<uint64_t, uint64_t>::iterator it) {
  f.free_by_size.erase({it->second, it->first});
  f.free_by_offset.erase(it);
}

std::optional<DiskExtent> DiskExtentAllocator::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes % kDirectIoAlignment != 0) return std::nullopt;
  for (size_t n = 0; n < files_.size(); ++n) {
    const size_t i = (next_file_ + n) % files_.size();
    File& f = files_[i];
    auto best = f.free_by_size.lower_bound({bytes, 0});
    if (best == f.free_by_size.end()) continue;
    const uint64_t length = best->first;
    const uint64_t offset = best->second;
    EraseFree(f, f.free_by_offset.find(offset));
    if (length > bytes) InsertFree(f, offset + bytes, length - bytes);
    free_ -= bytes;
    next_file_ = (i + 1) % files_.size();
    return DiskExtent{static_cast<uint32_t>(i), offset, bytes};
  }
  return std::nullopt;
}

Status DiskExtentAllocator::Reserve(const DiskExtent& e) {
  if (e.file >= files_.size() || e.bytes == 0 || e.offset % kDirectIoAlignment != 0 ||
      e.bytes % kDirectIoAlignment != 0 || e.offset > files_[e.file].bytes ||
      e.bytes > files_[e.file].bytes - e.offset) {
    return Status::InvalidArgument("extent " + e.ToString() + " does not fit data file " +
                                   std::to_string(e.file) + " (" + std::to_string(files_.size()) +
                                   " files)");
  }
  File& f = files_[e.file];
  // The free range that must contain [offset, end).
  auto it = f.free_by_offset.upper_bound(e.offset);
  if (it == f.free_by_offset.begin()) {
    return Status::Corruption("extent " + e.ToString() + " overlaps another record's extent");
  }
  --it;
  const uint64_t start = it->first;
  const uint64_t length = it->second;
  if (start + length < e.end()) {
    return Status::Corruption("extent " + e.ToString() + " overlaps another record's extent");
  }
  EraseFree(f, it);
  if (e.offset > start) InsertFree(f, start, e.offset - start);
  if (start + length > e.end()) InsertFree(f, e.end(), start + length - e.end());
  free_ -= e.bytes;
  return Status::OK();
}

void DiskExtentAllocator::Free(const DiskExtent& e) {
  assert(e.file < files_.size());
  InsertFree(files_[e.file], e.offset, e.bytes);
  free_ += e.bytes;
}

uint64_t DiskExtentAllocator::LargestFree() const {
  uint64_t best = 0;
  for (const File& f : files_) {
    if (!f.free_by_size.empty()) best = std::max(best, f.free_by_size.rbegin()->first);
  }
  return best;
}

}  // namespace cachepawl
