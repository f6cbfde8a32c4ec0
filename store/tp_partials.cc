#include "store/tp_partials.h"

#include <algorithm>

namespace cachepawl {

bool TpPartials::LacksLocked(const EntryKey& key, uint32_t rank) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  return ((it->second.landed | it->second.in_flight) & (uint64_t{1} << rank)) == 0;
}

std::optional<HostSlotId> TpPartials::JoinLocked(const EntryKey& key, uint32_t rank,
                                                 Clock::time_point now) {
  Entry& e = entries_.at(key);
  const uint64_t bit = uint64_t{1} << rank;
  e.touched = now;
  if ((e.landed | e.in_flight) & bit) return std::nullopt;
  e.in_flight |= bit;
  return e.slot;
}

void TpPartials::StartLocked(const EntryKey& key, HostSlotId slot, uint32_t rank,
                             Clock::time_point now) {
  entries_[key] = Entry{slot, 0, uint64_t{1} << rank, now};
}

TpPartials::Ended TpPartials::EndLocked(const EntryKey& key, uint32_t rank, bool ok,
                                        Clock::time_point now) {
  Ended out;
  auto it = entries_.find(key);
  if (it == entries_.end()) return out;
  Entry& e = it->second;
  const uint64_t bit = uint64_t{1} << rank;
  e.in_flight &= ~bit;
  if (ok) e.landed |= bit;
  e.touched = now;
  out.slot = e.slot;
  if (e.landed == AllRanks()) {
    out.complete = true;
  } else if (e.landed == 0 && e.in_flight == 0) {
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
