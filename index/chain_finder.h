// ChainFinder: the prefetching pipeline that follows a query's chain of page hashes through the
// prefix index's PageTable and hot entries, for PrefixIndex::Match (an internal part of the
// index library, index/prefix_index_internal.h; nothing outside index/ and its tests uses it).
//
// Inputs: the table (hash -> entry index), the hot entries it names, the entry allocator's high
// water mark (indices at or past it are never read), and the query's hashes h[0..n).
// Reports: Find(i) is the index of the live entry (depth != 0) whose hash is h[i], or kNone when
// the index has no h[i]; it is called for i = 0, 1, 2... < n, and not after a kNone. It answers
// exactly what the table's own lookup answers: predictions only decide what is prefetched and
// which entry is checked first. It does not check that h[i]'s parent is h[i-1]'s entry (the
// caller does: a chain may jump to a page of another chain).
// Thread safety: one finder per query, used by one thread; the table and entries must not change
// while it lives (Match holds the index's lock shared). It copies nothing: the table, the
// entries and the hashes must outlive it.
//
// Header only: Match's walk inlines Find (see there), which an out-of-line definition would
// prevent.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>

#include "index/chunked_array.h"
#include "index/entry_allocator.h"
#include "index/page_table.h"
#include "index/prefix_index_internal.h"
#include "vocab/page_hash.h"

namespace cachepawl::prefix_index_internal {

// Finds the entries of a query's pages in order, for Match. EntryAllocator gives a chain grown
// page by page consecutive indices inside aligned blocks of kBlock and a new block where one
// ends, so page j+1 is most likely at x+1 when page j is at x and x+1 is in the same block.
// Three stages, each ahead of the next:
//  1. (kFar pages ahead) the table slot of a page that will need the table is prefetched: every
//     page in table mode, else only pages where a block is expected to begin (`phase_`);
//  2. (kNear pages ahead) each page gets a predicted index: in sequential mode x+1 inside a
//     block, else (table mode, a block boundary) the first slot whose tag matches; the entry's
//     line is prefetched;
//  3. (the caller's page) the predicted entry is checked (live, same hash). When it is not the
//     page's, the table is asked (full hash compare) and predictions restart after that page
//     in table mode.
// Table mode turns into sequential mode once the table has given each of kToSequential pages
// in a row the index after the previous page's. When the table shows, at a block boundary, that the
// chain goes on in the next block (a chain inserted by InsertChain is one run of blocks),
// boundaries are predicted as x+1 too, until a misprediction. An index whose chains are scattered
// (no two pages in a row consecutive) stays in table mode: one table slot and one entry line per
// page, in parallel.
class ChainFinder {
 public:
  ChainFinder(const PageTable& table, const ChunkedArray<HotEntry, 16>& hot, uint32_t high_water,
              std::span<const PageHash> hashes)
      : table_(table), hot_(hot), high_water_(high_water), hashes_(hashes), n_(hashes.size()) {
    std::fill(std::begin(mixed_page_), std::end(mixed_page_), kNoPage);
  }

  // The index of hashes[i] or kNone; called for i = 0, 1, 2... and not after a kNone.
  // Always inlined (as are the helpers below): Match instantiates its walk twice (with and
  // without windowed KV), and an out-of-line call per page costs ~20% of a warm Match.
  [[gnu::always_inline]] uint32_t Find(size_t i) {
    Advance(i);
    const uint32_t c = predicted_[i % kRing];
    if (c == kNone) return kNone;  // no table slot of the probe run has the tag: absent
    if (c < high_water_) {
      const HotEntry& e = hot_[c];
      if (e.depth != 0 && index_internal::SameHash(e.hash, hashes_[i])) return c;
    }
    // Mispredicted or a tag collision: ask the table, predict again from there in table mode.
    const uint32_t found = table_.Find(hashes_[i], EntryKeys{&hot_});
    s2_ = i + 1;
    last_ = found;
    table_mode_ = true;
    blocks_follow_ = false;
    run_ = 0;
    if (found == kNone) n_ = i + 1;  // the match ends here
    return found;
  }

 private:
  // Chosen by measurement (docs/PERFORMANCE.md, "The depth of Match's pipeline"); in table mode
  // this is the same pipeline as before the allocator had blocks.
  static constexpr size_t kRing = 64, kFar = 32, kNear = 16;
  static constexpr uint32_t kBlock = EntryAllocator::kBlock;
  static constexpr size_t kToSequential = 2;
  static constexpr size_t kNoPage = ~size_t{0};

  [[gnu::always_inline]] uint64_t MixedOf(size_t j) {
    if (mixed_page_[j % kRing] != j) {
      mixed_[j % kRing] = PageTable::Mix(hashes_[j]);
      mixed_page_[j % kRing] = j;
    }
    return mixed_[j % kRing];
  }
  [[gnu::always_inline]] void PrefetchSlot(size_t j) { table_.Prefetch(MixedOf(j)); }

  // Runs stage 1 up to page i + kFar and stage 2 up to page i + kNear.
  [[gnu::always_inline]] void Advance(size_t i) {
    for (const size_t end = std::min(n_, i + kFar); s1_ < end; ++s1_) {
      if (table_mode_ || (!blocks_follow_ && s1_ % kBlock == phase_)) PrefetchSlot(s1_);
    }
    for (const size_t end = std::min(s1_, i + kNear); s2_ < end; ++s2_) {
      const size_t j = s2_;
      uint32_t c;
      if (!table_mode_ && last_ != kNone && ((last_ + 1) % kBlock != 0 || blocks_follow_)) {
        c = last_ + 1;
      } else {
        size_t pos;
        c = table_.FirstTagMatch(MixedOf(j), &pos);
        if (!table_mode_ && c != kNone && last_ != kNone && c == last_ + 1) {
          blocks_follow_ = true;  // a block boundary, and the next block is the chain's too
        }
        if (table_mode_) {
          run_ = (c != kNone && last_ != kNone && c == last_ + 1) ? run_ + 1 : 0;
          table_mode_ = run_ < kToSequential;
        }
        if (c != kNone && !table_mode_) {
          // A block begins at page j - c % kBlock: the next at j + kBlock - c % kBlock.
          const size_t phase = (j + kBlock - c % kBlock) % kBlock;
          if (phase != phase_) {
            phase_ = phase;
            // Stage 1 went past the next boundaries with the old phase: fetch them now.
            for (size_t b = j + kBlock - c % kBlock; b < s1_; b += kBlock) PrefetchSlot(b);
          }
        }
      }
      predicted_[j % kRing] = c;
      last_ = c;
      if (c == kNone) {  // absent: nothing after it can match
        n_ = j + 1;
        s1_ = std::min(s1_, n_);
        break;
      }
      // A prediction across a block boundary may lie past the last entry (checked in Find).
      if (c < high_water_) __builtin_prefetch(&hot_[c]);
    }
  }

  const PageTable& table_;
  const ChunkedArray<HotEntry, 16>& hot_;
  const uint32_t high_water_;
  const std::span<const PageHash> hashes_;
  size_t n_;  // pages that may still match
  uint64_t mixed_[kRing];
  size_t mixed_page_[kRing];  // the page whose Mix is in mixed_ there
  uint32_t predicted_[kRing];
  size_t s1_ = 0;          // pages [0, s1_) went through stage 1
  size_t s2_ = 0;          // pages [0, s2_) went through stage 2
  uint32_t last_ = kNone;  // the index predicted for page s2_ - 1
  bool table_mode_ = true;
  size_t run_ = 0;    // table mode: pages in a row before s2_ with consecutive indices
  size_t phase_ = 0;  // sequential mode: blocks begin at pages j with j % kBlock == phase_
  // Sequential mode: a block boundary found the chain going on in the next block (a chain
  // inserted whole), so x+1 is predicted across boundaries too, without the table.
  bool blocks_follow_ = false;
};

}  // namespace cachepawl::prefix_index_internal
