// StoreImpl: the Store over the prefix index, the host arena, the transfer engine and the disk
// engine.
//
// Locking. One mutex (mu_) serializes the store's bookkeeping: host and disk slot allocation,
// eviction decisions, index mutations and the in-flight maps. No I/O and no wait on a transfer
// happens under it, except the synchronous disk write of a write-back eviction (the disk
// engine fires its fences without mu_). Lookup takes no store lock (the index is thread-safe).
//
// Completion. The transfer and disk engines fire their fences on their own threads; the store
// never does bookkeeping there. Every fence the store waits for hands a task to the store's
// completion worker (one thread), which takes mu_, publishes locations (invariant 4: after the
// bytes landed), unpins, starts the next stage, and then completes the fence the engine holds.
// So when a fence returned by Save or Load fires, the index already says what it did.
//
// Entries being filled (a host slot allocated, its bytes not there yet) are not in the index's
// locations; they are in filling_ so that a second Save of the same key is a refresh and a
// Lookup cannot see them.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "cuda/gpu_runtime.h"
#include "index/page_hasher.h"
#include "index/prefix_index.h"
#include "store/latency_histogram.h"
#include "store/store.h"
#include "tiers/device_pool.h"
#include "tiers/device_pool_arena.h"
#include "tiers/host_arena.h"
#include "transfer/io_uring_disk.h"
#include "transfer/transfer_engine.h"

namespace cachepawl {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct EntryKey {
  PageHash hash;
  Kind kind = Kind::kKV;
  friend bool operator==(const EntryKey&, const EntryKey&) = default;
};

struct EntryKeyHasher {
  size_t operator()(const EntryKey& k) const noexcept {
    return PageHashHasher()(k.hash) ^ static_cast<size_t>(k.kind);
  }
};

int TierIndex(Tier t) { return static_cast<int>(t); }
int KindIndex(Kind k) { return static_cast<int>(k); }

// A one-thread task queue: where the store does the bookkeeping of completed transfers.
class CompletionWorker {
 public:
  CompletionWorker() : thread_([this] { Loop(); }) {}
  ~CompletionWorker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Post(std::function<void()> task) {
    // Notify under the lock: the task may be the store's last operation, after which Close()
    // destroys this worker; the destructor takes mu_ first, so it cannot overtake notify_one.
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    cv_.notify_one();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_ and drained
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::thread thread_;
};

// The GPU-side wait of a Load whose pages come from disk first. The host->device operation
// (whose transfer-engine fence carries the real GPU signal) is submitted only once the disk
// reads are done; a stream wait must not be enqueued ahead of its producer (a semaphore wait
// queued before the copies it waits for can deadlock a shared hardware queue), so StreamWait
// on such a fence blocks the calling thread until the host->device copies are enqueued. An
// engine that must never block calls StartPrefetch first and Loads from host afterwards.
class DeferredStreamWaiter {
 public:
  // `waiter` empty: there is no GPU work to wait for (the load failed; the fence says why).
  void Resolve(std::function<Status(void*)> waiter) {
    std::lock_guard<std::mutex> lock(mu_);
    waiter_ = std::move(waiter);
    resolved_ = true;
    cv_.notify_all();
  }
  Status Wait(void* stream) {
    std::function<Status(void*)> waiter;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return resolved_; });
      waiter = waiter_;
    }
    return waiter ? waiter(stream) : Status::OK();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool resolved_ = false;                // guarded by mu_
  std::function<Status(void*)> waiter_;  // guarded by mu_
};

}  // namespace

class StoreImpl final : public Store {
 public:
  ~StoreImpl() override { (void)Close(); }

  static StatusOr<std::unique_ptr<Store>> Open(const StoreOptions& options);

  const ModelLayout& layout() const override { return layout_; }
  bool gpu_mode() const override { return engine_ != nullptr && engine_->gpu_mode(); }
  std::vector<PageHash> HashTokens(std::string_view ns,
                                   std::span<const uint32_t> tokens) const override {
    return hasher_->HashTokens(ns, tokens);
  }

  StatusOr<PrefixMatch> Lookup(std::string_view ns, std::span<const uint32_t> tokens) override;
  StatusOr<PrefixMatch> LookupHashes(std::span<const PageHash> hashes) override;
  StatusOr<PrefixLock> Lock(const PrefixMatch& match, size_t pages) override;
  Status Unlock(PrefixLock& lock) override;
  StatusOr<Fence> Load(const PrefixMatch& match, std::span<const uint64_t> device_pages,
                       std::optional<uint64_t> device_state_slot, const LoadOptions& opts) override;
  StatusOr<std::shared_ptr<Prefetch>> StartPrefetch(const PrefixMatch& match) override;
  StatusOr<Fence> Save(const SaveRequest& request) override;
  Status RegisterDevicePool(const DevicePoolDescription& pool) override;
  StatusOr<uint64_t> AllocateDeviceSlot(Kind kind) override;
  Status FreeDeviceSlot(Kind kind, uint64_t slot) override;
  Status WriteDeviceRecord(Kind kind, uint64_t slot, std::span<const std::byte> record) override;
  Status ReadDeviceRecord(Kind kind, uint64_t slot, std::span<std::byte> record) override;
  StoreStats Stats() const override;
  Status Close() override;

 private:
  class PrefetchImpl;
  // One host slot being filled from disk for a Load or Prefetch.
  struct DiskFill {
    EntryKey key;
    uint64_t depth_tokens = 0;
    HostSlotId slot = 0;
  };
  // One unit of a LoadBack whose source is a host slot located in the index.
  struct HostSource {
    EntryKey key;
    HostSlotId slot = 0;
    uint64_t device_slot = 0;
  };

  StoreImpl() = default;
  Status CheckOpen() const;
  // OK when `slot` of `kind` is allocated in the store-owned pool and `bytes` is its record size.
  Status CheckDeviceRecord(Kind kind, uint64_t slot, size_t bytes) const;
  Status OpenTiers();
  Status RebuildIndexFromDisk();
  Status CreateEngine(const DevicePoolDescription& pool);

  // Allocates a host slot of `kind`, evicting unlocked entries when the arena is full. When
  // everything left is pinned by transfers in flight (disk writes, loads), waits for them (at
  // most kSpaceWait): backpressure, not failure. NoSpace when everything left is locked by the
  // engine, or the wait runs out. Requires mu_.
  // May wait (releasing mu_ through `lock`) while transfers that pin host slots finish.
  StatusOr<HostSlotId> AllocateHostLocked(Kind kind, std::unique_lock<std::mutex>& lock);
  // Evicts one victim from host (writing it to disk first under kWriteBack). Requires mu_.
  Status EvictFromHostLocked(const Victim& v);
  // Forgets `key`'s Disk location (after the disk tier dropped or evicted the record).
  void ForgetDiskLocked(const EntryKey& key);
  // Removes index entries that no tier holds any more, from `hash` up toward the root.
  void PruneLocked(const PageHash& hash);

  // Starts disk writes of host-resident entries (write-through and selective policies).
  // Pins their host slots until the writes finish. Requires mu_.
  void StartDiskWritesLocked(const std::vector<EntryKey>& keys);
  void FinishDiskWrites(std::vector<EntryKey> keys, std::vector<HostSlotId> slots, DiskOp op,
                        int attempt);

  // Post `fn(status)` to the worker when `fence` fires.
  void WhenDone(const Fence& fence, std::function<void(const Status&)> fn);
  void OperationStarted();
  void OperationFinished();

  // Load helpers.
  void FinishDiskFills(std::vector<DiskFill> fills, const Status& disk_status,
                       const std::shared_ptr<const DiskBatchResult>& result,
                       std::vector<size_t>* failed);
  // `deferred`: set for loads that read from disk first (see DeferredStreamWaiter).
  void SubmitHostToDevice(std::vector<HostSource> sources, std::shared_ptr<FenceCompleter> outer,
                          bool per_layer, SteadyClock::time_point start,
                          std::shared_ptr<DeferredStreamWaiter> deferred);
  void CountHit(const EntryKey& key);

  StoreOptions options_;
  ModelLayout layout_;
  std::unique_ptr<PageHasher> hasher_;
  std::unique_ptr<PrefixIndex> index_;
  std::unique_ptr<HostArena> host_;
  std::unique_ptr<DiskEngine> disk_;
  std::unique_ptr<DevicePoolArena> device_arena_;
  std::unique_ptr<TransferEngine> engine_;  // set once, before any Load/Save can run
  std::unique_ptr<CompletionWorker> worker_;

  mutable std::mutex mu_;
  bool closed_ = false;                                                      // guarded by mu_
  bool engine_ready_ = false;                                                // guarded by mu_
  std::unordered_map<EntryKey, HostSlotId, EntryKeyHasher> filling_;         // guarded by mu_
  std::unordered_set<EntryKey, EntryKeyHasher> disk_writing_;                // guarded by mu_
  std::unordered_map<EntryKey, uint32_t, EntryKeyHasher> hits_;              // guarded by mu_
  std::array<std::array<uint64_t, kNumKinds>, kNumTiers> evictions_{};       // guarded by mu_
  std::array<std::array<uint64_t, kNumKinds>, kNumTiers> loaded_entries_{};  // guarded by mu_
  uint64_t saves_ = 0, saved_pages_ = 0, saved_states_ = 0, refreshed_ = 0;  // guarded by mu_
  uint64_t loads_ = 0, prefetches_ = 0, failed_ops_ = 0, no_space_ = 0;      // guarded by mu_
  uint64_t checksum_failures_ = 0, io_errors_ = 0;                           // guarded by mu_
  uint64_t loads_pinning_host_ = 0;   // loads holding host pins; guarded by mu_
  std::condition_variable space_cv_;  // signalled (under mu_) when host entries may be evictable

  mutable std::mutex drain_mu_;
  std::condition_variable drain_cv_;
  uint64_t in_flight_ = 0;  // guarded by drain_mu_

  std::atomic<uint64_t> lookups_{0}, lookup_pages_{0}, hit_pages_{0}, kv_only_pages_{0};
  LatencyHistogram lookup_latency_, load_latency_, save_latency_;
};

// ------------------------------------------------------------------------------------------
// Opening and closing
// ------------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  return StoreImpl::Open(options);
}

StatusOr<std::unique_ptr<Store>> StoreImpl::Open(const StoreOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<StoreImpl> s(new StoreImpl());
  s->options_ = options;
  if (options.layout) {
    s->layout_ = *options.layout;
  } else {
    auto layout = ResolveLayout(options.layout_name, options.page_size_tokens);
    if (!layout.ok()) return layout.status().WithContext("StoreOptions.layout_name");
    s->layout_ = *layout;
  }
  CACHEPAWL_RETURN_IF_ERROR(s->layout_.Validate().WithContext("StoreOptions.layout"));
  if (!s->layout_.has_attention()) {
    return Status::InvalidArgument(
        "StoreOptions.layout: '" + s->layout_.model +
        "' has no attention layers; the store keys prefixes by KV pages and needs at least "
        "one attention layer");
  }
  auto hasher = PageHasher::Create(s->layout_.page_size_tokens);
  if (!hasher.ok()) return hasher.status();
  s->hasher_ = std::make_unique<PageHasher>(std::move(hasher).value());

  IndexOptions io;
  io.require_mamba = s->layout_.has_ssm();
  io.track_interval_pages = std::max<uint32_t>(1, options.track_interval_pages);
  io.kv_page_bytes = RecordSlotBytes(s->layout_, Kind::kKV);
  io.mamba_state_bytes = s->layout_.has_ssm() ? RecordSlotBytes(s->layout_, Kind::kMamba) : 0;
  auto index = PrefixIndex::Create(io);
  if (!index.ok()) return index.status();
  s->index_ = std::move(index).value();

  CACHEPAWL_RETURN_IF_ERROR(s->OpenTiers());
  s->worker_ = std::make_unique<CompletionWorker>();
  return std::unique_ptr<Store>(std::move(s));
}

Status StoreImpl::OpenTiers() {
  const bool cpu_only = options_.cuda_device < 0 || !cuda::GpuAvailable();
  HostArenaOptions ho;
  ho.bytes = options_.host_bytes;
  ho.pin = cpu_only ? HostArenaOptions::Pin::kOff : HostArenaOptions::Pin::kAuto;
  ho.device = std::max(0, options_.cuda_device);
  auto host = HostArena::Open(layout_, ho);
  if (!host.ok()) return host.status().WithContext("host tier");
  host_ = std::move(host).value();

  if (options_.disk_bytes > 0) {
    DiskEngineOptions d;
    d.tier.dir = options_.disk_dir;
    d.tier.data_paths = options_.disk_data_paths;
    d.tier.capacity_bytes = options_.disk_bytes;
    d.tier.wipe_on_mismatch = options_.wipe_on_layout_mismatch;
    // The store evicts disk records itself, through the index, so that locked prefixes stay.
    d.tier.evict_when_full = false;
    d.queue_depth = options_.disk_queue_depth;
    auto disk = DiskEngine::Open(d, layout_, host_.get());
    if (!disk.ok()) return disk.status().WithContext("disk tier");
    disk_ = std::move(disk).value();
    CACHEPAWL_RETURN_IF_ERROR(RebuildIndexFromDisk());
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
    CACHEPAWL_RETURN_IF_ERROR(CreateEngine(device_arena_->description()));
  }
  return Status::OK();
}

Status StoreImpl::CreateEngine(const DevicePoolDescription& pool) {
  TransferEngineOptions to;
  to.mode =
      pool.device < 0 ? TransferEngineOptions::Mode::kCpu : TransferEngineOptions::Mode::kAuto;
  to.writeback_priority = options_.write_stream_priority;
  to.loadback_priority = options_.load_stream_priority;
  to.staging_bytes = options_.staging_bytes;
  auto engine = TransferEngine::Create(layout_, pool, host_.get(), to);
  if (!engine.ok()) return engine.status().WithContext("device pool");
  std::lock_guard<std::mutex> lock(mu_);
  engine_ = std::move(engine).value();
  engine_ready_ = true;
  return Status::OK();
}

Status StoreImpl::RebuildIndexFromDisk() {
  std::vector<DiskRecordInfo> kv, mamba;
  disk_->tier().ForEachRecord(
      [&](const DiskRecordInfo& r) { (r.key.kind == Kind::kKV ? kv : mamba).push_back(r); });
  // Parents before children: a page's depth is its position in the chain.
  std::sort(kv.begin(), kv.end(), [](const DiskRecordInfo& a, const DiskRecordInfo& b) {
    return a.key.depth < b.key.depth;
  });
  std::vector<DiskKey> orphans;
  for (const DiskRecordInfo& r : kv) {
    std::optional<PageHash> parent;
    if (!r.parent.IsZero()) parent = r.parent;
    Status s = index_->InsertKv(parent, r.key.hash);
    if (s.ok()) s = index_->SetLocation(r.key.hash, Kind::kKV, Tier::kDisk, r.extent.Id());
    if (!s.ok()) orphans.push_back(r.key);  // its parent was lost: unreachable, reclaim it
  }
  for (const DiskRecordInfo& r : mamba) {
    auto entry = index_->Lookup(r.key.hash);
    Status s = Status::NotFound("no KV entry");
    if (entry && uint64_t{entry->depth_pages} * layout_.page_size_tokens == r.key.depth) {
      s = index_->SetLocation(r.key.hash, Kind::kMamba, Tier::kDisk, r.extent.Id());
    }
    if (!s.ok()) orphans.push_back(r.key);
  }
  for (const DiskKey& k : orphans) (void)disk_->tier().Remove(k);
  if (!orphans.empty()) {
    spdlog::info("cachepawl: reopened disk tier: {} KV pages, {} states, {} orphans reclaimed",
                 kv.size(), mamba.size(), orphans.size());
  }
  return Status::OK();
}

Status StoreImpl::CheckOpen() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Status::FailedPrecondition("store is closed");
  return Status::OK();
}

Status StoreImpl::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::OK();
    closed_ = true;
    space_cv_.notify_all();
  }
  // Drain: every operation in flight fires its fence (the worker keeps running meanwhile).
  {
    std::unique_lock<std::mutex> lock(drain_mu_);
    drain_cv_.wait(lock, [&] { return in_flight_ == 0; });
  }
  worker_.reset();  // runs what is queued, then stops
  Status s;
  if (disk_) s = disk_->Close();
  engine_.reset();
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
  CompletionWorker* worker = worker_.get();
  fence.OnComplete([worker, fn = std::move(fn)](const Status& s) mutable {
    worker->Post([fn = std::move(fn), s]() mutable { fn(s); });
  });
}

// ------------------------------------------------------------------------------------------
// Lookup and locks
// ------------------------------------------------------------------------------------------

StatusOr<PrefixMatch> StoreImpl::Lookup(std::string_view ns, std::span<const uint32_t> tokens) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  const auto start = SteadyClock::now();
  auto hashes = hasher_->HashTokens(ns, tokens);
  auto m = LookupHashes(hashes);
  lookup_latency_.Record(SteadyClock::now() - start);
  return m;
}

StatusOr<PrefixMatch> StoreImpl::LookupHashes(std::span<const PageHash> hashes) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (hashes[i].IsZero()) {
      return Status::InvalidArgument("hashes[" + std::to_string(i) + "]: the all-zero hash");
    }
  }
  MatchResult r = index_->Match(hashes);
  PrefixMatch m;
  m.hashes.assign(hashes.begin(), hashes.end());
  m.page_size_tokens = layout_.page_size_tokens;
  m.reusable_pages = r.reusable_pages;
  m.kv_only_pages = r.kv_only_pages;
  m.checkpoint_hint_pages = r.checkpoint_hint_pages;
  m.page_tiers.reserve(r.pages.size());
  for (const TierLocations& loc : r.pages) m.page_tiers.push_back(*loc.Fastest());
  if (r.reusable_pages > 0) m.state_tier = r.state.Fastest();
  lookups_.fetch_add(1, std::memory_order_relaxed);
  lookup_pages_.fetch_add(hashes.size(), std::memory_order_relaxed);
  hit_pages_.fetch_add(r.reusable_pages, std::memory_order_relaxed);
  kv_only_pages_.fetch_add(r.kv_only_pages - r.reusable_pages, std::memory_order_relaxed);
  return m;
}

StatusOr<PrefixLock> StoreImpl::Lock(const PrefixMatch& match, size_t pages) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  if (pages > match.kv_only_pages) {
    return Status::InvalidArgument("pages: " + std::to_string(pages) + " (the match has " +
                                   std::to_string(match.kv_only_pages) + " cached pages)");
  }
  PrefixLock lock;
  if (pages == 0) return lock;
  lock.hashes.assign(match.hashes.begin(), match.hashes.begin() + static_cast<long>(pages));
  lock.with_state = layout_.has_ssm() && pages == match.reusable_pages;
  std::lock_guard<std::mutex> g(mu_);
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
  space_cv_.notify_all();
  return Status::OK();
}

// ------------------------------------------------------------------------------------------
// Host allocation and eviction
// ------------------------------------------------------------------------------------------

StatusOr<HostSlotId> StoreImpl::AllocateHostLocked(Kind kind, std::unique_lock<std::mutex>& lock) {
  constexpr auto kSpaceWait = std::chrono::seconds(30);
  const auto deadline = SteadyClock::now() + kSpaceWait;
  for (;;) {
    auto slot = host_->Allocate(kind);
    if (slot.ok()) return slot;
    if (slot.status().IsBusy()) {
      // Only chunks still being pinned could hold it: wait for pinning (start-up only).
      Status pinned = host_->WaitUntilPinned(std::chrono::seconds(60));
      if (!pinned.ok()) return pinned.WithContext("host tier pinning");
      continue;
    }
    if (!slot.status().IsNoSpace()) return slot.status();
    // Full: evict. Mamba states go first (large, and only one depth of each is useful).
    bool evicted = false;
    for (Kind victim_kind : {Kind::kMamba, Kind::kKV}) {
      if (victim_kind == Kind::kMamba && !layout_.has_ssm()) continue;
      auto victims = index_->PickVictims(Tier::kHost, victim_kind, 8);
      if (!victims.ok()) return victims.status();
      for (const Victim& v : *victims) {
        if (EvictFromHostLocked(v).ok()) evicted = true;
      }
      if (evicted) break;
    }
    if (evicted) continue;
    const bool transfers_pin_host = !disk_writing_.empty() || loads_pinning_host_ > 0;
    if (transfers_pin_host && !closed_ &&
        space_cv_.wait_until(lock, deadline) != std::cv_status::timeout) {
      continue;
    }
    if (transfers_pin_host && !closed_ && SteadyClock::now() < deadline) continue;
    ++no_space_;
    return Status::NoSpace(std::string("host tier: no room for a ") + std::string(KindName(kind)) +
                           " slot: every cached entry is locked by the engine" +
                           (transfers_pin_host ? " or still in flight after 30 s" : ""));
  }
}

Status StoreImpl::EvictFromHostLocked(const Victim& v) {
  const EntryKey key{v.hash, v.kind};
  auto entry = index_->Lookup(v.hash);
  if (!entry) return Status::NotFound("victim vanished");
  const TierLocations& loc = v.kind == Kind::kKV ? entry->kv : entry->state;
  if (disk_ && !loc.Has(Tier::kDisk) && !disk_writing_.count(key) &&
      options_.write_policy == WritePolicy::kWriteBack) {
    // Write-on-evict: the entry leaves host memory for disk, synchronously (the disk engine
    // fires its fence without mu_).
    DiskWrite w{DiskKey{v.kind, v.hash, uint64_t{entry->depth_pages} * layout_.page_size_tokens},
                entry->parent.value_or(PageHash::Zero()), v.slot};
    DiskOp op = disk_->WriteBack(std::span<const DiskWrite>(&w, 1));
    (void)op.fence.Wait();
    const DiskRecordResult& r = op.result->records.at(0);
    if (r.status.ok()) {
      (void)index_->SetLocation(v.hash, v.kind, Tier::kDisk, r.extent_id);
    } else {
      spdlog::warn("cachepawl: write-on-evict of {} failed: {}", v.hash.ToHex(),
                   r.status.ToString());
      if (r.status.IsNoSpace()) ++no_space_;
    }
  }
  auto cleared = index_->ClearLocation(v.hash, v.kind, Tier::kHost);
  if (!cleared.ok()) return cleared.status();
  (void)host_->Free(*cleared);
  ++evictions_[TierIndex(Tier::kHost)][KindIndex(v.kind)];
  PruneLocked(v.hash);
  return Status::OK();
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
    if (!e || !e->kv.empty() || !e->state.empty() || e->children > 0) return;
    if (filling_.count({*cur, Kind::kKV}) || filling_.count({*cur, Kind::kMamba})) return;
    if (!index_->Remove(*cur).ok()) return;
    hits_.erase({*cur, Kind::kKV});
    hits_.erase({*cur, Kind::kMamba});
    cur = e->parent;
  }
}

// ------------------------------------------------------------------------------------------
// Save: device -> host (-> disk by policy)
// ------------------------------------------------------------------------------------------

StatusOr<Fence> StoreImpl::Save(const SaveRequest& req) {
  const auto start = SteadyClock::now();
  std::vector<PageHash> computed;
  std::span<const PageHash> hashes = req.hashes;
  if (!req.hashes.empty() && !req.tokens.empty()) {
    return Status::InvalidArgument("SaveRequest: give tokens or hashes, not both");
  }
  if (req.hashes.empty()) {
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
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (!engine_ready_) {
      return Status::FailedPrecondition(
          "no device pool: open the store with device_pool_bytes or call RegisterDevicePool");
    }
    if (chain == 0) return Fence::Completed(Status::OK());
    CACHEPAWL_RETURN_IF_ERROR(
        index_->InsertChain(std::nullopt, hashes.first(chain)).WithContext("SaveRequest"));
    auto rollback = [&](const Status& why) {
      for (auto& [key, slot] : pending) {
        filling_.erase(key);
        (void)host_->Free(slot);
      }
      for (size_t i = chain; i-- > 0;) PruneLocked(hashes[i]);
      return why;
    };
    auto add = [&](EntryKey key, uint64_t device_slot) -> Status {
      auto e = index_->Lookup(key.hash);
      if (!e) return Status::Aborted("entry pruned while waiting for space");
      const TierLocations& loc = key.kind == Kind::kKV ? e->kv : e->state;
      if (loc.Has(Tier::kHost) || loc.Has(Tier::kDisk) || filling_.count(key)) {
        ++refreshed_;
        return Status::OK();
      }
      auto slot = AllocateHostLocked(key.kind, lock);
      if (slot.ok()) {
        // Waiting for space released mu_: the chain may have been pruned meanwhile.
        Status again = index_->InsertChain(std::nullopt, hashes.first(chain));
        if (!again.ok()) {
          (void)host_->Free(*slot);
          return again;
        }
        auto now = index_->Lookup(key.hash);
        const TierLocations& l2 = key.kind == Kind::kKV ? now->kv : now->state;
        if (l2.Has(Tier::kHost) || l2.Has(Tier::kDisk) || filling_.count(key)) {
          (void)host_->Free(*slot);  // another Save cached it meanwhile
          ++refreshed_;
          return Status::OK();
        }
      }
      if (!slot.ok()) return slot.status();
      filling_[key] = *slot;
      pending.emplace_back(key, *slot);
      op.units.push_back({key.kind, {Tier::kDevice, device_slot}, {Tier::kHost, *slot}});
      return Status::OK();
    };
    for (size_t j = 0; j < count; ++j) {
      Status s = add({hashes[first + j], Kind::kKV}, req.device_pages[j]);
      if (!s.ok()) return rollback(s);
    }
    if (req.device_state_slot) {
      Status s = add({hashes[state_pages - 1], Kind::kMamba}, *req.device_state_slot);
      if (!s.ok()) return rollback(s);
    }
    ++saves_;
  }
  // Refresh recency of what was already cached.
  (void)index_->Match(hashes.first(chain));
  if (op.units.empty()) {
    save_latency_.Record(SteadyClock::now() - start);
    return Fence::Completed(Status::OK());
  }

  auto outer = std::make_shared<FenceCompleter>();
  Fence result = outer->fence();
  OperationStarted();
  Fence inner = engine_->Submit(std::move(op));
  {
    std::lock_guard<std::mutex> g(inner.state()->mu);
    auto waiter = inner.state()->gpu_stream_waiter;
    std::lock_guard<std::mutex> g2(result.state()->mu);
    result.state()->gpu_stream_waiter = waiter;
  }
  WhenDone(inner, [this, pending = std::move(pending), outer, start](const Status& s) {
    std::vector<EntryKey> to_disk;
    {
      std::lock_guard<std::mutex> lock(mu_);
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
        if (disk_ && options_.write_policy == WritePolicy::kWriteThrough) to_disk.push_back(key);
      }
      if (!s.ok()) ++failed_ops_;
      if (!to_disk.empty()) StartDiskWritesLocked(to_disk);
      space_cv_.notify_all();
    }
    save_latency_.Record(SteadyClock::now() - start);
    outer->Complete(s);
    OperationFinished();
  });
  return result;
}

void StoreImpl::StartDiskWritesLocked(const std::vector<EntryKey>& keys) {
  std::vector<DiskWrite> writes;
  std::vector<EntryKey> written;
  std::vector<HostSlotId> slots;
  for (const EntryKey& key : keys) {
    if (disk_writing_.count(key)) continue;
    auto e = index_->Lookup(key.hash);
    if (!e) continue;
    const TierLocations& loc = key.kind == Kind::kKV ? e->kv : e->state;
    if (!loc.Has(Tier::kHost) || loc.Has(Tier::kDisk)) continue;
    if (!index_->PinForTransfer(key.hash, key.kind, Tier::kHost).ok()) continue;
    disk_writing_.insert(key);
    const HostSlotId slot = *loc.Slot(Tier::kHost);
    writes.push_back(
        {DiskKey{key.kind, key.hash, uint64_t{e->depth_pages} * layout_.page_size_tokens},
         e->parent.value_or(PageHash::Zero()), slot});
    written.push_back(key);
    slots.push_back(slot);
  }
  if (writes.empty()) return;
  OperationStarted();
  DiskOp op = disk_->WriteBack(writes);
  WhenDone(op.fence, [this, written = std::move(written), slots = std::move(slots),
                      op](const Status&) mutable {
    FinishDiskWrites(std::move(written), std::move(slots), std::move(op), 0);
  });
}

void StoreImpl::FinishDiskWrites(std::vector<EntryKey> keys, std::vector<HostSlotId> slots,
                                 DiskOp op, int attempt) {
  std::vector<DiskWrite> retry;
  std::vector<EntryKey> retry_keys;
  std::vector<HostSlotId> retry_slots;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const DiskKey& k : op.result->evicted) ForgetDiskLocked({k.hash, k.kind});
    for (size_t i = 0; i < keys.size(); ++i) {
      const EntryKey& key = keys[i];
      const DiskRecordResult& r = op.result->records.at(i);
      if (r.status.ok()) {
        (void)index_->SetLocation(key.hash, key.kind, Tier::kDisk, r.extent_id);
      } else if (r.status.IsNoSpace() && attempt == 0 && !closed_) {
        // Make room through the index (so locked prefixes stay), then try once more.
        retry_keys.push_back(key);
        retry_slots.push_back(slots[i]);
        continue;
      } else if (r.status.IsIOError()) {
        ++io_errors_;
      } else if (r.status.IsNoSpace()) {
        ++no_space_;
      }
      (void)index_->Unpin(key.hash, key.kind, Tier::kHost);
      disk_writing_.erase(key);
    }
    space_cv_.notify_all();
    if (!retry_keys.empty()) {
      const uint64_t need = retry_keys.size();
      uint64_t freed = 0;
      for (Kind kind : {Kind::kMamba, Kind::kKV}) {
        if (freed >= need) break;
        auto victims = index_->PickVictims(Tier::kDisk, kind, need - freed + 4);
        if (!victims.ok()) continue;
        for (const Victim& v : *victims) {
          auto e = index_->Lookup(v.hash);
          if (!e) continue;
          DiskKey dk{v.kind, v.hash, uint64_t{e->depth_pages} * layout_.page_size_tokens};
          if (!disk_->tier().Remove(dk).ok()) continue;
          ++evictions_[TierIndex(Tier::kDisk)][KindIndex(v.kind)];
          ForgetDiskLocked({v.hash, v.kind});
          ++freed;
        }
      }
      for (size_t i = 0; i < retry_keys.size(); ++i) {
        auto e = index_->Lookup(retry_keys[i].hash);
        retry.push_back({DiskKey{retry_keys[i].kind, retry_keys[i].hash,
                                 e ? uint64_t{e->depth_pages} * layout_.page_size_tokens : 0},
                         e && e->parent ? *e->parent : PageHash::Zero(), retry_slots[i]});
      }
    }
  }
  if (!retry.empty()) {
    OperationStarted();
    DiskOp again = disk_->WriteBack(retry);
    WhenDone(again.fence, [this, retry_keys = std::move(retry_keys),
                           retry_slots = std::move(retry_slots), again](const Status&) mutable {
      FinishDiskWrites(std::move(retry_keys), std::move(retry_slots), std::move(again), 1);
    });
  }
  OperationFinished();
}

// ------------------------------------------------------------------------------------------
// Load: disk -> host -> device
// ------------------------------------------------------------------------------------------

void StoreImpl::CountHit(const EntryKey& key) {
  if (!disk_ || options_.write_policy != WritePolicy::kWriteThroughSelective) return;
  uint32_t& h = hits_[key];
  if (++h == options_.selective_min_hits) StartDiskWritesLocked({key});
}

StatusOr<Fence> StoreImpl::Load(const PrefixMatch& match, std::span<const uint64_t> device_pages,
                                std::optional<uint64_t> device_state_slot,
                                const LoadOptions& opts) {
  const auto start = SteadyClock::now();
  const size_t first = opts.first_page;
  const size_t count = device_pages.size();
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
  std::vector<HostSource> sources;
  std::vector<DiskFill> fills;
  std::vector<uint64_t> fill_device_slots;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (!engine_ready_) {
      return Status::FailedPrecondition(
          "no device pool: open the store with device_pool_bytes or call RegisterDevicePool");
    }
    auto rollback = [&](const Status& why) {
      for (const HostSource& s : sources) (void)index_->Unpin(s.key.hash, s.key.kind, Tier::kHost);
      for (const DiskFill& f : fills) {
        filling_.erase(f.key);
        (void)host_->Free(f.slot);
      }
      return why;
    };
    auto add = [&](const EntryKey& key, size_t page, uint64_t device_slot) -> Status {
      auto e = index_->Lookup(key.hash);
      const TierLocations* loc = nullptr;
      if (e) loc = key.kind == Kind::kKV ? &e->kv : &e->state;
      if (loc == nullptr || loc->empty()) {
        return Status::NotFound(std::string(key.kind == Kind::kKV ? "page " : "state at page ") +
                                std::to_string(page) + " is no longer cached");
      }
      if (loc->Has(Tier::kHost)) {
        CACHEPAWL_RETURN_IF_ERROR(index_->PinForTransfer(key.hash, key.kind, Tier::kHost));
        sources.push_back({key, *loc->Slot(Tier::kHost), device_slot});
        ++loaded_entries_[TierIndex(Tier::kHost)][KindIndex(key.kind)];
      } else {
        if (filling_.count(key)) {
          return Status::Busy("page " + std::to_string(page) + " is being filled; retry");
        }
        const uint64_t depth = uint64_t{e->depth_pages} * layout_.page_size_tokens;
        auto slot = AllocateHostLocked(key.kind, lock);
        if (!slot.ok()) return slot.status();
        filling_[key] = *slot;
        fills.push_back({key, depth, *slot});
        fill_device_slots.push_back(device_slot);
        ++loaded_entries_[TierIndex(Tier::kDisk)][KindIndex(key.kind)];
      }
      CountHit(key);
      return Status::OK();
    };
    for (size_t j = 0; j < count; ++j) {
      Status s = add({match.hashes[first + j], Kind::kKV}, first + j, device_pages[j]);
      if (!s.ok()) return rollback(s);
    }
    if (device_state_slot) {
      Status s = add({match.hashes[first + count - 1], Kind::kMamba}, first + count - 1,
                     *device_state_slot);
      if (!s.ok()) return rollback(s);
    }
    ++loads_;
    ++loads_pinning_host_;
  }

  auto outer =
      std::make_shared<FenceCompleter>(opts.per_layer_fences ? layout_.attention_layers.size() : 0);
  Fence result = outer->fence();
  OperationStarted();
  if (fills.empty()) {
    SubmitHostToDevice(std::move(sources), outer, opts.per_layer_fences, start, nullptr);
    return result;
  }
  std::vector<DiskRead> reads;
  for (const DiskFill& f : fills)
    reads.push_back({DiskKey{f.key.kind, f.key.hash, f.depth_tokens}, f.slot});
  std::shared_ptr<DeferredStreamWaiter> deferred;
  if (engine_->gpu_mode()) {
    deferred = std::make_shared<DeferredStreamWaiter>();
    std::lock_guard<std::mutex> g(result.state()->mu);
    result.state()->gpu_stream_waiter = [deferred](void* stream) { return deferred->Wait(stream); };
  }
  DiskOp op = disk_->LoadBack(reads);
  WhenDone(op.fence, [this, fills = std::move(fills),
                      fill_device_slots = std::move(fill_device_slots),
                      sources = std::move(sources), outer, op, start, deferred,
                      per_layer = opts.per_layer_fences](const Status& s) mutable {
    std::vector<size_t> failed;
    FinishDiskFills(fills, s, op.result, &failed);
    if (!failed.empty()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const HostSource& src : sources) {
          (void)index_->Unpin(src.key.hash, src.key.kind, Tier::kHost);
        }
        for (size_t i = 0; i < fills.size(); ++i) {
          if (std::find(failed.begin(), failed.end(), i) == failed.end()) {
            (void)index_->Unpin(fills[i].key.hash, fills[i].key.kind, Tier::kHost);
          }
        }
        ++failed_ops_;
        --loads_pinning_host_;
        space_cv_.notify_all();
      }
      if (deferred) deferred->Resolve({});  // nothing reaches the GPU: release stream waits
      const DiskRecordResult& r = op.result->records.at(failed.front());
      outer->Complete(Status::NotFound(std::to_string(failed.size()) +
                                       " disk record(s) could not be loaded (dropped as a miss; "
                                       "first: " +
                                       r.status.ToString() + ")"));
      load_latency_.Record(SteadyClock::now() - start);
      OperationFinished();
      return;
    }
    for (size_t i = 0; i < fills.size(); ++i) {
      sources.push_back({fills[i].key, fills[i].slot, fill_device_slots[i]});
    }
    SubmitHostToDevice(std::move(sources), outer, per_layer, start, deferred);
  });
  return result;
}

void StoreImpl::FinishDiskFills(std::vector<DiskFill> fills, const Status& disk_status,
                                const std::shared_ptr<const DiskBatchResult>& result,
                                std::vector<size_t>* failed) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < fills.size(); ++i) {
    const DiskFill& f = fills[i];
    filling_.erase(f.key);
    Status s = result && i < result->records.size() ? result->records[i].status : disk_status;
    if (s.ok()) {
      s = index_->SetLocation(f.key.hash, f.key.kind, Tier::kHost, f.slot);
      if (s.ok()) s = index_->PinForTransfer(f.key.hash, f.key.kind, Tier::kHost);
    }
    if (!s.ok()) {
      failed->push_back(i);
      if (s.IsCorruption()) ++checksum_failures_;
      if (s.IsIOError()) ++io_errors_;
      (void)host_->Free(f.slot);
      // The disk tier dropped a record that failed verification; the index forgets it too.
      if (!disk_->tier().Contains(DiskKey{f.key.kind, f.key.hash, f.depth_tokens})) {
        ForgetDiskLocked(f.key);
      }
    }
  }
}

void StoreImpl::SubmitHostToDevice(std::vector<HostSource> sources,
                                   std::shared_ptr<FenceCompleter> outer, bool per_layer,
                                   SteadyClock::time_point start,
                                   std::shared_ptr<DeferredStreamWaiter> deferred) {
  Operation op;
  op.direction = Direction::kLoadBack;
  op.per_layer_fences = per_layer;
  for (const HostSource& s : sources) {
    op.units.push_back({s.key.kind, {Tier::kHost, s.slot}, {Tier::kDevice, s.device_slot}});
  }
  Fence inner = engine_->Submit(std::move(op));
  {
    std::function<Status(void*)> waiter;
    {
      std::lock_guard<std::mutex> g(inner.state()->mu);
      waiter = inner.state()->gpu_stream_waiter;
    }
    if (deferred) {
      deferred->Resolve(std::move(waiter));
    } else {
      std::lock_guard<std::mutex> g(outer->fence().state()->mu);
      outer->fence().state()->gpu_stream_waiter = std::move(waiter);
    }
  }
  if (per_layer && inner.num_layers() > 0) {
    // Sub-fences fire in layer order; one forwarding thread per operation passes them on as
    // they fire (it holds only the two fences' shared state, so it may outlive the store).
    std::thread([inner, outer] {
      for (size_t l = 0; l < inner.num_layers(); ++l) outer->CompleteLayer(l, inner.WaitLayer(l));
    }).detach();
  }
  WhenDone(inner, [this, sources = std::move(sources), outer, start](const Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const HostSource& src : sources) {
        (void)index_->Unpin(src.key.hash, src.key.kind, Tier::kHost);
      }
      if (!s.ok()) ++failed_ops_;
      --loads_pinning_host_;
      space_cv_.notify_all();
    }
    load_latency_.Record(SteadyClock::now() - start);
    outer->Complete(s);
    OperationFinished();
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
  std::vector<DiskFill> fills;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (disk_) {
      auto want = [&](const EntryKey& key) -> Status {
        auto e = index_->Lookup(key.hash);
        if (!e) return Status::OK();
        const TierLocations& loc = key.kind == Kind::kKV ? e->kv : e->state;
        if (!loc.Has(Tier::kDisk) || loc.Has(Tier::kHost) || filling_.count(key)) {
          return Status::OK();
        }
        const uint64_t depth = uint64_t{e->depth_pages} * layout_.page_size_tokens;
        auto slot = AllocateHostLocked(key.kind, lock);
        if (!slot.ok()) return slot.status();
        filling_[key] = *slot;
        fills.push_back({key, depth, *slot});
        return Status::OK();
      };
      Status s;
      for (size_t i = 0; i < match.kv_only_pages && s.ok(); ++i) {
        s = want({match.hashes[i], Kind::kKV});
      }
      if (s.ok() && match.reusable_pages > 0 && layout_.has_ssm()) {
        s = want({match.hashes[match.reusable_pages - 1], Kind::kMamba});
      }
      if (!s.ok()) {
        for (const DiskFill& f : fills) {
          filling_.erase(f.key);
          (void)host_->Free(f.slot);
        }
        return s;
      }
    }
    ++prefetches_;
  }
  auto outer = std::make_shared<FenceCompleter>();
  auto handle = std::make_shared<PrefetchImpl>(outer->fence());
  if (fills.empty()) {
    outer->Complete(Status::OK());
    return std::shared_ptr<Store::Prefetch>(handle);
  }
  OperationStarted();
  // Cancellation: the reads are issued from the worker, so a Cancel() that comes before the
  // worker runs stops all of them.
  worker_->Post([this, fills = std::move(fills), outer, handle]() mutable {
    if (handle->cancelled()) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const DiskFill& f : fills) {
        filling_.erase(f.key);
        (void)host_->Free(f.slot);
      }
      outer->Complete(Status::Aborted("prefetch cancelled"));
      OperationFinished();
      return;
    }
    std::vector<DiskRead> reads;
    for (const DiskFill& f : fills) {
      reads.push_back({DiskKey{f.key.kind, f.key.hash, f.depth_tokens}, f.slot});
    }
    DiskOp op = disk_->LoadBack(reads);
    WhenDone(op.fence, [this, fills = std::move(fills), outer, op](const Status& s) {
      std::vector<size_t> failed;
      FinishDiskFills(fills, s, op.result, &failed);
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t i = 0; i < fills.size(); ++i) {
          if (std::find(failed.begin(), failed.end(), i) == failed.end()) {
            (void)index_->Unpin(fills[i].key.hash, fills[i].key.kind, Tier::kHost);
          }
        }
      }
      outer->Complete(failed.empty() ? Status::OK()
                                     : Status::NotFound(std::to_string(failed.size()) +
                                                        " record(s) could not be prefetched"));
      OperationFinished();
    });
  });
  return std::shared_ptr<Store::Prefetch>(handle);
}

// ------------------------------------------------------------------------------------------
// Device pools
// ------------------------------------------------------------------------------------------

Status StoreImpl::RegisterDevicePool(const DevicePoolDescription& pool) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (engine_ready_) {
      return Status::FailedPrecondition("a device pool is already registered");
    }
  }
  return CreateEngine(pool);
}

namespace {
Status CheckKind(Kind kind, const ModelLayout& layout) {
  if (!IsValidKind(static_cast<uint8_t>(kind))) {
    return Status::InvalidArgument("kind: " + std::to_string(static_cast<int>(kind)) +
                                   " (expected kv or mamba)");
  }
  if (kind == Kind::kMamba && !layout.has_ssm()) {
    return Status::InvalidArgument("kind: mamba (layout '" + layout.model + "' has no SSM layers)");
  }
  return Status::OK();
}
}  // namespace

StatusOr<uint64_t> StoreImpl::AllocateDeviceSlot(Kind kind) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  CACHEPAWL_RETURN_IF_ERROR(CheckKind(kind, layout_));
  if (!device_arena_) {
    return Status::FailedPrecondition("the store has no store-owned device pool");
  }
  return device_arena_->Allocate(kind);
}

Status StoreImpl::FreeDeviceSlot(Kind kind, uint64_t slot) {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  CACHEPAWL_RETURN_IF_ERROR(CheckKind(kind, layout_));
  if (!device_arena_) {
    return Status::FailedPrecondition("the store has no store-owned device pool");
  }
  return device_arena_->Free(kind, slot);
}

Status StoreImpl::CheckDeviceRecord(Kind kind, uint64_t slot, size_t bytes) const {
  CACHEPAWL_RETURN_IF_ERROR(CheckOpen());
  CACHEPAWL_RETURN_IF_ERROR(CheckKind(kind, layout_));
  if (!device_arena_) {
    return Status::FailedPrecondition("the store has no store-owned device pool");
  }
  CACHEPAWL_RETURN_IF_ERROR(device_arena_->CheckSlot(kind, slot));
  if (bytes != layout_.RecordBytes(kind)) {
    return Status::InvalidArgument("record: " + std::to_string(bytes) + " bytes (a " +
                                   std::string(KindName(kind)) + " record has " +
                                   std::to_string(layout_.RecordBytes(kind)) + ")");
  }
  return Status::OK();
}

Status StoreImpl::WriteDeviceRecord(Kind kind, uint64_t slot, std::span<const std::byte> record) {
  CACHEPAWL_RETURN_IF_ERROR(CheckDeviceRecord(kind, slot, record.size()));
  std::byte* dst = device_arena_->SlotRecord(kind, slot);
  if (!device_arena_->on_gpu()) {
    std::memcpy(dst, record.data(), record.size());
    return Status::OK();
  }
  return cuda::CopySync(dst, record.data(), record.size());
}

Status StoreImpl::ReadDeviceRecord(Kind kind, uint64_t slot, std::span<std::byte> record) {
  CACHEPAWL_RETURN_IF_ERROR(CheckDeviceRecord(kind, slot, record.size()));
  const std::byte* src = device_arena_->SlotRecord(kind, slot);
  if (!device_arena_->on_gpu()) {
    std::memcpy(record.data(), src, record.size());
    return Status::OK();
  }
  return cuda::CopySync(record.data(), src, record.size());
}

// ------------------------------------------------------------------------------------------
// Stats
// ------------------------------------------------------------------------------------------

StoreStats StoreImpl::Stats() const {
  StoreStats st;
  st.lookups = lookups_.load();
  st.lookup_pages = lookup_pages_.load();
  st.hit_pages = hit_pages_.load();
  st.kv_only_hit_pages = kv_only_pages_.load();
  st.lookup_latency = lookup_latency_.Summary();
  st.load_latency = load_latency_.Summary();
  st.save_latency = save_latency_.Summary();
  {
    std::lock_guard<std::mutex> lock(mu_);
    st.evictions = evictions_;
    st.loaded_entries = loaded_entries_;
    for (int t = 0; t < kNumTiers; ++t) {
      for (int k = 0; k < kNumKinds; ++k) {
        const uint64_t bytes = layout_.RecordBytes(static_cast<Kind>(k));
        st.loaded_bytes[t][k] = loaded_entries_[t][k] * bytes;
      }
    }
    st.saves = saves_;
    st.saved_pages = saved_pages_;
    st.saved_states = saved_states_;
    st.refreshed_pages = refreshed_;
    st.loads = loads_;
    st.prefetches = prefetches_;
    st.failed_operations = failed_ops_;
    st.no_space_errors = no_space_;
    st.checksum_failures = checksum_failures_;
    st.io_errors = io_errors_;
    if (closed_) return st;
    IndexStats is = index_->Stats();
    for (int t = 0; t < kNumTiers; ++t) {
      for (int k = 0; k < kNumKinds; ++k) {
        st.resident_entries[t][k] = is.located[k][t];
        st.resident_bytes[t][k] = is.located[k][t] * layout_.RecordBytes(static_cast<Kind>(k));
      }
    }
    if (engine_) {
      TransferEngineStats es = engine_->stats();
      st.bytes_device_to_host = es.bytes[static_cast<int>(Direction::kWriteBack)];
      st.bytes_host_to_device = es.bytes[static_cast<int>(Direction::kLoadBack)];
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
    }
  }
  {
    std::lock_guard<std::mutex> lock(drain_mu_);
    st.in_flight_operations = in_flight_;
  }
  return st;
}

}  // namespace cachepawl
