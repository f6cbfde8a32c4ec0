// ChunkedSlab<T>: an array of T addressed by 32-bit indices that grows a chunk at a time.
// Elements never move (a chunk is never reallocated), so T may hold atomics, and growth costs
// no copy and leaves at most one chunk unused. Freed indices are reused, most recent first.
// Not thread-safe: the owner guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace cachepawl::index_internal {

template <typename T, unsigned kChunkBits = 14>
class ChunkedSlab {
 public:
  static constexpr uint32_t kChunkSize = uint32_t{1} << kChunkBits;

  ChunkedSlab() = default;
  ChunkedSlab(const ChunkedSlab&) = delete;
  ChunkedSlab& operator=(const ChunkedSlab&) = delete;

  T& operator[](uint32_t i) { return chunks_[i >> kChunkBits][i & (kChunkSize - 1)]; }
  const T& operator[](uint32_t i) const { return chunks_[i >> kChunkBits][i & (kChunkSize - 1)]; }

  // Indices ever handed out are [0, high_water()); some of them may be free.
  uint32_t high_water() const { return high_water_; }
  size_t live() const { return high_water_ - free_.size(); }

  // Makes room for `n` elements in total without further chunk allocation.
  void Reserve(uint64_t n) {
    while (static_cast<uint64_t>(chunks_.size()) * kChunkSize < n) AddChunk();
  }

  // A free index (the element keeps whatever the previous owner left: reset it).
  uint32_t Allocate() {
    if (!free_.empty()) {
      const uint32_t i = free_.back();
      free_.pop_back();
      return i;
    }
    if (high_water_ == chunks_.size() * kChunkSize) AddChunk();
    return high_water_++;
  }
  void Free(uint32_t i) { free_.push_back(i); }

  size_t MemoryBytes() const {
    return chunks_.size() * (sizeof(T) * kChunkSize + sizeof(std::unique_ptr<T[]>)) +
           free_.capacity() * sizeof(uint32_t);
  }

 private:
  void AddChunk() { chunks_.push_back(std::make_unique<T[]>(kChunkSize)); }

  std::vector<std::unique_ptr<T[]>> chunks_;
  std::vector<uint32_t> free_;
  uint32_t high_water_ = 0;
};

}  // namespace cachepawl::index_internal
