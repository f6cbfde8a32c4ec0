// PrefixIndex: CheckInvariants, the check of every invariant of the index against counts
// recomputed from scratch (see index/prefix_index_internal.h for the layout and the invariants).
#include <algorithm>
#include <array>
#include <shared_mutex>  // std::shared_lock
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "index/prefix_index.h"
#include "index/prefix_index_internal.h"

namespace cachepawl {

using namespace prefix_index_internal;  // NOLINT(google-build-using-namespace): its internals

// ===== invariants ============================================================================

// window_locks and window_anchors from scratch: each lock and each anchor counts at its entry
// and the W-1 nearest ancestors. `live`: every live entry.
Status Core::CheckWindowCounts(const std::vector<uint32_t>& live) const {
  std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> want;  // locks, anchors
  for (uint32_t i : live) {
    const uint32_t locks = cold[i].state_locks;
    const bool anchor = options.require_mamba && hot[i].state != kNone;
    if (locks == 0 && !anchor) continue;
    uint32_t at = i;
    for (uint32_t k = 0; k < options.window_pages && at != kNone; ++k, at = hot[at].parent) {
      want[at].first += locks;
      want[at].second += anchor ? 1 : 0;
    }
  }
  for (uint32_t i : live) {
    const auto it = want.find(i);
    const auto [locks, anchors] = it == want.end() ? std::pair<uint64_t, uint64_t>{} : it->second;
    if (win[i].locks != locks || win[i].anchors != anchors) {
      return Status::Internal("index invariant: " + Describe(hot[i].hash) + ": window_locks " +
                              std::to_string(win[i].locks) + " / anchors " +
                              std::to_string(win[i].anchors) + " but " + std::to_string(locks) +
                              " / " + std::to_string(anchors) + " within window_pages below");
    }
  }
  return Status::OK();
}

Status PrefixIndex::CheckInvariants() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  auto fail = [](const std::string& what) { return Status::Internal("index invariant: " + what); };
  const uint32_t high = m.entry_ids.high_water();
  std::vector<uint32_t> children(high, 0);
  std::vector<std::array<uint32_t, kNumLocalTiers>> tier_children(high, {0, 0, 0});
  uint64_t live = 0, states = 0, windows = 0, spilled = 0, locked = 0;
  uint64_t located[kNumKinds][kNumLocalTiers] = {};
  uint64_t evictable[kNumKinds][kNumLocalTiers] = {};
  std::vector<uint32_t> by_depth;
  // Record r (a state or windowed KV, kind k) of entry i: empty when sound, else the fault.
  auto record_fault = [&](const ChunkedArray<State, 10>& slab, const IndexAllocator& ids,
                          uint32_t r, uint32_t i, int k) -> std::string {
    if (r >= ids.high_water()) return "index out of range";
    const State& s = slab[r];
    if (s.entry != i) return "points elsewhere";
    if (s.mask == 0 || (s.mask >> kNumLocalTiers)) return "with bad mask";
    for (int t = 0; t < kNumLocalTiers; ++t) {
      if (s.mask & Bit(t)) ++located[k][t];
      if (s.pins[t] != 0 && !(s.mask & Bit(t))) return "pinned, not held";
    }
    if (s.flags & kPickedBit) return "picked mark left behind";
    return "";
  };
  for (uint32_t i = 0; i < high; ++i) {
    const HotEntry& e = m.hot[i];
    const ColdEntry& ec = m.cold[i];
    if (e.depth == 0) continue;
    ++live;
    by_depth.push_back(i);
    const std::string who = Describe(e.hash);
    if (m.FindIndex(e.hash) != i) return fail(who + ": not found at its own index");
    if (e.parent == kNone) {
      if (e.depth != 1) return fail(who + ": no parent but depth " + std::to_string(e.depth));
    } else {
      if (e.parent >= high || m.hot[e.parent].depth == 0) {
        return fail(who + ": parent index " + std::to_string(e.parent) + " is free");
      }
      if (e.depth != m.hot[e.parent].depth + 1) {
        return fail(who + ": depth " + std::to_string(e.depth) + " under a parent of depth " +
                    std::to_string(m.hot[e.parent].depth));
      }
      ++children[e.parent];
      for (int t = 0; t < kNumLocalTiers; ++t) {
        if (e.kv_mask & Bit(t)) ++tier_children[e.parent][t];
      }
    }
    if (e.kv_mask >> kNumLocalTiers) return fail(who + ": bad tier mask");
    if (e.kv_mask != 0 && !m.options.kv_payload) return fail(who + ": KV held without payload");
    if (ec.flags & kPickedBit) return fail(who + ": picked mark left behind");
    for (int t = 0; t < kNumLocalTiers; ++t) {
      const bool held = e.kv_mask & Bit(t);
      const bool spill = m.spilled.count(Impl::SpillKey(i, t)) != 0;
      if (held) ++located[kKv][t];
      if (spill) ++spilled;
      if (spill != (held && e.kv_slot[t] == kSpilledSlot)) return fail(who + ": spilled slot");
      if (!held && e.kv_slot[t] != 0) return fail(who + ": slot left in a tier not held");
      if (ec.kv_pins[t] != 0 && !held) return fail(who + ": KV pinned where not held");
      if (m.KvEvictable(i, t)) ++evictable[kKv][t];
      if (m.StateEvictable(i, t)) ++evictable[kMamba][t];
      if (m.WindowEvictability(i, t) != kNotEvictable) ++evictable[kWindow][t];
    }
    if (ec.state_locks > ec.kv_locks) return fail(who + ": state locks exceed KV locks");
    if (ec.kv_locks != 0) ++locked;
    if (e.state != kNone) {
      ++states;
      const std::string f = record_fault(m.states, m.state_ids, e.state, i, kMamba);
      if (!f.empty()) return fail(who + ": state " + f);
    }
    if (const uint32_t r = m.WindowRecord(i); r != kNone) {
      ++windows;
      const std::string f = record_fault(m.windows, m.window_ids, r, i, kWindow);
      if (!f.empty()) return fail(who + ": windowed KV " + f);
    }
  }
  if (live != m.table.size()) return fail("table size differs from live entries");
  if (live != m.entry_ids.live()) return fail("entry allocator's live count");
  bool table_ok = true;
  m.table.ForEach([&](const PageTable::Slot& slot) {
    if (slot.index >= high || m.hot[slot.index].depth == 0 ||
        PageTable::Tag(PageTable::Mix(m.hot[slot.index].hash)) != slot.tag) {
      table_ok = false;
    }
  });
  if (!table_ok) return fail("table slot names a free entry or has a wrong tag");
  if (states != m.live_states) return fail("live state count");
  if (windows != m.live_windows) return fail("live windowed KV count");
  if (spilled != m.spilled.size()) return fail("spilled slot map has stray keys");
  if (locked != m.locked_entries) return fail("locked entry count");
  for (uint32_t i : by_depth) {
    const HotEntry& e = m.hot[i];
    const ColdEntry& ec = m.cold[i];
    if (ec.children != children[i]) return fail(Describe(e.hash) + ": child count");
    for (int t = 0; t < kNumLocalTiers; ++t) {
      if (ec.tier_children[t] != tier_children[i][t]) {
        return fail(Describe(e.hash) + ": child count in " + std::string(TierName(Tier(t))));
      }
    }
  }
  for (int k = 0; k < kNumKinds; ++k) {
    for (int t = 0; t < kNumLocalTiers; ++t) {
      const std::string what =
          std::string(KindName(Kind(k))) + " in " + std::string(TierName(Tier(t)));
      if (located[k][t] != m.located[k][t]) return fail("located count of " + what);
      if (evictable[k][t] != m.evictable[k][t]) return fail("evictable count of " + what);
    }
  }
  // kv_locks == sum of state_locks over the subtree, subtree_states == the subtree's states
  // (hybrid eviction of KV, else 0): accumulate from the deepest entries up.
  std::sort(by_depth.begin(), by_depth.end(),
            [&](uint32_t a, uint32_t b) { return m.hot[a].depth > m.hot[b].depth; });
  std::vector<uint64_t> subtree(high, 0), subtree_states(high, 0);
  for (uint32_t i : by_depth) {
    const HotEntry& e = m.hot[i];
    const ColdEntry& ec = m.cold[i];
    subtree[i] += ec.state_locks;
    if (subtree[i] != ec.kv_locks) {
      return fail(Describe(e.hash) + ": kv_locks " + std::to_string(ec.kv_locks) +
                  " but the subtree holds " + std::to_string(subtree[i]) + " locks");
    }
    if (m.hybrid_kv() && e.state != kNone) ++subtree_states[i];
    const uint32_t kept = m.hybrid_kv() ? m.subtree_states[i] : 0;
    if (subtree_states[i] != kept) {
      return fail(Describe(e.hash) + ": subtree_states " + std::to_string(kept) +
                  " but the subtree holds " + std::to_string(subtree_states[i]) + " states");
    }
    if (e.parent != kNone) {
      subtree[e.parent] += subtree[i];
      subtree_states[e.parent] += subtree_states[i];
    }
  }
  if (m.windowed()) CACHEPAWL_RETURN_IF_ERROR(m.CheckWindowCounts(by_depth));
  // Every evictable entry has a queue item no more recent than the entry (windowed KV: in the
  // queue of its class).
  for (int q = 0; q < kNumQueues; ++q) {
    for (int t = 0; t < kNumLocalTiers; ++t) {
      std::unordered_map<uint32_t, uint64_t> oldest;
      for (const VictimItem& item : m.queues[q][t].items()) {
        if (!m.SameIdentity(item)) continue;
        auto [it, fresh] = oldest.emplace(item.index, item.last_use);
        if (!fresh) it->second = std::min(it->second, item.last_use);
      }
      for (uint32_t i : by_depth) {
        if (!m.EvictableIn(q, i, t)) continue;
        auto it = oldest.find(i);
        if (it == oldest.end() || it->second > m.LastUse(q, i)) {
          const bool needed = q == kNeededWindowQ || q == kNeededKvQ;
          const std::string what =
              std::string(needed ? "needed " : "") + std::string(KindName(Kind(KindOfQueue(q))));
          return fail(Describe(m.hot[i].hash) + ": evictable " + what + " in " +
                      std::string(TierName(Tier(t))) + " has no queue item");
        }
      }
    }
  }
  return Status::OK();
}

}  // namespace cachepawl
