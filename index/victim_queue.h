// VictimQueue: a lazy min-heap of eviction candidates for one (kind, tier).
//
// An item records an entry's index, its identity (depth and the first 8 hash bytes) and its
// recency when queued. Recency only grows and Match refreshes it without the exclusive lock,
// so items go stale rather than being moved: the owner pops the least item, drops it when the
// entry is gone or no longer evictable, re-queues it with the entry's current recency when it
// grew, and otherwise has the least recently used candidate. This is exact as long as every
// evictable entry has an item whose recency is at most its current one.
// Order: smaller recency, then deeper, then smaller hash bytes, then smaller index.
// Not thread-safe: the owner guards it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "vocab/page_hash.h"

namespace cachepawl::index_internal {

struct VictimItem {
  uint64_t last_use = 0;
  uint64_t order = 0;  // the first 8 hash bytes, big-endian: compares like the bytes
  uint32_t depth = 0;
  uint32_t index = 0;
};

inline uint64_t HashOrderKey(const PageHash& h) {
  uint64_t v;
  std::memcpy(&v, h.bytes.data(), sizeof(v));
  return __builtin_bswap64(v);
}

// True when `a` should be evicted before `b`.
inline bool EvictsBefore(const VictimItem& a, const VictimItem& b) {
  if (a.last_use != b.last_use) return a.last_use < b.last_use;
  if (a.depth != b.depth) return a.depth > b.depth;
  if (a.order != b.order) return a.order < b.order;
  return a.index < b.index;
}

class VictimQueue {
 public:
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const VictimItem& top() const { return heap_.front(); }
  size_t MemoryBytes() const { return heap_.capacity() * sizeof(VictimItem); }

  void Push(const VictimItem& item) {
    heap_.push_back(item);
    std::push_heap(heap_.begin(), heap_.end(), Later);
  }
  void Pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Later);
    heap_.pop_back();
  }

  // Keeps the items for which `keep(item&)` returns true (it may rewrite the item) and
  // restores the heap order. Releases memory when the queue shrank a lot.
  template <typename Keep>
  void Rebuild(Keep&& keep) {
    size_t out = 0;
    for (size_t i = 0; i < heap_.size(); ++i) {
      VictimItem item = heap_[i];
      if (keep(item)) heap_[out++] = item;
    }
    heap_.resize(out);
    if (heap_.capacity() > 4 * out + 64) heap_.shrink_to_fit();
    std::make_heap(heap_.begin(), heap_.end(), Later);
  }

  // For invariant checks.
  const std::vector<VictimItem>& items() const { return heap_; }

 private:
  // std heaps keep the greatest on top: "greater" is "evicted before".
  static bool Later(const VictimItem& a, const VictimItem& b) { return EvictsBefore(b, a); }

  std::vector<VictimItem> heap_;
};

}  // namespace cachepawl::index_internal
