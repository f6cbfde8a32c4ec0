#include "tools/replay/replay_ceiling.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace cachepawl::tools {
namespace {

// An edge of the block trie: (parent node, block id). Node 0 is the root (empty prefix).
struct Edge {
  uint64_t parent;
  uint64_t block_id;
  friend bool operator==(const Edge&, const Edge&) = default;
};

struct EdgeHash {
  size_t operator()(const Edge& e) const noexcept {
    uint64_t z = e.parent * 0x9E3779B97F4A7C15ull ^ e.block_id;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<size_t>(z ^ (z >> 31));
  }
};

// A page's identity: the trie node of its block and its index inside the block.
struct PageId {
  uint64_t node;
  uint64_t index;
  friend bool operator==(const PageId&, const PageId&) = default;
};

struct PageIdHash {
  size_t operator()(const PageId& p) const noexcept { return EdgeHash()(Edge{p.node, p.index}); }
};

}  // namespace

StatusOr<Ceiling> ComputeCeiling(std::span<const TraceRequest> requests,
                                 const CeilingOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(
      ValidateBlockAndPageSize(options.block_size_tokens, options.page_size_tokens));
  const uint64_t page_size = options.page_size_tokens;
  const uint64_t pages_per_block = options.block_size_tokens / page_size;
  const uint64_t track = options.track_interval_pages;

  std::unordered_map<Edge, uint64_t, EdgeHash> trie;
  // Per node: how many of its block's pages have been cached (always a prefix of the block).
  std::vector<uint64_t> cached_pages(1, 0);
  std::unordered_set<PageId, PageIdHash> states;  // a state at the depth ending with this page

  Ceiling c;
  std::vector<uint64_t> nodes;
  std::vector<char> existed;
  for (const TraceRequest& r : requests) {
    ++c.requests;
    const uint64_t tokens = PromptTokenCount(r, options.block_size_tokens);
    const uint64_t pages = tokens / page_size;
    c.blocks += r.hash_ids.size();
    c.pages += pages;
    c.tokens += tokens;

    // Walk (and extend) the trie.
    nodes.clear();
    existed.clear();
    uint64_t parent = 0;
    for (uint64_t id : r.hash_ids) {
      auto [it, inserted] = trie.try_emplace(Edge{parent, id}, cached_pages.size());
      if (inserted) cached_pages.push_back(0);
      nodes.push_back(it->second);
      existed.push_back(!inserted);
      parent = it->second;
    }
    for (char e : existed) {
      if (!e) break;
      ++c.hit_blocks;
    }
    auto page_id = [&](uint64_t page) {
      return PageId{nodes[page / pages_per_block], page % pages_per_block};
    };

    // Leading pages already cached.
    uint64_t kv_hit = 0;
    while (kv_hit < pages) {
      const PageId p = page_id(kv_hit);
      if (p.index >= cached_pages[p.node]) break;
      ++kv_hit;
    }
    uint64_t reuse = kv_hit;
    if (options.hybrid) {
      while (reuse > 0 && !states.contains(page_id(reuse - 1))) --reuse;
    }
    c.kv_hit_pages += kv_hit;
    c.kv_hit_tokens += kv_hit * page_size;
    c.hybrid_hit_pages += reuse;
    c.hybrid_hit_tokens += reuse * page_size;

    // Cache what the request saves: every page, and states at the replay engine's save points.
    for (uint64_t b = 0; b < nodes.size(); ++b) {
      const uint64_t in_block =
          std::min(pages_per_block, pages - std::min(pages, b * pages_per_block));
      cached_pages[nodes[b]] = std::max(cached_pages[nodes[b]], in_block);
    }
    if (options.hybrid && pages > reuse) {
      for (uint64_t d = reuse + 1; d <= pages; ++d) {
        if (d == pages || (track != 0 && d % track == 0)) states.insert(page_id(d - 1));
      }
    }
  }
  for (uint64_t n : cached_pages) c.distinct_pages += n;
  c.saved_states = states.size();
  return c;
}

}  // namespace cachepawl::tools
