// PrefixIndex: inspection: Lookup, Ancestors, DumpEntries, StateScoreFloor, Stats (see
// index/prefix_index_internal.h for the layout).
#include <algorithm>
#include <bit>
#include <shared_mutex>  // std::shared_lock
#include <string>
#include <utility>
#include <vector>

#include "index/prefix_index.h"
#include "index/prefix_index_internal.h"

namespace cachepawl {

using namespace prefix_index_internal;  // NOLINT(google-build-using-namespace): its internals

// ===== Lookup / inspection ===================================================================

EntryInfo Core::Info(uint32_t i) const {
  const HotEntry& e = hot[i];
  const ColdEntry& ec = cold[i];
  EntryInfo info;
  info.hash = e.hash;
  if (e.parent != kNone) info.parent = hot[e.parent].hash;
  info.depth_pages = e.depth;
  info.kv = KvLocations(i);
  info.state = StateLocations(i);
  info.children = ec.children;
  info.kv_locks = ec.kv_locks;
  info.state_locks = ec.state_locks;
  for (int t = 0; t < kNumLocalTiers; ++t) info.kv_pins[t] = ec.kv_pins[t];
  info.kv_last_use = e.last_use.load(std::memory_order_relaxed);
  if (e.state != kNone) {
    const State& s = states[e.state];
    for (int t = 0; t < kNumLocalTiers; ++t) info.state_pins[t] = s.pins[t];
    info.state_last_use = s.last_use.load(std::memory_order_relaxed);
    if (hybrid_states()) {
      info.state_hits = s.hits.load(std::memory_order_relaxed);
      info.state_priority = std::bit_cast<double>(s.priority.load(std::memory_order_relaxed));
    }
  }
  if (hybrid_kv()) info.subtree_states = subtree_states[i];
  info.window = WindowLocations(i);
  if (windowed()) {
    info.window_locks = win[i].locks;
    info.window_anchors = win[i].anchors;
  }
  if (const uint32_t r = WindowRecord(i); r != kNone) {
    const State& w = windows[r];
    for (int t = 0; t < kNumLocalTiers; ++t) info.window_pins[t] = w.pins[t];
    info.window_last_use = w.last_use.load(std::memory_order_relaxed);
  }
  return info;
}

std::optional<EntryInfo> PrefixIndex::Lookup(const PageHash& hash) const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  const uint32_t i = m.FindIndex(hash);
  if (i == kNone) return std::nullopt;
  return m.Info(i);
}

std::optional<TierLocations> PrefixIndex::Locations(const PageHash& hash, Kind kind) const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  const uint32_t i = m.FindIndex(hash);
  if (i == kNone) return std::nullopt;
  switch (kind) {
    case Kind::kKV:
      return m.KvLocations(i);
    case Kind::kWindowKV:
      return m.WindowLocations(i);
    case Kind::kMamba:
      return m.StateLocations(i);
  }
  return TierLocations{};
}

std::optional<std::vector<PageHash>> PrefixIndex::Ancestors(const PageHash& hash) const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  const uint32_t i = m.FindIndex(hash);
  if (i == kNone) return std::nullopt;
  std::vector<PageHash> out(m.hot[i].depth - 1);
  uint32_t at = m.hot[i].parent;
  for (size_t k = out.size(); k-- > 0; at = m.hot[at].parent) out[k] = m.hot[at].hash;
  return out;
}

std::vector<EntryInfo> PrefixIndex::DumpEntries() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  std::vector<EntryInfo> out;
  out.reserve(m.table.size());
  for (uint32_t i = 0; i < m.entry_ids.high_water(); ++i) {
    if (m.hot[i].depth != 0) out.push_back(m.Info(i));
  }
  std::sort(out.begin(), out.end(),
            [](const EntryInfo& a, const EntryInfo& b) { return a.hash < b.hash; });
  return out;
}

double PrefixIndex::StateScoreFloor() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  return m.inflation;
}

IndexStats PrefixIndex::Stats() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  IndexStats s = m.errors;
  s.entries = m.table.size();
  s.states = m.live_states;
  s.windows = m.live_windows;
  for (int k = 0; k < kNumKinds; ++k) {
    const uint64_t unit = m.UnitBytes(k);
    for (int t = 0; t < kNumLocalTiers; ++t) {
      s.located[k][t] = m.located[k][t];
      s.located_bytes[k][t] = m.located[k][t] * unit;
      s.evictable[k][t] = m.evictable[k][t];
    }
  }
  s.locked_entries = m.locked_entries;
  uint64_t mem = sizeof(Impl) + m.hot.MemoryBytes() + m.cold.MemoryBytes() + m.win.MemoryBytes() +
                 m.subtree_states.MemoryBytes() + m.entry_ids.MemoryBytes() +
                 m.states.MemoryBytes() + m.state_ids.MemoryBytes() + m.windows.MemoryBytes() +
                 m.window_ids.MemoryBytes() + m.table.MemoryBytes() +
                 m.path.capacity() * sizeof(uint32_t);
  // An unordered_map node holds the pair and a next pointer (and the cached hash is not kept
  // for integer keys); buckets are one pointer each.
  mem += m.spilled.size() * (sizeof(std::pair<const uint64_t, uint64_t>) + sizeof(void*)) +
         m.spilled.bucket_count() * sizeof(void*);
  for (const auto& per_kind : m.queues) {
    for (const VictimQueue& q : per_kind) mem += q.MemoryBytes();
  }
  s.memory_bytes = mem;
  s.matches = m.matches.load(std::memory_order_relaxed);
  s.match_pages = m.match_pages.load(std::memory_order_relaxed);
  return s;
}

}  // namespace cachepawl
