// PrefixIndex: construction and Match, the walk of a query's chain (finding the entries is
// index/chain_finder.h; see index/prefix_index_internal.h for the layout).
#include "index/prefix_index.h"

#include <algorithm>
#include <memory>
#include <shared_mutex>  // std::shared_lock
#include <span>
#include <utility>

#include "index/chain_finder.h"
#include "index/prefix_index_internal.h"

namespace cachepawl {

using namespace prefix_index_internal;  // NOLINT(google-build-using-namespace): its internals

// ===== construction ==========================================================================

StatusOr<std::unique_ptr<PrefixIndex>> PrefixIndex::Create(const IndexOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<PrefixIndex>(new PrefixIndex(std::make_unique<Impl>(options)));
}

PrefixIndex::PrefixIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PrefixIndex::~PrefixIndex() = default;

const IndexOptions& PrefixIndex::options() const { return impl_->options; }

// ===== Match =================================================================================

MatchResult PrefixIndex::Match(std::span<const PageHash> hashes) {
  MatchResult r;
  Match(hashes, &r);
  return r;
}

void PrefixIndex::Match(std::span<const PageHash> hashes, MatchResult* out) {
  Impl& m = *impl_;
  out->Clear();
  std::shared_lock lock(m.mu);
  if (m.options.window_pages == 0) {
    m.MatchChain<false>(hashes, out);
  } else {
    m.MatchChain<true>(hashes, out);
  }
}

// kWindowed: the layout has windowed layers (window_pages > 0), so the rule also needs the
// windowed KV of the last W pages, which is in the cold part: only then is it read.
template <bool kWindowed>
void Core::MatchChain(std::span<const PageHash> hashes, MatchResult* out) {
  Core& m = *this;
  const uint64_t now = m.clock + 1;
  const size_t n = hashes.size();

  ChainFinder finder(m.table, m.hot, m.entry_ids.high_water(), hashes);
  uint32_t prev = kNone;
  uint32_t last_kv = kNone;
  uint32_t last_state = kNone;
  size_t last_state_pages = 0;
  size_t kv_only = 0;
  size_t indexed = 0;
  bool kv_run = true;
  const bool payload = m.options.kv_payload;
  [[maybe_unused]] const size_t window = m.options.window_pages;
  [[maybe_unused]] size_t window_run = 0;  // pages in a row up to page i with windowed KV
  [[maybe_unused]] uint32_t reusable_at = kNone;
  [[maybe_unused]] size_t reusable = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t idx = finder.Find(i);
    if (idx == kNone) break;
    HotEntry& e = m.hot[idx];
    if (e.parent != prev) break;
    prev = idx;
    indexed = i + 1;
    if (!kv_run) continue;
    if (e.kv_mask == 0 && payload) {
      kv_run = false;
      continue;
    }
    kv_only = i + 1;
    last_kv = idx;
    if (e.last_use.load(std::memory_order_relaxed) != now) {
      e.last_use.store(now, std::memory_order_relaxed);
    }
    if (e.state != kNone) {
      last_state = idx;
      last_state_pages = i + 1;
    }
    if constexpr (kWindowed) {
      window_run = m.win[idx].record != kNone ? window_run + 1 : 0;
      if (window_run >= std::min(window, i + 1) && (!m.options.require_mamba || e.state != kNone)) {
        reusable = i + 1;
        reusable_at = idx;
      }
    }
    if (!payload) continue;  // the page is its chain link: no tier holds KV for it
    // Slots of tiers not held are 0 (DropKvSlot), so copying all three is exact; a spilled
    // slot (rare) is looked up.
    TierLocations& loc = out->pages.emplace_back();
    loc.mask = e.kv_mask;
    loc.slot = {e.kv_slot[0], e.kv_slot[1], e.kv_slot[2]};
    if ((e.kv_slot[0] == kSpilledSlot) | (e.kv_slot[1] == kSpilledSlot) |
        (e.kv_slot[2] == kSpilledSlot)) {
      for (int t = 0; t < kNumLocalTiers; ++t) {
        if (loc.mask & Bit(t)) loc.slot[t] = m.KvSlot(idx, t);
      }
    }
  }

  out->kv_only_pages = kv_only;
  out->indexed_pages = indexed;
  out->checkpoint_hint_pages = kv_only - kv_only % m.options.track_interval_pages;
  uint32_t state_at = kNone;
  if constexpr (kWindowed) {
    out->reusable_pages = reusable;
    state_at = reusable_at;
    // The windowed KV of the last min(W, reusable) pages: reusable_at and its ancestors.
    out->window.resize(std::min(window, reusable));
    out->window_first_page = reusable - out->window.size();
    uint32_t at = reusable_at;
    for (size_t k = out->window.size(); k-- > 0; at = m.hot[at].parent) {
      State& w = m.windows[m.win[at].record];
      out->window[k] = RecordLocations(w);
      if (w.last_use.load(std::memory_order_relaxed) != now) {
        w.last_use.store(now, std::memory_order_relaxed);
      }
    }
  } else if (m.options.require_mamba) {
    out->reusable_pages = last_state_pages;
    state_at = last_state;
  } else {
    out->reusable_pages = kv_only;
    state_at = last_kv;
  }
  if (state_at != kNone && m.hot[state_at].state != kNone) {
    out->state = m.StateLocations(state_at);
    State& s = m.states[m.hot[state_at].state];
    if (s.last_use.load(std::memory_order_relaxed) != now) {
      s.last_use.store(now, std::memory_order_relaxed);
    }
    if (m.hybrid_states()) m.ScoreStateHit(state_at, s);
  }
  m.matches.fetch_add(1, std::memory_order_relaxed);
  m.match_pages.fetch_add(kv_only, std::memory_order_relaxed);
}

}  // namespace cachepawl
