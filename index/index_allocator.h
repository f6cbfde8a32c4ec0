// IndexAllocator: hands out 32-bit indices into a ChunkedArray (index/chunked_array.h),
// reusing freed ones most recent first. The index uses it for Mamba and window state records;
// entries, which grow chain by chain, use EntryAllocator (index/entry_allocator.h).
//
// Thread safety: none; the owner guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cachepawl::index_internal {

class IndexAllocator {
 public:
  // Indices ever handed out are [0, high_water()); some of them may be free.
  uint32_t high_water() const { return high_water_; }
  size_t live() const { return high_water_ - free_.size(); }

  uint32_t Allocate() {
    if (free_.empty()) return high_water_++;
    const uint32_t i = free_.back();
    free_.pop_back();
    return i;
  }
  void Free(uint32_t i) { free_.push_back(i); }

  size_t MemoryBytes() const { return free_.capacity() * sizeof(uint32_t); }

 private:
  std::vector<uint32_t> free_;
  uint32_t high_water_ = 0;
};

}  // namespace cachepawl::index_internal
