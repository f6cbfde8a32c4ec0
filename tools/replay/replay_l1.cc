#include "tools/replay/replay_l1.h"

namespace cachepawl::tools {

void ReplayL1::BeginRequest() {
  std::lock_guard lock(mu_);
  ++in_flight_;
}

void ReplayL1::EndRequest() {
  std::lock_guard lock(mu_);
  --in_flight_;
  NotifyReleaseLocked();  // a waiter may now be alone, or find the request's pins gone
}

std::optional<ReplayL1::Ref> ReplayL1::PinReady(const std::string& key) {
  std::lock_guard lock(mu_);
  auto found = map_.find(key);
  if (found == map_.end() || !found->second->ready) return std::nullopt;
  ++found->second->pins;
  return found->second;
}

std::vector<ReplayL1::Ref> ReplayL1::PinReadyPrefix(const std::vector<std::string>& keys) {
  std::vector<Ref> pinned;
  std::lock_guard lock(mu_);
  for (const std::string& key : keys) {
    auto found = map_.find(key);
    if (found == map_.end() || !found->second->ready) break;
    ++found->second->pins;
    pinned.push_back(found->second);
  }
  return pinned;
}

StatusOr<ReplayL1::Acquired> ReplayL1::Acquire(Kind kind, const std::string& key, Fill fill,
                                               const SpaceHooks& hooks) {
  ReplayTotals& totals = *hooks.totals;
  std::unique_lock lock(mu_);
  for (;;) {
    bool private_entry = false;
    if (auto found = map_.find(key); found != map_.end()) {
      Entry& e = *found->second;
      if (e.ready && e.pins == 0) {  // nobody uses it: take it over and refill it
        e.ready = false;
        e.pins = 1;
        TouchLocked(found->second);
        return Acquired{found->second, true};
      }
      if (e.ready && fill == Fill::kCompute) {  // others read it: its content is what we'd write
        ++e.pins;
        TouchLocked(found->second);
        return Acquired{found->second, false};
      }
      private_entry = true;  // another request fills it, or reads what we'd load over
    }
    auto slot = store_.AllocateDeviceSlot(kind);
    if (slot.ok()) {
      std::list<Entry>& to = private_entry ? unmapped_ : Lru(kind);
      to.push_front(Entry{key, kind, *slot, 1, false, !private_entry});
      if (!private_entry) map_[key] = to.begin();
      return Acquired{to.begin(), true};
    }
    if (!slot.status().IsNoSpace()) return slot.status();
    if (EvictOneLocked(kind, totals)) continue;
    if (hooks.collect_own) {
      lock.unlock();
      const bool collected = hooks.collect_own();
      lock.lock();
      if (collected) continue;
    }
    if (!hooks.wait_for_others) return slot.status();
    // Nothing of ours to give back. Other requests that are not waiting will release pins.
    if (in_flight_ - waiting_ <= 1) {
      if (in_flight_ <= 1) return slot.status();  // alone: the pool is too small
      return Status::Busy("device pool: every slot is held by the " + std::to_string(in_flight_) +
                          " requests in flight, each waiting for another's");
    }
    ++waiting_;
    const uint64_t seen = release_generation_;
    released_.wait(lock, [&] { return release_generation_ != seen; });
    --waiting_;
  }
}

void ReplayL1::MarkReady(Ref ref) {
  std::lock_guard lock(mu_);
  ref->ready = true;
}

void ReplayL1::Unpin(Ref ref, ReplayTotals& totals) {
  std::lock_guard lock(mu_);
  UnpinLocked(ref, totals);
}

void ReplayL1::Discard(Ref ref, ReplayTotals& totals) {
  std::lock_guard lock(mu_);
  DiscardLocked(ref);
  UnpinLocked(ref, totals);
}

void ReplayL1::Release(Ref ref, ReplayTotals& totals) {
  std::lock_guard lock(mu_);
  if (!ref->ready) DiscardLocked(ref);
  UnpinLocked(ref, totals);
}

void ReplayL1::Touch(Ref ref) {
  std::lock_guard lock(mu_);
  TouchLocked(ref);
}

void ReplayL1::TouchTailFirst(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
    if (auto found = map_.find(*key); found != map_.end()) TouchLocked(found->second);
  }
}

uint64_t ReplayL1::resident(Kind kind) const {
  std::lock_guard lock(mu_);
  return lru_[static_cast<int>(kind)].size();
}

void ReplayL1::TouchLocked(Ref ref) {
  if (!ref->mapped) return;
  std::list<Entry>& lru = Lru(ref->kind);
  lru.splice(lru.begin(), lru, ref);
}

void ReplayL1::UnpinLocked(Ref ref, ReplayTotals& totals) {
  if (--ref->pins > 0) return;
  if (!ref->mapped) {
    FreeLocked(ref, unmapped_, totals);
  } else {
    NotifyReleaseLocked();  // evictable now
  }
}

void ReplayL1::DiscardLocked(Ref ref) {
  if (!ref->mapped) return;
  map_.erase(ref->key);
  ref->mapped = false;
  ref->ready = false;
  unmapped_.splice(unmapped_.begin(), Lru(ref->kind), ref);
}

void ReplayL1::FreeLocked(Ref ref, std::list<Entry>& from, ReplayTotals& totals) {
  Status s = store_.FreeDeviceSlot(ref->kind, ref->slot);
  if (!s.ok()) totals.AddError("FreeDeviceSlot: " + s.ToString());
  if (ref->mapped) map_.erase(ref->key);
  from.erase(ref);
  NotifyReleaseLocked();
}

bool ReplayL1::EvictOneLocked(Kind kind, ReplayTotals& totals) {
  for (Kind k : {kind, kind == Kind::kKV ? Kind::kMamba : Kind::kKV}) {
    std::list<Entry>& lru = Lru(k);
    for (auto it = lru.end(); it != lru.begin();) {
      --it;
      if (it->pins == 0) {
        ++totals.l1_evictions[static_cast<int>(k)];
        FreeLocked(it, lru, totals);
        return true;
      }
    }
  }
  return false;
}

void ReplayL1::NotifyReleaseLocked() {
  ++release_generation_;
  if (waiting_ > 0) released_.notify_all();
}

}  // namespace cachepawl::tools
