// StoreImpl: opening and closing, Lookup and locks, the device pool, Stats (see store_impl.h).
#include "store/store_impl.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "cuda/gpu_runtime.h"
#include "layouts/layout_presets.h"
#include "layouts/layout_tp.h"
#include "store/owned_device_pool.h"
#include "store/store_option_rules.h"
#include "tiers/machine_probe.h"

namespace cachepawl {

namespace {
constexpr uint32_t kMaxTpSize = TpPartials::kMaxRanks;
}  // namespace

// ------------------------------------------------------------------------------------------
// Opening and closing
// ------------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  return StoreImpl::Open(options);
}

StatusOr<std::unique_ptr<Store>> OpenStoreWithFaults(const StoreOptions& options,
                                                     StoreFaultInjection faults) {
  return StoreImpl::Open(options, std::move(faults));
}

StatusOr<std::unique_ptr<Store>> StoreImpl::Open(const StoreOptions& options,
                                                 StoreFaultInjection faults, bool host_shared) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<StoreImpl> s(new StoreImpl());
  s->host_shared_ = host_shared;
  s->options_ = options;
  s->faults_ = std::move(faults);
  if (options.layout) {
    s->layout_ = *options.layout;
  } else {
    auto layout = ResolveLayout(options.layout_name, options.page_size_tokens);
    if (!layout.ok()) return layout.status().WithContext("StoreOptions.layout_name");
    s->layout_ = *layout;
  }
  CACHEPAWL_RETURN_IF_ERROR(s->layout_.Validate().WithContext("StoreOptions.layout"));
  if (s->layout_.tp_size > kMaxTpSize) {
    return Status::InvalidArgument(
        "StoreOptions.layout.tp_size: " + std::to_string(s->layout_.tp_size) +
        " (a store holds the records of at most " + std::to_string(kMaxTpSize) +
        " tensor-parallel ranks)");
  }
  auto group = GroupLayout(s->layout_);
  if (!group.ok()) return group.status().WithContext("StoreOptions.layout");
  s->tier_layout_ = std::move(group).value();
  if (s->layout_.tp_size > 1) {
    std::array<uint32_t, kNumKinds> replicas{};
    for (Kind k : kAllKinds) {
      replicas[static_cast<int>(k)] = s->layout_.tp_size / s->layout_.TpShares(k);
    }
    s->partials_ = std::make_unique<TpPartials>(
        s->layout_.tp_size, replicas, std::chrono::milliseconds(options.tp_partial_timeout_ms));
  }
  // A layout file's own page size, known only now.
  CACHEPAWL_RETURN_IF_ERROR(
      CheckMaxPromptTokensHoldAPage(options.max_prompt_tokens, s->layout_.page_size_tokens));
  auto hasher = PageHasher::Create(s->layout_.page_size_tokens);
  if (!hasher.ok()) return hasher.status();
  s->hasher_ = std::make_unique<PageHasher>(std::move(hasher).value());

  IndexOptions io;
  io.require_mamba = s->layout_.has_ssm();
  // Pure SSM (no attention layers), or every attention layer windowed: pages carry no
  // full-attention KV; the chain names them, states (and windowed KV) are the payload.
  io.kv_payload = s->layout_.Stores(Kind::kKV);
  io.track_interval_pages = std::max<uint32_t>(1, options.track_interval_pages);
  io.kv_page_bytes = io.kv_payload ? RecordSlotBytes(s->tier_layout_, Kind::kKV) : 0;
  // Sliding-window layers: a reusable prefix needs their KV for its last WindowPages() pages.
  io.window_pages = s->layout_.WindowPages();
  io.window_page_bytes = StoredRecordSlotBytes(s->tier_layout_, Kind::kWindowKV);
  io.mamba_state_bytes = s->layout_.has_ssm() ? RecordSlotBytes(s->tier_layout_, Kind::kMamba) : 0;
  // Hybrid eviction: a state's value is the prefill it saves (per page of its depth).
  io.hybrid_eviction = options.eviction_policy == EvictionPolicy::kHybrid;
  s->eviction_policy_ = options.eviction_policy;
  const ModelLayout::PrefillCost cost = s->layout_.EstimatedPrefillCost();
  const double page = s->layout_.page_size_tokens;
  io.state_value_per_page = std::max(cost.per_token * page, 1.0);
  io.state_value_per_page_squared = cost.per_token_squared * page * page;
  auto index = PrefixIndex::Create(io);
  if (!index.ok()) return index.status();
  s->index_ = std::move(index).value();

  CACHEPAWL_RETURN_IF_ERROR(s->OpenTiers());
  HostSpace::Options hs;
  hs.policy = options.eviction_policy;
  hs.free_target_bytes = options.host_free_target();
  hs.space_wait = std::chrono::milliseconds(options.host_space_wait_ms);
  hs.pinning_wait = std::chrono::milliseconds(options.host_pinning_wait_ms);
  HostSpace::Victims* victims = s.get();  // (a private base: converted here)
  s->host_space_ =
      std::make_unique<HostSpace>(s->host_.get(), s->index_.get(), &s->mu_, victims, hs);
  s->worker_ = std::make_unique<TaskQueue>();
  CACHEPAWL_RETURN_IF_ERROR(s->OpenRemote());
  if (s->disk_) {
    DiskCascade::Options co;
    co.write_policy = options.write_policy;
    co.selective_min_hits = options.selective_min_hits;
    co.eviction_policy = options.eviction_policy;
    DiskCascade::Hooks* hooks = s.get();  // (a private base: converted here)
    s->cascade_ = std::make_unique<DiskCascade>(s->disk_.get(), s->index_.get(), &s->tier_layout_,
                                                &s->mu_, hooks, co);
  }
  return std::unique_ptr<Store>(std::move(s));
}

Status StoreImpl::OpenTiers() {
  const bool cpu_only = options_.cuda_device < 0 || !cuda::GpuAvailable();
  // The host tier is faulted in and pinned at open (cudaHostRegister; io_uring's registered
  // buffers), and a CPU-mode device pool is host memory the engine fills: a budget beyond the
  // machine's memory is refused here, before the kernel's OOM killer takes the engine.
  const uint64_t pool_in_host = cpu_only ? options_.device_pool_bytes : 0;
  std::string asked = "StoreOptions.host_bytes";
  if (pool_in_host > 0) asked += " + device_pool_bytes (host memory in CPU mode)";
  const uint64_t bytes = options_.host_bytes > UINT64_MAX - pool_in_host
                             ? UINT64_MAX
                             : options_.host_bytes + pool_in_host;
  CACHEPAWL_RETURN_IF_ERROR(
      CheckTakeableMemory(asked, bytes, ProbePinnedMemory(),
                          "give a smaller budget (cachepawl info shows what this machine offers)"));
  HostArenaOptions ho;
  ho.bytes = options_.host_bytes;
  ho.pin = cpu_only ? HostArenaOptions::Pin::kOff : HostArenaOptions::Pin::kAuto;
  ho.device = std::max(0, options_.cuda_device);
  ho.shared = host_shared_;
  auto host = HostArena::Open(tier_layout_, ho);
  if (!host.ok()) return host.status().WithContext("host tier");
  host_ = std::move(host).value();

  if (options_.disk_bytes > 0) {
    DiskMoverOptions d;
    d.tier.dir = options_.disk_dir;
    d.tier.data_paths = options_.disk_data_paths;
    d.tier.capacity_bytes = options_.disk_bytes;
    d.tier.wipe_on_mismatch = options_.wipe_on_layout_mismatch;
    d.tier.wipe_unreadable_catalog = options_.wipe_unreadable_catalog;
    // The store evicts disk records itself, through the index, so that locked prefixes stay.
    d.queue_depth = options_.disk_queue_depth;
    auto disk = DiskMover::Open(d, tier_layout_, host_.get());
    if (!disk.ok()) return disk.status().WithContext("disk tier");
    disk_ = std::move(disk).value();
    auto orphans = RebuildIndexFromDisk(disk_->tier(), *index_, tier_layout_);
    if (!orphans.ok()) return orphans.status().WithContext("disk tier: rebuilding the index");
    const DiskTierStats opened = disk_->tier().stats();
    counters_.SetOpenedWith(opened.records_kv + opened.records_mamba + opened.records_window,
                            *orphans);
  }

  if (options_.device_pool_bytes > 0) {
    DevicePoolArenaOptions po;
    po.budget_bytes = options_.device_pool_bytes;
    po.device = std::max(0, options_.cuda_device);
    po.use_gpu =
        cpu_only ? DevicePoolArenaOptions::UseGpu::kOff : DevicePoolArenaOptions::UseGpu::kAuto;
    auto arena = DevicePoolArena::Create(layout_, po);
    if (!arena.ok()) return arena.status().WithContext("store-owned device pool");
    device_arena_ = std::move(arena).value();
    CACHEPAWL_RETURN_IF_ERROR(CreateMover(device_arena_->description()));
  }
  return Status::OK();
}

Status StoreImpl::CreateMover(const DevicePoolDescription& pool) {
  DeviceMoverOptions to;
  to.mode = pool.device < 0 ? DeviceMoverOptions::Mode::kOff : DeviceMoverOptions::Mode::kAuto;
  to.save_priority = options_.write_stream_priority;
  to.load_priority = options_.load_stream_priority;
  to.staging_bytes = options_.staging_bytes;
  to.completion_spin_us = options_.completion_spin_us;
  to.wait_spin_us = options_.wait_spin_us;
  to.inline_dispatch = options_.inline_dispatch;
  to.fault_injection = faults_.before_operation;
  to.cuda_fault = faults_.cuda_call;
  auto mover = DeviceMover::Create(layout_, pool, host_.get(), to);
  if (!mover.ok()) return mover.status().WithContext("device pool");
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Status::FailedPrecondition("store is closed");  // (the mover is dropped)
  mover_ = std::move(mover).value();
  mover_ready_ = true;
  return Status::OK();
}

Status StoreImpl::CheckOpen() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Status::FailedPrecondition("store is closed");
  return Status::OK();
}

Status StoreImpl::CheckPromptSize(std::string_view what, uint64_t count, bool in_pages) const {
  const uint64_t page = layout_.page_size_tokens;
  const uint64_t max = options_.max_prompt_tokens;
  if (in_pages ? count <= max / page : count <= max) return Status::OK();
  std::string message(what);
  message.append(": ").append(std::to_string(count));
  message.append(in_pages ? " pages of " + std::to_string(page) + " tokens" : " tokens");
  message.append(" (more than StoreOptions.max_prompt_tokens ").append(std::to_string(max));
  message.append(", the longest prompt one call may name)");
  return Status::InvalidArgument(message);
}

Status StoreImpl::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::OK();
    closed_ = true;
    if (host_space_) host_space_->StopLocked();
  }
  // Drain: every operation in flight fires its fence (the worker keeps running meanwhile).
  {
    std::unique_lock<std::mutex> lock(drain_mu_);
    drain_cv_.wait(lock, [&] { return in_flight_ == 0; });
  }
  // The disk submitter first (its tasks post completions to the worker), then the worker; each
  // runs what is queued before it stops. Operations posted meanwhile were counted in in_flight_.
  // The evictor first: its pass (closed_ is set) stops at its next batch; it may hand writes to
  // the disk submitter.
  CloseRemote();
  if (host_space_) host_space_->StopEvictor();
  if (cascade_) cascade_->StopSubmitter();
  worker_.reset();
  Status s;
  if (disk_) s = disk_->Close();
  mover_.reset();
  device_arena_.reset();
  disk_.reset();
  host_.reset();
  return s;
}

void StoreImpl::OperationStarted() {
  std::lock_guard<std::mutex> lock(drain_mu_);
  ++in_flight_;
}

void StoreImpl::OperationFinished() {
  // Notify under the lock: once in_flight_ is 0, Close() may return and the store be destroyed.
  std::lock_guard<std::mutex> lock(drain_mu_);
  --in_flight_;
  drain_cv_.notify_all();
}

void StoreImpl::WhenDone(const Fence& fence, std::function<void(const Status&)> fn) {
  TaskQueue* worker = worker_.get();
  fence.OnComplete([worker, fn = std::move(fn)](const Status& s) mutable {
    worker->Post([fn = std::move(fn), s]() mutable { fn(s); });
  });
}

void StoreImpl::WhenDone(const Fence& fence, const WhenDoneProfile& prof,
                         std::function<void(const Status&)> fn) {
  if (prof.submitted_at == 0) return WhenDone(fence, std::move(fn));
  TaskQueue* worker = worker_.get();
  fence.OnComplete([worker, fn = std::move(fn), prof](const Status& s) mutable {
    profile::Add(prof.copy, prof.submitted_at);
    const uint64_t fired = profile::Now();
    worker->Post([fn = std::move(fn), s, prof, fired]() mutable {
      profile::Add(prof.hop, fired);
      profile::ScopedStage finish(prof.finish);
      fn(s);
    });
  });
}

// ------------------------------------------------------------------------------------------
// Lookup and locks
// ------------------------------------------------------------------------------------------

StatusOr<PrefixMatch> StoreImpl::Lookup(std::string_view ns, std::span<const uint32_t> tokens) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  CACHEPAWL_RETURN_IF_ERROR(CheckPromptSize("tokens", tokens.size(), false));
  const auto start = SteadyClock::now();
  auto hashes = hasher_->HashTokens(ns, tokens);
  auto m = LookupHashes(hashes);
  counters_.lookup_latency().Record(SteadyClock::now() - start);
  return m;
}

StatusOr<PrefixMatch> StoreImpl::LookupHashes(std::span<const PageHash> hashes) {
  const uint64_t check_start = profile::Now();
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  CACHEPAWL_RETURN_IF_ERROR(CheckPromptSize("hashes", hashes.size(), true));
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (hashes[i].IsZero()) {
      return Status::InvalidArgument("hashes[" + std::to_string(i) + "]: the all-zero hash");
    }
  }
  profile::Add(profile::Stage::kLookupCheck, check_start);
  const uint64_t match_start = profile::Now();
  MatchResult r = index_->Match(hashes);
  profile::Add(profile::Stage::kLookupMatch, match_start);
  profile::ScopedStage building(profile::Stage::kLookupBuild);
  PrefixMatch m;
  m.hashes.assign(hashes.begin(), hashes.end());
  m.page_size_tokens = layout_.page_size_tokens;
  m.reusable_pages = r.reusable_pages;
  m.kv_only_pages = r.kv_only_pages;
  m.checkpoint_hint_pages = r.checkpoint_hint_pages;
  m.page_tiers.reserve(r.pages.size());
  for (const TierLocations& loc : r.pages) m.page_tiers.push_back(*loc.Fastest());
  if (r.reusable_pages > 0) m.state_tier = r.state.Fastest();
  m.window_first_page = r.window_first_page;
  m.window_tiers.reserve(r.window.size());
  for (const TierLocations& loc : r.window) m.window_tiers.push_back(*loc.Fastest());
  ExtendMatchFromRemote(m);
  counters_.CountLookup(hashes.size(), m.reusable_pages, m.kv_only_pages - m.reusable_pages);
  return m;
}

StatusOr<PrefixLock> StoreImpl::Lock(const PrefixMatch& match, size_t pages) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  if (pages > match.kv_only_pages) {
    return Status::InvalidArgument("pages: " + std::to_string(pages) + " (the match has " +
                                   std::to_string(match.kv_only_pages) + " cached pages)");
  }
  PrefixLock lock;
  std::lock_guard<std::mutex> g(mu_);
  // Pages only the remote tier holds are not here to lock: the lock covers the local part of
  // the match (Load fetches the rest).
  const bool state_here = !match.state_tier || *match.state_tier != Tier::kRemote;
  while (remote_ && pages > 0 && !index_->Lookup(match.hashes[pages - 1])) --pages;
  if (pages == 0) return lock;
  lock.hashes.assign(match.hashes.begin(), match.hashes.begin() + static_cast<long>(pages));
  lock.with_state = layout_.has_ssm() && pages == match.reusable_pages && state_here;
  Status s = index_->Lock(lock.hashes.back());
  if (!s.ok()) {
    return s.IsNotFound() ? Status::NotFound("page " + std::to_string(pages - 1) +
                                             " of the match is no longer cached")
                          : s;
  }
  return lock;
}

Status StoreImpl::Unlock(PrefixLock& lock) {
  if (lock.released) return Status::FailedPrecondition("lock was already released");
  if (lock.hashes.empty()) {
    lock.released = true;
    return Status::OK();
  }
  std::lock_guard<std::mutex> g(mu_);
  CACHEPAWL_RETURN_IF_ERROR(index_->Unlock(lock.hashes.back()));
  lock.released = true;
  // What the lock kept from pruning while the tiers dropped the entries below it (a pure SSM
  // chain whose states went, or pages whose KV went before Lock) is useless now.
  PruneLocked(lock.hashes.back());
  host_space_->NotifyLocked();
  return Status::OK();
}

// ------------------------------------------------------------------------------------------
// Device pools
// ------------------------------------------------------------------------------------------

StatusOr<std::shared_ptr<DeviceMover>> StoreImpl::UsableMoverLocked() const {
  if (closed_) return Status::FailedPrecondition("store is closed");
  if (!mover_ready_) {
    return Status::FailedPrecondition(
        "no device pool: open the store with device_pool_bytes or call RegisterDevicePool");
  }
  return mover_;
}

Status StoreImpl::RegisterDevicePool(const DevicePoolDescription& pool) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (mover_ready_ || registering_) {
      return Status::FailedPrecondition("a device pool is already registered");
    }
    registering_ = true;  // a second caller meanwhile fails as if this one had finished
  }
  Status s = CreateMover(pool);
  std::lock_guard<std::mutex> lock(mu_);
  registering_ = false;
  return s;
}

Status StoreImpl::UnregisterDevicePool() {
  std::shared_ptr<DeviceMover> mover;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (device_arena_) {
      return Status::FailedPrecondition(
          "the device pool is store-owned (StoreOptions.device_pool_bytes): it goes with Close");
    }
    if (registering_) {
      return Status::FailedPrecondition("a device pool is being registered or unregistered");
    }
    if (!mover_ready_) return Status::FailedPrecondition("no device pool is registered");
    mover_ready_ = false;  // Load and Save refuse from now on
    registering_ = true;   // and so does RegisterDevicePool, until the mover is gone
    mover = std::move(mover_);
  }
  // Every Load and Save that took the mover holds a copy until its last transfer fired (and,
  // for loads from disk, until its host-to-device stage was submitted): wait for them. Their
  // completions signal drain_cv_ (OperationFinished); the copy may go just after, hence the
  // bounded waits.
  {
    std::unique_lock<std::mutex> lock(drain_mu_);
    while (mover.use_count() > 1) drain_cv_.wait_for(lock, std::chrono::milliseconds(1));
  }
  mover.reset();  // drains nothing (no operation is left) and releases the staging memory
  std::lock_guard<std::mutex> lock(mu_);
  registering_ = false;
  return Status::OK();
}

StatusOr<uint64_t> StoreImpl::AllocateDeviceSlot(Kind kind) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  return AllocateOwnedDeviceSlot(device_arena_.get(), layout_, kind);
}

Status StoreImpl::FreeDeviceSlot(Kind kind, uint64_t slot) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  return FreeOwnedDeviceSlot(device_arena_.get(), layout_, kind, slot);
}

Status StoreImpl::WriteDeviceRecord(Kind kind, uint64_t slot, std::span<const std::byte> record) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  return WriteOwnedDeviceRecord(device_arena_.get(), layout_, kind, slot, record);
}

Status StoreImpl::ReadDeviceRecord(Kind kind, uint64_t slot, std::span<std::byte> record) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  return ReadOwnedDeviceRecord(device_arena_.get(), layout_, kind, slot, record);
}

// ------------------------------------------------------------------------------------------
// Stats
// ------------------------------------------------------------------------------------------

StoreStats StoreImpl::Stats() const {
  StoreStats st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.FillLocked(layout_, &st);
    if (partials_) st.tp_partial_entries = partials_->SizeLocked();
    st.remote = RemoteStatsLocked();
    for (Kind k : kAllKinds) {
      const int i = static_cast<int>(k);
      st.evictions[static_cast<int>(Tier::kHost)][i] = host_space_->evictions(k);
    }
    st.no_space_errors = host_space_->no_space();
    st.evicted_ahead = host_space_->evicted_ahead();
    if (cascade_) cascade_->AddStatsLocked(&st);
    if (closed_) return st;
    IndexStats is = index_->Stats();
    st.index_entries = is.entries;
    for (int t = 0; t < kNumLocalTiers; ++t) {
      for (int k = 0; k < kNumKinds; ++k) {
        st.resident_entries[t][k] = is.located[k][t];
        st.resident_bytes[t][k] = is.located[k][t] * tier_layout_.RecordBytes(static_cast<Kind>(k));
      }
    }
    if (mover_) {
      DeviceMoverStats es = mover_->stats();
      st.bytes_device_to_host = es.bytes[static_cast<int>(Direction::kSave)];
      st.bytes_host_to_device = es.bytes[static_cast<int>(Direction::kLoad)];
      // Over the time operations were in flight (sum of their latencies), not wall time.
      const double save_s =
          st.save_latency.mean_us * static_cast<double>(st.save_latency.count) / 1e6;
      const double load_s =
          st.load_latency.mean_us * static_cast<double>(st.load_latency.count) / 1e6;
      if (save_s > 0)
        st.gbps_device_to_host = static_cast<double>(st.bytes_device_to_host) / save_s / 1e9;
      if (load_s > 0)
        st.gbps_host_to_device = static_cast<double>(st.bytes_host_to_device) / load_s / 1e9;
    }
    if (disk_) {
      DiskTierStats ds = disk_->stats();
      st.bytes_host_to_disk = ds.write_bytes;
      st.bytes_disk_to_host = ds.read_bytes;
      st.checksum_failures =
          std::max(st.checksum_failures, ds.checksum_failures + ds.header_mismatches);
      st.io_errors = std::max(st.io_errors, ds.read_io_errors + ds.write_io_errors);
      st.disk_dropped_at_open = ds.dropped_at_open;
    }
  }
  {
    std::lock_guard<std::mutex> lock(drain_mu_);
    st.in_flight_operations = in_flight_;
  }
  return st;
}

}  // namespace cachepawl
