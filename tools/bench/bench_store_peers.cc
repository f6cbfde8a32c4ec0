// `cachepawl bench store`: concurrent rounds and their timing, and the two peers every store
// figure is printed next to: the DeviceMover alone and the contiguous-copy limit
// (tools/bench/bench_store.h).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <latch>
#include <thread>

#include "cuda/cuda_status.h"
#include "tools/bench/bench_store.h"
#include "tools/human_bytes.h"
#include "tools/stall_watchdog.h"

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl::tools::bench_store {

const char* OpName(Op op) {
  switch (op) {
    case Op::kLoad:
      return "load";
    case Op::kSave:
      return "save";
    case Op::kBoth:
      return "both";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Rounds
// ---------------------------------------------------------------------------------------------

Status RunRound(uint32_t threads, const RoundFn& fn, Samples* out,
                std::vector<ThreadTimes>* times_out) {
  std::vector<ThreadTimes> times(threads);
  std::vector<Status> status(threads);
  std::latch ready(threads), go(1);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.count_down();
      go.wait();
      status[t] = fn(t, times[t]);
    });
  }
  ready.wait();
  go.count_down();
  for (std::thread& th : pool) th.join();
  Progress("a round of bench store's threads");
  for (const Status& s : status) CACHEPAWL_RETURN_IF_ERROR(s);
  if (times_out != nullptr) *times_out = times;
  Clock::time_point first = times[0].start, end = first, load = first, save = first;
  bool any_load = false, any_save = false;
  for (const ThreadTimes& t : times) first = std::min(first, t.start);
  for (const ThreadTimes& t : times) {
    Clock::time_point e = t.start;
    if (t.load) e = std::max(e, t.load_end), load = std::max(load, t.load_end), any_load = true;
    if (t.save) e = std::max(e, t.save_end), save = std::max(save, t.save_end), any_save = true;
    end = std::max(end, e);
    out->latency_us.push_back(std::chrono::duration<double, std::micro>(e - t.start).count());
  }
  auto seconds = [&](Clock::time_point e) {
    return std::chrono::duration<double>(e - first).count();
  };
  out->round_s.push_back(seconds(end));
  if (any_load) out->load_s.push_back(seconds(load));
  if (any_save) out->save_s.push_back(seconds(save));
  return Status::OK();
}

StatusOr<Clock::time_point> WaitStamped(const Fence& fence) {
  auto stamp = std::make_shared<std::atomic<int64_t>>(0);
  fence.OnComplete([stamp](const Status&) {
    stamp->store(Clock::now().time_since_epoch().count(), std::memory_order_release);
  });
  // Generous: a transfer that has not landed after this long is reported, not waited for.
  CACHEPAWL_RETURN_IF_ERROR(fence.Wait(std::chrono::minutes(10)));
  // Callbacks run right after the waiters are woken, on the completing thread.
  int64_t t = 0;
  while ((t = stamp->load(std::memory_order_acquire)) == 0) std::this_thread::yield();
  return Clock::time_point(Clock::duration(t));
}

Status ParallelFor(size_t n, const std::function<Status(size_t)>& fn) {
  const size_t workers = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Status> status(workers);
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      for (size_t i = w; i < n && status[w].ok(); i += workers) status[w] = fn(i);
    });
  }
  for (std::thread& th : pool) th.join();
  for (const Status& s : status) CACHEPAWL_RETURN_IF_ERROR(s);
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
// The DeviceMover peer
// ---------------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<MoverPeer>> MoverPeer::Create(const ModelLayout& layout,
                                                       uint64_t arena_bytes, bool gpu,
                                                       bool polling) {
  std::unique_ptr<MoverPeer> p(new MoverPeer());
  p->layout_ = layout;
  p->gpu_ = gpu;
  p->polling_ = polling;
  HostArenaOptions ho;
  ho.bytes = (arena_bytes + 4095) / 4096 * 4096;
  ho.pin = gpu ? HostArenaOptions::Pin::kOn : HostArenaOptions::Pin::kOff;
  auto arena = HostArena::Open(layout, ho);
  if (!arena.ok()) return arena.status().WithContext("mover peer's host arena");
  p->arena_ = std::move(arena).value();
  CACHEPAWL_RETURN_IF_ERROR(p->arena_->WaitUntilPinned().WithContext("mover peer's host arena"));
  return p;
}

MoverPeer::~MoverPeer() {
  mover_.reset();  // before the arena it borrows
  Release();
}

Status MoverPeer::UsePool(const DevicePoolDescription& pool) {
  mover_.reset();
  DeviceMoverOptions o;
  o.mode = gpu_ ? DeviceMoverOptions::Mode::kOn : DeviceMoverOptions::Mode::kOff;
  if (!polling_) {
    o.completion_spin_us = 0;
    o.wait_spin_us = 0;
    o.inline_dispatch = false;
  }
  auto e = DeviceMover::Create(layout_, pool, arena_.get(), o);
  if (!e.ok()) return e.status().WithContext("mover peer");
  mover_ = std::move(e).value();
  return Status::OK();
}

Status MoverPeer::Prepare(const std::vector<ThreadSlots>& slots) {
  Release();
  slots_ = slots;
  // The store's units (Sizes): every page's kKV record, the windowed records a Load reads (and a
  // Save keeps), the state.
  const Sizes sizes = SizesOf(layout_);
  for (const ThreadSlots& s : slots_) {
    Operation load{Direction::kLoad, {}, false}, save{Direction::kSave, {}, false};
    std::vector<uint64_t>& seeds = save_seeds_.emplace_back();
    auto add = [&](Kind kind, uint64_t src_dev, uint64_t dst_dev, uint64_t seed, bool loads,
                   bool saves) -> Status {
      if (loads) {
        auto from = arena_->Allocate(kind);
        if (!from.ok()) return from.status().WithContext("mover peer's host arena");
        FillRecord(seed, {arena_->SlotPayload(*from), layout_.RecordBytes(kind)});
        load.units.push_back({kind, {Tier::kHost, *from}, {Tier::kDevice, dst_dev}});
      }
      if (saves) {
        auto to = arena_->Allocate(kind);
        if (!to.ok()) return to.status().WithContext("mover peer's host arena");
        save.units.push_back({kind, {Tier::kDevice, src_dev}, {Tier::kHost, *to}});
        seeds.push_back(seed);
      }
      return Status::OK();
    };
    Status st;
    const size_t n = s.src_pages.size();
    for (size_t i = 0; i < n && st.ok() && sizes.kv_record > 0; ++i) {
      st = add(Kind::kKV, s.src_pages[i], s.dst_pages[i], s.page_seeds[i], true, true);
    }
    for (size_t i = 0; i < n && st.ok() && sizes.window_record > 0; ++i) {
      const bool loads = i >= n - sizes.LoadedWindowPages(n);
      const bool saves = i >= n - sizes.SavedWindowPages(n);
      st = add(Kind::kWindowKV, s.src_pages[i], s.dst_pages[i], s.window_seeds[i], loads, saves);
    }
    if (st.ok() && s.src_state) {
      st = add(Kind::kMamba, *s.src_state, *s.dst_state, s.state_seed, true, true);
    }
    load_ops_.push_back(std::move(load));
    save_ops_.push_back(std::move(save));
    if (!st.ok()) return st;
  }
  return Status::OK();
}

void MoverPeer::Release() {
  for (auto* ops : {&load_ops_, &save_ops_}) {
    for (const Operation& op : *ops) {
      for (const CacheTransferUnit& u : op.units) {
        (void)arena_->Free(u.src.tier == Tier::kHost ? u.src.slot : u.dst.slot);
      }
    }
    ops->clear();
  }
  save_seeds_.clear();
  slots_.clear();
}

Status MoverPeer::Round(Op op, Samples* out) {
  return RunRound(
      static_cast<uint32_t>(slots_.size()),
      [&](uint32_t t, ThreadTimes& times) -> Status {
        Operation load = op != Op::kSave ? load_ops_[t] : Operation{};
        Operation save = op != Op::kLoad ? save_ops_[t] : Operation{};
        times.start = Clock::now();
        Fence fl, fs;
        if (op != Op::kSave) fl = mover_->Submit(std::move(load));
        if (op != Op::kLoad) fs = mover_->Submit(std::move(save));
        if (op != Op::kSave) {
          CACHEPAWL_ASSIGN_OR_RETURN(times.load_end, WaitStamped(fl));
          times.load = true;
        }
        if (op != Op::kLoad) {
          CACHEPAWL_ASSIGN_OR_RETURN(times.save_end, WaitStamped(fs));
          times.save = true;
        }
        return Status::OK();
      },
      out);
}

StatusOr<std::string> MoverPeer::VerifySaved() {
  for (size_t t = 0; t < slots_.size(); ++t) {
    const Operation& op = save_ops_[t];
    for (size_t i = 0; i < op.units.size(); ++i) {
      const CacheTransferUnit& u = op.units[i];
      const uint64_t seed = save_seeds_[t][i];
      const size_t bad =
          FirstMismatch(seed, {arena_->SlotPayload(u.dst.slot), layout_.RecordBytes(u.kind)});
      if (bad != std::string::npos) {
        return "mover peer save, thread " + std::to_string(t) + " unit " + std::to_string(i) +
               ": byte " + std::to_string(bad) + " differs";
      }
    }
  }
  return std::string();
}

// ---------------------------------------------------------------------------------------------
// The contiguous limit
// ---------------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<LimitPeer>> LimitPeer::Create(bool gpu, std::byte* device,
                                                       uint64_t device_bytes, uint64_t host_bytes,
                                                       uint32_t max_threads) {
  std::unique_ptr<LimitPeer> p(new LimitPeer());
  p->gpu_ = gpu;
  p->device_ = device;
  p->device_bytes_ = device_bytes;
  auto host = Memory::Allocate(Memory::Where::kHost, gpu, host_bytes);
  if (!host.ok()) return host.status().WithContext("limit's host buffer");
  p->host_ = std::move(host).value();
  // Random bytes in the host buffer, and from it everywhere in the device memory, so no timed
  // copy (the limit's, the store's, the mover's) ever moves zeros.
  CACHEPAWL_RETURN_IF_ERROR(FillRandom(p->host_->data(), p->host_->size(), false, 99));
  for (uint64_t at = 0; at < device_bytes; at += p->host_->size()) {
    CACHEPAWL_RETURN_IF_ERROR(CopyBytes(device + at, p->host_->data(),
                                        std::min(p->host_->size(), device_bytes - at), gpu));
  }
  if (gpu) {
    for (uint32_t i = 0; i < 2 * max_threads; ++i) {
      auto stream = cuda::Stream::Create();
      if (!stream.ok()) return stream.status().WithContext("limit's streams");
      p->streams_.push_back(std::move(stream).value());
    }
  }
  return p;
}

LimitPeer::~LimitPeer() = default;

Status LimitPeer::Round(Op op, uint32_t threads, uint64_t load_bytes, uint64_t save_bytes,
                        Samples* out) {
  // Thread slices of the larger size; each direction copies its own bytes.
  const uint64_t bytes = std::max(load_bytes, save_bytes);
  const uint64_t need = 2 * uint64_t{threads} * bytes;
  if (need > device_bytes_ || need > host_->size()) {
    return Status::Internal("limit: " + HumanBytes(need) + " exceed its buffers");
  }
  // Thread t: load host[t] -> device[T + t], save device[t] -> host[T + t] (slices of `bytes`).
  std::byte* host = host_->data();
  const uint64_t n = threads;
  if (!gpu_) {
    // Both at once in CPU mode: a thread per direction.
    const bool both = op == Op::kBoth;
    Samples round;
    round.threads = threads;
    round.bytes = load_bytes;
    round.save_bytes = save_bytes;
    CACHEPAWL_RETURN_IF_ERROR(RunRound(
        both ? 2 * threads : threads,
        [&](uint32_t i, ThreadTimes& times) -> Status {
          const uint64_t t = i % n;
          const bool load = both ? i < n : op == Op::kLoad;
          times.start = Clock::now();
          if (load) {
            std::memcpy(device_ + (n + t) * bytes, host + t * bytes, load_bytes);
            times.load_end = Clock::now();
            times.load = true;
          } else {
            std::memcpy(host + (n + t) * bytes, device_ + t * bytes, save_bytes);
            times.save_end = Clock::now();
            times.save = true;
          }
          return Status::OK();
        },
        &round));
    out->round_s.push_back(round.round_s.back());
    if (!round.load_s.empty()) out->load_s.push_back(round.load_s.back());
    if (!round.save_s.empty()) out->save_s.push_back(round.save_s.back());
    return Status::OK();
  }
#if CACHEPAWL_HAVE_CUDA
  if (streams_.size() < 2 * n) return Status::Internal("limit: too few streams");
  return RunRound(
      threads,
      [&](uint32_t t, ThreadTimes& times) -> Status {
        const cuda::Stream& load_stream = streams_[2 * t];
        const cuda::Stream& save_stream = streams_[2 * t + 1];
        cudaStream_t s_load = load_stream.get();
        cudaStream_t s_save = save_stream.get();
        const bool load = op != Op::kSave, save = op != Op::kLoad;
        // A first runtime call on this (new) thread binds the context before the clock starts.
        CACHEPAWL_RETURN_IF_ERROR(load_stream.Finished().status().WithContext("limit"));
        CACHEPAWL_RETURN_IF_ERROR(save_stream.Finished().status().WithContext("limit"));
        times.start = Clock::now();
        if (load) {
          CACHEPAWL_RETURN_IF_ERROR(
              cuda::CheckCuda(cudaMemcpyAsync(device_ + (n + t) * bytes, host + t * bytes,
                                              load_bytes, cudaMemcpyHostToDevice, s_load),
                              "load cudaMemcpyAsync"));
        }
        if (save) {
          CACHEPAWL_RETURN_IF_ERROR(
              cuda::CheckCuda(cudaMemcpyAsync(host + (n + t) * bytes, device_ + t * bytes,
                                              save_bytes, cudaMemcpyDeviceToHost, s_save),
                              "save cudaMemcpyAsync"));
        }
        bool wait_load = load, wait_save = save;
        while (wait_load || wait_save) {
          for (int dir = 0; dir < 2; ++dir) {
            bool& waiting = dir == 0 ? wait_load : wait_save;
            if (!waiting) continue;
            auto finished = (dir == 0 ? load_stream : save_stream).Finished();
            if (!finished.ok()) return finished.status().WithContext("limit");
            if (!*finished) continue;
            waiting = false;
            (dir == 0 ? times.load_end : times.save_end) = Clock::now();
            (dir == 0 ? times.load : times.save) = true;
          }
        }
        return Status::OK();
      },
      out);
#else
  return Status::Unavailable("limit: built without CUDA");
#endif
}

}  // namespace cachepawl::tools::bench_store
