#include "store/remote_reader.h"

#include <algorithm>

namespace cachepawl {

size_t RemoteReader::ExtendMatch(PrefixMatch& m, const LocalTier& local_tier) const {
  const size_t n = m.hashes.size();
  if (n == 0 || m.reusable_pages == n) return 0;
  const uint64_t page_tokens = layout_->page_size_tokens;
  const bool full_kv = layout_->Stores(Kind::kKV);
  const size_t window = layout_->Stores(Kind::kWindowKV) ? layout_->WindowPages() : 0;
  const bool ssm = layout_->has_ssm();
  const size_t local_kv = full_kv ? m.kv_only_pages : m.reusable_pages;

  // Local tiers of the windowed KV and states the match may use past its local depth.
  auto local_fastest = [&](size_t page, Kind kind) { return local_tier(m.hashes[page], kind); };
  // One existence batch: KV pages past the local match, windowed KV and states not held here.
  std::vector<DiskKey> keys;
  struct Asked {
    size_t page;
    Kind kind;
  };
  std::vector<Asked> asked;
  std::vector<std::optional<Tier>> window_tier(n), state_tier(n);
  auto ask = [&](size_t page, Kind kind) {
    keys.push_back(DiskKey{kind, m.hashes[page], (page + 1) * page_tokens});
    asked.push_back({page, kind});
  };
  if (full_kv) {
    for (size_t p = local_kv; p < n; ++p) ask(p, Kind::kKV);
  }
  const size_t window_from = m.reusable_pages - std::min(m.reusable_pages, window);
  for (size_t p = window > 0 ? window_from : n; p < n; ++p) {
    window_tier[p] = local_fastest(p, Kind::kWindowKV);
    if (!window_tier[p]) ask(p, Kind::kWindowKV);
  }
  for (size_t p = ssm ? m.reusable_pages : n; p < n; ++p) {
    state_tier[p] = local_fastest(p, Kind::kMamba);
    if (!state_tier[p]) ask(p, Kind::kMamba);
  }
  if (keys.empty()) return 0;
  const std::vector<bool> there = remote_->Exists(keys, options_.lookup_deadline);
  std::vector<bool> kv_remote(n, false);
  for (size_t i = 0; i < asked.size(); ++i) {
    if (!there[i]) continue;
    const auto [page, kind] = asked[i];
    if (kind == Kind::kKV) kv_remote[page] = true;
    if (kind == Kind::kWindowKV) window_tier[page] = Tier::kRemote;
    if (kind == Kind::kMamba) state_tier[page] = Tier::kRemote;
  }
  size_t kv_end = local_kv;
  if (full_kv) {
    while (kv_end < n && kv_remote[kv_end]) ++kv_end;
  } else {
    kv_end = n;  // pages without KV: the chain is all they need
  }
  // The deepest depth past the local one with a state (SSM layouts) and its window.
  size_t reusable = m.reusable_pages;
  for (size_t d = kv_end; d > m.reusable_pages; --d) {
    if (ssm && !state_tier[d - 1]) continue;
    bool window_ok = true;
    for (size_t p = d - std::min(d, window); p < d && window_ok; ++p) {
      window_ok = window_tier[p].has_value();
    }
    if (window_ok) {
      reusable = d;
      break;
    }
  }
  if (reusable == m.reusable_pages && kv_end <= m.kv_only_pages) return 0;
  const size_t added = reusable - m.reusable_pages;
  if (full_kv) {
    for (size_t p = m.kv_only_pages; p < kv_end; ++p) m.page_tiers.push_back(Tier::kRemote);
    m.kv_only_pages = kv_end;
  } else {
    m.kv_only_pages = std::max(m.kv_only_pages, reusable);
  }
  const size_t track = std::max<uint32_t>(1, options_.track_interval_pages);
  m.checkpoint_hint_pages = m.kv_only_pages / track * track;
  if (reusable > m.reusable_pages) {
    m.reusable_pages = reusable;
    m.state_tier = ssm ? state_tier[reusable - 1] : std::nullopt;
    if (window > 0) {
      m.window_first_page = reusable - std::min(reusable, window);
      m.window_tiers.clear();
      for (size_t p = m.window_first_page; p < reusable; ++p) {
        m.window_tiers.push_back(*window_tier[p]);
      }
    }
  }
  return added;
}

}  // namespace cachepawl
