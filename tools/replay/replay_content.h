// Deterministic content for `cachepawl replay`: the tokens of a block, the bytes of a KV page
// and of a Mamba state. Every byte the replay writes is a function of the entry's key, so every
// byte it loads back can be checked without keeping a copy (docs/DESIGN.md, invariant 1).
//
//   token(block b, position j)     a 32-bit mix of (b, j): equal block ids, equal tokens
//   KV page record (page hash h)   word i (8 bytes, little-endian) = T[i mod 2^17] ^ K(seed(h), i
//   >> 17) state record (h, depth d)      the same with seed(h, d) in another domain
//
// T is a fixed SplitMix64 table (1 MiB) and K(seed, c) a SplitMix64 mix per 1 MiB chunk, so the
// content runs at memory speed, differs between any two keys in almost every byte, and differs
// between chunks of one record (a swapped or shifted chunk is caught). The last partial word of
// a record takes the leading bytes of its word.
//
// Thread safety: free functions, safe from any thread. ContentVerifier is not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tools/replay/replay_trace.h"
#include "vocab/page_hash.h"

namespace cachepawl::tools {

// The token at `position` of block `block_id`.
uint32_t BlockToken(uint64_t block_id, uint64_t position);

// Appends the PromptTokenCount(request, block_size_tokens) tokens of `request`'s prompt.
void AppendPromptTokens(const TraceRequest& request, uint32_t block_size_tokens,
                        std::vector<uint32_t>* out);

// The content seeds of a KV page and of a Mamba state (depth in tokens).
uint64_t PageContentSeed(const PageHash& page);
uint64_t StateContentSeed(const PageHash& last_page, uint64_t depth_tokens);

// Writes the content defined by `seed` into `record`.
void FillContent(uint64_t seed, std::span<std::byte> record);

// Compares `record` with the content defined by `seed`. Returns the number of wrong bytes;
// `*first_wrong_offset` (when given) is set to the offset of the first one, if any.
uint64_t CountWrongBytes(uint64_t seed, std::span<const std::byte> record,
                         uint64_t* first_wrong_offset = nullptr);

// Counts what a replay checked and found wrong; keeps a description of the first failures.
class ContentVerifier {
 public:
  explicit ContentVerifier(size_t max_kept_failures = 10) : max_kept_(max_kept_failures) {}

  // Each returns the wrong-byte count of `record` and adds it to the totals.
  uint64_t CheckPage(const PageHash& page, std::span<const std::byte> record);
  uint64_t CheckState(const PageHash& last_page, uint64_t depth_tokens,
                      std::span<const std::byte> record);

  uint64_t records_checked() const { return records_checked_; }
  uint64_t bytes_checked() const { return bytes_checked_; }
  uint64_t wrong_records() const { return wrong_records_; }
  uint64_t wrong_bytes() const { return wrong_bytes_; }
  const std::vector<std::string>& failures() const { return failures_; }

 private:
  uint64_t Check(uint64_t seed, std::span<const std::byte> record, const std::string& what);

  size_t max_kept_;
  uint64_t records_checked_ = 0;
  uint64_t bytes_checked_ = 0;
  uint64_t wrong_records_ = 0;
  uint64_t wrong_bytes_ = 0;
  std::vector<std::string> failures_;
};

}  // namespace cachepawl::tools
