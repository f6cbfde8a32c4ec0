// PageTable: an open-addressing hash table from PageHash to a 32-bit entry index.
//
// Linear probing over 8-byte slots {tag, index}; the tag (32 bits of a mix of all 32 hash bytes)
// spares most full-hash comparisons, which need the entry itself (the owner keeps the hashes;
// `key_of(index)` returns the PageHash stored at an index). Deletion shifts the following run
// back, so there are no tombstones. The load factor stays at or below 3/4.
// Not thread-safe: the owner guards it (concurrent const calls are safe), except
// PrefetchUnguarded, which may run concurrently with anything.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "index/huge_page_allocator.h"
#include "vocab/page_hash.h"

namespace cachepawl::index_internal {

// Whether all 32 bytes are zero, without a memcmp call.
inline bool IsZeroHash(const PageHash& a) {
  uint64_t x[4];
  std::memcpy(x, a.bytes.data(), sizeof(x));
  return (x[0] | x[1] | x[2] | x[3]) == 0;
}

// Equality of two hashes without a memcmp call.
inline bool SameHash(const PageHash& a, const PageHash& b) {
  uint64_t x[4], y[4];
  std::memcpy(x, a.bytes.data(), sizeof(x));
  std::memcpy(y, b.bytes.data(), sizeof(y));
  return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3])) == 0;
}

class PageTable {
 public:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;

  struct Slot {
    uint32_t tag = 0;
    uint32_t index = kNone;  // kNone: empty
  };

  // A 64-bit mix of all 32 bytes: robust to hashes that differ in any byte only.
  static uint64_t Mix(const PageHash& h) {
    uint64_t w[4];
    std::memcpy(w, h.bytes.data(), sizeof(w));
    const uint64_t x = w[0] ^ std::rotl(w[1], 17) ^ std::rotl(w[2], 31) ^ std::rotl(w[3], 47);
    return x * 0x9E3779B97F4A7C15ull;
  }

  PageTable() {
    Rehash(16, [](uint32_t) -> const PageHash& { return kZero; });
  }
  PageTable(const PageTable&) = delete;
  PageTable& operator=(const PageTable&) = delete;

  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }
  size_t MemoryBytes() const { return slots_.capacity() * sizeof(Slot); }

  // Where a probe for `mixed` (= Mix(hash)) starts, and the tag it looks for.
  size_t Home(uint64_t mixed) const { return static_cast<size_t>(mixed >> shift_); }
  static uint32_t Tag(uint64_t mixed) { return static_cast<uint32_t>(mixed); }
  void Prefetch(uint64_t mixed) const { __builtin_prefetch(&slots_[Home(mixed)]); }
  // Prefetch without the owner's lock: from relaxed atomic copies of the slots' address and the
  // shift, which Rehash updates. A copy that a concurrent Rehash made stale (or a mix of an old
  // address and a new shift) only makes the prefetch useless: a prefetch never faults.
  void PrefetchUnguarded(uint64_t mixed) const {
    const uintptr_t base = base_hint_.load(std::memory_order_relaxed);
    const int shift = shift_hint_.load(std::memory_order_relaxed);
    const uintptr_t home = base + (mixed >> shift) * sizeof(Slot);
    __builtin_prefetch(reinterpret_cast<const void*>(home));
    // A probe run from the second half of a line most often ends in the next line.
    __builtin_prefetch(reinterpret_cast<const void*>(home + 4 * sizeof(Slot)));
  }

  // The index of the first slot from the home of `mixed` whose tag matches, or kNone when the
  // run ends first. The caller must check the full hash (FindFrom continues the probe).
  uint32_t FirstTagMatch(uint64_t mixed, size_t* pos) const {
    const uint32_t tag = Tag(mixed);
    size_t i = Home(mixed);
    while (slots_[i].index != kNone) {
      if (slots_[i].tag == tag) {
        *pos = i;
        return slots_[i].index;
      }
      i = (i + 1) & mask_;
    }
    return kNone;
  }

  // The index stored for `h`, or kNone. `mixed` is Mix(h).
  template <typename KeyOf>
  uint32_t Find(const PageHash& h, uint64_t mixed, KeyOf&& key_of) const {
    const uint32_t tag = Tag(mixed);
    for (size_t i = Home(mixed); slots_[i].index != kNone; i = (i + 1) & mask_) {
      if (slots_[i].tag == tag && SameHash(key_of(slots_[i].index), h)) return slots_[i].index;
    }
    return kNone;
  }
  template <typename KeyOf>
  uint32_t Find(const PageHash& h, KeyOf&& key_of) const {
    return Find(h, Mix(h), key_of);
  }

  // Inserting takes one probe: ReserveOneMore(), then FindForInsert() either finds `h` or says
  // where it goes, then (table unchanged in between) InsertAt() puts it there.
  template <typename KeyOf>
  void ReserveOneMore(KeyOf&& key_of) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Rehash(slots_.size() * 2, key_of);
  }
  struct InsertPoint {
    size_t pos;
    uint32_t tag;
  };
  template <typename KeyOf>
  uint32_t FindForInsert(const PageHash& h, uint64_t mixed, KeyOf&& key_of, InsertPoint* at) const {
    const uint32_t tag = Tag(mixed);
    size_t i = Home(mixed);
    for (; slots_[i].index != kNone; i = (i + 1) & mask_) {
      if (slots_[i].tag == tag && SameHash(key_of(slots_[i].index), h)) return slots_[i].index;
    }
    *at = InsertPoint{i, tag};
    return kNone;
  }
  void InsertAt(const InsertPoint& at, uint32_t index) {
    slots_[at.pos] = Slot{at.tag, index};
    ++size_;
  }

  // Makes room for `n` keys without rehashing.
  template <typename KeyOf>
  void Reserve(size_t n, KeyOf&& key_of) {
    size_t cap = slots_.size();
    while (n * 4 > cap * 3) cap *= 2;
    if (cap != slots_.size()) Rehash(cap, key_of);
  }

  // Removes `h` (stored with `index`); no-op when absent.
  template <typename KeyOf>
  void Erase(const PageHash& h, uint32_t index, KeyOf&& key_of) {
    size_t i = Home(Mix(h));
    while (slots_[i].index != index) {
      if (slots_[i].index == kNone) return;
      i = (i + 1) & mask_;
    }
    // Backward shift: move later members of the run into the hole when their home allows.
    size_t j = i;
    for (;;) {
      j = (j + 1) & mask_;
      if (slots_[j].index == kNone) break;
      const size_t home = Home(Mix(key_of(slots_[j].index)));
      // The hole at i may take slot j when home is not cyclically in (i, j].
      const bool home_in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
      if (!home_in_range) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --size_;
  }

  // For invariant checks: every occupied slot.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Slot& s : slots_) {
      if (s.index != kNone) fn(s);
    }
  }

 private:
  static inline const PageHash kZero{};

  template <typename KeyOf>
  void Rehash(size_t capacity, KeyOf&& key_of) {
    std::vector<Slot, HugePageAllocator<Slot>> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64 - std::countr_zero(capacity);
    base_hint_.store(reinterpret_cast<uintptr_t>(slots_.data()), std::memory_order_relaxed);
    shift_hint_.store(shift_, std::memory_order_relaxed);
    for (const Slot& s : old) {
      if (s.index != kNone) Place(Mix(key_of(s.index)), s.index);
    }
  }

  void Place(uint64_t mixed, uint32_t index) {
    size_t i = Home(mixed);
    while (slots_[i].index != kNone) i = (i + 1) & mask_;
    slots_[i] = Slot{Tag(mixed), index};
  }

  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
  std::atomic<uintptr_t> base_hint_{0};  // slots_.data() and shift_ for PrefetchUnguarded
  std::atomic<int> shift_hint_{63};
};

}  // namespace cachepawl::index_internal
