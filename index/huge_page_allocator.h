// HugePageAllocator<T>: a std::allocator replacement for the index's large arrays. In arrays of
// 2 MiB or more, the whole 2 MiB-aligned pages are advised to the kernel as huge-page
// candidates (madvise MADV_HUGEPAGE; a no-op where transparent huge pages are off), so that
// random lookups in a large index miss the TLB far less. Nothing is over-allocated to align.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>

namespace cachepawl::index_internal {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

inline void* AllocateMaybeHuge(size_t bytes, size_t align = alignof(std::max_align_t)) {
  void* p = ::operator new(bytes, std::align_val_t(align));
  if (bytes >= kHugePageBytes) {
    // Advise the whole 2 MiB-aligned pages inside the block (no over-allocation to align it).
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
    const uintptr_t first = (begin + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
    const uintptr_t last = (begin + bytes) & ~uintptr_t{kHugePageBytes - 1};
    if (last > first) {
      (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);  // advice only
    }
  }
  return p;
}

inline void FreeMaybeHuge(void* p, size_t /*bytes*/, size_t align = alignof(std::max_align_t)) {
  ::operator delete(p, std::align_val_t(align));
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
