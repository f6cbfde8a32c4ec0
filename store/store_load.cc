// StoreImpl::Load and StartPrefetch: disk -> host -> device (see store_impl.h). Pages and the
// state already in host memory are pinned and copied to the device at once; those only on disk
// get host slots (allocated as runs), are read and verified by the disk mover, and then join the
// host -> device operation. One fence for everything.
#include <algorithm>
#include <array>

#include "store/store_impl.h"
#include "vocab/internal/fence_access.h"

namespace cachepawl {

void StoreImpl::CountHitLocked(const EntryKey& key) {
  if (cascade_) cascade_->HitLocked(key);
  if (remote_policy_ && remote_policy_->OnHit(key)) StartRemoteWritesLocked({key});
}

StatusOr<Fence> StoreImpl::Load(const PrefixMatch& match, std::span<const uint64_t> device_pages,
                                std::optional<uint64_t> device_state_slot,
                                const LoadOptions& opts) {
  return LoadVia(nullptr, match, device_pages, device_state_slot, opts);
}

StatusOr<Fence> StoreImpl::LoadVia(std::shared_ptr<TransferQueue> via, const PrefixMatch& match,
                                   std::span<const uint64_t> device_pages,
                                   std::optional<uint64_t> device_state_slot,
                                   const LoadOptions& opts) {
  const auto start = SteadyClock::now();
  const uint32_t tp_rank = opts.tp_rank.value_or(layout_.tp_rank);
  if (tp_rank >= layout_.tp_size) {
    return Status::InvalidArgument("LoadOptions.tp_rank: " + std::to_string(tp_rank) +
                                   " (layout '" + layout_.model + "' has tp_size " +
                                   std::to_string(layout_.tp_size) + ")");
  }
  size_t first = opts.first_page;
  const size_t count = device_pages.size();
  if (!layout_.has_attention()) {
    // Pure SSM: the pages carry no KV, so the state is all a Load moves. Its depth is
    // first_page (+ 0 pages), and first_page 0 stands for the match's depth.
    if (count != 0) {
      return Status::InvalidArgument("device_pages: " + std::to_string(count) + " pages (layout '" +
                                     layout_.model +
                                     "' has no attention layers: its pages hold no KV; pass none)");
    }
    if (!device_state_slot) {
      return Status::InvalidArgument("device_state_slot: none (layout '" + layout_.model +
                                     "' has no attention layers: a Load moves only the state)");
    }
    if (match.reusable_pages == 0) {
      return Status::InvalidArgument(
          "device_state_slot: the match has no state to load (reusable_pages 0: a miss)");
    }
    if (first != 0 && first != match.reusable_pages) {
      return Status::InvalidArgument(
          "first_page: " + std::to_string(first) + " asks for a state at depth " +
          std::to_string(first) + " pages, but the match's state is at depth " +
          std::to_string(match.reusable_pages) + " pages (0 asks for the match's depth)");
    }
    first = match.reusable_pages;
  }
  if (first > match.kv_only_pages || count > match.kv_only_pages - first) {
    return Status::InvalidArgument("device_pages: pages [" + std::to_string(first) + ", " +
                                   std::to_string(first + count) + ") exceed the match's " +
                                   std::to_string(match.kv_only_pages) + " cached pages");
  }
  if (match.hashes.size() < first + count) {
    return Status::InvalidArgument("match: fewer hashes than pages");
  }
  if (device_state_slot) {
    if (!layout_.has_ssm()) {
      return Status::InvalidArgument("device_state_slot: layout '" + layout_.model +
                                     "' has no SSM layers");
    }
    if (first + count != match.reusable_pages || match.reusable_pages == 0) {
      return Status::InvalidArgument(
          "device_state_slot: the state is at depth " + std::to_string(match.reusable_pages) +
          " pages but the load ends at page " + std::to_string(first + count));
    }
  }
  // Full-attention KV of every page; windowed KV only of the pages a model resuming at the
  // match's depth reads: the last WindowPages() before reusable_pages (a load in several calls
  // gets them with the call that covers them). A load past reusable_pages resumes at its own end
  // instead. The serving engine holds the pages before `first` already.
  std::vector<FillWant> wants;
  const bool full_kv = layout_.Stores(Kind::kKV);
  const size_t window = layout_.Stores(Kind::kWindowKV) ? layout_.WindowPages() : 0;
  const size_t depth = std::max(first + count, match.reusable_pages);
  const size_t window_from = depth - std::min(depth, window);
  for (size_t j = 0; j < count; ++j) {
    if (full_kv)
      wants.push_back({{match.hashes[first + j], Kind::kKV}, first + j, device_pages[j]});
    if (first + j >= window_from && window > 0) {
      wants.push_back({{match.hashes[first + j], Kind::kWindowKV}, first + j, device_pages[j]});
    }
  }
  if (device_state_slot) {
    wants.push_back(
        {{match.hashes[first + count - 1], Kind::kMamba}, first + count - 1, *device_state_slot});
  }
  FillPlan plan;
  std::shared_ptr<TransferQueue> mover = std::move(via);
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (!mover) {
      CACHEPAWL_ASSIGN_OR_RETURN(mover, UsableMoverLocked());
    }
    if (partials_) WaitForOtherFillsLocked(wants, lock);
    CACHEPAWL_RETURN_IF_ERROR(PlanFillsLocked(match, wants, FillMode::kLoad, lock, &plan));
    counters_.CountLoadLocked();
    ++loads_pinning_host_;
  }
  std::vector<HostSource> sources = std::move(plan.sources);
  std::vector<HostFill> fills = std::move(plan.fills);

  // Remote fills go first (on a remote reader), then disk fills, then host -> device.
  std::vector<HostFill> remote_fills = SplitRemoteFills(&fills);
  auto outer =
      std::make_shared<FenceCompleter>(opts.per_layer_fences ? layout_.attention_layers.size() : 0);
  Fence result = outer->fence();
  OperationStarted();
  if (fills.empty() && remote_fills.empty()) {
    SubmitHostToDevice(mover, std::move(sources), outer, opts.per_layer_fences, start, nullptr,
                       tp_rank);
    return result;
  }
  std::shared_ptr<DeferredStreamWaiter> deferred;
  if (mover->gpu_mode()) {
    deferred =
        std::make_shared<DeferredStreamWaiter>(std::chrono::milliseconds(options_.stream_wait_ms));
    internal::FenceAccess::SetStreamWaiter(
        result, [deferred](void* stream) { return deferred->Wait(stream); });
  }
  PendingLoad pending{mover, std::move(sources), std::move(fills),      outer,
                      start, deferred,           opts.per_layer_fences, tp_rank};
  if (remote_fills.empty()) {
    LoadFromDisk(std::move(pending));
    return result;
  }
  remote_reader_->Post([this, pending = std::move(pending), remote_fills = std::move(remote_fills),
                        hashes = match.hashes]() mutable {
    std::vector<size_t> failed;
    const Status error = FetchRemoteFills(hashes, remote_fills, &failed);
    AddFilledSources(remote_fills, failed, &pending.sources);
    if (!failed.empty()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        AbandonFillsLocked(pending.fills);  // not read yet
      }
      pending.fills.clear();
      FailLoad(pending, Status::NotFound(std::to_string(failed.size()) +
                                         " remote record(s) could not be loaded (a miss; first: " +
                                         error.ToString() + ")"));
      return;
    }
    LoadFromDisk(std::move(pending));
  });
  return result;
}

void StoreImpl::FailLoad(PendingLoad& load, const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const HostSource& src : load.sources) {
      (void)index_->Unpin(src.key.hash, src.key.kind, Tier::kHost);
    }
    counters_.CountFailedOperationLocked();
    --loads_pinning_host_;
    host_space_->NotifyLocked();
  }
  if (load.deferred) load.deferred->Resolve({});  // nothing reaches the GPU: release stream waits
  load.outer->Complete(why);
  counters_.load_latency().Record(SteadyClock::now() - load.start);
  OperationFinished();
}

void StoreImpl::LoadFromDisk(PendingLoad load) {
  if (load.fills.empty()) {
    SubmitHostToDevice(load.mover, std::move(load.sources), load.outer, load.per_layer, load.start,
                       load.deferred, load.tp_rank);
    return;
  }
  DiskOp op = disk_->Load(DiskReadsOf(load.fills));
  WhenDone(op.fence, [this, load = std::move(load), op](const Status& s) mutable {
    std::vector<size_t> failed;
    FinishDiskFills(load.fills, s, op.result, &failed);
    AddFilledSources(load.fills, failed, &load.sources);
    if (!failed.empty()) {
      const DiskRecordResult& r = op.result->records.at(failed.front());
      FailLoad(load, Status::NotFound(std::to_string(failed.size()) +
                                      " disk record(s) could not be loaded (dropped as a miss; "
                                      "first: " +
                                      r.status.ToString() + ")"));
      return;
    }
    SubmitHostToDevice(load.mover, std::move(load.sources), load.outer, load.per_layer, load.start,
                       load.deferred, load.tp_rank);
  });
}

void StoreImpl::FinishDiskFills(const std::vector<HostFill>& fills, const Status& disk_status,
                                const std::shared_ptr<const DiskBatchResult>& result,
                                std::vector<size_t>* failed) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < fills.size(); ++i) {
    const HostFill& f = fills[i];
    filling_.erase(f.key);
    Status s = result && i < result->records.size() ? result->records[i].status : disk_status;
    if (s.ok()) {
      s = index_->SetLocation(f.key.hash, f.key.kind, Tier::kHost, f.slot);
      if (s.ok()) s = index_->PinForTransfer(f.key.hash, f.key.kind, Tier::kHost);
    }
    if (!s.ok()) {
      failed->push_back(i);
      counters_.CountReadErrorLocked(s);
      (void)host_->Free(f.slot);
      // The disk tier holds no such record any more (it failed verification and was
      // dropped, or was not there): the index forgets it too.
      if (result && i < result->records.size() && result->records[i].gone) ForgetDiskLocked(f.key);
    }
  }
}

void StoreImpl::SubmitHostToDevice(const std::shared_ptr<TransferQueue>& mover,
                                   std::vector<HostSource> sources,
                                   std::shared_ptr<FenceCompleter> outer, bool per_layer,
                                   SteadyClock::time_point start,
                                   std::shared_ptr<DeferredStreamWaiter> deferred,
                                   uint32_t tp_rank) {
  Operation op;
  op.direction = Direction::kLoad;
  op.per_layer_fences = per_layer;
  // A group store's host record holds every share: this rank's is at its offset (once per kind,
  // not per unit: RecordBytes walks the layers).
  std::array<uint64_t, kNumKinds> offset{};
  if (tp_rank > 0) {
    for (Kind k : kAllKinds) {
      offset[static_cast<int>(k)] =
          uint64_t{layout_.TpShareOf(k, tp_rank)} * layout_.RecordBytes(k);
    }
  }
  for (const HostSource& s : sources) {
    op.units.push_back({s.key.kind,
                        {Tier::kHost, s.slot, offset[static_cast<int>(s.key.kind)]},
                        {Tier::kDevice, s.device_slot}});
  }
  const uint64_t submit_start = profile::Now();
  Fence inner = mover->Submit(std::move(op));
  profile::Add(profile::Stage::kLoadSubmit, submit_start);
  internal::FenceAccess::SetWaitSpin(outer->fence(), internal::FenceAccess::WaitSpin(inner));
  const WhenDoneProfile prof{profile::Stage::kLoadCopy, profile::Stage::kLoadHop,
                             profile::Stage::kLoadFinish, profile::Now()};
  {
    std::function<Status(void*)> waiter = internal::FenceAccess::StreamWaiter(inner);
    if (deferred) {
      deferred->Resolve(std::move(waiter));
    } else {
      internal::FenceAccess::SetStreamWaiter(outer->fence(), std::move(waiter));
    }
  }
  if (per_layer) {
    // Each sub-fence is passed on as it fires, on the device mover's completion thread (the
    // callback holds only the outer fence's completer).
    for (size_t l = 0; l < inner.num_layers(); ++l) {
      (void)inner.OnLayerComplete(l, [outer, l](const Status& s) { outer->CompleteLayer(l, s); });
    }
  }
  // The outer fence fires on the mover's completion thread, as the mover's own fence does:
  // the bytes are on the device and the serving engine needs nothing else. The unpins follow on the
  // completion worker (which takes mu_; the mover's threads never do); until then the sources stay
  // pinned, and Close() waits for them (OperationFinished).
  TaskQueue* worker = worker_.get();
  inner.OnComplete(
      [this, worker, sources = std::move(sources), outer, start, prof](const Status& s) mutable {
        profile::Add(prof.copy, prof.submitted_at);
        counters_.load_latency().Record(SteadyClock::now() - start);
        outer->Complete(s);
        const uint64_t fired = profile::Now();
        worker->Post([this, sources = std::move(sources), s, prof, fired] {
          profile::Add(prof.hop, fired);
          {
            profile::ScopedStage finish(prof.finish);
            std::lock_guard<std::mutex> lock(mu_);
            for (const HostSource& src : sources) {
              (void)index_->Unpin(src.key.hash, src.key.kind, Tier::kHost);
            }
            if (!s.ok()) counters_.CountFailedOperationLocked();
            --loads_pinning_host_;
            host_space_->NotifyLocked();
          }
          OperationFinished();
        });
      });
}

// ------------------------------------------------------------------------------------------
// Prefetch: disk -> host ahead of Load
// ------------------------------------------------------------------------------------------

class StoreImpl::PrefetchImpl final : public Store::Prefetch {
 public:
  explicit PrefetchImpl(Fence f) : fence_(std::move(f)) {}
  Fence fence() const override { return fence_; }
  void Cancel() override { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  Fence fence_;
  std::atomic<bool> cancelled_{false};
};

StatusOr<std::shared_ptr<Store::Prefetch>> StoreImpl::StartPrefetch(const PrefixMatch& match) {
  // Everything a Load at the match's depth reads: the KV of every page, the windowed KV of the
  // pages a model resuming there reads, and the state.
  std::vector<FillWant> wants;
  for (size_t i = 0; layout_.Stores(Kind::kKV) && i < match.kv_only_pages; ++i) {
    wants.push_back({{match.hashes[i], Kind::kKV}, i});
  }
  for (size_t i = match.window_first_page; !match.window_tiers.empty() && i < match.reusable_pages;
       ++i) {
    wants.push_back({{match.hashes[i], Kind::kWindowKV}, i});
  }
  if (match.reusable_pages > 0 && layout_.has_ssm()) {
    wants.push_back(
        {{match.hashes[match.reusable_pages - 1], Kind::kMamba}, match.reusable_pages - 1});
  }
  std::vector<HostFill> fills;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (disk_ || remote_) {
      FillPlan plan;
      CACHEPAWL_RETURN_IF_ERROR(PlanFillsLocked(match, wants, FillMode::kPrefetch, lock, &plan));
      fills = std::move(plan.fills);
    }
    counters_.CountPrefetchLocked();
  }
  auto outer = std::make_shared<FenceCompleter>();
  auto handle = std::make_shared<PrefetchImpl>(outer->fence());
  if (fills.empty()) {
    outer->Complete(Status::OK());
    return std::shared_ptr<Store::Prefetch>(handle);
  }
  OperationStarted();
  std::vector<HostFill> remote_fills = SplitRemoteFills(&fills);
  // The remote reads (on a remote reader), then the disk reads. Cancellation: reads are issued
  // from those threads, so a Cancel() that comes before they run stops them.
  auto read_disk = [this, outer, handle](std::vector<HostFill> fills, Status so_far) {
    if (fills.empty() || handle->cancelled()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        AbandonFillsLocked(fills);
      }
      if (!fills.empty() && so_far.ok()) so_far = Status::Aborted("prefetch cancelled");
      outer->Complete(so_far);
      OperationFinished();
      return;
    }
    DiskOp op = disk_->Load(DiskReadsOf(fills));
    WhenDone(op.fence, [this, fills = std::move(fills), outer, op, so_far](const Status& s) {
      std::vector<size_t> failed;
      FinishDiskFills(fills, s, op.result, &failed);
      UnpinFilled(fills, failed);
      outer->Complete(!so_far.ok()     ? so_far
                      : failed.empty() ? Status::OK()
                                       : Status::NotFound(std::to_string(failed.size()) +
                                                          " record(s) could not be prefetched"));
      OperationFinished();
    });
  };
  if (remote_fills.empty()) {
    worker_->Post([read_disk, fills = std::move(fills)]() mutable {
      read_disk(std::move(fills), Status::OK());
    });
    return std::shared_ptr<Store::Prefetch>(handle);
  }
  remote_reader_->Post([this, read_disk, handle, fills = std::move(fills),
                        remote_fills = std::move(remote_fills), hashes = match.hashes]() mutable {
    Status so_far;
    if (handle->cancelled()) {
      std::lock_guard<std::mutex> lock(mu_);
      AbandonFillsLocked(remote_fills);
      so_far = Status::Aborted("prefetch cancelled");
    } else {
      std::vector<size_t> failed;
      const Status error = FetchRemoteFills(hashes, remote_fills, &failed);
      UnpinFilled(remote_fills, failed);
      if (!failed.empty()) {
        so_far = Status::NotFound(
            std::to_string(failed.size()) +
            " remote record(s) could not be prefetched (first: " + error.ToString() + ")");
      }
    }
    worker_->Post([read_disk, fills = std::move(fills), so_far]() mutable {
      read_disk(std::move(fills), so_far);
    });
  });
  return std::shared_ptr<Store::Prefetch>(handle);
}

}  // namespace cachepawl
