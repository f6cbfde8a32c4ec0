// StoreImpl::Save: device -> host (-> disk by policy). The pages and state that no tier holds yet
// get host slots allocated as runs (adjacent where the arena allows) and move in one transfer
// operation; what is already cached is only refreshed (see store_impl.h).
#include <algorithm>

#include "store/store_impl.h"

namespace cachepawl {

namespace {
// Saves of at most this many entries finish on the thread where the engine's fence fires (when
// the store's mutex is free): publishing 256 locations takes ~50 us.
constexpr size_t kInlineFinishEntries = 256;
}  // namespace

StatusOr<Fence> StoreImpl::Save(const SaveRequest& req) {
  const auto start = SteadyClock::now();
  std::vector<PageHash> computed;
  std::span<const PageHash> hashes = req.hashes;
  if (!req.hashes.empty() && !req.tokens.empty()) {
    return Status::InvalidArgument("SaveRequest: give tokens or hashes, not both");
  }
  if (req.hashes.empty()) {
    profile::ScopedStage hashing(profile::Stage::kSaveHash);
    computed = hasher_->HashTokens(req.ns, req.tokens);
    hashes = computed;
  }
  const size_t n = hashes.size();
  const size_t first = req.first_page;
  const size_t count = req.device_pages.size();
  if (first > n || count > n - first) {
    return Status::InvalidArgument("SaveRequest.device_pages: pages [" + std::to_string(first) +
                                   ", " + std::to_string(first + count) + ") exceed the " +
                                   std::to_string(n) + " full pages");
  }
  size_t state_pages = 0;
  if (req.device_state_slot) {
    const uint64_t p = layout_.page_size_tokens;
    if (!layout_.has_ssm()) {
      return Status::InvalidArgument("SaveRequest.device_state_slot: layout '" + layout_.model +
                                     "' has no SSM layers");
    }
    if (req.state_depth_tokens == 0 || req.state_depth_tokens % p != 0 ||
        req.state_depth_tokens / p > n) {
      return Status::InvalidArgument(
          "SaveRequest.state_depth_tokens: " + std::to_string(req.state_depth_tokens) +
          " (must be a positive multiple of the page size " + std::to_string(p) + " within the " +
          std::to_string(n) + " full pages)");
    }
    state_pages = req.state_depth_tokens / p;
  }
  for (size_t i = 0; i < n; ++i) {
    if (hashes[i].IsZero()) {
      return Status::InvalidArgument("SaveRequest.hashes[" + std::to_string(i) +
                                     "]: the all-zero hash");
    }
  }
  const size_t chain = std::max(first + count, state_pages);

  Operation op;
  op.direction = Direction::kWriteBack;
  std::vector<std::pair<EntryKey, HostSlotId>> pending;
  {
    uint64_t index_start = profile::Now();
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (!engine_ready_) {
      return Status::FailedPrecondition(
          "no device pool: open the store with device_pool_bytes or call RegisterDevicePool");
    }
    if (chain == 0) return Fence::Completed(Status::OK());
    CACHEPAWL_RETURN_IF_ERROR(
        index_->InsertChain(std::nullopt, hashes.first(chain)).WithContext("SaveRequest"));
    // What no tier holds (nor a Save in flight fills) needs a host slot.
    auto cached = [&](const EntryKey& key) {
      auto e = index_->Lookup(key.hash);
      if (!e) return false;
      const TierLocations& loc = key.kind == Kind::kKV ? e->kv : e->state;
      return loc.Has(Tier::kHost) || loc.Has(Tier::kDisk) || filling_.count(key) > 0;
    };
    struct Want {
      EntryKey key;
      uint64_t device_slot;
    };
    std::vector<Want> wants;
    for (size_t j = 0; j < count; ++j) {
      wants.push_back({{hashes[first + j], Kind::kKV}, req.device_pages[j]});
    }
    if (req.device_state_slot) {
      wants.push_back({{hashes[state_pages - 1], Kind::kMamba}, *req.device_state_slot});
    }
    std::vector<Want> fresh;
    for (const Want& w : wants) {
      if (cached(w.key)) {
        ++refreshed_;
      } else {
        fresh.push_back(w);
      }
    }
    // Host slots, as runs: the pages first, then the state.
    std::vector<HostSlotId> slots;
    const size_t fresh_pages = static_cast<size_t>(std::count_if(
        fresh.begin(), fresh.end(), [](const Want& w) { return w.key.kind == Kind::kKV; }));
    profile::Add(profile::Stage::kSaveIndex, index_start);
    const uint64_t allocate_start = profile::Now();
    bool released = false;  // mu_ was released while waiting for space
    Status st = AllocateHostLocked(Kind::kKV, fresh_pages, lock, &slots, &released);
    if (st.ok() && fresh.size() > fresh_pages) {
      st = AllocateHostLocked(Kind::kMamba, 1, lock, &slots, &released);
    }
    profile::Add(profile::Stage::kSaveHostAllocate, allocate_start);
    index_start = profile::Now();
    auto free_slots = [&](size_t from) {
      for (size_t i = from; i < slots.size(); ++i) (void)host_->Free(slots[i]);
    };
    if (st.ok() && slots.size() != fresh.size()) st = Status::Internal("host slot count");
    if (st.ok() && !fresh.empty() && released) {
      // Waiting for space released mu_: the chain may have been pruned, and another Save may have
      // cached some of these keys meanwhile.
      st = index_->InsertChain(std::nullopt, hashes.first(chain)).WithContext("SaveRequest");
    }
    if (!st.ok()) {
      free_slots(0);
      for (size_t i = chain; i-- > 0;) PruneLocked(hashes[i]);
      return st;
    }
    for (size_t i = 0; i < fresh.size(); ++i) {
      if (released && cached(fresh[i].key)) {
        (void)host_->Free(slots[i]);  // another Save cached it meanwhile
        ++refreshed_;
        continue;
      }
      filling_[fresh[i].key] = slots[i];
      pending.emplace_back(fresh[i].key, slots[i]);
      op.units.push_back(
          {fresh[i].key.kind, {Tier::kDevice, fresh[i].device_slot}, {Tier::kHost, slots[i]}});
    }
    ++saves_;
    profile::Add(profile::Stage::kSaveIndex, index_start);
  }
  // Refresh recency of what was already cached.
  const uint64_t refresh_start = profile::Now();
  (void)index_->Match(hashes.first(chain));
  profile::Add(profile::Stage::kSaveIndex, refresh_start);
  if (op.units.empty()) {
    save_latency_.Record(SteadyClock::now() - start);
    return Fence::Completed(Status::OK());
  }

  auto outer = std::make_shared<FenceCompleter>();
  Fence result = outer->fence();
  OperationStarted();
  const uint64_t submit_start = profile::Now();
  Fence inner = engine_->Submit(std::move(op));
  profile::Add(profile::Stage::kSaveSubmit, submit_start);
  const WhenDoneProfile prof{profile::Stage::kSaveCopy, profile::Stage::kSaveHop,
                             profile::Stage::kSaveFinish, profile::Now()};
  {
    std::lock_guard<std::mutex> g(inner.state()->mu);
    auto waiter = inner.state()->gpu_stream_waiter;
    std::lock_guard<std::mutex> g2(result.state()->mu);
    result.state()->gpu_stream_waiter = waiter;
  }
  // The finish publishes the locations before the fence fires (a Lookup after the fence finds
  // the pages). It runs where the engine's fence fires when that costs the engine's thread
  // little: a Save of at most kInlineFinishEntries entries, and mu_ free right then (try_lock:
  // an engine thread never waits for the store's mutex). Otherwise on the completion worker.
  const bool small = pending.size() <= kInlineFinishEntries;
  CompletionWorker* worker = worker_.get();
  inner.OnComplete([this, worker, pending = std::move(pending), outer, start, prof,
                    small](const Status& s) mutable {
    profile::Add(prof.copy, prof.submitted_at);
    if (small) {
      std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
      if (lock.owns_lock()) {
        profile::ScopedStage finish(prof.finish);
        FinishSaveLocked(pending, s);
        lock.unlock();
        save_latency_.Record(SteadyClock::now() - start);
        outer->Complete(s);
        OperationFinished();
        return;
      }
    }
    const uint64_t fired = profile::Now();
    worker->Post([this, pending = std::move(pending), outer, start, prof, fired, s] {
      profile::Add(prof.hop, fired);
      {
        profile::ScopedStage finish(prof.finish);
        std::lock_guard<std::mutex> lock(mu_);
        FinishSaveLocked(pending, s);
      }
      save_latency_.Record(SteadyClock::now() - start);
      outer->Complete(s);
      OperationFinished();
    });
  });
  return result;
}

void StoreImpl::FinishSaveLocked(const std::vector<std::pair<EntryKey, HostSlotId>>& pending,
                                 const Status& s) {
  std::vector<EntryKey> to_disk;
  for (const auto& [key, slot] : pending) {
    filling_.erase(key);
    Status located = s;
    if (s.ok()) located = index_->SetLocation(key.hash, key.kind, Tier::kHost, slot);
    if (!located.ok()) {
      (void)host_->Free(slot);
      PruneLocked(key.hash);
      continue;
    }
    key.kind == Kind::kKV ? ++saved_pages_ : ++saved_states_;
    if (disk_ && policy_->OnSaved()) to_disk.push_back(key);
  }
  if (!s.ok()) ++failed_ops_;
  if (!to_disk.empty()) StartDiskWritesLocked(to_disk, /*evict_after=*/false);
  space_cv_.notify_all();
}

}  // namespace cachepawl
