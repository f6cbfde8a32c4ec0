#include "tools/bench/bench_transfer_interference.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <random>

#include "cuda/cuda_status.h"
#include "tools/bench/bench_matmul_kernel.h"

namespace cachepawl::tools {

// ---------------------------------------------------------------------------------------------
// Matmul

StatusOr<std::unique_ptr<Matmul>> Matmul::Create(int n) {
  std::unique_ptr<Matmul> m(new Matmul(n));
  const size_t bytes = size_t(n) * n * 2;
  int device = 0;
  CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  for (cuda::DeviceBuffer* p : {&m->a_, &m->b_, &m->c_}) {
    auto buffer = cuda::DeviceBuffer::Allocate(device, bytes);
    if (!buffer.ok()) return buffer.status().WithContext("matmul");
    *p = std::move(buffer).value();
  }
  std::vector<std::byte> host(bytes);
  // Random bf16 in [-1, 1): sign, exponent 126 or less, random mantissa.
  std::mt19937 rng(3);
  for (size_t i = 0; i < bytes; i += 2) {
    const uint16_t v =
        static_cast<uint16_t>(((rng() & 1) << 15) | ((120 + rng() % 7) << 7) | (rng() & 0x7F));
    std::memcpy(&host[i], &v, 2);
  }
  CACHEPAWL_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(m->a_.data(), host.data(), bytes, cudaMemcpyHostToDevice));
  CACHEPAWL_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(m->b_.data(), host.data(), bytes, cudaMemcpyHostToDevice));
  CACHEPAWL_ASSIGN_OR_RETURN(m->stream_, cuda::Stream::Create());
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    m->lib_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (m->lib_ != nullptr) {
      m->library_ = name;
      break;
    }
  }
  if (m->lib_ != nullptr) {
    auto create = reinterpret_cast<int (*)(void**)>(dlsym(m->lib_, "cublasCreate_v2"));
    auto set_stream =
        reinterpret_cast<int (*)(void*, cudaStream_t)>(dlsym(m->lib_, "cublasSetStream_v2"));
    m->destroy_ = reinterpret_cast<int (*)(void*)>(dlsym(m->lib_, "cublasDestroy_v2"));
    m->gemm_ = reinterpret_cast<GemmEx>(dlsym(m->lib_, "cublasGemmEx"));
    if (create == nullptr || set_stream == nullptr || m->destroy_ == nullptr ||
        m->gemm_ == nullptr || create(&m->handle_) != 0) {
      m->handle_ = nullptr;
    } else if (set_stream(m->handle_, m->stream_.get()) != 0) {
      (void)m->destroy_(m->handle_);
      m->handle_ = nullptr;
    }
  }
  CACHEPAWL_ASSIGN_OR_RETURN(m->start_, cuda::Event::Create(cuda::Event::kTiming));
  CACHEPAWL_ASSIGN_OR_RETURN(m->stop_, cuda::Event::Create(cuda::Event::kTiming));
  return m;
}

Matmul::~Matmul() {
  if (enqueuer_.joinable()) enqueuer_.join();
  // The enqueuer used the handle; the stream it is bound to is still alive (members go later).
  if (handle_ != nullptr) (void)destroy_(handle_);
  if (lib_ != nullptr) (void)dlclose(lib_);
}

std::string Matmul::backend() const {
  return handle_ != nullptr ? "cuBLAS GemmEx bf16 (" + library_ + ")"
                            : "tiled bf16 kernel without tensor cores (cuBLAS not loadable)";
}

StatusOr<double> Matmul::Run(int count) {
  CACHEPAWL_RETURN_IF_ERROR(start_.Record(stream_));
  for (int i = 0; i < count; ++i) CACHEPAWL_RETURN_IF_ERROR(Product());
  CACHEPAWL_RETURN_IF_ERROR(stop_.Record(stream_));
  CACHEPAWL_RETURN_IF_ERROR(stop_.Synchronize().WithContext("matmul sync"));
  return cuda::Event::ElapsedSeconds(start_, stop_);
}

Status Matmul::StartTimeline(int count) {
  CACHEPAWL_RETURN_IF_ERROR(stream_.Synchronize().WithContext("matmul sync"));
  while (timeline_.size() < static_cast<size_t>(count) + 1) {
    CACHEPAWL_ASSIGN_OR_RETURN(cuda::Event e, cuda::Event::Create(cuda::Event::kTiming));
    timeline_.push_back(std::move(e));
  }
  timeline_count_ = count;
  enqueued_ = 0;
  CACHEPAWL_RETURN_IF_ERROR(timeline_[0].Record(stream_));
  CACHEPAWL_RETURN_IF_ERROR(timeline_[0].Synchronize().WithContext("reference event"));
  timeline_ref_ = SteadyNow();
  enqueue_error_ = Status::OK();
  enqueuer_ = std::thread([this, count] {
    for (int i = 0; i < count; ++i) {
      Status st = Product();
      if (st.ok()) st = timeline_[i + 1].Record(stream_);
      if (!st.ok()) {
        enqueue_error_ = st;
        enqueued_.store(count);
        return;
      }
      enqueued_.store(i + 1);
    }
  });
  return Status::OK();
}

StatusOr<bool> Matmul::Finished(int i) const {
  if (enqueued_.load() <= i) return false;
  const StatusOr<bool> done = timeline_[i + 1].Finished();
  if (!done.ok()) return done.status().WithContext("matmul product " + std::to_string(i));
  return *done;
}

StatusOr<std::vector<std::pair<double, double>>> Matmul::Spans() {
  enqueuer_.join();
  CACHEPAWL_RETURN_IF_ERROR(enqueue_error_);
  CACHEPAWL_RETURN_IF_ERROR(timeline_[timeline_count_].Synchronize().WithContext("matmul sync"));
  std::vector<std::pair<double, double>> spans;
  double prev = timeline_ref_;
  for (int i = 1; i <= timeline_count_; ++i) {
    CACHEPAWL_ASSIGN_OR_RETURN(const double s,
                               cuda::Event::ElapsedSeconds(timeline_[0], timeline_[i]));
    const double end = timeline_ref_ + s;
    spans.emplace_back(prev, end);
    prev = end;
  }
  return spans;
}

double Matmul::SteadyNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status Matmul::Product() {
  if (handle_ != nullptr) {
    const float alpha = 1.f, beta = 0.f;
    if (gemm_(handle_, 0, 0, n_, n_, n_, &alpha, a_.data(), 14, n_, b_.data(), 14, n_, &beta,
              c_.data(), 14, n_, 68, -1) != 0) {
      return Status::Internal("cublasGemmEx failed");
    }
    return Status::OK();
  }
  return cuda::CheckCuda(LaunchBf16Matmul(a_.data(), b_.data(), c_.data(), n_, stream_.get()),
                         "matmul kernel launch");
}

// ---------------------------------------------------------------------------------------------
// Mover

Mover::Mover(Start start, uint64_t bytes_per_move)
    : start_(std::move(start)), bytes_per_move_(bytes_per_move), thread_([this] { Loop(); }) {}

Mover::~Mover() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Mover::On() {
  std::lock_guard<std::mutex> lock(mu_);
  want_on_ = true;
  cv_.notify_all();
}

StatusOr<uint64_t> Mover::Off() {
  std::unique_lock<std::mutex> lock(mu_);
  want_on_ = false;
  cv_.wait(lock, [&] { return !running_; });
  CACHEPAWL_RETURN_IF_ERROR(error_);
  return std::exchange(moved_, 0);
}

void Mover::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || want_on_; });
    if (stop_) return;
    running_ = true;
    Wait previous;
    while (error_.ok()) {
      const bool more = want_on_ && !stop_;
      lock.unlock();
      Status error;
      uint64_t done = 0;
      Wait next;
      if (more) {
        StatusOr<Wait> started = start_();
        if (started.ok()) {
          next = std::move(started).value();
        } else {
          error = started.status();
        }
      }
      if (error.ok()) {
        if (previous) {
          error = previous();
          if (error.ok()) done = bytes_per_move_;
        }
        if (error.ok()) previous = std::move(next);
      }
      lock.lock();
      moved_ += done;
      if (!error.ok()) error_ = error;
      if (!more) break;
    }
    running_ = false;
    cv_.notify_all();
  }
}

// ---------------------------------------------------------------------------------------------
// MeasureInterference

StatusOr<Interference> MeasureInterference(Matmul& mm, Mover& mover, int products,
                                           double period_s) {
  using Span = std::pair<double, double>;
  std::vector<Span> on;
  uint64_t moved = 0;
  double on_seconds = 0;
  const auto sleep = [](double s) {
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
  };
  CACHEPAWL_RETURN_IF_ERROR(mm.StartTimeline(products));
  const int warmup = std::min(100, products / 4);
  // A CUDA error while waiting for a product ends the measurement (else the loops would spin).
  for (;;) {
    CACHEPAWL_ASSIGN_OR_RETURN(const bool warm, mm.Finished(warmup));
    if (warm) break;
    sleep(1e-3);
  }
  for (;;) {
    CACHEPAWL_ASSIGN_OR_RETURN(const bool done, mm.Finished(products - 1));
    if (done) break;
    const double start = Matmul::SteadyNow();
    mover.On();
    sleep(period_s);
    CACHEPAWL_ASSIGN_OR_RETURN(const uint64_t moved_now, mover.Off());
    moved += moved_now;
    const double end = Matmul::SteadyNow();
    on.emplace_back(start, end);
    on_seconds += end - start;
    sleep(period_s);
  }
  CACHEPAWL_ASSIGN_OR_RETURN(const std::vector<Span> spans, mm.Spans());
  std::vector<double> with, alone, alone_parity[2];
  for (const Span& p : spans) {
    if (on.empty() || p.first < on.front().first || p.second > on.back().second) continue;
    size_t before = 0;  // on-periods that ended before this product started
    bool inside = false, touches = false;
    for (const Span& o : on) {
      if (o.second + 1e-3 <= p.first) ++before;
      if (p.first >= o.first + 1e-3 && p.second <= o.second) inside = true;
      if (p.second > o.first - 1e-3 && p.first < o.second + 1e-3) touches = true;
    }
    const double len = p.second - p.first;
    if (inside) {
      with.push_back(len);
    } else if (!touches) {
      alone.push_back(len);
      alone_parity[before % 2].push_back(len);
    }
  }
  Interference r;
  r.with_products = with.size();
  r.alone_products = alone.size();
  if (!with.empty() && !alone.empty()) {
    r.slowdown_pct = (Median(with) / Median(alone) - 1) * 100;
  }
  if (!alone_parity[0].empty() && !alone_parity[1].empty()) {
    r.noise_pct = (Median(alone_parity[1]) / Median(alone_parity[0]) - 1) * 100;
  }
  r.gbps = on_seconds > 0 ? static_cast<double>(moved) / on_seconds / 1e9 : 0;
  return r;
}

}  // namespace cachepawl::tools
