#include "tools/stress/stress_prompts.h"

#include <unordered_set>

#include "tools/replay/replay_content.h"

namespace cachepawl::tools {

StressPrompts StressPrompts::Build(const Store& store, uint32_t families,
                                   uint32_t prompts_per_family, uint32_t max_pages,
                                   uint32_t namespaces, uint64_t seed) {
  constexpr uint32_t kSystemPages = 2;
  const uint32_t page = store.layout().page_size_tokens;
  SplitMix64 rng(seed ^ 0x70726f6d70747301ull);
  // Block ids: the system prompt's pages, each family's shared pages, each prompt's own pages.
  std::vector<std::vector<uint64_t>> blocks;
  for (uint32_t f = 0; f < families; ++f) {
    const uint64_t shared = rng.Between(1, max_pages / 2);
    for (uint32_t p = 0; p < prompts_per_family; ++p) {
      const uint64_t pages = rng.Between(kSystemPages + shared + 1, max_pages);
      std::vector<uint64_t> ids;
      for (uint64_t i = 0; i < pages; ++i) {
        if (i < kSystemPages) {
          ids.push_back(i);
        } else if (i < kSystemPages + shared) {
          ids.push_back((uint64_t{f + 1} << 32) | i);
        } else {
          ids.push_back((uint64_t{f + 1} << 32) | (uint64_t{p + 1} << 16) | i);
        }
      }
      blocks.push_back(std::move(ids));
    }
  }
  StressPrompts pool;
  pool.per_namespace_ = blocks.size();
  std::unordered_set<PageHash> distinct;
  for (uint32_t n = 0; n < namespaces; ++n) {
    const std::string ns = n == 0 ? "" : "tenant-" + std::to_string(n);
    for (const std::vector<uint64_t>& ids : blocks) {
      StressPrompt prompt;
      prompt.ns = ns;
      for (uint64_t id : ids) {
        for (uint32_t j = 0; j < page; ++j) prompt.tokens.push_back(BlockToken(id, j));
      }
      prompt.hashes = store.HashTokens(ns, prompt.tokens);
      distinct.insert(prompt.hashes.begin(), prompt.hashes.end());
      pool.prompts_.push_back(std::move(prompt));
    }
  }
  pool.distinct_pages_ = distinct.size();
  return pool;
}

const StressPrompt& StressPrompts::Pick(SplitMix64& rng) const {
  const size_t namespaces = prompts_.size() / per_namespace_;
  const size_t ns = namespaces > 1 && rng.Between(0, 4) == 0 ? rng.Between(1, namespaces - 1) : 0;
  return prompts_[ns * per_namespace_ + rng.Between(0, per_namespace_ - 1)];
}

}  // namespace cachepawl::tools
