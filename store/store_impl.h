// StoreImpl: the Store (store/store.h) over the prefix index, the host arena, the device mover
// and the disk mover. It orchestrates; each concern lives in its own file:
//
//   store_impl.cc           open and close, Lookup, Lock, the device pool, Stats
//   store_save.cc           Save: device -> host (host slots allocated as runs)
//   store_load.cc           Load and StartPrefetch: disk -> host -> device
//   store_fill_plan.cc      what a Load or a StartPrefetch reads into host memory (one planner)
//   host_space.h            HostSpace: host slots allocated as runs, eviction in the policy's
//                           order, waiting for room, evicting ahead (a class of its own)
//   store_host_victims.cc   the store's side of host eviction: what becomes of each victim
//   disk_cascade.h          DiskCascade: host -> disk writes by policy (write-through,
//                           selective, write-on-evict), asynchronous, with disk eviction and one
//                           retry when the disk is full (a class of its own)
//   store_recovery.cc       the index rebuilt from the disk catalog at open
//   remote_reader.h         RemoteReader: Lookup's look past the local match, the reads of
//                           remote records and the threads they run on (a class of its own)
//   store_remote.cc         the store's side of remote reads: publishing what arrived
//   remote_writer.h         RemoteWriter: the remote writes by policy and on eviction, its
//                           thread, queue and counters (a class of its own)
//   tier_write_policy.h     when an entry goes to disk or the remote tier (testable alone)
//
// Locking. One mutex (mu_) serializes the store's bookkeeping: host slot allocation, eviction
// decisions, index mutations and the in-flight sets. No thread waits on I/O or on a transfer
// while holding it: disk writes are submitted (and checksummed) on the disk submitter thread,
// write-on-evict is a disk write after which the entry leaves host memory, and an allocation that
// must wait for space waits in HostSpace, which releases mu_. Lookup takes no store lock (the
// index is thread-safe).
//
// Completion. The device and disk movers fire their fences on their own threads; the store
// never does bookkeeping there. Every fence the store waits for hands a task to the completion
// worker (one thread), which takes mu_, publishes locations (invariant 4: after the bytes
// landed), unpins, starts the next stage, and then completes the fence the serving engine holds. So
// when a fence returned by Save or Load fires, the index already says what it did. Per-layer fences
// are forwarded by callbacks on the device mover's completion thread (no thread per Load).
//
// Entries being filled (a host slot allocated, its bytes not there yet) are not in the index's
// locations; they are in filling_ so that a second Save of the same key is a refresh, a second
// Load or Prefetch does not read them again, and a Lookup cannot see them.
//
// The disk tier (tiers/disk_tier.h) is the truth of which records are on disk; the index's Disk
// locations are derived from it by one rule: a Disk location is set only from a write the tier
// committed (DiskCascade), and cleared (ForgetDiskLocked) before the tier removes the record
// (the cascade's victims: the removal follows outside mu_, and until it has, no write of the key
// starts and finds the old record), or when a read found the record gone
// (DiskRecordResult::gone: dropped by a failed verification, or not there).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "index/page_hasher.h"
#include "index/prefix_index.h"
#include "store/deferred_stream_waiter.h"
#include "store/disk_cascade.h"
#include "store/entry_key.h"
#include "store/eviction_order.h"
#include "store/host_space.h"
#include "store/remote_reader.h"
#include "store/remote_writer.h"
#include "store/store.h"
#include "store/store_counters.h"
#include "store/store_faults.h"
#include "store/task_queue.h"
#include "store/tier_write_policy.h"
#include "store/tp_partials.h"
#include "tiers/device_pool_arena.h"
#include "tiers/disk_record_copy.h"
#include "tiers/host_arena.h"
#include "tiers/remote_tier.h"
#include "transfer/device_mover.h"
#include "transfer/disk_mover.h"
#include "vocab/device_pool.h"
#include "vocab/internal/stage_profile.h"

namespace cachepawl {

// Rebuilds `index` from the records `disk` holds (parents before children); removes from the
// disk tier the records that cannot be reached (a lost parent, a state without its page).
// Returns how many were removed. (store_recovery.cc)
StatusOr<size_t> RebuildIndexFromDisk(DiskTier& disk, PrefixIndex& index,
                                      const ModelLayout& layout);

class StoreImpl final : public Store, private HostSpace::Victims, private DiskCascade::Hooks {
 public:
  ~StoreImpl() override { (void)Close(); }

  // `host_shared`: the host arena in shared memory (HostArenaOptions::shared), for an owner
  // store that attached processes map (ipc/).
  static StatusOr<std::unique_ptr<Store>> Open(const StoreOptions& options,
                                               StoreFaultInjection faults = {},
                                               bool host_shared = false);

  const ModelLayout& layout() const override { return layout_; }
  // The device mover's mode once a pool is registered (or store-owned); before that, the mode a
  // device pool on a GPU would get (the host tier is pinned: a GPU is usable).
  bool gpu_mode() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;  // (Close releases the tiers and the mover after setting it)
    if (mover_ready_) return mover_->gpu_mode();
    return host_->pinning();
  }
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
  Status UnregisterDevicePool() override;
  StatusOr<uint64_t> AllocateDeviceSlot(Kind kind) override;
  Status FreeDeviceSlot(Kind kind, uint64_t slot) override;
  Status WriteDeviceRecord(Kind kind, uint64_t slot, std::span<const std::byte> record) override;
  Status ReadDeviceRecord(Kind kind, uint64_t slot, std::span<std::byte> record) override;
  StoreStats Stats() const override;
  Status Close() override;

  // ---- For an owner store (ipc/store_server.h): another process's transfers. ----
  // Load and Save whose device <-> host copies go to `via` (null: the registered device pool's
  // mover, as Load and Save do) instead of this process's mover.
  StatusOr<Fence> LoadVia(std::shared_ptr<TransferQueue> via, const PrefixMatch& match,
                          std::span<const uint64_t> device_pages,
                          std::optional<uint64_t> device_state_slot, const LoadOptions& opts);
  StatusOr<Fence> SaveVia(std::shared_ptr<TransferQueue> via, const SaveRequest& request);
  // The host arena (its memfd with StoreOptions::host_shared). Valid until Close.
  const HostArena& host_arena() const { return *host_; }
  const StoreOptions& options() const { return options_; }

 private:
  using SteadyClock = std::chrono::steady_clock;
  class PrefetchImpl;
  // One host slot being filled from disk or the remote tier for a Load or Prefetch.
  struct HostFill {
    EntryKey key;
    size_t page = 0;            // its page in the match (a remote fill joins by hashes[0..page])
    uint64_t depth_tokens = 0;  // its depth: (page + 1) pages
    HostSlotId slot = 0;        // valid when has_slot
    bool has_slot = false;
    uint64_t device_slot = 0;  // Load: where it lands on the device
    bool remote = false;       // read from the remote tier, not from disk
  };
  // One unit of a Load whose source is a host slot located in the index.
  struct HostSource {
    EntryKey key;
    HostSlotId slot = 0;
    uint64_t device_slot = 0;
  };
  StoreImpl() = default;

  // ---- store_impl.cc ----
  Status CheckOpen() const;
  // OK when a call naming `count` tokens (or pages, with `in_pages`) stays within
  // max_prompt_tokens; else InvalidArgument "<what>: <count> tokens (more than
  // StoreOptions.max_prompt_tokens <max>, ...)" ("<count> pages of <p> tokens" for pages).
  // Lock-free: reads options_ and layout_ only.
  Status CheckPromptSize(std::string_view what, uint64_t count, bool in_pages) const;
  Status OpenTiers();
  Status CreateMover(const DevicePoolDescription& pool);
  // The device mover a Load or Save uses (a copy: it outlives UnregisterDevicePool):
  // FailedPrecondition when the store is closed or has no device pool. Requires mu_.
  StatusOr<std::shared_ptr<DeviceMover>> UsableMoverLocked() const;
  // Post `fn(status)` to the completion worker when `fence` fires. With a profile (see
  // vocab/internal/stage_profile.h; submitted_at != 0): `copy` gets submitted_at -> fired,
  // `hop` fired -> fn runs, `finish` fn's own time.
  struct WhenDoneProfile {
    profile::Stage copy, hop, finish;
    uint64_t submitted_at = 0;
  };
  void WhenDone(const Fence& fence, std::function<void(const Status&)> fn) override;
  void WhenDone(const Fence& fence, const WhenDoneProfile& prof,
                std::function<void(const Status&)> fn);
  void OperationStarted() override;
  void OperationFinished() override;

  // ---- store_host_victims.cc: the store's side of host eviction (HostSpace::Victims) ----
  // A host victim: kSkip while a Save still publishes it; kWriteToDisk when the disk policy
  // writes it on eviction (admitted, no disk copy, no removal pending, not a window no state
  // needs, its earlier write did not fail); kKeepForWrite while its remote write-on-evict is
  // queued or under way; kDrop otherwise.
  HostSpace::Verdict DecideLocked(const EntryKey& key, const EntryInfo& e,
                                  size_t* writes_started) override;
  size_t StartEvictWritesLocked(const std::vector<EntryKey>& keys) override {
    return cascade_ ? cascade_->StartWritesLocked(keys, /*evict_after=*/true) : 0;
  }
  uint64_t EvictWritesInFlightLocked() const override {
    return cascade_ ? cascade_->EvictWritesInFlightLocked() : 0;
  }
  void DropLocked(const EntryKey& key) override { DropHostCopyLocked(key); }
  // Write-on-evict writes (disk or remote) or loads holding host pins are in flight.
  bool SpaceMayComeLocked() const override;
  uint64_t ReclaimLocked(uint64_t bytes) override;
  // Frees the host copy of `key` (its location, its slot) and prunes what no tier holds.
  void DropHostCopyLocked(const EntryKey& key);
  // Forgets `key`'s Disk location (after the disk tier dropped or evicted the record).
  void ForgetDiskLocked(const EntryKey& key) override;
  // Removes index entries that no tier holds any more, from `hash` up toward the root.
  void PruneLocked(const PageHash& hash);

  // ---- DiskCascade::Hooks (the cascade's side of the store) ----
  void CopyDiskVictimsToRemote(const std::vector<DiskKey>& keys) override {
    remote_writer_->CopyDiskVictims(disk_->tier(), keys);
  }
  void SpaceChangedLocked() override { host_space_->NotifyLocked(); }
  bool ClosedLocked() const override { return closed_; }

  // ---- store_save.cc ----
  struct SaveWant {
    EntryKey key;
    uint64_t device_slot;
  };
  // One Save's transfer operations: the outer fence fires when the last of them (and the
  // submitting thread, which holds one share until it has submitted them all) is done. The
  // fields are guarded by the store's mu_, except `outer` and `start`.
  struct SaveProgress {
    FenceCompleter outer;
    SteadyClock::time_point start;
    size_t remaining = 1;
    Status first_error;
    std::vector<EntryKey> held;  // published entries kept in filling_ until the end
    uint32_t tp_rank = 0;        // a group store: the rank whose shares the Save copies
    // One share done with `s`. The last one releases `held` and returns true: the caller
    // then calls Fire() after releasing mu_. Requires mu_.
    bool ReleaseLocked(const Status& s, StoreImpl* store);
    // Records the latency, fires the outer fence, ends the store's operation.
    void Fire(StoreImpl* store);
  };
  // Whether `key` is in some tier or being filled. Requires mu_.
  bool CachedLocked(const EntryKey& key);
  // Allocates host slots (as runs) for `part` and builds its operation; entries another Save
  // cached meanwhile are dropped from it. On error nothing of `part` is kept and the chain's
  // unfilled entries are pruned. Takes mu_.
  // Counts the operation in `progress` when it has units.
  Status PrepareSaveChunk(std::span<const SaveWant> part, std::span<const PageHash> chain,
                          SaveProgress* progress, Operation* op,
                          std::vector<std::pair<EntryKey, HostSlotId>>* pending);
  // PrepareSaveChunk for a tensor-parallel group's store: a new entry gets a slot for the group's
  // record (every share) and starts partial; a partial one this rank has not saved gets its share
  // copied into its slot (at TpShareOf(kind, tp_rank) * layout_.RecordBytes(kind)), unless another
  // rank of the share copied it (TpPartials::JoinLocked). Requires mu_ (`lock`; waiting for room
  // releases it).
  Status PrepareGroupSaveChunkLocked(std::span<const SaveWant> part,
                                     std::span<const PageHash> chain, SaveProgress* progress,
                                     std::unique_lock<std::mutex>& lock, Operation* op,
                                     std::vector<std::pair<EntryKey, HostSlotId>>* pending);
  // Drops the partial entries that timed out (StoreOptions::tp_partial_timeout_ms): their slots
  // freed, their chains pruned. Requires mu_.
  void ExpirePartialsLocked();
  // When `inner` fires: FinishSaveLocked(pending) and progress->ReleaseLocked under mu_.
  void FinishSaveWhenDone(const Fence& inner, std::vector<std::pair<EntryKey, HostSlotId>> pending,
                          std::shared_ptr<SaveProgress> progress);
  // A Save's transfer finished with `s`: publishes the host locations of `pending` (or frees
  // their slots when `s` failed), hands them to the disk cascade by policy. Requires mu_; never
  // blocks (it may run on the device mover's completion thread).
  void FinishSaveLocked(const std::vector<std::pair<EntryKey, HostSlotId>>& pending,
                        const Status& s, SaveProgress* progress);

  // ---- store_remote.cc ----
  // Connects the remote tier (StoreOptions::remote) and starts the writer by policy.
  Status OpenRemote();
  // Stops the writer and the reader, before the tiers go: queued writes still go out for up to
  // remote.deadline_ms (a dead cluster cannot hold Close longer than about twice that), the
  // rest are dropped, counted.
  void CloseRemote();
  // The remote writes by policy (store/remote_writer.h does them; these do nothing without a
  // writer). Require mu_.
  void StartRemoteWritesLocked(const std::vector<EntryKey>& keys) {
    if (remote_writer_) remote_writer_->StartWritesLocked(keys);
  }
  bool RemoteWriteOnEvictLocked(const EntryKey& key, const TierLocations& loc, bool useless,
                                size_t* writes_started) {
    return remote_writer_ && remote_writer_->WriteOnEvictLocked(key, loc, useless, writes_started);
  }
  bool RemoteWantsDiskVictimLocked(const EntryKey& key, const TierLocations& loc) override {
    return remote_writer_ && remote_writer_->WantsDiskVictimLocked(key, loc);
  }
  // Lookup: extends a local match with what the remote tier holds past it (one existence batch
  // within lookup_deadline_ms; an unreachable cluster is a miss). Takes no store lock.
  void ExtendMatchFromRemote(PrefixMatch& m);
  // The tier a match reported for `key` at `page` (kDevice when it reported none).
  static Tier MatchTier(const PrefixMatch& match, const EntryKey& key, size_t page);
  // Reads remote fills (host slots allocated, keys in filling_) and publishes the verified ones
  // in host memory, pinned for transfer, after their chains (hashes[0..page]) joined the index.
  // Failed ones: slot freed, chain pruned, index in *failed; returns the first error. Blocks on
  // the remote tier: runs on remote_reader_, never under mu_ (takes it to publish).
  Status FetchRemoteFills(std::span<const PageHash> hashes, const std::vector<HostFill>& fills,
                          std::vector<size_t>* failed);
  RemoteStats RemoteStatsLocked() const;

  // ---- store_fill_plan.cc ----
  // What a Load or a Prefetch asks for: `key`, at `page` of the match (depth page + 1 pages),
  // to land in `device_slot` (Load).
  struct FillWant {
    EntryKey key;
    size_t page = 0;
    uint64_t device_slot = 0;
  };
  enum class FillMode { kLoad, kPrefetch };
  struct FillPlan {
    std::vector<HostSource> sources;  // Load: host copies, pinned for transfer
    std::vector<HostFill> fills;      // in filling_, each with its host slot
  };
  // Plans `wants` (the one planner of Load and StartPrefetch). Per entry: a host copy is a
  // source, pinned (Load; a Prefetch skips it); an entry on disk, or (by the match) only in the
  // remote tier, is a fill, marked in filling_, its host slot allocated with the others of its
  // kind as runs; an entry being filled is Busy (Load) or skipped; anything else is NotFound
  // (Load) or skipped. A Load counts its hits and loaded entries. On error nothing is kept:
  // pins released, fills abandoned. Requires mu_ (held through `lock`; released while waiting
  // for host space).
  Status PlanFillsLocked(const PrefixMatch& match, std::span<const FillWant> wants, FillMode mode,
                         std::unique_lock<std::mutex>& lock, FillPlan* plan);
  // A tensor-parallel group's Load: every rank loads the same entries at about the same time,
  // and the first rank's Load reads the disk hits into host memory; the others wait (mu_
  // released, at most host_space_wait_ms) until no entry they want is being filled, instead of
  // failing Busy. Requires mu_ (`lock`).
  void WaitForOtherFillsLocked(std::span<const FillWant> wants, std::unique_lock<std::mutex>& lock);
  // Fills that will not be read: out of filling_, their slots (if any) freed. Requires mu_.
  void AbandonFillsLocked(std::span<const HostFill> fills);
  // Unpins the host copies the fills published (every fill not in `failed`). Takes mu_.
  void UnpinFilled(std::span<const HostFill> fills, std::span<const size_t> failed);
  // Appends the fills not in `failed` to `sources` (with their device slots).
  static void AddFilledSources(std::span<const HostFill> fills, std::span<const size_t> failed,
                               std::vector<HostSource>* sources);
  // Moves the remote fills out of `*fills` (the disk fills stay) and returns them.
  static std::vector<HostFill> SplitRemoteFills(std::vector<HostFill>* fills);
  static std::vector<DiskRead> DiskReadsOf(std::span<const HostFill> fills);

  // ---- store_load.cc ----
  // A Load past its index stage: host sources pinned, fills' host slots allocated.
  struct PendingLoad {
    std::shared_ptr<TransferQueue> mover;
    std::vector<HostSource> sources;
    std::vector<HostFill> fills;  // disk reads still to make
    std::shared_ptr<FenceCompleter> outer;
    SteadyClock::time_point start;
    std::shared_ptr<DeferredStreamWaiter> deferred;
    bool per_layer = false;
    uint32_t tp_rank = 0;  // a group store: the rank whose shares go to the device
  };
  // Reads the disk fills (none: goes on at once), then copies everything host -> device.
  void LoadFromDisk(PendingLoad load);
  // Unpins the sources (the caller freed what was not published), fires the fence with `why`.
  void FailLoad(PendingLoad& load, const Status& why);
  void FinishDiskFills(const std::vector<HostFill>& fills, const Status& disk_status,
                       const std::shared_ptr<const DiskBatchResult>& result,
                       std::vector<size_t>* failed);
  // `deferred`: set for loads that read from disk first (see DeferredStreamWaiter).
  void SubmitHostToDevice(const std::shared_ptr<TransferQueue>& mover,
                          std::vector<HostSource> sources, std::shared_ptr<FenceCompleter> outer,
                          bool per_layer, SteadyClock::time_point start,
                          std::shared_ptr<DeferredStreamWaiter> deferred, uint32_t tp_rank);
  void CountHitLocked(const EntryKey& key);

  StoreOptions options_;
  ModelLayout layout_;  // a rank's records: the API's, the device pool's and the mover's
  // The tiers' records (host, disk, remote): every share of an entry in one (GroupLayout,
  // vocab/model_layout.h); layout_ itself when tp_size is 1.
  ModelLayout tier_layout_;
  std::unique_ptr<PageHasher> hasher_;
  std::unique_ptr<PrefixIndex> index_;
  std::unique_ptr<HostArena> host_;
  std::unique_ptr<DiskMover> disk_;
  std::unique_ptr<DevicePoolArena> device_arena_;
  // Set by Open (store-owned pool) or RegisterDevicePool, dropped by UnregisterDevicePool, under
  // mu_ (with mover_ready_). Load and Save copy it under mu_ and use only their copy, so a
  // mover outlives the operations that use it (UnregisterDevicePool waits for them).
  std::shared_ptr<DeviceMover> mover_;
  StoreFaultInjection faults_;  // tests only (store/store_faults.h); set by Open
  std::unique_ptr<TaskQueue> worker_;
  // Host -> disk (only with a disk tier; after the host space); its state is guarded by mu_.
  std::unique_ptr<DiskCascade> cascade_;
  // Host slots and host eviction (after OpenTiers: it uses host_ and index_); its state is
  // guarded by mu_.
  std::unique_ptr<HostSpace> host_space_;

  mutable std::mutex mu_;
  bool closed_ = false;       // guarded by mu_
  bool mover_ready_ = false;  // guarded by mu_
  bool registering_ = false;  // Register/UnregisterDevicePool at work; guarded by mu_
  bool host_shared_ = false;  // set by Open
  std::unordered_set<EntryKey, EntryKeyHasher> filling_;  // guarded by mu_
  // A tensor-parallel group's store (layout tp_size > 1): the entries whose shares have not all
  // been saved yet (also in filling_); null otherwise. Guarded by mu_.
  std::unique_ptr<TpPartials> partials_;
  uint64_t loads_pinning_host_ = 0;  // loads holding host pins; guarded by mu_
  // What the store counts of its own calls (store/store_counters.h: its event counters are
  // guarded by mu_, its lookup counters and latencies need no lock).
  StoreCounters counters_;
  EvictionPolicy eviction_policy_ = EvictionPolicy::kHybrid;  // set by Open

  // The remote tier (null without StoreOptions::remote). The readers run remote fetches; the
  // writer (null when this store writes nothing) its writes; its state is guarded by mu_.
  std::unique_ptr<RemoteTier> remote_;
  std::unique_ptr<RemoteReader> remote_reader_;
  std::unique_ptr<TierWritePolicy> remote_policy_;  // null when this store writes nothing
  std::unique_ptr<RemoteWriter> remote_writer_;

  mutable std::mutex drain_mu_;
  std::condition_variable drain_cv_;
  uint64_t in_flight_ = 0;  // guarded by drain_mu_
};

}  // namespace cachepawl
