// StoreImpl: the store's side of host eviction (HostSpace::Victims; store/host_space.h picks
// the victims and allocates): what becomes of each victim, dropping a host copy, and pruning
// what no tier holds (see store_impl.h).
#include <algorithm>

#include "store/store_impl.h"

namespace cachepawl {

HostSpace::Verdict StoreImpl::DecideLocked(const EntryKey& key, const EntryInfo& e,
                                           size_t* writes_started) {
  if (filling_.count(key) > 0) return HostSpace::Verdict::kSkip;  // a Save still publishes it
  const TierLocations& loc = LocationsOf(e, key.kind);
  // Windowed KV that no cached state needs is dropped, never written on eviction: no lookup can
  // use it until a new state comes with its own window.
  const bool useless_window =
      key.kind == Kind::kWindowKV && layout_.has_ssm() && e.window_anchors == 0;
  if (cascade_ && cascade_->WritesOnEvictLocked(key, e, loc, useless_window)) {
    return HostSpace::Verdict::kWriteToDisk;
  }
  // Remote write-on-evict: the entry stays until the remote tier has it (or gave up on it).
  if (RemoteWriteOnEvictLocked(key, loc, useless_window, writes_started)) {
    return HostSpace::Verdict::kKeepForWrite;
  }
  return HostSpace::Verdict::kDrop;
}

bool StoreImpl::SpaceMayComeLocked() const {
  return (cascade_ && (cascade_->EvictWritesInFlightLocked() > 0 || cascade_->WritingLocked())) ||
         loads_pinning_host_ > 0 || (remote_writer_ && remote_writer_->EvictingLocked());
}

uint64_t StoreImpl::ReclaimLocked(uint64_t bytes) {
  if (!partials_) return 0;
  uint64_t freed = 0;
  auto taken = partials_->TakeOldestIdleLocked([&](HostSlotId slot) {
    freed += host_->SlotBytes(slot);
    return freed >= bytes;
  });
  for (const auto& [key, slot] : taken) {
    filling_.erase(key);
    (void)host_->Free(slot);
    PruneLocked(key.hash);
  }
  counters_.CountPartialsDroppedLocked(taken.size());
  return freed;
}

void StoreImpl::DropHostCopyLocked(const EntryKey& key) {
  auto cleared = index_->ClearLocation(key.hash, key.kind, Tier::kHost);
  if (!cleared.ok()) return;
  (void)host_->Free(*cleared);
  if (cascade_) cascade_->ForgetHostCopyLocked(key);
  if (remote_writer_) remote_writer_->ForgetHostCopyLocked(key);
  PruneLocked(key.hash);
}

void StoreImpl::ForgetDiskLocked(const EntryKey& key) {
  auto cleared = index_->ClearLocation(key.hash, key.kind, Tier::kDisk);
  if (cleared.ok()) PruneLocked(key.hash);
}

void StoreImpl::PruneLocked(const PageHash& hash) {
  // Remove succeeds only for an entry that no tier holds, without children, unlocked; walk
  // up while it does (each removal may make the parent a childless, location-less entry).
  std::optional<PageHash> cur = hash;
  while (cur) {
    auto e = index_->Lookup(*cur);
    if (!e || !e->kv.empty() || !e->state.empty() || !e->window.empty() || e->children > 0) return;
    for (Kind k : kAllKinds) {
      if (filling_.count({*cur, k})) return;
    }
    if (!index_->Remove(*cur).ok()) return;
    for (Kind k : kAllKinds) {
      if (cascade_) cascade_->ForgetLocked({*cur, k});
      if (remote_policy_) remote_policy_->Forget({*cur, k});
      if (remote_writer_) remote_writer_->ForgetEntryLocked({*cur, k});
    }
    cur = e->parent;
  }
}

}  // namespace cachepawl
