#include "index/index_types.h"

#include <cmath>
#include <string>

namespace cachepawl {

Status IndexOptions::Validate() const {
  if (track_interval_pages == 0) {
    return Status::InvalidArgument("index.track_interval_pages: 0 (must be >= 1)");
  }
  if (max_pages == 0 || max_pages > kMaxIndexPages) {
    return Status::InvalidArgument("index.max_pages: " + std::to_string(max_pages) +
                                   " (must be 1.." + std::to_string(kMaxIndexPages) + ")");
  }
  if (!kv_payload && !require_mamba && window_pages == 0) {
    return Status::InvalidArgument(
        "index.kv_payload: false without require_mamba or window_pages (a layout without KV is "
        "reusable only by its states or its windowed KV)");
  }
  if (window_pages > kMaxWindowPages) {
    return Status::InvalidArgument("index.window_pages: " + std::to_string(window_pages) +
                                   " (must be <= " + std::to_string(kMaxWindowPages) +
                                   ", the longest chain)");
  }
  if (hybrid_eviction) {
    auto bad_value = [](const char* field, double v) {
      return Status::InvalidArgument(std::string("index.") + field + ": " + std::to_string(v) +
                                     " (must be finite and >= 0)");
    };
    if (!(state_value_per_page >= 0) || !std::isfinite(state_value_per_page)) {
      return bad_value("state_value_per_page", state_value_per_page);
    }
    if (!(state_value_per_page_squared >= 0) || !std::isfinite(state_value_per_page_squared)) {
      return bad_value("state_value_per_page_squared", state_value_per_page_squared);
    }
    if (state_value_per_page == 0 && state_value_per_page_squared == 0) {
      return Status::InvalidArgument(
          "index.state_value_per_page: 0 with state_value_per_page_squared 0 (a state must save "
          "something)");
    }
  }
  if (expected_pages > max_pages) {
    return Status::InvalidArgument("index.expected_pages: " + std::to_string(expected_pages) +
                                   " (must be <= max_pages " + std::to_string(max_pages) + ")");
  }
  return Status::OK();
}

std::optional<Tier> TierLocations::Fastest() const {
  for (int t = 0; t < kNumLocalTiers; ++t) {
    if ((mask >> t) & 1) return static_cast<Tier>(t);
  }
  return std::nullopt;
}

bool operator==(const TierLocations& a, const TierLocations& b) {
  if (a.mask != b.mask) return false;
  for (int t = 0; t < kNumLocalTiers; ++t) {
    if (((a.mask >> t) & 1) && a.slot[t] != b.slot[t]) return false;
  }
  return true;
}

void MatchResult::Clear() {
  reusable_pages = 0;
  kv_only_pages = 0;
  checkpoint_hint_pages = 0;
  indexed_pages = 0;
  pages.clear();
  state = TierLocations{};
  window.clear();
  window_first_page = 0;
}

}  // namespace cachepawl
