// The interference half of `cachepawl bench transfer`: how much a data path slows a GPU's
// compute down while it moves data. A matrix-product loop (Matmul: bf16 8192x8192 products on a
// stream of its own, cuBLAS loaded with dlopen or the fallback kernel of
// tools/bench/bench_matmul_kernel.h) runs continuously while a Mover switches the path on and off;
// MeasureInterference compares the products that ran with the path moving against those that
// ran alone. Built only with CUDA. No exceptions: every failure is a Status naming the call.
//
// Thread safety: a Matmul is driven by one thread (its timeline has an enqueuing thread of its
// own); a Mover is switched by one thread and moves on a thread of its own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/cuda_resources.h"
#include "tools/bench/bench_median.h"
#include "vocab/status.h"

namespace cachepawl::tools {

// The matrix-product loop: cuBLAS (GemmEx, bf16) through dlopen, or a tiled kernel.
class Matmul {
 public:
  // Device buffers for n x n A, B, C on the current device (A and B random bf16 in [-1, 1)),
  // a non-blocking stream, and cuBLAS when a libcublas can be loaded.
  static StatusOr<std::unique_ptr<Matmul>> Create(int n);
  ~Matmul();  // joins the enqueuer, then cublasDestroy and dlclose of the library
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // What runs the products ("cuBLAS GemmEx bf16 (libcublas.so.12)" or the kernel).
  std::string backend() const;
  // Enqueues `count` products and returns their GPU time in seconds.
  StatusOr<double> Run(int count);

  // Starts `count` products, each followed by a timing event, enqueued by a thread of their own
  // (enqueueing blocks once the launch queue is full), and returns at once. Finished(i): product
  // i (0-based) has run; a failed query of its event is the CUDA error, naming the product.
  // Spans(): each product's [start, end] on the CPU's steady clock (seconds), mapped through a
  // reference event that completed just before the first; it waits for the last product and
  // reports what failed while enqueueing.
  Status StartTimeline(int count);
  StatusOr<bool> Finished(int i) const;
  StatusOr<std::vector<std::pair<double, double>>> Spans();
  static double SteadyNow();

 private:
  using GemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int,
                         const void*, int, int, const void*, void*, int, int, int, int);
  explicit Matmul(int n) : n_(n) {}
  Status Product();
  int n_;
  cuda::DeviceBuffer a_, b_, c_;
  cuda::Stream stream_;
  cuda::Event start_, stop_;
  void* lib_ = nullptr;
  std::string library_;
  void* handle_ = nullptr;           // cublasHandle_t; destroyed by ~Matmul
  int (*destroy_)(void*) = nullptr;  // cublasDestroy_v2
  GemmEx gemm_ = nullptr;
  std::vector<cuda::Event> timeline_;  // [0] is the reference, [i] follows product i
  int timeline_count_ = 0;
  double timeline_ref_ = 0;
  std::atomic<int> enqueued_{0};
  std::thread enqueuer_;
  Status enqueue_error_;  // written by enqueuer_ before it ends
};

// Moves data on its own thread while switched on: from On() until Off() it keeps two
// iterations in flight (`start` enqueues one and returns what waits for it; each moves
// `bytes_per_move`), as an engine streaming pages keeps its queue non-empty. Off() returns once
// the iterations in flight have ended.
class Mover {
 public:
  using Wait = std::function<Status()>;
  using Start = std::function<StatusOr<Wait>()>;
  Mover(Start start, uint64_t bytes_per_move);
  ~Mover();
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;
  void On();
  // The bytes moved since the last Off(), or the first error a move returned.
  StatusOr<uint64_t> Off();

 private:
  void Loop();

  const Start start_;
  const uint64_t bytes_per_move_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool want_on_ = false;  // guarded by mu_
  bool running_ = false;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  uint64_t moved_ = 0;    // guarded by mu_
  Status error_;          // guarded by mu_
  std::thread thread_;
};

struct Interference {
  double slowdown_pct = 0;  // median product time with the path moving / alone, minus 1
  double noise_pct = 0;     // the same between alone products of alternate off-periods
  double gbps = 0;          // moved while on (both directions)
  size_t with_products = 0, alone_products = 0;
};

// One continuous stream of `products` matrix products. After a warm-up (a quarter of them, at
// most 100: the GPU reaches its power limit), `mover` is switched on and off every `period_s`.
// Products that ran wholly inside an on-period (from 1 ms after it started) are "with", those
// wholly inside an off-period between two on-periods (1 ms clear of both) are "alone"; the
// slowdown compares their medians. The loop's speed wanders by several percent over tens of
// milliseconds on a GPU at its power limit; alternating hits both classes alike, and the same
// comparison between alone products of even and odd off-periods is reported as the noise.
StatusOr<Interference> MeasureInterference(Matmul& mm, Mover& mover, int products, double period_s);

}  // namespace cachepawl::tools
