// StoreImpl's fill planner (store_impl.h): what a Load or a StartPrefetch reads into host memory
// from disk or the remote tier, planned once for both, and the small steps both take afterwards.
#include <algorithm>
#include <array>
#include <chrono>
#include <thread>

#include "store/store_impl.h"

namespace cachepawl {

Status StoreImpl::PlanFillsLocked(const PrefixMatch& match, std::span<const FillWant> wants,
                                  FillMode mode, std::unique_lock<std::mutex>& lock,
                                  FillPlan* plan) {
  const bool load = mode == FillMode::kLoad;
  const uint64_t index_start = profile::Now();
  // A Load's host-resident entries, pinned per kind in one index call once all are found.
  std::array<std::vector<PageHash>, kNumKinds> to_pin;
  bool pinned = false;
  auto rollback = [&](const Status& why) {
    for (const HostSource& s : plan->sources) {
      if (pinned) (void)index_->Unpin(s.key.hash, s.key.kind, Tier::kHost);
    }
    AbandonFillsLocked(plan->fills);
    plan->sources.clear();
    plan->fills.clear();
    return why;
  };
  for (const FillWant& w : wants) {
    const EntryKey& key = w.key;
    const std::optional<TierLocations> found = index_->Locations(key.hash, key.kind);
    const TierLocations* loc = found ? &*found : nullptr;
    const bool local = loc != nullptr && !loc->empty();
    if (local && loc->Has(Tier::kHost)) {
      if (!load) continue;  // in host memory already: nothing to prefetch
      to_pin[static_cast<int>(key.kind)].push_back(key.hash);
      plan->sources.push_back({key, *loc->Slot(Tier::kHost), w.device_slot});
      counters_.CountLoadedLocked(Tier::kHost, key.kind);
      CountHitLocked(key);
      continue;
    }
    const bool from_disk = disk_ && local && loc->Has(Tier::kDisk);
    const bool from_remote =
        !local && remote_ != nullptr && MatchTier(match, key, w.page) == Tier::kRemote;
    if (!from_disk && !from_remote) {
      if (!load) continue;
      return rollback(Status::NotFound(EntryName(key.kind, w.page) + " is no longer cached"));
    }
    // Marked as filling before any host slot is allocated (which may wait for space without
    // mu_): a Load or Prefetch of the entry meanwhile must see it being filled, or both would
    // read it and the second to finish would fail (a locked Load came back NotFound).
    if (filling_.count(key) > 0) {
      if (!load) continue;  // another Load or Prefetch reads it
      return rollback(Status::Busy("page " + std::to_string(w.page) + " is being filled; retry"));
    }
    filling_.insert(key);
    HostFill f;
    f.key = key;
    f.page = w.page;
    f.depth_tokens = (w.page + 1) * uint64_t{layout_.page_size_tokens};
    f.device_slot = w.device_slot;
    f.remote = from_remote;
    plan->fills.push_back(f);
    if (load) {
      if (from_disk) counters_.CountLoadedLocked(Tier::kDisk, key.kind);
      CountHitLocked(key);
    }
  }
  for (Kind kind : kAllKinds) {
    const auto& hashes = to_pin[static_cast<int>(kind)];
    if (hashes.empty()) continue;
    if (Status s = index_->PinForTransfer(hashes, kind, Tier::kHost); !s.ok()) {
      for (Kind done : kAllKinds) {  // (the kinds before this one were pinned)
        if (done == kind) break;
        const auto& pinned_hashes = to_pin[static_cast<int>(done)];
        if (!pinned_hashes.empty()) (void)index_->Unpin(pinned_hashes, done, Tier::kHost);
      }
      return rollback(s);
    }
  }
  pinned = true;
  if (load) profile::Add(profile::Stage::kLoadIndex, index_start);
  // Host slots for the fills, as runs per kind (a page's full and windowed KV interleave; the
  // state is last). Waiting for space releases mu_; the pinned sources and the filling_ marks
  // stay meanwhile. (A Load's own pins are not yet counted in loads_pinning_host_: a wait for
  // space must not wait for the load that is waiting.)
  for (Kind kind : kAllKinds) {
    std::vector<size_t> of_kind;
    for (size_t i = 0; i < plan->fills.size(); ++i) {
      if (plan->fills[i].key.kind == kind) of_kind.push_back(i);
    }
    if (of_kind.empty()) continue;
    std::vector<HostSlotId> slots;
    profile::ScopedStage allocating(profile::Stage::kLoadHostAllocate);
    if (Status s = host_space_->AllocateLocked(kind, of_kind.size(), lock, &slots); !s.ok()) {
      return rollback(s);
    }
    for (size_t j = 0; j < of_kind.size(); ++j) {
      plan->fills[of_kind[j]].slot = slots[j];
      plan->fills[of_kind[j]].has_slot = true;
    }
  }
  return Status::OK();
}

void StoreImpl::WaitForOtherFillsLocked(std::span<const FillWant> wants,
                                        std::unique_lock<std::mutex>& lock) {
  auto busy = [&] {
    for (const FillWant& w : wants) {
      if (filling_.count(w.key) > 0) return true;
    }
    return false;
  };
  // Polled with mu_ released: fills end in several places (disk, remote, abandoned), none of
  // which needs to know who waits. Nothing of this Load is marked or pinned yet, so waiting
  // cannot hold up the fill it waits for.
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(options_.host_space_wait_ms);
  while (!closed_ && busy() && SteadyClock::now() < deadline) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    lock.lock();
  }
}

void StoreImpl::AbandonFillsLocked(std::span<const HostFill> fills) {
  for (const HostFill& f : fills) {
    filling_.erase(f.key);
    if (f.has_slot) (void)host_->Free(f.slot);
  }
}

void StoreImpl::UnpinFilled(std::span<const HostFill> fills, std::span<const size_t> failed) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < fills.size(); ++i) {
    if (std::find(failed.begin(), failed.end(), i) == failed.end()) {
      (void)index_->Unpin(fills[i].key.hash, fills[i].key.kind, Tier::kHost);
    }
  }
}

void StoreImpl::AddFilledSources(std::span<const HostFill> fills, std::span<const size_t> failed,
                                 std::vector<HostSource>* sources) {
  for (size_t i = 0; i < fills.size(); ++i) {
    if (std::find(failed.begin(), failed.end(), i) == failed.end()) {
      sources->push_back({fills[i].key, fills[i].slot, fills[i].device_slot});
    }
  }
}

std::vector<StoreImpl::HostFill> StoreImpl::SplitRemoteFills(std::vector<HostFill>* fills) {
  std::vector<HostFill> remote, disk;
  for (HostFill& f : *fills) (f.remote ? remote : disk).push_back(std::move(f));
  *fills = std::move(disk);
  return remote;
}

std::vector<DiskRead> StoreImpl::DiskReadsOf(std::span<const HostFill> fills) {
  std::vector<DiskRead> reads;
  reads.reserve(fills.size());
  for (const HostFill& f : fills) {
    reads.push_back({DiskKey{f.key.kind, f.key.hash, f.depth_tokens}, f.slot});
  }
  return reads;
}

}  // namespace cachepawl
