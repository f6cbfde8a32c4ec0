// StressPrompts: the bounded pool of prompts `cachepawl stress` draws from (tools/stress/stress.h).
//
// Every prompt starts with the same 2 pages (a system prompt every thread races on), then its
// family's shared pages, then its own, up to max_pages pages; each prompt exists once per
// namespace ("" and "tenant-1" ...), so namespaces share tokens and never entries. Tokens are
// BlockToken(block, position) (replay_content.h), and the page hashes are computed once, with
// Store::HashTokens, so every thread can name and verify any page and state.
//
// Thread safety: immutable after Build; every method may be called from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "store/store.h"
#include "tools/replay/replay_rng.h"
#include "vocab/page_hash.h"

namespace cachepawl::tools {

struct StressPrompt {
  std::string ns;
  std::vector<uint32_t> tokens;  // whole pages
  std::vector<PageHash> hashes;  // one per page
};

class StressPrompts {
 public:
  // `store` only hashes. families, prompts_per_family, max_pages (>= 4) and namespaces >= 1.
  static StressPrompts Build(const Store& store, uint32_t families, uint32_t prompts_per_family,
                             uint32_t max_pages, uint32_t namespaces, uint64_t seed);

  size_t size() const { return prompts_.size(); }
  const StressPrompt& at(size_t i) const { return prompts_[i]; }
  // A prompt at random: of the empty namespace 4 times in 5.
  const StressPrompt& Pick(SplitMix64& rng) const;
  // Distinct pages over every prompt (what the pool would occupy in full: each page's KV and a
  // state at each depth).
  uint64_t distinct_pages() const { return distinct_pages_; }

 private:
  std::vector<StressPrompt> prompts_;
  size_t per_namespace_ = 0;
  uint64_t distinct_pages_ = 0;
};

}  // namespace cachepawl::tools
