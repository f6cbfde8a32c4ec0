// StoreImpl::Save: device -> host (-> disk by policy). The pages and state that no tier holds yet
// get host slots allocated as runs (adjacent where the arena allows) and move in one transfer
// operation; what is already cached is only refreshed (see store_impl.h).
#include <algorithm>
#include <array>

#include "store/store_impl.h"
#include "vocab/internal/fence_access.h"

namespace cachepawl {

namespace {
// Saves of at most this many entries finish on the thread where the mover's fence fires (when
// the store's mutex is free): publishing 256 locations takes ~50 us.
constexpr size_t kInlineFinishEntries = 256;
}  // namespace

StatusOr<Fence> StoreImpl::Save(const SaveRequest& req) { return SaveVia(nullptr, req); }

StatusOr<Fence> StoreImpl::SaveVia(std::shared_ptr<TransferQueue> via, const SaveRequest& req) {
  const auto start = SteadyClock::now();
  std::vector<PageHash> computed;
  std::span<const PageHash> hashes = req.hashes;
  if (!req.hashes.empty() && !req.tokens.empty()) {
    return Status::InvalidArgument("SaveRequest: give tokens or hashes, not both");
  }
  CACHEPAWL_RETURN_IF_ERROR(req.hashes.empty()
                                ? CheckPromptSize("SaveRequest.tokens", req.tokens.size(), false)
                                : CheckPromptSize("SaveRequest.hashes", req.hashes.size(), true));
  if (req.hashes.empty()) {
    profile::ScopedStage hashing(profile::Stage::kSaveHash);
    computed = hasher_->HashTokens(req.ns, req.tokens);
    hashes = computed;
  }
  const uint32_t tp_rank = req.tp_rank.value_or(layout_.tp_rank);
  if (tp_rank >= layout_.tp_size) {
    return Status::InvalidArgument("SaveRequest.tp_rank: " + std::to_string(tp_rank) +
                                   " (layout '" + layout_.model + "' has tp_size " +
                                   std::to_string(layout_.tp_size) + ")");
  }
  const size_t n = hashes.size();
  const size_t first = req.first_page;
  const size_t count = req.device_pages.size();
  if (!layout_.has_attention() && count != 0) {
    return Status::InvalidArgument("SaveRequest.device_pages: " + std::to_string(count) +
                                   " pages (layout '" + layout_.model +
                                   "' has no attention layers: its pages hold no KV; pass none "
                                   "and name the pages by tokens or hashes)");
  }
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
  // Windowed KV is saved for the pages a load at this Save's depth reads: the last
  // WindowPages() before the state's depth, those of them this Save is given. Without a state,
  // those before the end of the given pages: a chunked prefill's next Save may put a state
  // there, whose window reaches back into this one (until then the index holds them as needed
  // by no state: the first windowed KV to be evicted). Attention-only layouts can reuse any
  // depth: every given page keeps it.
  const bool full_kv = layout_.Stores(Kind::kKV);
  const size_t window = layout_.Stores(Kind::kWindowKV) ? layout_.WindowPages() : 0;
  const size_t window_end = req.device_state_slot ? state_pages : first + count;
  const size_t window_from = !layout_.has_ssm() ? 0 : window_end - std::min(window_end, window);
  auto keeps_window = [&](size_t page) {
    return window > 0 && page >= window_from && page < window_end;
  };
  // The entries to insert: up to the last page that holds something. Pure SSM, or no
  // full-attention layers: pages alone carry nothing; the chain goes up to the state (and the
  // last windowed page).
  size_t chain = state_pages;
  if (full_kv) {
    chain = std::max(first + count, state_pages);
  } else if (window > 0 && count > 0 && window_end > first && window_end > window_from) {
    chain = std::max(chain, std::min(window_end, first + count));
  }

  // What no tier holds (nor a Save in flight fills) needs a host slot: `fresh`, the pages first,
  // then the state.
  std::vector<SaveWant> fresh;
  std::shared_ptr<TransferQueue> mover = std::move(via);
  {
    const uint64_t index_start = profile::Now();
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (!mover) {
      CACHEPAWL_ASSIGN_OR_RETURN(mover, UsableMoverLocked());
    }
    if (chain == 0) return Fence::Completed(Status::OK());
    CACHEPAWL_RETURN_IF_ERROR(
        index_->InsertChain(std::nullopt, hashes.first(chain)).WithContext("SaveRequest"));
    // `fresh` in kind order: full KV, windowed KV, the state (PrepareSaveChunk allocates runs
    // per kind in that order). A group store's partial entry is fresh for a rank whose share it
    // lacks (PrepareSaveChunk copies the share into its slot).
    if (partials_) ExpirePartialsLocked();
    auto consider = [&](const SaveWant& w) {
      const bool partial = partials_ && partials_->ContainsLocked(w.key);
      if (partial ? !partials_->LacksLocked(w.key, tp_rank) : CachedLocked(w.key)) {
        counters_.CountRefreshedLocked();
      } else {
        fresh.push_back(w);
      }
    };
    for (size_t j = 0; full_kv && j < count; ++j) {
      consider({{hashes[first + j], Kind::kKV}, req.device_pages[j]});
    }
    for (size_t j = 0; j < count; ++j) {
      if (keeps_window(first + j)) {
        consider({{hashes[first + j], Kind::kWindowKV}, req.device_pages[j]});
      }
    }
    if (req.device_state_slot) {
      consider({{hashes[state_pages - 1], Kind::kMamba}, *req.device_state_slot});
    }
    counters_.CountSaveLocked();
    profile::Add(profile::Stage::kSaveIndex, index_start);
  }
  // Refresh recency of what was already cached.
  const uint64_t refresh_start = profile::Now();
  (void)index_->Match(hashes.first(chain));
  profile::Add(profile::Stage::kSaveIndex, refresh_start);
  if (fresh.empty()) {
    counters_.save_latency().Record(SteadyClock::now() - start);
    return Fence::Completed(Status::OK());
  }

  // A pipeline of transfer operations of at most save_chunk_entries entries each: the first
  // crosses the link while the next ones get their host slots. The outer fence fires once every
  // operation's entries are published (or dropped), with the first error.
  auto progress = std::make_shared<SaveProgress>();
  progress->start = start;
  progress->tp_rank = tp_rank;
  Fence result = progress->outer.fence();
  OperationStarted();
  const size_t per_op = std::max<size_t>(1, options_.save_chunk_entries);
  Status failed;
  Fence last_op;
  for (size_t lo = 0; lo < fresh.size() && failed.ok(); lo += per_op) {
    const std::span<const SaveWant> part =
        std::span<const SaveWant>(fresh).subspan(lo, std::min(per_op, fresh.size() - lo));
    Operation op;
    op.direction = Direction::kSave;
    std::vector<std::pair<EntryKey, HostSlotId>> pending;
    failed = PrepareSaveChunk(part, hashes.first(chain), progress.get(), &op, &pending);
    if (!failed.ok() || op.units.empty()) continue;
    const uint64_t submit_start = profile::Now();
    Fence inner = mover->Submit(std::move(op));
    profile::Add(profile::Stage::kSaveSubmit, submit_start);
    FinishSaveWhenDone(inner, std::move(pending), progress);
    last_op = inner;
  }
  if (!internal::FenceAccess::Empty(last_op)) {
    // Operations of one direction complete in order: waiting for the last one waits for all.
    internal::FenceAccess::SetStreamWaiter(result, internal::FenceAccess::StreamWaiter(last_op));
    internal::FenceAccess::SetWaitSpin(result, internal::FenceAccess::WaitSpin(last_op));
  } else if (!failed.ok()) {
    // Nothing was submitted: the error is the call's, as before any transfer started.
    OperationFinished();
    return failed;
  }
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = progress->ReleaseLocked(failed, this);  // the submitting thread's share
  }
  if (last) progress->Fire(this);
  return result;
}

bool StoreImpl::CachedLocked(const EntryKey& key) {
  const std::optional<TierLocations> loc = index_->Locations(key.hash, key.kind);
  if (!loc) return false;
  return loc->Has(Tier::kHost) || loc->Has(Tier::kDisk) || filling_.count(key) > 0;
}

Status StoreImpl::PrepareSaveChunk(std::span<const SaveWant> part, std::span<const PageHash> chain,
                                   SaveProgress* progress, Operation* op,
                                   std::vector<std::pair<EntryKey, HostSlotId>>* pending) {
  const uint64_t allocate_start = profile::Now();
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) return Status::FailedPrecondition("store is closed");
  if (partials_) return PrepareGroupSaveChunkLocked(part, chain, progress, lock, op, pending);
  // Host slots, as runs per kind, in the order of `part`: full KV, windowed KV, the state (at
  // most one, at the end).
  std::vector<HostSlotId> slots;
  bool released = false;  // mu_ was released while waiting for space
  Status st;
  for (Kind kind : {Kind::kKV, Kind::kWindowKV, Kind::kMamba}) {
    const size_t n = static_cast<size_t>(std::count_if(
        part.begin(), part.end(), [&](const SaveWant& w) { return w.key.kind == kind; }));
    if (n > 0 && st.ok()) st = host_space_->AllocateLocked(kind, n, lock, &slots, &released);
  }
  profile::Add(profile::Stage::kSaveHostAllocate, allocate_start);
  const uint64_t index_start = profile::Now();
  if (st.ok() && slots.size() != part.size()) st = Status::Internal("host slot count");
  const bool recheck = released || !layout_.Stores(Kind::kKV);
  if (st.ok() && recheck) {
    // Waiting for space released mu_: the chain may have been pruned, and another Save may have
    // cached some of these keys meanwhile. Without full-attention KV (pure SSM, all layers
    // windowed): the chain's entries hold nothing until their state or windowed KV is filling
    // (filling_ then keeps them), so an Unlock or an eviction may have pruned them since Save
    // inserted them: insert again (idempotent).
    st = index_->InsertChain(std::nullopt, chain).WithContext("SaveRequest");
  }
  if (!st.ok()) {
    for (HostSlotId slot : slots) (void)host_->Free(slot);
    // What is in flight (earlier operations of this Save) is in filling_: pruning keeps it.
    for (size_t i = chain.size(); i-- > 0;) PruneLocked(chain[i]);
    return st;
  }
  for (size_t i = 0; i < part.size(); ++i) {
    if (recheck && CachedLocked(part[i].key)) {
      (void)host_->Free(slots[i]);  // another Save cached it meanwhile
      counters_.CountRefreshedLocked();
      continue;
    }
    filling_.insert(part[i].key);
    pending->emplace_back(part[i].key, slots[i]);
    op->units.push_back(
        {part[i].key.kind, {Tier::kDevice, part[i].device_slot}, {Tier::kHost, slots[i]}});
  }
  if (!op->units.empty()) ++progress->remaining;
  profile::Add(profile::Stage::kSaveIndex, index_start);
  return Status::OK();
}

bool StoreImpl::SaveProgress::ReleaseLocked(const Status& s, StoreImpl* store) {
  if (!s.ok() && first_error.ok()) first_error = s;
  if (--remaining != 0) return false;
  // The whole Save is done: its published entries become evictable.
  for (const EntryKey& key : held) store->filling_.erase(key);
  store->host_space_->NotifyLocked();
  return true;
}

void StoreImpl::SaveProgress::Fire(StoreImpl* store) {
  store->counters_.save_latency().Record(SteadyClock::now() - start);
  outer.Complete(first_error);  // (no share is left: nothing writes it any more)
  store->OperationFinished();
}

void StoreImpl::FinishSaveWhenDone(const Fence& inner,
                                   std::vector<std::pair<EntryKey, HostSlotId>> pending,
                                   std::shared_ptr<SaveProgress> progress) {
  // The finish publishes the locations before the outer fence fires (a Lookup after it finds
  // the pages). It runs where the mover's fence fires when that costs the mover's thread
  // little: at most kInlineFinishEntries entries, and mu_ free right then (try_lock: a mover
  // thread never waits for the store's mutex). Otherwise on the completion worker.
  const bool small = pending.size() <= kInlineFinishEntries;
  const uint64_t submitted_at = profile::Now();
  TaskQueue* worker = worker_.get();
  inner.OnComplete([this, worker, pending = std::move(pending), progress, submitted_at,
                    small](const Status& s) mutable {
    profile::Add(profile::Stage::kSaveCopy, submitted_at);
    if (small) {
      std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
      if (lock.owns_lock()) {
        bool last = false;
        {
          profile::ScopedStage finish(profile::Stage::kSaveFinish);
          FinishSaveLocked(pending, s, progress.get());
          last = progress->ReleaseLocked(s, this);
        }
        lock.unlock();
        if (last) progress->Fire(this);
        return;
      }
    }
    const uint64_t fired = profile::Now();
    worker->Post([this, pending = std::move(pending), progress, fired, s] {
      profile::Add(profile::Stage::kSaveHop, fired);
      bool last = false;
      {
        profile::ScopedStage finish(profile::Stage::kSaveFinish);
        std::lock_guard<std::mutex> lock(mu_);
        FinishSaveLocked(pending, s, progress.get());
        last = progress->ReleaseLocked(s, this);
      }
      if (last) progress->Fire(this);
    });
  });
}

Status StoreImpl::PrepareGroupSaveChunkLocked(
    std::span<const SaveWant> part, std::span<const PageHash> chain, SaveProgress* progress,
    std::unique_lock<std::mutex>& lock, Operation* op,
    std::vector<std::pair<EntryKey, HostSlotId>>* pending) {
  const uint32_t rank = progress->tp_rank;
  const auto now = SteadyClock::now();
  // This rank joins the partial entries first: its copy in flight keeps them from expiring or
  // giving way to the allocation below. The others need a slot for the group's record.
  std::vector<std::optional<HostSlotId>> slot_of(part.size());
  std::vector<bool> joined(part.size(), false), refreshed(part.size(), false);
  std::vector<HostSlotId> slots;
  std::vector<size_t> allocated_for;  // index into part of slots[k]
  for (size_t i = 0; i < part.size(); ++i) {
    if (partials_->ContainsLocked(part[i].key)) {
      slot_of[i] = partials_->JoinLocked(part[i].key, rank, now);
      joined[i] = slot_of[i].has_value();
      refreshed[i] = !joined[i];
    } else if (CachedLocked(part[i].key)) {
      refreshed[i] = true;
    }
  }
  bool released = false;
  Status st;
  for (Kind kind : {Kind::kKV, Kind::kWindowKV, Kind::kMamba}) {
    size_t n = 0;
    for (size_t i = 0; i < part.size(); ++i) {
      if (part[i].key.kind == kind && !joined[i] && !refreshed[i]) {
        allocated_for.push_back(i);
        ++n;
      }
    }
    if (n > 0 && st.ok()) st = host_space_->AllocateLocked(kind, n, lock, &slots, &released);
  }
  if (st.ok() && slots.size() != allocated_for.size()) st = Status::Internal("host slot count");
  if (st.ok()) st = index_->InsertChain(std::nullopt, chain).WithContext("SaveRequest");
  if (!st.ok()) {
    for (HostSlotId slot : slots) (void)host_->Free(slot);
    for (size_t i = 0; i < part.size(); ++i) {
      if (!joined[i]) continue;
      const TpPartials::Ended ended =
          partials_->EndLocked(part[i].key, rank, /*ok=*/false, SteadyClock::now());
      if (ended.abandoned) {
        filling_.erase(part[i].key);
        (void)host_->Free(ended.slot);
      }
    }
    for (size_t i = chain.size(); i-- > 0;) PruneLocked(chain[i]);
    return st;
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    const size_t i = allocated_for[k];
    const EntryKey& key = part[i].key;
    if (partials_->ContainsLocked(key)) {
      // Another rank started it while this one waited for room: its slot.
      (void)host_->Free(slots[k]);
      slot_of[i] = partials_->JoinLocked(key, rank, now);
      refreshed[i] = !slot_of[i].has_value();
    } else if (CachedLocked(key)) {
      (void)host_->Free(slots[k]);  // published (or being filled) meanwhile
      refreshed[i] = true;
    } else {
      slot_of[i] = slots[k];
      partials_->StartLocked(key, slots[k], rank, now);
      filling_.insert(key);
    }
  }
  // This rank's share in a group record, per kind: ranks holding the same share (equal bytes)
  // copy to its one place (TpPartials decides which of them copy).
  std::array<uint64_t, kNumKinds> offset{};
  for (Kind k : kAllKinds) {
    offset[static_cast<int>(k)] = uint64_t{layout_.TpShareOf(k, rank)} * layout_.RecordBytes(k);
  }
  for (size_t i = 0; i < part.size(); ++i) {
    const EntryKey& key = part[i].key;
    if (refreshed[i] || !slot_of[i]) {
      counters_.CountRefreshedLocked();
      continue;
    }
    pending->emplace_back(key, *slot_of[i]);
    op->units.push_back({key.kind,
                         {Tier::kDevice, part[i].device_slot},
                         {Tier::kHost, *slot_of[i], offset[static_cast<int>(key.kind)]}});
  }
  if (!op->units.empty()) ++progress->remaining;
  return Status::OK();
}

void StoreImpl::ExpirePartialsLocked() {
  const auto expired = partials_->ExpireLocked(SteadyClock::now());
  for (const auto& [key, slot] : expired) {
    filling_.erase(key);
    (void)host_->Free(slot);
    PruneLocked(key.hash);
  }
  counters_.CountPartialsDroppedLocked(expired.size());
}

void StoreImpl::FinishSaveLocked(const std::vector<std::pair<EntryKey, HostSlotId>>& pending,
                                 const Status& s, SaveProgress* progress) {
  std::vector<EntryKey> to_disk, to_remote;
  for (const auto& [key, slot] : pending) {
    if (partials_) {
      // A group store: this rank's share landed (or not). The entry is published only with
      // every rank's share; until then it stays partial (and in filling_).
      const TpPartials::Ended ended =
          partials_->EndLocked(key, progress->tp_rank, s.ok(), SteadyClock::now());
      if (ended.abandoned) {
        filling_.erase(key);
        (void)host_->Free(slot);
        PruneLocked(key.hash);
        continue;
      }
      if (!ended.complete) continue;
    }
    Status located = s;
    if (s.ok()) located = index_->SetLocation(key.hash, key.kind, Tier::kHost, slot);
    if (!located.ok()) {
      filling_.erase(key);
      (void)host_->Free(slot);
      PruneLocked(key.hash);
      continue;
    }
    // Published (a Lookup finds it), but it stays in filling_, so that this Save's later
    // operations cannot evict it, until the whole Save is done (SaveProgress::ReleaseLocked).
    progress->held.push_back(key);
    counters_.CountSavedLocked(key.kind);
    if (cascade_) to_disk.push_back(key);
    if (remote_policy_ && remote_policy_->OnSaved()) to_remote.push_back(key);
  }
  if (!s.ok()) counters_.CountFailedOperationLocked();
  if (cascade_) cascade_->SavedLocked(to_disk);
  if (!to_remote.empty()) StartRemoteWritesLocked(to_remote);
  host_space_->NotifyLocked();
}

}  // namespace cachepawl
