// The CUDA backend of the device mover (see transfer/device_mover.h for the data path).
//
// Per direction: a copy stream and a kernel stream (non-blocking, the direction's priority), a
// device staging buffer cut into a ring of chunks, and events that hand each chunk between the
// kernel and the copies: Save gathers into chunk c on the kernel stream while the copy
// stream drains earlier chunks to the host; Load fills chunk c from the host while the kernel
// stream scatters earlier chunks. A chunk is reused once its previous user has finished.
// Dispatch only enqueues (it never waits on the GPU; the dispatcher or a submitting thread calls
// it, one at a time per direction); a completion thread per direction waits for each operation's
// final event in order and fires its fence.
//
// GPU-side fence signal: one pinned, mapped 32-bit counter per direction. Operation `seq` ends
// with cuStreamWriteValue32(counter, seq) on the direction's last stream; Fence::StreamWait
// enqueues cuStreamWaitValue32(counter >= seq) (a cyclic comparison) on the caller's stream.
// StreamWait may be called before the operation is dispatched: it then blocks the CPU until the
// dispatcher has enqueued the operation (it never waits on the GPU, so this is short), because
// a semaphore wait enqueued ahead of its producer can deadlock when the two streams share a
// hardware queue (seen on an H100: the waiting stream never ran). Driver entry points are fetched
// with cudaGetDriverEntryPointByVersion (libcuda is never linked). Without them, StreamWait blocks
// the CPU until the fence fires and the completion thread writes the counter.
#include "transfer/device_mover.h"
#include "transfer/transfer_backend.h"

#if CACHEPAWL_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/cuda_resources.h"
#include "cuda/cuda_status.h"
#include "cuda/transfer_kernels.h"
#include "vocab/internal/stage_profile.h"

namespace cachepawl::internal {

namespace {

// Driver API types, declared here so that no driver header or library is needed.
using CUresult = int;
using CUdeviceptr = unsigned long long;
using StreamValue32Fn = CUresult (*)(void* stream, CUdeviceptr addr, uint32_t value,
                                     unsigned int flags);
constexpr unsigned int kWaitValueGeq = 0x0;       // CU_STREAM_WAIT_VALUE_GEQ
constexpr unsigned int kWriteValueDefault = 0x0;  // CU_STREAM_WRITE_VALUE_DEFAULT

using cuda::CheckCu;
using cuda::CheckCuda;
using cuda::DeviceBuffer;
using cuda::Event;
using cuda::PinnedBuffer;
using cuda::Stream;

// CACHEPAWL_CUDA_RETURN_IF_ERROR for a call where tests may inject a fault
// (DeviceMoverOptions::cuda_fault): the injected error stands for the call's.
#define CP_CUDA_AT(site, call)                                         \
  do {                                                                 \
    cudaError_t _e = InjectedFault(site);                              \
    if (_e == cudaSuccess) _e = (call);                                \
    CACHEPAWL_RETURN_IF_ERROR(CheckCuda(static_cast<int>(_e), #call)); \
  } while (0)

// A driver entry point, or null when the driver lacks it (version too old, symbol not found)
// or the query fails; the mover then works without it (Fence::StreamWait blocks the CPU), so a
// failed query is logged, not returned.
StreamValue32Fn DriverEntryPoint(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  const Status st =
      CheckCuda(cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &q),
                "cudaGetDriverEntryPointByVersion");
  if (!st.ok()) {
    (void)cudaGetLastError();  // reported here: a later launch check must not see it
    spdlog::warn("device mover: {} ({}): Fence::StreamWait blocks the CPU instead", st.ToString(),
                 symbol);
    return nullptr;
  }
  return q == cudaDriverEntryPointSuccess ? reinterpret_cast<StreamValue32Fn>(fn) : nullptr;
}

// The per-direction completion counters; shared with every fence's stream waiter so the pinned
// memory outlives the mover while a fence may still be waited on.
struct Signal {
  PinnedBuffer memory;                // mapped: the GPU writes the counters
  volatile uint32_t* host = nullptr;  // [2], one per direction, in `memory`
  CUdeviceptr device = 0;
  StreamValue32Fn write = nullptr;
  StreamValue32Fn wait = nullptr;
  std::mutex mu;
  std::condition_variable cv;       // signalled on dispatch and on CPU writes of the counter
  uint64_t dispatched[2] = {0, 0};  // guarded by mu: the last seq enqueued per direction
  bool gpu_side() const { return write != nullptr && wait != nullptr; }
  void Dispatched(int direction, uint64_t seq) {
    {
      std::lock_guard<std::mutex> lock(mu);
      dispatched[direction] = seq;
    }
    cv.notify_all();
  }
  void CpuWrite(int direction, uint32_t seq) {
    {
      std::lock_guard<std::mutex> lock(mu);
      const uint32_t now = host[direction];
      if (static_cast<int32_t>(seq - now) > 0) host[direction] = seq;
    }
    cv.notify_all();
  }
};

class EventPool {
 public:
  StatusOr<Event> Get() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        Event e = std::move(free_.back());
        free_.pop_back();
        return e;
      }
    }
    return Event::Create(Event::kBlockingSync);
  }
  void Put(Event e) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(e));
  }

 private:
  std::mutex mu_;
  std::vector<Event> free_;  // guarded by mu_
};

struct Pending {
  std::unique_ptr<PlannedOperation> op;
  Status status;
  Event done;
  std::vector<Event> layer_events;  // Load per-layer fences
  std::vector<Event> extra_events;  // returned to the pool after completion
  bool cpu_release = false;         // the counter must be written by the CPU
  uint64_t enqueued_at = 0;         // profile::Now() when its GPU work was enqueued
};

class CudaBackend final : public TransferBackend {
 public:
  CudaBackend(const RecordMap* const maps[kNumKinds], const DeviceMoverOptions& options, int device)
      : options_(options),
        device_(device),
        chunk_bytes_(options.staging_chunk_bytes()),
        chunks_(options.staging_chunks) {
    maps_[0] = maps[0];
    maps_[1] = maps[1];
    maps_[2] = maps[2];
  }

  ~CudaBackend() override {
    Drain();
    for (auto& d : dirs_) {
      {
        std::lock_guard<std::mutex> lock(d.mu);
        d.stop = true;
      }
      d.cv.notify_all();
      if (d.completer.joinable()) d.completer.join();
    }
    // The members' CUDA resources are released on it; a destructor can only report a failure,
    // and says nothing while the process exits (the CUDA runtime is already unloading then).
    const cudaError_t err = cudaSetDevice(device_);
    if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
      spdlog::warn("device mover: releasing GPU {}'s resources: {}", device_,
                   CheckCuda(err, "cudaSetDevice").ToString());
    }
  }

  Status Init() {
    CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    int lo = 0, hi = 0;  // lo = least priority (numerically greatest)
    CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    int sms = 0;
    CACHEPAWL_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
    ctas_ = options_.kernel_ctas != 0 ? options_.kernel_ctas : static_cast<uint32_t>(sms);
    CACHEPAWL_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&max_pitch_, cudaDevAttrMaxPitch, device_));
    for (int d = 0; d < 2; ++d) {
      Dir& dir = dirs_[d];
      dir.index = d;
      int prio = d == 0 ? options_.save_priority : options_.load_priority;
      prio = std::clamp(prio, hi, lo);
      CACHEPAWL_ASSIGN_OR_RETURN(dir.copy, Stream::Create(prio));
      CACHEPAWL_ASSIGN_OR_RETURN(dir.kernel, Stream::Create(prio));
      CACHEPAWL_RETURN_IF_ERROR(
          CheckCuda(InjectedFault(CudaFaultSite::kStagingAlloc), "cudaMalloc (staging ring)"));
      CACHEPAWL_ASSIGN_OR_RETURN(dir.staging,
                                 DeviceBuffer::Allocate(device_, chunk_bytes_ * chunks_));
      dir.chunk_used.assign(chunks_, false);
      for (uint32_t c = 0; c < chunks_; ++c) {
        CACHEPAWL_ASSIGN_OR_RETURN(Event produced, Event::Create());
        CACHEPAWL_ASSIGN_OR_RETURN(Event consumed, Event::Create());
        dir.produced.push_back(std::move(produced));
        dir.consumed.push_back(std::move(consumed));
      }
    }
    for (int k = 0; k < kNumKinds; ++k) CACHEPAWL_RETURN_IF_ERROR(UploadTables(k));
    // The completion counters and the stream memory operations.
    signal_ = std::make_shared<Signal>();
    CACHEPAWL_ASSIGN_OR_RETURN(signal_->memory,
                               PinnedBuffer::Allocate(64, PinnedBuffer::Mapping::kMapped));
    signal_->host = reinterpret_cast<volatile uint32_t*>(signal_->memory.data());
    signal_->host[0] = 0;
    signal_->host[1] = 0;
    CACHEPAWL_ASSIGN_OR_RETURN(void* dptr, signal_->memory.DevicePointer());
    signal_->device = reinterpret_cast<CUdeviceptr>(dptr);
    signal_->write = DriverEntryPoint("cuStreamWriteValue32");
    signal_->wait = DriverEntryPoint("cuStreamWaitValue32");
    for (auto& d : dirs_) d.completer = std::thread([this, &d] { CompletionLoop(d); });
    return Status::OK();
  }

  bool EnqueuesOnly() const override { return true; }

  bool CanDispatchHere() const override {
    int current = -1;
    return cudaGetDevice(&current) == cudaSuccess && current == device_ &&
           cudaPeekAtLastError() == cudaSuccess;
  }

  void OnDispatcherThread() override {
    const Status st = CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
    if (!st.ok()) spdlog::warn("device mover: dispatcher thread: {}", st.ToString());
  }

  void Dispatch(std::unique_ptr<PlannedOperation> op) override {
    const uint64_t enqueue_start = profile::Now();
    Dir& d = dirs_[static_cast<int>(op->direction)];
    Pending p;
    p.status = op->pre_status;
    p.op = std::move(op);
    // The calling thread has this mover's GPU current: the dispatcher (OnDispatcherThread), or
    // a submitting thread CanDispatchHere() admitted.
    if (p.status.ok()) {
      p.status = p.op->direction == Direction::kSave ? EnqueueSave(d, p) : EnqueueLoad(d, p);
    }
    if (!p.status.ok()) execution_errors_.fetch_add(1, std::memory_order_relaxed);
    Status fin = Finalize(d, p);
    if (!fin.ok()) {
      p.cpu_release = true;
      if (p.status.ok()) p.status = fin;
    }
    // A failed call's error is this operation's (reported through its status): it must not be
    // left for the next CUDA call of the thread (an engine's, when dispatched inline).
    if (!p.status.ok()) (void)cudaGetLastError();
    const uint64_t seq = p.op->seq;
    profile::Add(profile::Stage::kMoverEnqueue, enqueue_start);
    p.enqueued_at = profile::Now();
    {
      std::lock_guard<std::mutex> lock(d.mu);
      d.queue.push_back(std::move(p));
      ++d.in_flight;
    }
    d.cv.notify_all();
    signal_->Dispatched(d.index, seq);
  }

  void Drain() override {
    for (auto& d : dirs_) {
      std::unique_lock<std::mutex> lock(d.mu);
      d.cv.wait(lock, [&] { return d.in_flight == 0; });
    }
  }

  std::function<Status(void*)> StreamWaiter(Direction direction, uint64_t seq) override {
    std::shared_ptr<Signal> sig = signal_;
    const int d = static_cast<int>(direction);
    const uint32_t value = static_cast<uint32_t>(seq);
    return [sig, d, seq, value](void* stream) -> Status {
      if (sig->gpu_side()) {
        // Enqueue the GPU wait only after the operation's work is enqueued: a stream blocked on
        // a semaphore ahead of that work in a shared hardware queue would never be released.
        {
          std::unique_lock<std::mutex> lock(sig->mu);
          sig->cv.wait(lock, [&] { return sig->dispatched[d] >= seq; });
        }
        return CheckCu(sig->wait(stream, sig->device + d * sizeof(uint32_t), value, kWaitValueGeq),
                       "cuStreamWaitValue32");
      }
      std::unique_lock<std::mutex> lock(sig->mu);
      sig->cv.wait(lock, [&] { return static_cast<int32_t>(sig->host[d] - value) >= 0; });
      return Status::OK();
    };
  }

  uint64_t kernel_launches() const override { return kernel_launches_.load(); }
  uint64_t copy_calls() const override { return copy_calls_.load(); }
  uint64_t execution_errors() const override { return execution_errors_.load(); }

 private:
  struct Dir {
    int index = 0;
    Stream copy;
    Stream kernel;
    DeviceBuffer staging;
    // Per chunk: its bytes are ready for the next stage / free again.
    std::vector<Event> produced, consumed;
    // The next three: only the holder of the direction's dispatch turn (the dispatcher or an
    // inline submitter, handed over under DeviceMover's queue mutex) touches them.
    std::vector<bool> chunk_used;
    uint32_t next_chunk = 0;
    // Kernels were launched on `kernel` since the copy stream last waited for that stream: an
    // operation that ends on the copy stream must join it first.
    bool kernel_tail = false;
    // The next chunk of the ring.
    std::pair<uint32_t, std::byte*> TakeChunk(uint64_t chunk_bytes) {
      const uint32_t c = next_chunk;
      next_chunk = (next_chunk + 1) % static_cast<uint32_t>(produced.size());
      return {c, staging.data() + c * chunk_bytes};
    }
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Pending> queue;  // guarded by mu
    uint64_t in_flight = 0;     // guarded by mu
    bool stop = false;          // guarded by mu
    std::thread completer;
  };

  // The error tests inject at `site` (DeviceMoverOptions::cuda_fault), cudaSuccess without.
  cudaError_t InjectedFault(CudaFaultSite site) const {
    return options_.cuda_fault ? static_cast<cudaError_t>(options_.cuda_fault(site)) : cudaSuccess;
  }

  Status UploadTables(int k) {
    const RecordMap& m = *maps_[k];
    if (m.tiles.empty()) return Status::OK();
    std::vector<cuda::KernelSegment> segs;
    for (const auto& s : m.segments) {
      segs.push_back({s.device_base, s.device_stride, s.record_offset, s.bytes});
    }
    std::vector<cuda::KernelTile> tiles;
    for (const auto& t : m.tiles) {
      tiles.push_back({t.segment, static_cast<uint32_t>(t.bytes), t.offset});
    }
    CACHEPAWL_ASSIGN_OR_RETURN(DeviceBuffer sp,
                               DeviceBuffer::Allocate(device_, segs.size() * sizeof(segs[0])));
    CACHEPAWL_ASSIGN_OR_RETURN(DeviceBuffer tp,
                               DeviceBuffer::Allocate(device_, tiles.size() * sizeof(tiles[0])));
    CACHEPAWL_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(sp.data(), segs.data(), sp.size(), cudaMemcpyHostToDevice));
    CACHEPAWL_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(tp.data(), tiles.data(), tp.size(), cudaMemcpyHostToDevice));
    tables_[k] = {reinterpret_cast<const cuda::KernelSegment*>(sp.data()),
                  reinterpret_cast<const cuda::KernelTile*>(tp.data())};
    tables_memory_.push_back(std::move(sp));
    tables_memory_.push_back(std::move(tp));
    return Status::OK();
  }

  Status Launch(int kind, std::byte* chunk_base, const std::vector<KernelJob>& jobs, bool gather,
                cudaStream_t stream) {
    std::vector<cuda::KernelJob> kj;
    for (size_t at = 0; at < jobs.size(); at += cuda::kMaxJobsPerLaunch) {
      const size_t n = std::min<size_t>(cuda::kMaxJobsPerLaunch, jobs.size() - at);
      kj.clear();
      for (size_t i = 0; i < n; ++i) {
        const KernelJob& j = jobs[at + i];
        kj.push_back({j.slot, j.staging_record_base, j.tile_begin, j.tile_count, 0, 0});
      }
      int err = static_cast<int>(InjectedFault(CudaFaultSite::kKernelLaunch));
      if (err == 0) {
        err = cuda::LaunchGatherScatter(tables_[kind], chunk_base, kj.data(),
                                        static_cast<uint32_t>(n), gather, ctas_, stream);
      }
      CACHEPAWL_RETURN_IF_ERROR(CheckCuda(err, "gather/scatter kernel launch"));
      kernel_launches_.fetch_add(1, std::memory_order_relaxed);
    }
    return Status::OK();
  }

  Status Copies(const std::vector<CopyRun>& runs, std::byte* chunk_base, bool to_host,
                cudaStream_t stream) {
    const cudaMemcpyKind kind = to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> sizes;
    auto flush_batch = [&]() -> Status {
      if (dsts.empty()) return Status::OK();
      if (dsts.size() == 1) {
        CP_CUDA_AT(CudaFaultSite::kCopy, cudaMemcpyAsync(dsts[0], srcs[0], sizes[0], kind, stream));
      } else {
        cudaMemcpyAttributes attr{};
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t attr_index = 0;
        CP_CUDA_AT(CudaFaultSite::kCopy,
                   cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attr,
                                        &attr_index, 1, stream));
      }
      copy_calls_.fetch_add(1, std::memory_order_relaxed);
      dsts.clear();
      srcs.clear();
      sizes.clear();
      return Status::OK();
    };
    for (const CopyRun& r : runs) {
      std::byte* other =
          chunk_base != nullptr ? chunk_base + r.other : reinterpret_cast<std::byte*>(r.other);
      void* dst = to_host ? static_cast<void*>(r.host) : static_cast<void*>(other);
      const void* src =
          to_host ? static_cast<const void*>(other) : static_cast<const void*>(r.host);
      const uint64_t dpitch = to_host ? r.host_pitch : r.other_pitch;
      const uint64_t spitch = to_host ? r.other_pitch : r.host_pitch;
      const bool two_d = r.height > 1 && options_.coalesce_copies &&
                         dpitch <= static_cast<uint64_t>(max_pitch_) &&
                         spitch <= static_cast<uint64_t>(max_pitch_);
      if (two_d) {
        CACHEPAWL_RETURN_IF_ERROR(flush_batch());
        CP_CUDA_AT(CudaFaultSite::kCopy,
                   cudaMemcpy2DAsync(dst, dpitch, src, spitch, r.width, r.height, kind, stream));
        copy_calls_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      for (uint64_t row = 0; row < r.height; ++row) {
        dsts.push_back(static_cast<std::byte*>(dst) + row * dpitch);
        srcs.push_back(static_cast<const std::byte*>(src) + row * spitch);
        sizes.push_back(r.width);
      }
    }
    return flush_batch();
  }

  Status EnqueueSave(Dir& d, Pending& p) {
    const PlannedOperation& op = *p.op;
    if (!op.chunks.empty()) d.kernel_tail = true;  // (kept on a failure part way)
    for (const StagedChunk& chunk : op.chunks) {
      const auto [h, chunk_base] = d.TakeChunk(chunk_bytes_);
      if (d.chunk_used[h]) CACHEPAWL_RETURN_IF_ERROR(d.consumed[h].MakeWait(d.kernel.get()));
      for (int k = 0; k < kNumKinds; ++k) {
        CACHEPAWL_RETURN_IF_ERROR(Launch(k, chunk_base, chunk.jobs[k], true, d.kernel.get()));
      }
      CACHEPAWL_RETURN_IF_ERROR(d.produced[h].Record(d.kernel));
      CACHEPAWL_RETURN_IF_ERROR(d.produced[h].MakeWait(d.copy.get()));
      CACHEPAWL_RETURN_IF_ERROR(Copies(chunk.copies, chunk_base, true, d.copy.get()));
      CACHEPAWL_RETURN_IF_ERROR(d.consumed[h].Record(d.copy));
      d.chunk_used[h] = true;
    }
    return Copies(op.direct, nullptr, true, d.copy.get());
  }

  Status EnqueueLoad(Dir& d, Pending& p) {
    const PlannedOperation& op = *p.op;
    if (!op.chunks.empty()) d.kernel_tail = true;
    CACHEPAWL_RETURN_IF_ERROR(Copies(op.direct, nullptr, false, d.copy.get()));
    if (!op.direct.empty() && !op.chunks.empty()) {
      CACHEPAWL_ASSIGN_OR_RETURN(Event e, events_.Get());
      p.extra_events.push_back(std::move(e));
      const Event& direct_done = p.extra_events.back();
      CACHEPAWL_RETURN_IF_ERROR(direct_done.Record(d.copy));
      CACHEPAWL_RETURN_IF_ERROR(direct_done.MakeWait(d.kernel.get()));
    }
    const RecordMap& kv = *maps_[0];
    for (size_t c = 0; c < op.chunks.size(); ++c) {
      const StagedChunk& chunk = op.chunks[c];
      const bool last = c + 1 == op.chunks.size();
      const auto [h, chunk_base] = d.TakeChunk(chunk_bytes_);
      if (d.chunk_used[h]) CACHEPAWL_RETURN_IF_ERROR(d.consumed[h].MakeWait(d.copy.get()));
      CACHEPAWL_RETURN_IF_ERROR(Copies(chunk.copies, chunk_base, false, d.copy.get()));
      CACHEPAWL_RETURN_IF_ERROR(d.produced[h].Record(d.copy));
      CACHEPAWL_RETURN_IF_ERROR(d.produced[h].MakeWait(d.kernel.get()));
      // States and windowed KV first; a layer's fence then waits only for its full KV.
      CACHEPAWL_RETURN_IF_ERROR(Launch(1, chunk_base, chunk.jobs[1], false, d.kernel.get()));
      CACHEPAWL_RETURN_IF_ERROR(Launch(2, chunk_base, chunk.jobs[2], false, d.kernel.get()));
      if (op.per_layer) {
        for (size_t a = 0; a + 1 < kv.layer_tiles.size(); ++a) {
          CACHEPAWL_RETURN_IF_ERROR(Launch(
              0, chunk_base, RestrictJobs(chunk.jobs[0], kv.layer_tiles[a], kv.layer_tiles[a + 1]),
              false, d.kernel.get()));
          if (last) {
            CACHEPAWL_ASSIGN_OR_RETURN(Event e, events_.Get());
            p.layer_events.push_back(std::move(e));
            CACHEPAWL_RETURN_IF_ERROR(p.layer_events.back().Record(d.kernel));
          }
        }
      } else {
        CACHEPAWL_RETURN_IF_ERROR(Launch(0, chunk_base, chunk.jobs[0], false, d.kernel.get()));
      }
      CACHEPAWL_RETURN_IF_ERROR(d.consumed[h].Record(d.kernel));
      d.chunk_used[h] = true;
    }
    return Status::OK();
  }

  // Ends the operation on its last stream (a Save's copies, a Load's scatters; a Load without
  // staged chunks ends on the copy stream too), after joining the other stream when it may hold
  // work the last one is not ordered after, then writes the counter and records the done event
  // there. Every operation of the direction up to this one has then landed when the counter
  // passes its seq. Runs for failed operations too, so the counter never skips a value.
  Status Finalize(Dir& d, Pending& p) {
    const bool on_copy = d.index == 0 || p.op->chunks.empty();
    cudaStream_t last = on_copy ? d.copy.get() : d.kernel.get();
    cudaStream_t other = on_copy ? d.kernel.get() : d.copy.get();
    // Ending on the copy stream: only kernels launched since the copy stream last joined them
    // need a join. Ending on the kernel stream: always (the copy stream's copies feed it).
    if (!on_copy || d.kernel_tail) {
      CACHEPAWL_ASSIGN_OR_RETURN(Event e, events_.Get());
      p.extra_events.push_back(std::move(e));
      const Event& join = p.extra_events.back();
      CACHEPAWL_RETURN_IF_ERROR(join.Record(other));
      CACHEPAWL_RETURN_IF_ERROR(join.MakeWait(last));
    }
    // A Load that ends on the kernel stream leaves work there the copy stream is not after.
    d.kernel_tail = !on_copy;
    if (signal_->gpu_side()) {
      CACHEPAWL_RETURN_IF_ERROR(
          CheckCu(signal_->write(last, signal_->device + d.index * sizeof(uint32_t),
                                 static_cast<uint32_t>(p.op->seq), kWriteValueDefault),
                  "cuStreamWriteValue32"));
    } else {
      p.cpu_release = true;
    }
    CACHEPAWL_ASSIGN_OR_RETURN(p.done, events_.Get());
    CACHEPAWL_RETURN_IF_ERROR(p.done.Record(last));
    return Status::OK();
  }

  // Polls `e` for up to options_.completion_spin_us (the caller then sleeps on it if it has not
  // finished): the operation's end is seen without a sleeping thread's wake-up.
  void SpinUntilFinished(const Event& e) const {
    if (options_.completion_spin_us == 0) return;
    using Clock = std::chrono::steady_clock;
    const Clock::time_point until =
        Clock::now() + std::chrono::microseconds(options_.completion_spin_us);
    while (cudaEventQuery(e.get()) == cudaErrorNotReady && Clock::now() < until) {
      std::this_thread::yield();
    }
    // An error the query returned is the Synchronize's to report; it must not linger for the
    // next launch check.
    (void)cudaGetLastError();
  }

  void CompletionLoop(Dir& d) {
    // The events it waits on and the host counters it writes do not need the device current;
    // a failure to make it current is logged once, and the operations complete as they would.
    const Status on_device =
        CheckCuda(cudaSetDevice(device_), "cudaSetDevice").WithContext("completion thread");
    if (!on_device.ok()) spdlog::warn("device mover: {}", on_device.ToString());
    for (;;) {
      Pending p;
      {
        std::unique_lock<std::mutex> lock(d.mu);
        d.cv.wait(lock, [&] { return d.stop || !d.queue.empty(); });
        if (d.queue.empty()) return;
        p = std::move(d.queue.front());
        d.queue.pop_front();
      }
      Status status = p.status;
      for (size_t a = 0; a < p.layer_events.size(); ++a) {
        const Status layer = p.layer_events[a].Synchronize();
        if (status.ok()) status = layer.WithContext("layer event");
        p.op->completer.CompleteLayer(a, status);
      }
      if (p.done) {
        SpinUntilFinished(p.done);
        Status done = p.done.Synchronize();
        if (done.ok()) {
          done = CheckCuda(InjectedFault(CudaFaultSite::kCompletion), "cudaEventSynchronize");
        }
        if (status.ok()) status = done.WithContext("operation");
      }
      if (!status.ok() && p.status.ok()) {
        execution_errors_.fetch_add(1, std::memory_order_relaxed);
        p.cpu_release = true;  // the GPU may never write the counter now
      }
      if (p.cpu_release) signal_->CpuWrite(d.index, static_cast<uint32_t>(p.op->seq));
      profile::Add(profile::Stage::kMoverGpu, p.enqueued_at);
      const uint64_t finish_start = profile::Now();
      p.op->Finish(status);
      profile::Add(profile::Stage::kMoverFire, finish_start);
      for (Event& e : p.layer_events) events_.Put(std::move(e));
      for (Event& e : p.extra_events) events_.Put(std::move(e));
      if (p.done) events_.Put(std::move(p.done));
      {
        std::lock_guard<std::mutex> lock(d.mu);
        --d.in_flight;
      }
      d.cv.notify_all();
    }
  }

  const RecordMap* maps_[kNumKinds] = {nullptr, nullptr};
  const DeviceMoverOptions options_;
  const int device_;
  const uint64_t chunk_bytes_;
  const uint32_t chunks_;
  uint32_t ctas_ = 16;
  int max_pitch_ = 0;
  cuda::KernelTables tables_[kNumKinds] = {{nullptr, nullptr}, {nullptr, nullptr}};
  std::vector<DeviceBuffer> tables_memory_;
  std::shared_ptr<Signal> signal_;
  EventPool events_;
  Dir dirs_[2];
  std::atomic<uint64_t> kernel_launches_{0};
  std::atomic<uint64_t> copy_calls_{0};
  std::atomic<uint64_t> execution_errors_{0};
};

}  // namespace

StatusOr<std::unique_ptr<TransferBackend>> MakeCudaBackend(const RecordMap* const maps[kNumKinds],
                                                           const DeviceMoverOptions& options,
                                                           int device) {
  auto b = std::make_unique<CudaBackend>(maps, options, device);
  CACHEPAWL_RETURN_IF_ERROR(b->Init().WithContext("device mover (CUDA)"));
  return std::unique_ptr<TransferBackend>(std::move(b));
}

}  // namespace cachepawl::internal

#else  // !CACHEPAWL_HAVE_CUDA

namespace cachepawl::internal {

StatusOr<std::unique_ptr<TransferBackend>> MakeCudaBackend(const RecordMap* const maps[kNumKinds],
                                                           const DeviceMoverOptions& options,
                                                           int device) {
  (void)maps;
  (void)options;
  (void)device;
  return Status::Unavailable("device mover: built without CUDA");
}

}  // namespace cachepawl::internal

#endif
