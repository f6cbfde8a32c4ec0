// PrefixIndex: eviction. Picking victims from the victim queues (PickVictims,
// PickVictimsForBytes; windowed KV's own picking is in prefix_index_window.cc) and the hybrid
// eviction bookkeeping: states' scores and the subtree state counts that class KV pages as
// needed (see index/prefix_index_internal.h for the layout and the queues).
#include <algorithm>
#include <bit>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "index/prefix_index.h"
#include "index/prefix_index_internal.h"

namespace cachepawl {

using namespace prefix_index_internal;  // NOLINT(google-build-using-namespace): its internals

// ===== eviction ==============================================================================

void Core::PickKv(int t, size_t max_count, std::span<const int> kv_queues,
                  std::vector<Victim>* out) {
  std::vector<uint32_t> picked;
  std::unordered_map<uint32_t, uint32_t> picked_children;
  // A parent made a leaf by its picked children joins the queue of its class; a needed page's
  // parent is needed too, so it never joins a queue this call is already done with.
  for (const int qi : kv_queues) {
    const EvictClass want = qi == kNeededKvQ ? kNeededCopied : kUnneeded;
    auto eligible = [&](uint32_t i) {  // (maybe in the other queue)
      const auto pc = picked_children.find(i);
      return KvEvictability(i, t, pc == picked_children.end() ? 0 : pc->second) == want;
    };
    auto take = [&](const VictimItem& item) {
      const HotEntry& e = hot[item.index];
      out->push_back(
          Victim{e.hash, Kind::kKV, static_cast<Tier>(t), KvSlot(item.index, t), e.depth});
      if (e.parent != kNone) {
        const uint32_t n = ++picked_children[e.parent];
        const EvictClass c = KvEvictability(e.parent, t, n);
        if (c != kNotEvictable) QueueKv(QueueOf(kKv, c == kNeededCopied), e.parent, t, false);
      }
    };
    PopVictims(qi, t, max_count, out, &picked, eligible, take);
  }
  // Victims stay evictable until the caller clears them.
  for (uint32_t i : picked) {
    cold[i].flags &= static_cast<uint8_t>(~kPickedBit);
    const EvictClass c = KvEvictability(i, t);
    if (c != kNotEvictable) QueueKv(QueueOf(kKv, c == kNeededCopied), i, t, false);
  }
  MaybeRebuild(kKv, t);
  MaybeRebuild(kNeededKvQ, t);
}

void Core::PickRecords(int qi, int t, size_t max_count, std::vector<Victim>* out,
                       std::vector<uint32_t>* picked) {
  const Kind kind = qi == kMamba ? Kind::kMamba : Kind::kWindowKV;
  // (windowed KV: maybe in the other queue)
  auto eligible = [&](uint32_t i) { return EvictableIn(qi, i, t); };
  auto take = [&](const VictimItem& item) {
    if (qi == kMamba && hybrid_states()) {
      inflation = std::max(inflation, std::bit_cast<double>(item.last_use));
    }
    const HotEntry& e = hot[item.index];
    out->push_back(
        Victim{e.hash, kind, static_cast<Tier>(t), Record(qi, item.index)->slot[t], e.depth});
  };
  PopVictims(qi, t, max_count, out, picked, eligible, take);
}

// Victims stay evictable until the caller clears them.
void Core::EndPick(int q, int t, const std::vector<uint32_t>& picked) {
  for (uint32_t i : picked) {
    State& s = *Record(q, i);
    s.flags &= static_cast<uint8_t>(~kPickedBit);
    const EvictClass w = q == kMamba ? kNotEvictable : WindowEvictability(i, t);
    QueueRecord(q == kMamba ? kMamba : (w == kUnneeded ? kWindowQ : kNeededWindowQ), i, t,
                /*may_rebuild=*/false);
  }
  MaybeRebuild(q, t);
}

std::vector<Victim> Core::PickStates(int t, size_t max_count) {
  std::vector<Victim> out;
  std::vector<uint32_t> picked;
  PickRecords(kMamba, t, max_count, &out, &picked);
  EndPick(kMamba, t, picked);
  return out;
}

std::vector<Victim> Core::Pick(Kind kind, int t, size_t max_count, VictimClass cls) {
  if (kind == Kind::kMamba) {
    return cls == VictimClass::kNotNeeded ? std::vector<Victim>{} : PickStates(t, max_count);
  }
  if (kind == Kind::kWindowKV) return PickWindows(t, max_count, cls);
  static constexpr int kBoth[] = {kKv, kNeededKvQ};
  const std::span<const int> kv_queues = cls == VictimClass::kAny         ? std::span(kBoth)
                                         : cls == VictimClass::kNotNeeded ? std::span(kBoth, 1)
                                                                          : std::span(kBoth + 1, 1);
  std::vector<Victim> out;
  PickKv(t, max_count, kv_queues, &out);
  return out;
}

// ===== hybrid eviction of states ===============================================================

uint64_t Core::StatePriority(uint32_t depth, uint32_t hits, bool off_track) const {
  const double weight =
      static_cast<double>(std::min(hits + 1, kMaxScoredHits)) * (off_track ? kOffTrackWeight : 1.0);
  return std::bit_cast<uint64_t>(inflation + weight * options.StateValuePerByte(depth));
}

void Core::ScoreStateHit(uint32_t i, State& s) const {
  const uint32_t hits = s.hits.fetch_add(1, std::memory_order_relaxed) + 1;
  s.priority.store(StatePriority(hot[i].depth, hits, s.flags & kOffTrackBit),
                   std::memory_order_relaxed);
}

void Core::ScoreNewState(uint32_t i, State& s) {
  const uint32_t track = options.track_interval_pages;
  if (track > 1 && hot[i].depth % track != 0 && cold[i].children > 0) s.flags |= kOffTrackBit;
  s.hits.store(0, std::memory_order_relaxed);
  s.priority.store(StatePriority(hot[i].depth, 0, s.flags & kOffTrackBit),
                   std::memory_order_relaxed);
}

void Core::SubtreeStatesChanged(uint32_t i, int delta) {
  if (!hybrid_kv()) return;
  for (uint32_t a = i; a != kNone; a = hot[a].parent) {
    uint32_t& count = subtree_states[a];
    // Only 0 <-> 1 changes whether the page is needed.
    if ((delta > 0 && count != 0) || (delta < 0 && count > 1)) {
      count += static_cast<uint32_t>(delta);
      continue;
    }
    Tracked(a, [&](ColdEntry&) { count += static_cast<uint32_t>(delta); });
  }
}

StatusOr<std::vector<Victim>> PrefixIndex::PickVictims(Tier tier, Kind kind, size_t max_count,
                                                       VictimClass cls) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckPick(kind, tier, cls));
  return m.Pick(kind, static_cast<int>(tier), max_count, cls);
}

StatusOr<std::vector<Victim>> PrefixIndex::PickVictimsForBytes(Tier tier, Kind kind, uint64_t bytes,
                                                               VictimClass cls) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckPick(kind, tier, cls));
  const uint64_t unit = m.UnitBytes(static_cast<int>(kind));
  if (unit == 0) {
    ++m.errors.err_bytes_unknown;
    return Status::InvalidArgument(std::string(kUnitBytesField[static_cast<int>(kind)]) +
                                   ": 0 (PickVictimsForBytes needs the size of one entry)");
  }
  const uint64_t count = bytes / unit + (bytes % unit != 0 ? 1 : 0);
  return m.Pick(kind, static_cast<int>(tier), count, cls);
}

}  // namespace cachepawl
