// The ceiling of a trace: the prefix hit rate of an infinite cache, computed exactly.
//
// Requests are taken in order. A block, page or state is "cached" once an earlier request had
// it; identity is by prefix (the chain of block ids up to it), as the store's page hashes are.
//   blocks   per request, the leading blocks whose prefix was seen before, over all blocks
//            (docs/PERFORMANCE.md gives it for the Mooncake synthetic trace)
//   kv       per request, the leading full pages seen before (an attention-only model)
//   hybrid   per request, the longest prefix of n seen pages that also has a Mamba state at
//            depth n, where states exist only where the replay engine saves them: at every
//            multiple of the track interval past the reused prefix, and at the end of the
//            prompt's full pages. For a layout without SSM layers it equals `kv`.
// Tokens: a hit of n pages serves n * page_size tokens of the request's prompt tokens.
// What the infinite cache holds at the end (the trace's working set, `replay --sweep`): every
// distinct full page (by prefix) and, for the hybrid rule, every state saved at the points above.
//
// Thread safety: plain values and a free function.
#pragma once

#include <cstdint>
#include <span>

#include "tools/replay/replay_trace.h"
#include "vocab/status.h"

namespace cachepawl::tools {

struct CeilingOptions {
  uint32_t block_size_tokens = 512;
  uint32_t page_size_tokens = 16;
  uint32_t track_interval_pages = 32;  // 0: a state only at the end of each prompt
  bool hybrid = true;                  // the layout has SSM layers
};

struct Ceiling {
  uint64_t requests = 0;
  uint64_t blocks = 0, hit_blocks = 0;
  uint64_t pages = 0, kv_hit_pages = 0, hybrid_hit_pages = 0;
  uint64_t tokens = 0, kv_hit_tokens = 0, hybrid_hit_tokens = 0;
  uint64_t distinct_pages = 0;  // full pages the infinite cache holds at the end
  uint64_t saved_states = 0;    // states it holds (hybrid rule; 0 otherwise)

  static double Rate(uint64_t hits, uint64_t total) {
    return total == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(total);
  }
  double block_rate() const { return Rate(hit_blocks, blocks); }
  double kv_page_rate() const { return Rate(kv_hit_pages, pages); }
  double kv_token_rate() const { return Rate(kv_hit_tokens, tokens); }
  double hybrid_page_rate() const { return Rate(hybrid_hit_pages, pages); }
  double hybrid_token_rate() const { return Rate(hybrid_hit_tokens, tokens); }
};

// InvalidArgument (naming the flag) for a bad block / page size pair.
StatusOr<Ceiling> ComputeCeiling(std::span<const TraceRequest> requests,
                                 const CeilingOptions& options);

}  // namespace cachepawl::tools
