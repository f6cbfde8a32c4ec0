// HugePageAllocator<T>: a std::allocator replacement for the index's large arrays. A block of
// 2 MiB or more is mapped on its own (mmap), aligned to 2 MiB and advised to the kernel as a
// huge-page candidate (madvise MADV_HUGEPAGE; a no-op where transparent huge pages are off), so
// that random lookups in a large index miss the TLB far less. Such blocks are not malloc's:
// MappedHugeBytes() says how many bytes they hold now (for memory measurements; malloc
// statistics do not see them). Smaller blocks come from operator new.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

namespace cachepawl::index_internal {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

inline std::atomic<uint64_t>& MappedHugeBytesCounter() {
  static std::atomic<uint64_t> bytes{0};
  return bytes;
}

// Bytes of all blocks mapped by AllocateMaybeHuge and not yet freed, in this process.
inline uint64_t MappedHugeBytes() {
  return MappedHugeBytesCounter().load(std::memory_order_relaxed);
}

inline size_t MappedLength(size_t bytes) { return (bytes + 4095) & ~size_t{4095}; }

// Throws std::bad_alloc when out of memory, as operator new does.
inline void* AllocateMaybeHuge(size_t bytes, size_t align = alignof(std::max_align_t)) {
  if (bytes < kHugePageBytes) return ::operator new(bytes, std::align_val_t(align));
  // Map 2 MiB more than needed, then unmap the unaligned head and the tail.
  const size_t len = MappedLength(bytes);
  void* raw = mmap(nullptr, len + kHugePageBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  const uintptr_t end = begin + len + kHugePageBytes;
  if (aligned > begin) munmap(raw, aligned - begin);
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  (void)madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);  // advice only
  MappedHugeBytesCounter().fetch_add(len, std::memory_order_relaxed);
  return reinterpret_cast<void*>(aligned);
}

// `bytes` and `align` as given to AllocateMaybeHuge.
inline void FreeMaybeHuge(void* p, size_t bytes, size_t align = alignof(std::max_align_t)) {
  if (bytes < kHugePageBytes) {
    ::operator delete(p, std::align_val_t(align));
    return;
  }
  munmap(p, MappedLength(bytes));
  MappedHugeBytesCounter().fetch_sub(MappedLength(bytes), std::memory_order_relaxed);
}

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT(google-explicit-constructor)
  T* allocate(size_t n) { return static_cast<T*>(AllocateMaybeHuge(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, size_t n) { FreeMaybeHuge(p, n * sizeof(T), alignof(T)); }
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator&) { return true; }
};

}  // namespace cachepawl::index_internal
