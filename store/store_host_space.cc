// StoreImpl: host slots. Allocation as runs (one operation's slots adjacent where the arena
// allows, so the device mover moves them as few large copies), eviction in the index's order,
// and the hand-off of write-on-evict victims to the disk cascade (see store_impl.h).
#include <algorithm>

#include "store/store_impl.h"

namespace cachepawl {

namespace {
// Write-on-evict jobs in flight at most: enough to keep the disk's queue deep, few enough that
// one burst of allocations does not write the whole tier.
constexpr uint64_t kMaxEvictWrites = 256;
// Victims per batch of an allocation that found the tier full, and of the evict-ahead thread
// (which releases mu_ between its batches, so that no call waits long behind it).
constexpr size_t kMaxEvictBatch = 256;
constexpr size_t kEvictAheadBatch = 64;
}  // namespace

std::span<const StoreImpl::EvictionStage> StoreImpl::EvictionOrder() const {
  // LRU: per kind, states first (large, and only one depth of each is useful).
  static constexpr EvictionStage kLruOrder[] = {{Kind::kMamba, VictimClass::kAny},
                                                {Kind::kWindowKV, VictimClass::kAny},
                                                {Kind::kKV, VictimClass::kAny}};
  // Hybrid: bytes no cached state can use, then states by score (which frees their KV for the
  // first stages), then KV a state needs where another tier holds it too.
  static constexpr EvictionStage kHybridOrder[] = {{Kind::kWindowKV, VictimClass::kNotNeeded},
                                                   {Kind::kKV, VictimClass::kNotNeeded},
                                                   {Kind::kMamba, VictimClass::kAny},
                                                   {Kind::kWindowKV, VictimClass::kNeeded},
                                                   {Kind::kKV, VictimClass::kNeeded}};
  if (eviction_policy_ == EvictionPolicy::kHybrid) return kHybridOrder;
  return kLruOrder;
}

size_t StoreImpl::EvictForBytesLocked(uint64_t missing_bytes, size_t max_victims, size_t* writes) {
  size_t freed = 0;
  for (const EvictionStage& stage : EvictionOrder()) {
    const uint64_t victim_bytes = host_->slot_bytes(stage.kind);
    if (victim_bytes == 0) continue;  // the layout has no such kind
    const size_t wanted = static_cast<size_t>(
        std::clamp<uint64_t>((missing_bytes + victim_bytes - 1) / victim_bytes, 1, max_victims));
    freed += EvictFromHostLocked(stage, wanted, writes);
    if (freed > 0) break;
  }
  return freed;
}

void StoreImpl::MaybeEvictAheadLocked() {
  if (evictor_ == nullptr || evict_ahead_pending_ || closed_) return;
  if (host_->free_bytes() >= host_free_target_) return;
  evict_ahead_pending_ = true;
  evictor_->Post([this] { EvictAhead(); });
}

void StoreImpl::EvictAhead() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const uint64_t free = host_->free_bytes();
    if (closed_ || free >= host_free_target_) break;
    size_t writes = 0;
    const size_t freed = EvictForBytesLocked(host_free_target_ - free, kEvictAheadBatch, &writes);
    evicted_ahead_ += freed;
    if (freed == 0) break;  // everything left is locked, pinned or being written
    space_cv_.notify_all();
    lock.unlock();  // let the data path in between batches
    lock.lock();
  }
  evict_ahead_pending_ = false;
}

Status StoreImpl::AllocateHostLocked(Kind kind, size_t count, std::unique_lock<std::mutex>& lock,
                                     std::vector<HostSlotId>* slots, bool* released) {
  Status st = AllocateHostOnDemandLocked(kind, count, lock, slots, released);
  MaybeEvictAheadLocked();
  return st;
}

Status StoreImpl::AllocateHostOnDemandLocked(Kind kind, size_t count,
                                             std::unique_lock<std::mutex>& lock,
                                             std::vector<HostSlotId>* slots, bool* released) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(options_.host_space_wait_ms);
  const size_t first = slots->size();
  auto give_back = [&](Status why) {
    for (size_t i = first; i < slots->size(); ++i) (void)host_->Free((*slots)[i]);
    slots->resize(first);
    return why;
  };
  for (;;) {
    const size_t have = slots->size() - first;
    if (have == count) return Status::OK();
    const size_t before = slots->size();
    Status st = host_->AllocateRun(kind, count - have, slots);
    if (profile::Enabled()) {
      size_t runs = 0;
      for (size_t i = before; i < slots->size(); ++i) {
        runs += i == before || host_->SlotPayload((*slots)[i]) !=
                                   host_->SlotPayload((*slots)[i - 1]) + host_->slot_bytes(kind);
      }
      profile::Count(profile::Counter::kHostRunsAllocated, runs);
    }
    if (st.ok()) return Status::OK();
    if (st.IsBusy()) {
      // Only chunks still being pinned could hold it (start-up): wait for them without mu_.
      if (released != nullptr) *released = true;
      lock.unlock();
      Status pinned =
          host_->WaitUntilPinned(std::chrono::milliseconds(options_.host_pinning_wait_ms));
      lock.lock();
      if (!pinned.ok()) return give_back(pinned.WithContext("host tier pinning"));
      if (closed_) return give_back(Status::FailedPrecondition("store is closed"));
      continue;
    }
    if (!st.IsNoSpace()) return give_back(st);
    // Full: evict. Mamba states go first (large, and only one depth of each is useful).
    const uint64_t missing_bytes = (count - (slots->size() - first)) * host_->slot_bytes(kind);
    size_t writes = 0;
    if (EvictForBytesLocked(missing_bytes, kMaxEvictBatch, &writes) > 0) continue;
    // Nothing could go at once: wait while something in flight may free or clean an entry.
    const bool in_flight = writes > 0 || evict_writes_in_flight_ > 0 || !disk_writing_.empty() ||
                           loads_pinning_host_ > 0 || !remote_evicting_.empty();
    if (in_flight && !closed_ && released != nullptr) *released = true;
    if (in_flight && !closed_ && space_cv_.wait_until(lock, deadline) != std::cv_status::timeout) {
      continue;
    }
    if (in_flight && !closed_ && SteadyClock::now() < deadline) continue;
    ++no_space_;
    return give_back(
        Status::NoSpace(std::string("host tier: no room for ") + std::to_string(count) + " " +
                        std::string(KindName(kind)) +
                        " slot(s): every cached entry is locked by the serving engine" +
                        (in_flight ? " or still in flight after StoreOptions.host_space_wait_ms " +
                                         std::to_string(options_.host_space_wait_ms) + " ms"
                                   : "")));
  }
}

size_t StoreImpl::EvictFromHostLocked(const EvictionStage& stage, size_t wanted,
                                      size_t* writes_started) {
  profile::ScopedStage evicting(profile::Stage::kHostEvict);
  auto victims = index_->PickVictims(Tier::kHost, stage.kind, wanted, stage.cls);
  if (!victims.ok()) return 0;
  size_t freed = 0;
  bool dropping = true;  // KV: once a victim stays for its write, its ancestors stay too
  std::vector<EntryKey> to_write;
  for (const Victim& v : *victims) {
    const EntryKey key{v.hash, v.kind};
    if (filling_.count(key) > 0) continue;  // published by a Save still in flight: it stays
    auto e = index_->Lookup(v.hash);
    if (!e) continue;
    const TierLocations& loc = LocationsOf(*e, v.kind);
    // Windowed KV that no cached state needs is dropped, never written on eviction: no lookup
    // can use it until a new state comes with its own window.
    const bool useless_window =
        v.kind == Kind::kWindowKV && layout_.has_ssm() && e->window_anchors == 0;
    // A disk victim whose removal is pending cannot be written (StartDiskWritesLocked): it is
    // dropped as an unwritten one is.
    if (disk_ && !loc.Has(Tier::kDisk) && policy_->OnEvict() && !evict_unwritten_.count(key) &&
        !disk_removing_.count(key) && !useless_window && AdmitToDiskLocked(*e, v.kind)) {
      // Write-on-evict: the entry is written first (asynchronously); once on disk it is clean
      // and the next eviction frees it. Later KV victims of this call may be its ancestors:
      // they keep their host copy until then (a page never leaves a tier before its child).
      if (v.kind == Kind::kKV) dropping = false;
      if (evict_writes_in_flight_ + to_write.size() < kMaxEvictWrites) to_write.push_back(key);
      continue;
    }
    // Remote write-on-evict: the entry stays until the remote tier has it (or gave up on it).
    if (RemoteWriteOnEvictLocked(key, loc, useless_window, writes_started)) {
      if (v.kind == Kind::kKV) dropping = false;
      continue;
    }
    if (!dropping) continue;
    DropHostCopyLocked(key);
    ++evictions_[static_cast<int>(Tier::kHost)][static_cast<int>(v.kind)];
    ++freed;
  }
  if (!to_write.empty()) *writes_started += StartDiskWritesLocked(to_write, /*evict_after=*/true);
  return freed;
}

void StoreImpl::DropHostCopyLocked(const EntryKey& key) {
  auto cleared = index_->ClearLocation(key.hash, key.kind, Tier::kHost);
  if (!cleared.ok()) return;
  (void)host_->Free(*cleared);
  evict_unwritten_.erase(key);
  remote_unwritten_.erase(key);
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
      policy_->Forget({*cur, k});
      if (remote_policy_) remote_policy_->Forget({*cur, k});
      remote_written_.erase({*cur, k});
    }
    cur = e->parent;
  }
}

}  // namespace cachepawl
