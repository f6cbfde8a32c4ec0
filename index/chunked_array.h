// ChunkedArray<T, kChunkBits>: storage named by 32-bit indices, for the index's entries and
// states. It grows a chunk at a time: elements never move (a chunk is never reallocated), so T
// may hold atomics, growth costs no copy, and at most one chunk is unused. Chunks of 2 MiB or
// more sit on huge pages (see huge_page_allocator.h).
//
// Thread safety: none; the owner guards it. Indices come from IndexAllocator
// (index/index_allocator.h) or EntryAllocator (index/entry_allocator.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "index/huge_page_allocator.h"

namespace cachepawl::index_internal {

template <typename T, unsigned kChunkBits>
class ChunkedArray {
 public:
  static constexpr uint32_t kChunkSize = uint32_t{1} << kChunkBits;

  ChunkedArray() = default;
  ChunkedArray(const ChunkedArray&) = delete;
  ChunkedArray& operator=(const ChunkedArray&) = delete;

  T& operator[](uint32_t i) { return chunks_[i >> kChunkBits][i & (kChunkSize - 1)]; }
  const T& operator[](uint32_t i) const { return chunks_[i >> kChunkBits][i & (kChunkSize - 1)]; }

  // Makes indices [0, n) valid (value-initialized when new).
  void Reserve(uint64_t n) {
    while (static_cast<uint64_t>(chunks_.size()) * kChunkSize < n) AddChunk();
  }

  size_t MemoryBytes() const {
    return chunks_.size() * (sizeof(T) * kChunkSize) + chunks_.capacity() * sizeof(Chunk);
  }

 private:
  struct ChunkDeleter {
    void operator()(T* chunk) const {
      for (uint32_t i = 0; i < kChunkSize; ++i) chunk[i].~T();
      FreeMaybeHuge(chunk, sizeof(T) * kChunkSize, alignof(T));
    }
  };
  using Chunk = std::unique_ptr<T[], ChunkDeleter>;

  void AddChunk() {
    T* chunk = static_cast<T*>(AllocateMaybeHuge(sizeof(T) * kChunkSize, alignof(T)));
    for (uint32_t i = 0; i < kChunkSize; ++i) new (&chunk[i]) T();
    chunks_.push_back(Chunk(chunk));
  }

  std::vector<Chunk> chunks_;
};

}  // namespace cachepawl::index_internal
