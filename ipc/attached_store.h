// AttachedStore: the Store of a process attached to an owner (Store::Attach). Every call that
// reads or changes the cache (Lookup, Lock, Load, Save, StartPrefetch, Stats) is one round trip
// to the owner over its socket; the bytes move here: the owner's host arena is mapped into this
// process (and registered with CUDA in GPU mode), and this process's own device mover copies
// between its device pool and the host slots the owner names (ipc/protocol.h, Copy). Hashing
// runs here (the owner's hash chain: the same code and layout).
//
// When the owner goes: its socket ends (or, for an owner that stops answering, a call waits
// AttachOptions::call_timeout_ms, a pending fence owner_timeout_ms): every pending call and fence
// fails with Unavailable, and so does every later call; Unlock marks its lock released (the
// owner that held it is gone) and returns Unavailable. Attach again once an owner serves.
//
// Thread safety: as Store. The owner's messages are read by a caller waiting for its answer or,
// when none waits, by a reader thread; fences fire on those or on the device mover's threads.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "index/page_hasher.h"
#include "ipc/channel.h"
#include "ipc/protocol.h"
#include "store/deferred_stream_waiter.h"
#include "store/store.h"
#include "tiers/device_pool_arena.h"
#include "tiers/host_arena_view.h"
#include "transfer/device_mover.h"
#include "vocab/attach_options.h"

namespace cachepawl::ipc {

class AttachedStore final : public Store {
 public:
  static StatusOr<std::unique_ptr<Store>> Attach(const AttachOptions& options);
  ~AttachedStore() override;

  const ModelLayout& layout() const override { return layout_; }
  bool gpu_mode() const override;
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

 private:
  class PrefetchImpl;
  // A Load's, Save's or Prefetch's fence, until the owner's FenceDone.
  struct PendingFence {
    std::shared_ptr<FenceCompleter> user;
    std::shared_ptr<DeferredStreamWaiter> deferred;  // a GPU-mode Load's, until its Copy came
    Fence last_copy;                                 // the latest local copy of the call
    bool has_copy = false;
    // A Load: its fence fires when its copy has landed (the owner's fence of a Load fires with
    // its copy's status; FenceDone only brings the errors of a Load whose copy never came).
    bool complete_on_copy = false;
    uint64_t start_ns = 0;  // profile::Now() at the call (stage profiling on), else 0
  };
  struct PendingCall {
    std::atomic<bool> done{false};  // set under mu_; read without it while spinning
    Status status;
    std::string body;
  };
  explicit AttachedStore(const AttachOptions& options) : options_(options) {}
  Status Connect();
  // One call: sends `payload` (and `pass_fd`, when >= 0) and waits for the Reply (at most
  // call_timeout_ms).
  StatusOr<std::string> Call(Msg type, std::string_view payload, int pass_fd = -1) const;
  // Gives the owner a hash area (protocol.h, HashArea); without one (the owner refused it),
  // lookups carry their hashes over the socket.
  // Errors: only a connection that failed meanwhile (Unavailable).
  Status SetUpHashArea();
  // How long a reading thread polls for an answer that is due (AttachOptions::inflight_spin_us,
  // only with GPU copies) before it sleeps.
  uint32_t SpinUs() const;
  // A free slot of the hash area (then held until ReleaseSlot), or -1.
  int TakeSlot();
  void ReleaseSlot(int slot);
  // The background reader: while fences are pending and no caller reads, dispatches what comes
  // (FenceDone, Copy of Loads that read from disk first); pings a silent owner while operations
  // are pending; ends when the store closes or the owner is dropped.
  void ReaderLoop();
  // Reads one message (the caller holds the reader's role) and dispatches it: TimedOut when
  // none came; on a broken channel the owner is dropped.
  Status ReadOne(int timeout_ms, uint32_t spin_us) const;
  void Dispatch(Frame& frame) const;
  void RunCopy(uint64_t op_id, CopyOrder order);
  // Marks the owner gone: every pending call and fence fails with `why`. Takes mu_.
  void Drop(const Status& why) const;
  Status CheckUsable() const;  // Unavailable once dropped; FailedPrecondition once closed
  uint64_t NewFence(std::shared_ptr<FenceCompleter> user,
                    std::shared_ptr<DeferredStreamWaiter> deferred, bool complete_on_copy,
                    uint64_t start_ns = 0);
  void ForgetFence(uint64_t id);
  Status CheckPages(std::string_view what, uint64_t pages) const;
  // One Load call (Load splits a long one into pieces: AttachOptions::load_split_pages).
  StatusOr<Fence> LoadPiece(const PrefixMatch& match, std::span<const uint64_t> device_pages,
                            std::optional<uint64_t> device_state_slot, const LoadOptions& opts);
  // A fence that fires once every one of `parts` fired, with the first error; its StreamWait
  // waits for each of them.
  static Fence AllOf(std::vector<Fence> parts);
  // A call's explicit rank (SaveRequest::tp_rank, LoadOptions::tp_rank): none or this
  // process's; else InvalidArgument naming `field`.
  Status CheckRank(std::string_view field, std::optional<uint32_t> rank) const;
  Status CreateMover(const DevicePoolDescription& pool);

  const AttachOptions options_;
  ModelLayout layout_;  // a group store's: this process's rank's (tp_rank)
  // Where this rank's share starts in a group's host record, per kind (0 for rank 0 and
  // tp_size 1); set at attach.
  std::array<uint64_t, kNumKinds> rank_offset_{};
  std::unique_ptr<PageHasher> hasher_;
  uint64_t max_prompt_tokens_ = 0;
  int64_t owner_pid_ = 0;
  std::shared_ptr<Channel> channel_;  // (a Prefetch handle keeps it for Cancel)
  std::unique_ptr<HostArenaView> view_;
  std::unique_ptr<DevicePoolArena> device_arena_;
  bool gpu_ = false;  // this client copies with a GPU

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;         // calls done, the reader's role free, drains
  mutable std::condition_variable reader_cv_;  // the background reader: fences pending, or the end
  mutable Status dropped_;        // guarded by mu_: why the owner is gone (OK while connected)
  bool closed_ = false;           // guarded by mu_
  mutable uint64_t next_id_ = 1;  // guarded by mu_
  mutable std::unordered_map<uint64_t, std::shared_ptr<PendingCall>> calls_;  // guarded by mu_
  mutable std::unordered_map<uint64_t, PendingFence> fences_;                 // guarded by mu_
  std::shared_ptr<DeviceMover> mover_;  // guarded by mu_ (copies hold their own reference)
  bool registering_ = false;            // guarded by mu_
  uint64_t copies_in_flight_ = 0;       // guarded by mu_ (UnregisterDevicePool waits for 0)
  // A thread holds the reader's role: written under mu_ (read without it as a hint).
  mutable std::atomic<bool> reading_{false};
  mutable std::atomic<int64_t> last_heard_ns_{0};
  // The hash area: mapped at attach (before the reader starts), unmapped by the destructor.
  char* area_ = nullptr;
  HashArea area_shape_;
  uint64_t area_free_ = 0;  // a bit per free slot; guarded by mu_
  std::thread reader_;
};

}  // namespace cachepawl::ipc
