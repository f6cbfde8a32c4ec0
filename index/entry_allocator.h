// EntryAllocator: hands out the index's entry indices (into a ChunkedArray,
// index/chunked_array.h) in blocks, so that a chain grown page by page keeps consecutive indices
// even when other chains grow in between.
//
// Thread safety: none; the owner guards it.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cachepawl::index_internal {

// Indices come in aligned blocks of kBlock. Allocate(after) returns after + 1 when `after` was
// the last index handed out of a block still open for it (the block's next indices are
// reserved for the chain that `after` ends); otherwise it opens a block for a new run (a wholly
// free one, or a fresh one at the high water mark) and returns its first index. At most
// `max_open` blocks are open; opening one more closes the one opened longest ago, whose reserved
// indices become free. When more than max(max_open * kBlock, live / 32) indices are free, a
// freed one is reused (the lowest of its block) instead of opening a block. So at most that
// many plus max_open * (kBlock - 1) reserved indices below the high water mark are unused: the
// memory bound. Indices after the high water mark are never touched.
class EntryAllocator {
 public:
  static constexpr uint32_t kBlock = 16;
  static constexpr size_t kDefaultMaxOpen = 1024;
  static constexpr uint32_t kNone = 0xFFFFFFFFu;

  explicit EntryAllocator(size_t max_open = kDefaultMaxOpen)
      : max_open_(std::max<size_t>(max_open, 1)), open_(max_open_) {}
  EntryAllocator(const EntryAllocator&) = delete;
  EntryAllocator& operator=(const EntryAllocator&) = delete;

  uint32_t high_water() const { return high_water_; }
  // Indices handed out and not freed.
  size_t live() const { return high_water_ - free_count_ - reserved_count_; }
  // Indices below high_water() neither live nor reserved.
  size_t free_count() const { return free_count_; }
  // Indices kept for the next page of an open run.
  size_t reserved_count() const { return reserved_count_; }

  // `after`: the index the new one should follow (the parent's), or kNone.
  uint32_t Allocate(uint32_t after) {
    if (after != kNone) {
      const uint32_t i = after + 1;
      const uint32_t off = i % kBlock;
      if (off != 0 && i < high_water_) {
        Block& b = blocks_[i / kBlock];
        if ((b.flags & kOpen) && b.next == off) {
          --reserved_count_;
          if (++b.next == kBlock) {  // the run used the whole block
            b.flags &= static_cast<uint8_t>(~kOpen);
            Enlist(i / kBlock);  // indices of it freed meanwhile
          }
          return i;
        }
      }
    }
    return AllocateElsewhere();
  }

  void Free(uint32_t i) {
    const uint32_t bi = i / kBlock;
    Block& b = blocks_[bi];
    b.free_mask |= static_cast<uint16_t>(1u << (i % kBlock));
    ++free_count_;
    if (!(b.flags & kOpen)) Enlist(bi);
  }

  size_t MemoryBytes() const {
    return blocks_.capacity() * sizeof(Block) + open_.capacity() * sizeof(uint32_t) +
           (partial_.capacity() + empty_.capacity()) * sizeof(uint32_t);
  }

 private:
  static constexpr uint8_t kOpen = 1, kInPartial = 2, kInEmpty = 4;
  static constexpr uint16_t kAllFree = 0xFFFF;
  static_assert(kBlock == 16, "free_mask has one bit per index of a block");

  struct Block {
    uint16_t free_mask = 0;  // indices neither handed out nor reserved
    uint8_t next = 0;        // while open: the next index of the run (those after are reserved)
    uint8_t flags = 0;
  };

  // Allocate when `after` has no reserved successor.
  [[gnu::noinline]] uint32_t AllocateElsewhere() {
    if (free_count_ > std::max<size_t>(max_open_ * kBlock, live() / 32)) {
      if (const uint32_t i = TakeFreed(); i != kNone) return i;
    }
    return OpenRun();
  }

  // Queues block `bi` (not open) where the allocator looks for freed indices.
  void Enlist(uint32_t bi) {
    Block& b = blocks_[bi];
    if (b.free_mask == 0) return;
    if (!(b.flags & kInPartial)) {
      b.flags |= kInPartial;
      partial_.push_back(bi);
    }
    if (b.free_mask == kAllFree && !(b.flags & kInEmpty)) {
      b.flags |= kInEmpty;
      empty_.push_back(bi);
    }
  }

  // A freed index, or kNone. Blocks in partial_ may have become open or full since queued.
  uint32_t TakeFreed() {
    while (!partial_.empty()) {
      const uint32_t bi = partial_.back();
      Block& b = blocks_[bi];
      if (b.free_mask == 0 || (b.flags & kOpen)) {
        b.flags &= static_cast<uint8_t>(~kInPartial);
        partial_.pop_back();
        continue;
      }
      const uint32_t off = static_cast<uint32_t>(std::countr_zero(b.free_mask));
      b.free_mask &= static_cast<uint16_t>(b.free_mask - 1);
      --free_count_;
      return bi * kBlock + off;
    }
    return kNone;
  }

  // Opens a block for a new run and returns its first index.
  uint32_t OpenRun() {
    uint32_t bi = kNone;
    while (!empty_.empty()) {
      const uint32_t e = empty_.back();
      empty_.pop_back();
      Block& b = blocks_[e];
      b.flags &= static_cast<uint8_t>(~kInEmpty);
      if (b.free_mask == kAllFree && !(b.flags & kOpen)) {
        bi = e;
        free_count_ -= kBlock;
        break;
      }
    }
    if (bi == kNone) {
      bi = high_water_ / kBlock;
      high_water_ += kBlock;
      blocks_.emplace_back();
    }
    if (open_count_ == max_open_) {
      Close(open_[open_head_]);
      open_head_ = (open_head_ + 1) % max_open_;
      --open_count_;
    }
    open_[(open_head_ + open_count_) % max_open_] = bi;
    ++open_count_;
    Block& b = blocks_[bi];
    b.free_mask = 0;
    b.next = 1;
    b.flags |= kOpen;
    reserved_count_ += kBlock - 1;
    return bi * kBlock;
  }

  // Ends the run of block `bi` if it is still open: its reserved indices become free.
  void Close(uint32_t bi) {
    Block& b = blocks_[bi];
    if (!(b.flags & kOpen)) return;  // filled up, or reopened later (then it is queued again)
    b.flags &= static_cast<uint8_t>(~kOpen);
    const uint32_t reserved = kBlock - b.next;
    b.free_mask |= static_cast<uint16_t>(kAllFree << b.next);
    reserved_count_ -= reserved;
    free_count_ += reserved;
    Enlist(bi);
  }

  const size_t max_open_;
  std::vector<Block> blocks_;
  std::vector<uint32_t> open_;  // ring of blocks opened, oldest at open_head_
  size_t open_head_ = 0;
  size_t open_count_ = 0;
  std::vector<uint32_t> partial_;  // blocks that may have free indices
  std::vector<uint32_t> empty_;    // blocks that may be wholly free
  size_t free_count_ = 0;
  size_t reserved_count_ = 0;
  uint32_t high_water_ = 0;
};

}  // namespace cachepawl::index_internal
