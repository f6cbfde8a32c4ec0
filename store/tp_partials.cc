#include "store/tp_partials.h"

#include <algorithm>

namespace cachepawl {

bool TpPartials::LacksLocked(const EntryKey& key, uint32_t rank) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  return ((it->second.saved | it->second.in_flight) & (uint64_t{1} << rank)) == 0;
}

std::optional<HostSlotId> TpPartials::JoinLocked(const EntryKey& key, uint32_t rank,
                                                 Clock::time_point now) {
  Entry& e = entries_.at(key);
  const uint64_t bit = uint64_t{1} << rank;
  e.touched = now;
  if ((e.saved | e.in_flight) & bit) return std::nullopt;
  const uint32_t share = rank / Replicas(key.kind);
  const bool copied = (e.shares >> share) & 1;
  const bool copying = (e.in_flight & ShareRanks(key.kind, rank)) != 0;
  if (copying || copied) {
    Entry with = e;
    with.saved |= bit;
    // Counted as saved without a copy, unless that completes the entry with no copy in flight
    // to publish it: then this rank copies (its equal bytes, to the same place) and its copy's
    // end publishes the entry.
    if (!CompleteLocked(with, key.kind)) {
      e.saved |= bit;
      return std::nullopt;
    }
  }
  e.in_flight |= bit;
  return e.slot;
}

void TpPartials::StartLocked(const EntryKey& key, HostSlotId slot, uint32_t rank,
                             Clock::time_point now) {
  entries_[key] = Entry{slot, 0, uint64_t{1} << rank, 0, now};
}

TpPartials::Ended TpPartials::EndLocked(const EntryKey& key, uint32_t rank, bool ok,
                                        Clock::time_point now) {
  Ended out;
  auto it = entries_.find(key);
  if (it == entries_.end()) return out;
  Entry& e = it->second;
  const uint64_t bit = uint64_t{1} << rank;
  e.in_flight &= ~bit;
  if (ok) {
    e.saved |= bit;
    e.shares |= uint64_t{1} << (rank / Replicas(key.kind));
  }
  e.touched = now;
  out.slot = e.slot;
  if (CompleteLocked(e, key.kind)) {
    out.complete = true;
  } else if (e.saved == 0 && e.in_flight == 0) {
    out.abandoned = true;
  } else {
    return out;
  }
  entries_.erase(it);
  return out;
}

std::vector<std::pair<EntryKey, HostSlotId>> TpPartials::ExpireLocked(Clock::time_point now) {
  std::vector<std::pair<EntryKey, HostSlotId>> out;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.in_flight == 0 && now - it->second.touched > timeout_) {
      out.emplace_back(it->first, it->second.slot);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<std::pair<EntryKey, HostSlotId>> TpPartials::TakeOldestIdleLocked(
    const std::function<bool(HostSlotId)>& enough) {
  std::vector<std::pair<Clock::time_point, EntryKey>> idle;
  for (const auto& [key, e] : entries_) {
    if (e.in_flight == 0) idle.emplace_back(e.touched, key);
  }
  std::sort(idle.begin(), idle.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<EntryKey, HostSlotId>> out;
  for (const auto& [touched, key] : idle) {
    auto it = entries_.find(key);
    out.emplace_back(key, it->second.slot);
    entries_.erase(it);
    if (enough(out.back().second)) break;
  }
  return out;
}

}  // namespace cachepawl
