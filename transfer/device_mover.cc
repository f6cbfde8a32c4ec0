#include "transfer/device_mover.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/gpu_runtime.h"
#include "transfer/transfer_backend.h"
#include "transfer/transfer_plan.h"
#include "vocab/internal/fence_access.h"
#include "vocab/internal/stage_profile.h"

namespace cachepawl {

using internal::PlannedOperation;
using internal::RecordMap;

struct DeviceMover::DirectionQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<PlannedOperation>> pending;  // guarded by mu
  uint64_t next_seq = 0;                                  // guarded by mu
  bool stop = false;                                      // guarded by mu
  // The direction's dispatch turn: true while a thread (the dispatcher, or a submitting thread
  // dispatching inline) dispatches an operation; the next waits for it. Guarded by mu.
  bool dispatching = false;
  std::thread dispatcher;
  std::atomic<uint64_t> submitted{0}, completed_ok{0}, failed{0}, units{0}, bytes{0};
};

Status DeviceMoverOptions::Validate() const {
  CACHEPAWL_RETURN_IF_ERROR(cuda::ValidateGpuMode(mode, "device_mover.mode"));
  if (tile_bytes == 0 || tile_bytes % 4096 != 0 || tile_bytes > (uint64_t{1} << 30)) {
    return Status::InvalidArgument("device_mover.tile_bytes: " + std::to_string(tile_bytes) +
                                   " (must be a multiple of 4096 in [4096, 1 GiB])");
  }
  if (staging_chunks < 2 || staging_chunks > 64) {
    return Status::InvalidArgument(
        "device_mover.staging_chunks: " + std::to_string(staging_chunks) + " (must be in [2, 64])");
  }
  if (staging_bytes > (uint64_t{16} << 30) || staging_chunk_bytes() < tile_bytes) {
    return Status::InvalidArgument(
        "device_mover.staging_bytes: " + std::to_string(staging_bytes) +
        " (must be at most 16 GiB and hold staging_chunks = " + std::to_string(staging_chunks) +
        " chunks of at least tile_bytes = " + std::to_string(tile_bytes) + ")");
  }
  if (kernel_ctas > 65535) {
    return Status::InvalidArgument("device_mover.kernel_ctas: " + std::to_string(kernel_ctas) +
                                   " (must be <= 65535; 0 means one per SM)");
  }
  for (const auto& [name, us] :
       {std::pair<const char*, uint32_t>{"completion_spin_us", completion_spin_us},
        {"wait_spin_us", wait_spin_us}}) {
    if (us > 1000000) {
      return Status::InvalidArgument(std::string("device_mover.") + name + ": " +
                                     std::to_string(us) + " (must be at most 1000000: 1 s)");
    }
  }
  if (save_priority < -1000 || save_priority > 1000) {
    return Status::InvalidArgument("device_mover.save_priority: " + std::to_string(save_priority));
  }
  if (load_priority < -1000 || load_priority > 1000) {
    return Status::InvalidArgument("device_mover.load_priority: " + std::to_string(load_priority));
  }
  return Status::OK();
}

DeviceMover::DeviceMover(const ModelLayout& layout, const DevicePoolDescription& pool,
                         HostSlotMemory* host, const DeviceMoverOptions& options)
    : layout_(layout), pool_(pool), host_(host), options_(options) {}

StatusOr<std::unique_ptr<DeviceMover>> DeviceMover::Create(const ModelLayout& layout,
                                                           const DevicePoolDescription& pool,
                                                           HostSlotMemory* host,
                                                           const DeviceMoverOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  CACHEPAWL_RETURN_IF_ERROR(layout.Validate().WithContext("device mover layout"));
  if (host == nullptr) return Status::InvalidArgument("device mover: host arena is null");
  // The host arena holds this layout's records, or (a tensor-parallel group's store) the
  // group's, every rank's share of an entry in one (GroupLayout).
  const ModelLayout& held = host->layout();
  bool fits = held.Fingerprint() == layout.Fingerprint();
  if (!fits && layout.tp_size > 1) {
    auto group = GroupLayout(layout);
    fits = group.ok() && group->Fingerprint() == held.Fingerprint();
  }
  if (!fits) {
    return Status::InvalidArgument("device mover: the host arena's layout (" +
                                   held.FingerprintHex() + ") is neither the mover's (" +
                                   layout.FingerprintHex() + ") nor its tensor-parallel group's");
  }
  CACHEPAWL_RETURN_IF_ERROR(pool.Validate(layout));
  // kAuto follows the pool (a pool on a GPU passed Validate only with a GPU usable); kOn and kOff
  // must agree with it.
  bool gpu = pool.device >= 0;
  if (options.mode != DeviceMoverOptions::Mode::kAuto) {
    CACHEPAWL_ASSIGN_OR_RETURN(
        gpu, cuda::ResolveGpuMode(options.mode, "device_mover.mode", std::max(pool.device, 0)));
    if (!gpu && pool.device != -1) {
      return Status::InvalidArgument("device_mover.mode: kOff but device_pool.device is " +
                                     std::to_string(pool.device) +
                                     " (CPU mode needs a host-memory pool, device -1)");
    }
    if (gpu && pool.device < 0) {
      return Status::InvalidArgument(
          "device_mover.mode: kOn but device_pool.device is -1 (host memory)");
    }
  }
  if (gpu && !host->pinning()) {
    return Status::InvalidArgument("device mover: the device pool is on GPU " +
                                   std::to_string(pool.device) +
                                   " but the host arena is not pinned (opened in CPU mode)");
  }
  std::unique_ptr<DeviceMover> e(new DeviceMover(layout, pool, host, options));
  e->gpu_ = gpu;
  // A fault seam runs on the dispatcher thread (tests may hold an operation there while the
  // submitting thread goes on): operations are never dispatched inline while it is set.
  e->inline_dispatch_ = gpu && options.inline_dispatch && !options.fault_injection;
  const RecordMap* maps[kNumKinds] = {};
  for (Kind k : kAllKinds) {
    e->maps_[static_cast<int>(k)] =
        std::make_unique<RecordMap>(RecordMap::Build(layout, pool, k, options.tile_bytes));
    maps[static_cast<int>(k)] = e->maps_[static_cast<int>(k)].get();
  }
  if (gpu) {
    CACHEPAWL_ASSIGN_OR_RETURN(e->backend_, internal::MakeCudaBackend(maps, options, pool.device));
  } else {
    e->backend_ = internal::MakeCpuBackend(maps, options.staging_chunk_bytes());
  }
  e->inline_dispatch_ = e->inline_dispatch_ && e->backend_->EnqueuesOnly();
  for (int d = 0; d < 2; ++d) {
    e->queues_[d] = std::make_unique<DirectionQueue>();
    e->queues_[d]->dispatcher = std::thread([ptr = e.get(), d] { ptr->DispatchLoop(d); });
  }
  return e;
}

DeviceMover::~DeviceMover() {
  for (auto& q : queues_) {
    if (!q) continue;
    {
      std::lock_guard<std::mutex> lock(q->mu);
      q->stop = true;
    }
    q->cv.notify_all();
  }
  for (auto& q : queues_) {
    if (q && q->dispatcher.joinable()) q->dispatcher.join();
  }
  if (backend_) backend_->Drain();
  backend_.reset();
}

void DeviceMover::DispatchLoop(int direction) {
  DirectionQueue& q = *queues_[direction];
  backend_->OnDispatcherThread();
  for (;;) {
    std::unique_ptr<PlannedOperation> op;
    {
      std::unique_lock<std::mutex> lock(q.mu);
      q.cv.wait(lock, [&] { return !q.dispatching && (q.stop || !q.pending.empty()); });
      if (q.pending.empty()) return;  // stopping and drained
      op = std::move(q.pending.front());
      q.pending.pop_front();
      q.dispatching = true;
    }
    DispatchOne(std::move(op));
    {
      std::lock_guard<std::mutex> lock(q.mu);
      q.dispatching = false;
    }
  }
}

void DeviceMover::DispatchOne(std::unique_ptr<PlannedOperation> op) {
  profile::Add(profile::Stage::kMoverQueue, op->queued_at);
  if (options_.fault_injection && op->pre_status.ok()) {
    Status st = options_.fault_injection(op->op);
    if (!st.ok()) op->pre_status = st.WithContext("injected fault");
  }
  backend_->Dispatch(std::move(op));
}

Status DeviceMover::Validate(const Operation& op) const {
  if (op.direction != Direction::kSave && op.direction != Direction::kLoad) {
    return Status::InvalidArgument("operation.direction: " +
                                   std::to_string(static_cast<int>(op.direction)));
  }
  const bool saving = op.direction == Direction::kSave;
  if (op.per_layer_fences && saving) {
    return Status::InvalidArgument(
        "operation.per_layer_fences: true on a Save (only Load has per-layer fences)");
  }
  const Tier src_tier = saving ? Tier::kDevice : Tier::kHost;
  const Tier dst_tier = saving ? Tier::kHost : Tier::kDevice;
  // Runs once per unit on the submitting thread. A destination seen twice: a Load's are device
  // slots, bounded by the pool (a bit per slot of each kind); a Save's are host slots (sorted).
  std::array<std::vector<uint64_t>, kNumKinds> seen;
  std::vector<uint64_t> host_destinations;  // a Save's: (slot << 2) | kind
  if (saving) host_destinations.reserve(op.units.size());
  std::optional<size_t> repeat;  // the first unit whose destination an earlier unit has
  const auto at = [](size_t i) { return "units[" + std::to_string(i) + "]"; };
  for (size_t i = 0; i < op.units.size(); ++i) {
    const CacheTransferUnit& u = op.units[i];
    if (!IsValidKind(static_cast<uint8_t>(u.kind))) {
      return Status::InvalidArgument(at(i) + ".kind: " + std::to_string(static_cast<int>(u.kind)));
    }
    if (u.src.tier != src_tier || u.dst.tier != dst_tier) {
      return Status::InvalidArgument(
          at(i) + ": " + std::string(TierName(u.src.tier)) + "->" +
          std::string(TierName(u.dst.tier)) + " in a " + DirectionName(op.direction) +
          " (this mover moves " + std::string(TierName(src_tier)) + "->" +
          std::string(TierName(dst_tier)) + " only; disk units belong to the disk tier)");
    }
    const RecordMap& m = *maps_[static_cast<int>(u.kind)];
    const TierSlot& dev = saving ? u.src : u.dst;
    const TierSlot& host = saving ? u.dst : u.src;
    if (dev.slot >= m.num_slots) {
      return Status::InvalidArgument(at(i) + (saving ? ".src.slot: " : ".dst.slot: ") +
                                     std::to_string(dev.slot) + " (the device pool has " +
                                     std::to_string(m.num_slots) +
                                     (u.kind == Kind::kMamba ? " state slots)" : " KV pages)"));
    }
    Status st = host_->CheckSlot(host.slot, u.kind);
    if (!st.ok()) return st.WithContext(at(i) + (saving ? ".dst" : ".src"));
    const uint64_t payload = host_->SlotBytes(host.slot) - kRecordHeaderBytes;
    if (host.offset > payload || m.record_bytes > payload - host.offset) {
      return Status::InvalidArgument(at(i) + (saving ? ".dst.offset: " : ".src.offset: ") +
                                     std::to_string(host.offset) + " (a record of " +
                                     std::to_string(m.record_bytes) + " bytes there passes the " +
                                     std::to_string(payload) + "-byte payload of host slot " +
                                     std::to_string(host.slot) + ")");
    }
    if (saving) {
      host_destinations.push_back((u.dst.slot << 2) | static_cast<uint64_t>(u.kind));
    } else if (!repeat) {
      std::vector<uint64_t>& bits = seen[static_cast<int>(u.kind)];
      if (bits.empty()) bits.assign((m.num_slots + 63) / 64, 0);
      const uint64_t d = u.dst.slot;  // (< num_slots: checked above)
      if (bits[d / 64] & (uint64_t{1} << (d % 64))) repeat = i;
      bits[d / 64] |= uint64_t{1} << (d % 64);
    }
  }
  if (saving) {
    std::sort(host_destinations.begin(), host_destinations.end());
    const auto twice = std::adjacent_find(host_destinations.begin(), host_destinations.end());
    if (twice != host_destinations.end()) {
      const uint64_t slot = *twice >> 2;
      const Kind kind = static_cast<Kind>(*twice & 3);
      size_t count = 0;
      for (size_t i = 0; i < op.units.size() && !repeat; ++i) {
        if (op.units[i].kind == kind && op.units[i].dst.slot == slot && ++count == 2) repeat = i;
      }
    }
  }
  if (repeat) {
    // Named as a reader scanning the list would: the second unit with that destination.
    const size_t i = *repeat;
    return Status::InvalidArgument(at(i) + ".dst: " + std::string(TierName(dst_tier)) + " slot " +
                                   std::to_string(op.units[i].dst.slot) +
                                   " is the destination of an earlier unit too");
  }
  return Status::OK();
}

Fence DeviceMover::Submit(Operation op) {
  const size_t layers = op.per_layer_fences ? layout_.attention_layers.size() : 0;
  const uint64_t validate_start = profile::Now();
  Status st = Validate(op);
  profile::Add(profile::Stage::kMoverValidate, validate_start);
  if (!st.ok()) {
    invalid_operations_.fetch_add(1, std::memory_order_relaxed);
    FenceCompleter c(op.per_layer_fences ? layers : 0);
    Fence f = c.fence();
    c.Complete(std::move(st));
    return f;
  }
  const int d = static_cast<int>(op.direction);
  DirectionQueue& q = *queues_[d];
  if (op.units.empty()) {
    FenceCompleter c(layers);
    Fence f = c.fence();
    c.Complete(Status::OK());
    return f;
  }
  const uint64_t plan_start = profile::Now();
  auto planned = std::make_unique<PlannedOperation>();
  std::vector<internal::HostPlacement> placements(op.units.size());
  for (size_t i = 0; i < op.units.size(); ++i) {
    const TierSlot& host = op.direction == Direction::kSave ? op.units[i].dst : op.units[i].src;
    placements[i] = {host_->SlotPayload(host.slot) + host.offset, host_->RegionOf(host.slot)};
  }
  const RecordMap* maps[kNumKinds] = {};
  for (int k = 0; k < kNumKinds; ++k) maps[k] = maps_[k].get();
  internal::PlanOperation(op, placements, maps, options_.staging_chunk_bytes(), planned.get());
  staged_chunks_.fetch_add(planned->chunks.size(), std::memory_order_relaxed);
  if (plan_start != 0) {
    uint64_t runs = planned->direct.size();
    for (const auto& chunk : planned->chunks) runs += chunk.copies.size();
    profile::Count(profile::Counter::kMoverCopyRuns, runs);
    profile::Count(profile::Counter::kMoverChunks, planned->chunks.size());
    profile::Count(profile::Counter::kMoverUnits, planned->units);
    profile::Add(profile::Stage::kMoverPlan, plan_start);
    planned->queued_at = profile::Now();
  }
  planned->per_layer = op.per_layer_fences;
  planned->num_layers = layers;
  planned->completer = FenceCompleter(layers);
  Fence fence = planned->completer.fence();
  const uint64_t units = planned->units, bytes = planned->bytes;
  planned->before_complete = [&q, units, bytes](const Status& s) {
    if (s.ok()) {
      q.completed_ok.fetch_add(1, std::memory_order_relaxed);
      q.units.fetch_add(units, std::memory_order_relaxed);
      q.bytes.fetch_add(bytes, std::memory_order_relaxed);
    } else {
      q.failed.fetch_add(1, std::memory_order_relaxed);
    }
  };
  planned->op = std::move(op);
  if (gpu_ && options_.wait_spin_us > 0) {
    internal::FenceAccess::SetWaitSpin(fence, options_.wait_spin_us);
  }
  bool inline_turn = false;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    planned->seq = ++q.next_seq;
    std::function<Status(void*)> waiter = backend_->StreamWaiter(planned->direction, planned->seq);
    if (waiter) internal::FenceAccess::SetStreamWaiter(fence, std::move(waiter));
    q.submitted.fetch_add(1, std::memory_order_relaxed);
    inline_turn =
        inline_dispatch_ && !q.dispatching && q.pending.empty() && backend_->CanDispatchHere();
    if (inline_turn) {
      q.dispatching = true;
    } else {
      q.pending.push_back(std::move(planned));
    }
  }
  if (!inline_turn) {
    q.cv.notify_one();
    return fence;
  }
  // This thread holds the turn: nothing of this direction is queued before the operation. The
  // turn is handed back however DispatchOne ends (an exception must not wedge the direction).
  struct HandBack {
    DirectionQueue& q;
    ~HandBack() {
      bool more = false;
      {
        std::lock_guard<std::mutex> lock(q.mu);
        q.dispatching = false;
        more = !q.pending.empty() || q.stop;
      }
      if (more) q.cv.notify_one();
    }
  } hand_back{q};
  DispatchOne(std::move(planned));
  return fence;
}

DeviceMoverStats DeviceMover::stats() const {
  DeviceMoverStats s;
  for (int d = 0; d < 2; ++d) {
    const DirectionQueue& q = *queues_[d];
    s.submitted[d] = q.submitted.load(std::memory_order_relaxed);
    s.completed_ok[d] = q.completed_ok.load(std::memory_order_relaxed);
    s.failed[d] = q.failed.load(std::memory_order_relaxed);
    s.units[d] = q.units.load(std::memory_order_relaxed);
    s.bytes[d] = q.bytes.load(std::memory_order_relaxed);
  }
  s.invalid_operations = invalid_operations_.load(std::memory_order_relaxed);
  s.staged_chunks = staged_chunks_.load(std::memory_order_relaxed);
  s.execution_errors = backend_->execution_errors();
  s.kernel_launches = backend_->kernel_launches();
  s.copy_calls = backend_->copy_calls();
  return s;
}

}  // namespace cachepawl
