// cachepawl bench transfer [--scenarios LIST] [--paths LIST] [--iters N] [--matmuls N]
//                          [--period-ms MS] [--ctas N] [--priority P] [--no-coalesce]
//                          [--staging-mib N] [--staging-chunks N] [--json]
//
// The device<->host data path on a GPU, in one run, per scenario (a layout and a kind: KV pages
// of Llama-3.1-8B and Jamba with 16-token pages; Mamba states of 1, 16 and 128 MiB), with units
// scattered at random over layer-first device pools:
//   ours           TransferEngine, default path (gather/scatter kernel + staged copy engines)
//   ours_block     TransferEngine on a block-contiguous pool (whole records, copy engines only)
//   memcpy_piece   one cudaMemcpyAsync per page (or state) per layer per K/V (conv/SSM) piece
//   memcpy_batch   cudaMemcpyBatchAsync of the same pieces
//   contiguous     one cudaMemcpyAsync of the same total bytes: the link's limit
// each device->host (d2h), host->device (h2d) and both at once (both); GB/s, the ratio to the
// contiguous limit measured in the same run, and the slowdown of a bf16 8192x8192 matrix-product
// loop on another stream while the path moves data both ways (cuBLAS, loaded with dlopen; a
// tiled kernel without tensor cores when cuBLAS cannot be loaded, said in the output).
// Every timed iteration starts from poisoned destinations, sources are random, and after the
// last iteration of every path and direction every destination byte is compared (exit 1 on a
// mismatch). Without a GPU it says so and exits 1.
#include <dlfcn.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/gpu_runtime.h"
#include "cuda/transfer_kernels.h"
#include "store/model_layout.h"
#include "tiers/device_pool.h"
#include "tiers/host_arena.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "transfer/transfer_engine.h"

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl::tools {
namespace {

#if CACHEPAWL_HAVE_CUDA

constexpr uint8_t kHostPoison = 0xA5;
constexpr uint8_t kDevicePoison = 0x5A;

struct Failure {
  std::string what;
};

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Failure{std::string(what) + ": " + cudaGetErrorString(e)};
}
void Check(const Status& s, const char* what) {
  if (!s.ok()) throw Failure{std::string(what) + ": " + s.ToString()};
}

void FillRandom(std::byte* p, uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<std::byte>(rng());
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ---------------------------------------------------------------------------------------------
// The matrix-product loop: cuBLAS through dlopen, or a tiled kernel.
class Matmul {
 public:
  explicit Matmul(int n) : n_(n) {
    const size_t bytes = size_t(n) * n * 2;
    for (void** p : {&a_, &b_, &c_}) Check(cudaMalloc(p, bytes), "cudaMalloc matmul");
    std::vector<std::byte> host(bytes);
    // Random bf16 in [-1, 1): sign, exponent 126 or less, random mantissa.
    std::mt19937 rng(3);
    for (size_t i = 0; i < bytes; i += 2) {
      const uint16_t v =
          static_cast<uint16_t>(((rng() & 1) << 15) | ((120 + rng() % 7) << 7) | (rng() & 0x7F));
      std::memcpy(&host[i], &v, 2);
    }
    Check(cudaMemcpy(a_, host.data(), bytes, cudaMemcpyHostToDevice), "matmul A");
    Check(cudaMemcpy(b_, host.data(), bytes, cudaMemcpyHostToDevice), "matmul B");
    Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "matmul stream");
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      lib_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib_ != nullptr) {
        library_ = name;
        break;
      }
    }
    if (lib_ != nullptr) {
      auto create = reinterpret_cast<int (*)(void**)>(dlsym(lib_, "cublasCreate_v2"));
      auto set_stream =
          reinterpret_cast<int (*)(void*, cudaStream_t)>(dlsym(lib_, "cublasSetStream_v2"));
      gemm_ = reinterpret_cast<GemmEx>(dlsym(lib_, "cublasGemmEx"));
      if (create == nullptr || set_stream == nullptr || gemm_ == nullptr || create(&handle_) != 0 ||
          set_stream(handle_, stream_) != 0) {
        handle_ = nullptr;
      }
    }
    Check(cudaEventCreate(&start_), "event");
    Check(cudaEventCreate(&stop_), "event");
  }
  ~Matmul() {
    if (enqueuer_.joinable()) enqueuer_.join();
    for (cudaEvent_t e : timeline_) (void)cudaEventDestroy(e);
    (void)cudaFree(a_);
    (void)cudaFree(b_);
    (void)cudaFree(c_);
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
    (void)cudaStreamDestroy(stream_);
  }
  std::string engine() const {
    return handle_ != nullptr ? "cuBLAS GemmEx bf16 (" + library_ + ")"
                              : "tiled bf16 kernel without tensor cores (cuBLAS not loadable)";
  }
  // Enqueues `count` products and returns their GPU time in seconds.
  double Run(int count) {
    Check(cudaEventRecord(start_, stream_), "record");
    for (int i = 0; i < count; ++i) Product();
    Check(cudaEventRecord(stop_, stream_), "record");
    Check(cudaEventSynchronize(stop_), "matmul sync");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start_, stop_), "elapsed");
    return ms / 1e3;
  }

  // Starts `count` products, each followed by a timing event, enqueued by a thread of their own
  // (enqueueing blocks once the launch queue is full), and returns at once. Finished(i): product
  // i (0-based) has run. Spans(): each product's [start, end] on the CPU's steady clock
  // (seconds), mapped through a reference event that completed just before the first.
  void StartTimeline(int count) {
    Check(cudaStreamSynchronize(stream_), "matmul sync");
    while (timeline_.size() < static_cast<size_t>(count) + 1) {
      cudaEvent_t e;
      Check(cudaEventCreate(&e), "event");
      timeline_.push_back(e);
    }
    timeline_count_ = count;
    enqueued_ = 0;
    Check(cudaEventRecord(timeline_[0], stream_), "record");
    Check(cudaEventSynchronize(timeline_[0]), "reference event");
    timeline_ref_ = SteadyNow();
    enqueue_error_.clear();
    enqueuer_ = std::thread([this, count] {
      try {
        for (int i = 0; i < count; ++i) {
          Product();
          Check(cudaEventRecord(timeline_[i + 1], stream_), "record");
          enqueued_.store(i + 1);
        }
      } catch (const Failure& f) {
        enqueue_error_ = f.what;
        enqueued_.store(count);
      }
    });
  }
  bool Finished(int i) const {
    return enqueued_.load() > i && cudaEventQuery(timeline_[i + 1]) == cudaSuccess;
  }
  std::vector<std::pair<double, double>> Spans() {
    enqueuer_.join();
    if (!enqueue_error_.empty()) throw Failure{enqueue_error_};
    Check(cudaEventSynchronize(timeline_[timeline_count_]), "matmul sync");
    std::vector<std::pair<double, double>> spans;
    double prev = timeline_ref_;
    for (int i = 1; i <= timeline_count_; ++i) {
      float ms = 0;
      Check(cudaEventElapsedTime(&ms, timeline_[0], timeline_[i]), "elapsed");
      const double end = timeline_ref_ + ms / 1e3;
      spans.emplace_back(prev, end);
      prev = end;
    }
    return spans;
  }
  static double SteadyNow() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  using GemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int,
                         const void*, int, int, const void*, void*, int, int, int, int);
  void Product() {
    if (handle_ != nullptr) {
      const float alpha = 1.f, beta = 0.f;
      if (gemm_(handle_, 0, 0, n_, n_, n_, &alpha, a_, 14, n_, b_, 14, n_, &beta, c_, 14, n_, 68,
                -1) != 0) {
        throw Failure{"cublasGemmEx failed"};
      }
    } else {
      Check(static_cast<cudaError_t>(cuda::LaunchBf16Matmul(a_, b_, c_, n_, stream_)), "matmul");
    }
  }
  int n_;
  void *a_ = nullptr, *b_ = nullptr, *c_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* lib_ = nullptr;
  std::string library_;
  void* handle_ = nullptr;
  GemmEx gemm_ = nullptr;
  std::vector<cudaEvent_t> timeline_;  // [0] is the reference, [i] follows product i
  int timeline_count_ = 0;
  double timeline_ref_ = 0;
  std::atomic<int> enqueued_{0};
  std::thread enqueuer_;
  std::string enqueue_error_;  // written by enqueuer_ before it ends
};

// Moves data on its own thread while switched on: from On() until Off() it keeps two
// iterations in flight (`start` enqueues one and returns what waits for it; each moves
// `bytes_per_move`), as an engine streaming pages keeps its queue non-empty. Off() returns once
// the iterations in flight have ended.
class Mover {
 public:
  using Start = std::function<std::function<void()>()>;
  Mover(Start start, uint64_t bytes_per_move)
      : start_(std::move(start)), bytes_per_move_(bytes_per_move), thread_([this] { Loop(); }) {}
  ~Mover() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void On() {
    std::lock_guard<std::mutex> lock(mu_);
    want_on_ = true;
    cv_.notify_all();
  }
  // Returns the bytes moved since the last Off(); throws what a move threw.
  uint64_t Off() {
    std::unique_lock<std::mutex> lock(mu_);
    want_on_ = false;
    cv_.wait(lock, [&] { return !running_; });
    if (!error_.empty()) throw Failure{error_};
    return std::exchange(moved_, 0);
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || want_on_; });
      if (stop_) return;
      running_ = true;
      std::function<void()> previous;
      while (error_.empty()) {
        const bool more = want_on_ && !stop_;
        lock.unlock();
        std::string error;
        uint64_t done = 0;
        try {
          std::function<void()> next = more ? start_() : nullptr;
          if (previous) {
            previous();
            done = bytes_per_move_;
          }
          previous = std::move(next);
        } catch (const Failure& f) {
          error = f.what;
        }
        lock.lock();
        moved_ += done;
        if (!error.empty()) error_ = error;
        if (!more) break;
      }
      running_ = false;
      cv_.notify_all();
    }
  }

  const Start start_;
  const uint64_t bytes_per_move_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool want_on_ = false;  // guarded by mu_
  bool running_ = false;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  uint64_t moved_ = 0;    // guarded by mu_
  std::string error_;     // guarded by mu_
  std::thread thread_;
};

struct Interference {
  double slowdown_pct = 0;  // median product time with the path moving / alone, minus 1
  double noise_pct = 0;     // the same between alone products of alternate off-periods
  double gbps = 0;          // moved while on (both directions)
  size_t with_products = 0, alone_products = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One continuous stream of `products` matrix products. After a warm-up (a quarter of them, at
// most 100: the GPU reaches its power limit), `mover` is switched on and off every `period_s`.
// Products that ran wholly inside an on-period (from 1 ms after it started) are "with", those
// wholly inside an off-period between two on-periods (1 ms clear of both) are "alone"; the
// slowdown compares their medians. The loop's speed wanders by several percent over tens of
// milliseconds on a GPU at its power limit; alternating hits both classes alike, and the same
// comparison between alone products of even and odd off-periods is reported as the noise.
Interference MeasureInterference(Matmul& mm, Mover& mover, int products, double period_s) {
  using Span = std::pair<double, double>;
  std::vector<Span> on;
  uint64_t moved = 0;
  double on_seconds = 0;
  const auto sleep = [](double s) {
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
  };
  mm.StartTimeline(products);
  const int warmup = std::min(100, products / 4);
  while (!mm.Finished(warmup)) sleep(1e-3);
  while (!mm.Finished(products - 1)) {
    const double start = Matmul::SteadyNow();
    mover.On();
    sleep(period_s);
    moved += mover.Off();
    const double end = Matmul::SteadyNow();
    on.emplace_back(start, end);
    on_seconds += end - start;
    sleep(period_s);
  }
  const std::vector<Span> spans = mm.Spans();
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

// ---------------------------------------------------------------------------------------------
struct ScenarioSpec {
  std::string name;
  ModelLayout layout;
  Kind kind;
  uint64_t units;       // per operation
  uint64_t pool_slots;  // sources in [0, pool/2), destinations in [pool/2, pool)
};

ModelLayout MambaLayout(uint64_t mib) {
  // 32 SSM layers (8 for 1 MiB) of conv [C, 3] bf16 + state [R, 16] fp32 summing to `mib` MiB.
  ModelLayout l;
  const uint32_t layers = mib == 1 ? 8 : 32;
  l.model = "bench-mamba-" + std::to_string(mib) + "MiB";
  l.num_layers = layers;
  const uint64_t per_layer = (mib << 20) / layers;
  const uint64_t conv_dim = per_layer / 8 / 6 / 8 * 8;  // conv takes ~1/8 of the layer
  const uint64_t conv_bytes = conv_dim * 3 * 2;
  const uint64_t rows = (per_layer - conv_bytes) / 64;
  for (uint32_t i = 0; i < layers; ++i) {
    l.ssm_layers.push_back({i, "mamba2", {conv_dim, 3}, DType::kBf16, {rows, 16}, DType::kFp32});
  }
  return l;
}

std::vector<ScenarioSpec> AllScenarios() {
  std::vector<ScenarioSpec> s;
  s.push_back({"llama-3.1-8b kv", LayoutPreset("llama-3.1-8b", 16).value(), Kind::kKV, 256, 1024});
  ModelLayout jamba_kv = LayoutPreset("jamba-v0.1", 16).value();
  jamba_kv.ssm_layers.clear();  // its KV pages alone (its states: the Mamba scenarios)
  s.push_back({"jamba-v0.1 kv", jamba_kv, Kind::kKV, 2048, 8192});
  s.push_back({"mamba 1MiB", MambaLayout(1), Kind::kMamba, 512, 1024});
  s.push_back({"mamba 16MiB", MambaLayout(16), Kind::kMamba, 32, 64});
  s.push_back({"mamba 128MiB", MambaLayout(128), Kind::kMamba, 4, 8});
  return s;
}

struct Row {
  std::string scenario, path, direction;
  uint64_t unit_bytes = 0, units = 0, bytes = 0;
  double gbps = 0, ratio = 0;
  bool has_slowdown = false;  // both only
  double matmul_slowdown_pct = 0;
  double matmul_noise_pct = 0;
  double transfer_gbps_during_matmul = 0;
  bool verified = false;
};

// One scenario's buffers: layer-first and block-contiguous pools, pinned host slots, and a
// contiguous pair for the limit.
class Scenario {
 public:
  Scenario(const ScenarioSpec& spec, const TransferEngineOptions& engine_options, uint64_t seed)
      : spec_(spec), l_(spec.layout), rec_(l_.RecordBytes(spec.kind)) {
    const uint64_t n = spec.pool_slots;
    // Layer-first pool: one tensor per segment kind per layer.
    auto segs = Segments();
    std::vector<std::byte*> k, v, conv, ssm;
    for (size_t i = 0; i < segs.size(); ++i) {
      void* p = nullptr;
      Check(cudaMalloc(&p, segs[i].bytes * n), "cudaMalloc pool");
      tensors_.push_back({static_cast<std::byte*>(p), segs[i].bytes});
      (i % 2 == 0 ? (spec.kind == Kind::kKV ? k : conv) : (spec.kind == Kind::kKV ? v : ssm))
          .push_back(static_cast<std::byte*>(p));
    }
    const bool kv = spec.kind == Kind::kKV;
    layer_first_ =
        DevicePoolDescription::LayerFirst(l_, 0, kv ? n : 0, k, v, false, kv ? 0 : n, conv, ssm);
    void* b = nullptr;
    Check(cudaMalloc(&b, rec_ * n), "cudaMalloc block pool");
    block_base_ = static_cast<std::byte*>(b);
    block_ = DevicePoolDescription::BlockContiguous(l_, 0, kv ? block_base_ : nullptr, kv ? n : 0,
                                                    0, kv ? nullptr : block_base_, kv ? 0 : n, 0);
    // Random lower halves (sources), mirrored on the host for the checks.
    for (size_t i = 0; i < tensors_.size(); ++i) {
      mirrors_.emplace_back(tensors_[i].second * (n / 2));
      FillRandom(mirrors_.back().data(), mirrors_.back().size(), seed + i);
      Check(cudaMemcpy(tensors_[i].first, mirrors_.back().data(), mirrors_.back().size(),
                       cudaMemcpyHostToDevice),
            "fill pool");
    }
    block_mirror_.resize(rec_ * (n / 2));
    FillRandom(block_mirror_.data(), block_mirror_.size(), seed + 999);
    Check(
        cudaMemcpy(block_base_, block_mirror_.data(), block_mirror_.size(), cudaMemcpyHostToDevice),
        "fill block pool");
    // Units: random distinct sources and destinations.
    std::mt19937_64 rng(seed);
    std::vector<uint64_t> lo(n / 2), hi(n / 2);
    for (uint64_t i = 0; i < n / 2; ++i) lo[i] = i, hi[i] = n / 2 + i;
    std::shuffle(lo.begin(), lo.end(), rng);
    std::shuffle(hi.begin(), hi.end(), rng);
    src_.assign(lo.begin(), lo.begin() + spec.units);
    dst_.assign(hi.begin(), hi.begin() + spec.units);
    // Pinned host slots: W (WriteBack destinations) and R (LoadBack sources, random).
    HostArenaOptions ho;
    ho.bytes = 2 * spec.units * RecordSlotBytes(l_, spec.kind) + (64 << 20);
    ho.pin = HostArenaOptions::Pin::kOn;
    arena_ = HostArena::Open(l_, ho).value();
    Check(arena_->WaitUntilPinned(), "pinning the host arena");
    pin_seconds_ = arena_->pin_seconds();
    for (uint64_t i = 0; i < spec.units; ++i) w_.push_back(arena_->Allocate(spec.kind).value());
    for (uint64_t i = 0; i < spec.units; ++i) {
      r_.push_back(arena_->Allocate(spec.kind).value());
      FillRandom(arena_->SlotPayload(r_.back()), rec_, seed * 7 + i);
    }
    engine_ = TransferEngine::Create(l_, layer_first_, arena_.get(), engine_options).value();
    engine_block_ = TransferEngine::Create(l_, block_, arena_.get(), engine_options).value();
    // Pieces for the per-piece baselines (the same bytes, the same host record positions).
    for (uint64_t i = 0; i < spec.units; ++i) {
      for (size_t t = 0; t < tensors_.size(); ++t) {
        const uint64_t sb = segs[t].bytes;
        wb_pieces_.push_back(
            {tensors_[t].first + src_[i] * sb, arena_->SlotPayload(w_[i]) + segs[t].offset, sb});
        lb_pieces_.push_back(
            {tensors_[t].first + dst_[i] * sb, arena_->SlotPayload(r_[i]) + segs[t].offset, sb});
      }
    }
    // Contiguous limit buffers.
    const uint64_t total = rec_ * spec.units;
    void* p = nullptr;
    Check(cudaMalloc(&p, 2 * total), "cudaMalloc contiguous");
    contig_dev_ = static_cast<std::byte*>(p);
    Check(cudaHostAlloc(&p, 2 * total, cudaHostAllocPortable), "cudaHostAlloc contiguous");
    contig_host_ = static_cast<std::byte*>(p);
    FillRandom(contig_host_ + total, total, seed + 5);  // h2d source
    std::vector<std::byte> tmp(total);
    FillRandom(tmp.data(), total, seed + 6);
    contig_d2h_expected_ = tmp;
    Check(cudaMemcpy(contig_dev_, tmp.data(), total, cudaMemcpyHostToDevice), "fill contiguous");
    for (cudaStream_t* s : {&s_d2h_, &s_h2d_})
      Check(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "stream");
  }
  ~Scenario() {
    engine_.reset();
    engine_block_.reset();
    for (auto& [p, b] : tensors_) (void)cudaFree(p);
    (void)cudaFree(block_base_);
    (void)cudaFree(contig_dev_);
    (void)cudaFreeHost(contig_host_);
    (void)cudaStreamDestroy(s_d2h_);
    (void)cudaStreamDestroy(s_h2d_);
    for (auto& pair : events_) {
      for (cudaEvent_t e : pair) {
        if (e != nullptr) (void)cudaEventDestroy(e);
      }
    }
  }

  uint64_t bytes() const { return rec_ * spec_.units; }
  uint64_t record_bytes() const { return rec_; }
  double pin_seconds() const { return pin_seconds_; }

  // Poisons the destinations of the given directions (outside timing).
  void Poison(const std::string& path, bool d2h, bool h2d) {
    if (path == "contiguous") {
      if (d2h) std::memset(contig_host_, kHostPoison, bytes());
      if (h2d) Check(cudaMemset(contig_dev_ + bytes(), kDevicePoison, bytes()), "poison");
    } else {
      if (d2h) {
        for (HostSlotId w : w_) std::memset(arena_->SlotPayload(w), kHostPoison, rec_);
      }
      if (h2d) {
        const uint64_t n = spec_.pool_slots;
        if (path == "ours_block") {
          Check(cudaMemset(block_base_ + rec_ * (n / 2), kDevicePoison, rec_ * (n - n / 2)),
                "poison");
        } else {
          for (auto& [p, b] : tensors_)
            Check(cudaMemset(p + b * (n / 2), kDevicePoison, b * (n - n / 2)), "poison");
        }
      }
    }
    Check(cudaDeviceSynchronize(), "poison sync");
  }

  // One iteration of `path` in the given directions, enqueued: Wait() returns once it is done.
  // Iterations of one path run in order (the engine's queues, or the path's streams).
  class InFlight {
   public:
    void Wait() {
      Check(fw_.Wait(), "ours d2h");
      Check(fl_.Wait(), "ours h2d");
      for (cudaEvent_t e : events_) {
        if (e != nullptr) Check(cudaEventSynchronize(e), "sync");
      }
    }

   private:
    friend class Scenario;
    Fence fw_, fl_;
    cudaEvent_t events_[2] = {nullptr, nullptr};
  };
  InFlight Start(const std::string& path, bool d2h, bool h2d) {
    InFlight f;
    if (path == "ours" || path == "ours_block") {
      TransferEngine& e = path == "ours" ? *engine_ : *engine_block_;
      if (d2h) f.fw_ = e.Submit(Op(Direction::kWriteBack));
      if (h2d) f.fl_ = e.Submit(Op(Direction::kLoadBack));
      return f;
    }
    if (path == "memcpy_piece") {
      if (d2h) {
        for (const Piece& p : wb_pieces_)
          Check(cudaMemcpyAsync(p.host, p.dev, p.bytes, cudaMemcpyDeviceToHost, s_d2h_),
                "memcpy d2h");
      }
      if (h2d) {
        for (const Piece& p : lb_pieces_)
          Check(cudaMemcpyAsync(p.dev, p.host, p.bytes, cudaMemcpyHostToDevice, s_h2d_),
                "memcpy h2d");
      }
    } else if (path == "memcpy_batch") {
      auto batch = [&](const std::vector<Piece>& pieces, bool to_host, cudaStream_t s) {
        std::vector<void*> dsts;
        std::vector<const void*> srcs;
        std::vector<size_t> sizes;
        for (const Piece& p : pieces) {
          dsts.push_back(to_host ? static_cast<void*>(p.host) : static_cast<void*>(p.dev));
          srcs.push_back(to_host ? static_cast<const void*>(p.dev)
                                 : static_cast<const void*>(p.host));
          sizes.push_back(p.bytes);
        }
        cudaMemcpyAttributes attr{};
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t idx = 0;
        Check(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attr, &idx,
                                   1, s),
              "cudaMemcpyBatchAsync");
      };
      if (d2h) batch(wb_pieces_, true, s_d2h_);
      if (h2d) batch(lb_pieces_, false, s_h2d_);
    } else {  // contiguous
      if (d2h)
        Check(cudaMemcpyAsync(contig_host_, contig_dev_, bytes(), cudaMemcpyDeviceToHost, s_d2h_),
              "contig d2h");
      if (h2d)
        Check(cudaMemcpyAsync(contig_dev_ + bytes(), contig_host_ + bytes(), bytes(),
                              cudaMemcpyHostToDevice, s_h2d_),
              "contig h2d");
    }
    // Events of the last two iterations alternate: at most two are in flight.
    cudaEvent_t* ev = events_[next_events_];
    next_events_ ^= 1;
    for (int i = 0; i < 2; ++i) {
      if (ev[i] == nullptr)
        Check(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming), "event");
    }
    Check(cudaEventRecord(ev[0], s_d2h_), "record");
    Check(cudaEventRecord(ev[1], s_h2d_), "record");
    f.events_[0] = ev[0];
    f.events_[1] = ev[1];
    return f;
  }

  // Runs one iteration of `path` in the given directions; returns wall seconds.
  double Run(const std::string& path, bool d2h, bool h2d) {
    const auto t0 = std::chrono::steady_clock::now();
    Start(path, d2h, h2d).Wait();
    return Seconds(t0, std::chrono::steady_clock::now());
  }

  // Compares every destination byte of the last iteration; returns "" or what differs.
  std::string Verify(const std::string& path, bool d2h, bool h2d) {
    const uint64_t n = spec_.pool_slots;
    if (path == "contiguous") {
      if (d2h && std::memcmp(contig_host_, contig_d2h_expected_.data(), bytes()) != 0)
        return "contiguous d2h";
      if (h2d) {
        std::vector<std::byte> got(bytes());
        Check(cudaMemcpy(got.data(), contig_dev_ + bytes(), bytes(), cudaMemcpyDeviceToHost),
              "read");
        if (std::memcmp(got.data(), contig_host_ + bytes(), bytes()) != 0) return "contiguous h2d";
      }
      return "";
    }
    const bool block = path == "ours_block";
    auto segs = Segments();
    if (d2h) {
      std::vector<std::byte> expect(rec_);
      for (uint64_t i = 0; i < spec_.units; ++i) {
        if (block) {
          std::memcpy(expect.data(), block_mirror_.data() + src_[i] * rec_, rec_);
        } else {
          for (size_t t = 0; t < segs.size(); ++t) {
            std::memcpy(expect.data() + segs[t].offset,
                        mirrors_[t].data() + src_[i] * segs[t].bytes, segs[t].bytes);
          }
        }
        if (std::memcmp(arena_->SlotPayload(w_[i]), expect.data(), rec_) != 0) {
          return path + " d2h: unit " + std::to_string(i) + " differs";
        }
      }
    }
    if (h2d) {
      const uint64_t half = n - n / 2;
      if (block) {
        std::vector<std::byte> got(rec_ * half), expect(rec_ * half, std::byte{kDevicePoison});
        Check(cudaMemcpy(got.data(), block_base_ + rec_ * (n / 2), got.size(),
                         cudaMemcpyDeviceToHost),
              "read");
        for (uint64_t i = 0; i < spec_.units; ++i) {
          std::memcpy(expect.data() + (dst_[i] - n / 2) * rec_, arena_->SlotPayload(r_[i]), rec_);
        }
        if (got != expect) return path + " h2d differs";
      } else {
        for (size_t t = 0; t < segs.size(); ++t) {
          const uint64_t sb = segs[t].bytes;
          std::vector<std::byte> got(sb * half), expect(sb * half, std::byte{kDevicePoison});
          Check(cudaMemcpy(got.data(), tensors_[t].first + sb * (n / 2), got.size(),
                           cudaMemcpyDeviceToHost),
                "read");
          for (uint64_t i = 0; i < spec_.units; ++i) {
            std::memcpy(expect.data() + (dst_[i] - n / 2) * sb,
                        arena_->SlotPayload(r_[i]) + segs[t].offset, sb);
          }
          if (got != expect) return path + " h2d: segment " + std::to_string(t) + " differs";
        }
      }
    }
    return "";
  }

 private:
  struct Piece {
    std::byte* dev;
    std::byte* host;
    uint64_t bytes;
  };
  std::vector<RecordSegment> Segments() const {
    std::vector<RecordSegment> s;
    if (spec_.kind == Kind::kKV) {
      for (size_t a = 0; a < l_.attention_layers.size(); ++a) {
        s.push_back(l_.KSegment(a));
        s.push_back(l_.VSegment(a));
      }
    } else {
      for (size_t i = 0; i < l_.ssm_layers.size(); ++i) {
        s.push_back(l_.ConvSegment(i));
        s.push_back(l_.SsmSegment(i));
      }
    }
    return s;
  }
  Operation Op(Direction d) const {
    Operation op;
    op.direction = d;
    for (uint64_t i = 0; i < spec_.units; ++i) {
      if (d == Direction::kWriteBack) {
        op.units.push_back({spec_.kind, {Tier::kDevice, src_[i]}, {Tier::kHost, w_[i]}});
      } else {
        op.units.push_back({spec_.kind, {Tier::kHost, r_[i]}, {Tier::kDevice, dst_[i]}});
      }
    }
    return op;
  }

  ScenarioSpec spec_;
  ModelLayout l_;
  uint64_t rec_;
  std::vector<std::pair<std::byte*, uint64_t>> tensors_;  // base, bytes per slot
  std::vector<std::vector<std::byte>> mirrors_;
  std::byte* block_base_ = nullptr;
  std::vector<std::byte> block_mirror_;
  DevicePoolDescription layer_first_, block_;
  std::vector<uint64_t> src_, dst_;
  std::unique_ptr<HostArena> arena_;
  double pin_seconds_ = 0;
  std::vector<HostSlotId> w_, r_;
  std::unique_ptr<TransferEngine> engine_, engine_block_;
  std::vector<Piece> wb_pieces_, lb_pieces_;
  std::byte* contig_dev_ = nullptr;
  std::byte* contig_host_ = nullptr;
  std::vector<std::byte> contig_d2h_expected_;
  cudaStream_t s_d2h_ = nullptr, s_h2d_ = nullptr;
  cudaEvent_t events_[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  int next_events_ = 0;
};

int RunBenchTransfer(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Benchmarks the device<->host transfer engine against per-page copies, "
      "cudaMemcpyBatchAsync and the link's contiguous limit, with a matrix-product "
      "interference loop.",
      "cachepawl bench transfer"};
  std::string scenarios = "all";
  const TransferEngineOptions defaults;
  int iters = 5, matmuls = 800;
  double period_ms = 40;
  uint32_t ctas = defaults.kernel_ctas;
  uint64_t staging_mib = defaults.staging_bytes >> 20;
  bool json = false;
  bool no_coalesce = false;
  std::string path_list = "all";
  app.add_option("--scenarios", scenarios,
                 "comma-separated subset of: llama-kv, jamba-kv, mamba-1, mamba-16, mamba-128 "
                 "(default all)");
  app.add_option("--iters", iters, "timed iterations per path and direction (median; default 5)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--matmuls", matmuls,
                 "products in each interference measurement (default 800; 0: skip)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--period-ms", period_ms,
                 "interference: the path is switched on and off every this many ms (default 40)")
      ->check(CLI::Range(5.0, 10000.0));
  app.add_option("--ctas", ctas,
                 "gather/scatter kernel CTAs (default: the engine's, " +
                     std::to_string(defaults.kernel_ctas) + ")")
      ->check(CLI::Range(0u, 65535u));
  app.add_option("--staging-mib", staging_mib,
                 "staging MiB per direction (default: the engine's, " +
                     std::to_string(defaults.staging_bytes >> 20) + ")")
      ->check(CLI::Range(uint64_t{1}, uint64_t{16384}));
  uint32_t staging_chunks = defaults.staging_chunks;
  app.add_option("--staging-chunks", staging_chunks,
                 "staging ring chunks per direction (default: the engine's, " +
                     std::to_string(defaults.staging_chunks) + ")")
      ->check(CLI::Range(2u, 64u));
  app.add_flag("--json", json, "print rows as JSON");
  app.add_option("--paths", path_list,
                 "comma-separated subset of: ours, ours_block, memcpy_piece, memcpy_batch "
                 "(contiguous always runs; default all)");
  int priority = defaults.loadback_priority;
  app.add_option("--priority", priority,
                 "CUDA priority of the engine's streams (default: the engine's, " +
                     std::to_string(defaults.loadback_priority) +
                     "; 0 is the lowest, -5 the highest on an H100)")
      ->check(CLI::Range(-100, 100));
  app.add_flag("--no-coalesce", no_coalesce,
               "engine option coalesce_copies = false (one copy per record piece)");
  if (auto exit = ParseArgs(app, args, io)) return *exit;
  std::map<std::string, int> names = {
      {"llama-kv", 0}, {"jamba-kv", 1}, {"mamba-1", 2}, {"mamba-16", 3}, {"mamba-128", 4}};
  std::vector<int> chosen;
  if (scenarios == "all") {
    chosen = {0, 1, 2, 3, 4};
  } else {
    std::stringstream ss(scenarios);
    for (std::string w; std::getline(ss, w, ',');) {
      auto it = names.find(w);
      if (it == names.end()) {
        io.err << "cachepawl bench transfer: --scenarios: unknown '" << w << "'\n";
        return kExitUsage;
      }
      chosen.push_back(it->second);
    }
  }
  TransferEngineOptions eo;
  eo.mode = TransferEngineOptions::Mode::kGpu;
  eo.kernel_ctas = ctas;
  eo.staging_bytes = staging_mib << 20;
  eo.staging_chunks = staging_chunks;
  if (Status v = eo.Validate(); !v.ok()) {
    io.err << "cachepawl bench transfer: " << v.ToString() << "\n";
    return kExitUsage;
  }
  eo.coalesce_copies = !no_coalesce;
  eo.writeback_priority = eo.loadback_priority = priority;
  std::vector<std::string> paths;
  if (path_list == "all") {
    paths = {"ours", "ours_block", "memcpy_piece", "memcpy_batch"};
  } else {
    std::stringstream ss(path_list);
    for (std::string w; std::getline(ss, w, ',');) {
      if (w != "ours" && w != "ours_block" && w != "memcpy_piece" && w != "memcpy_batch") {
        io.err << "cachepawl bench transfer: --paths: unknown '" << w << "'\n";
        return kExitUsage;
      }
      paths.push_back(w);
    }
  }
  if (!cuda::GpuAvailable()) {
    io.err << "cachepawl bench transfer: needs a GPU (" << cuda::DescribeDevice(0) << ")\n";
    return kExitFailure;
  }
  paths.push_back("contiguous");
  std::vector<Row> rows;
  std::string mismatch;
  std::string matmul_engine;
  double matmul_alone_s = 0;
  try {
    Check(cuda::SetDevice(0), "device");
    Matmul mm(8192);
    matmul_engine = mm.engine();
    if (matmuls > 0) {
      mm.Run(5);  // warm-up
      std::vector<double> alone;
      for (int i = 0; i < 3; ++i) alone.push_back(mm.Run(50) / 50);
      matmul_alone_s = Median(alone);
    }
    const auto specs = AllScenarios();
    for (int si : chosen) {
      const ScenarioSpec& spec = specs[si];
      Scenario sc(spec, eo, 1234 + si);
      double limit[3] = {0, 0, 0};
      std::vector<Row> scenario_rows;
      for (const std::string& path : paths) {
        for (int d = 0; d < 3; ++d) {
          const bool d2h = d != 1, h2d = d != 0;
          sc.Poison(path, d2h, h2d);
          sc.Run(path, d2h, h2d);  // warm-up
          std::vector<double> t;
          for (int i = 0; i < iters; ++i) {
            sc.Poison(path, d2h, h2d);
            t.push_back(sc.Run(path, d2h, h2d));
          }
          const std::string bad = sc.Verify(path, d2h, h2d);
          if (!bad.empty() && mismatch.empty()) mismatch = spec.name + ": " + bad;
          Row r;
          r.scenario = spec.name;
          r.path = path;
          r.direction = d == 0 ? "d2h" : d == 1 ? "h2d" : "both";
          r.unit_bytes = sc.record_bytes();
          r.units = spec.units;
          r.bytes = sc.bytes() * (d == 2 ? 2 : 1);
          r.gbps = static_cast<double>(r.bytes) / Median(t) / 1e9;
          r.verified = bad.empty();
          if (path == "contiguous") limit[d] = r.gbps;
          scenario_rows.push_back(r);
        }
        if (matmuls > 0) {
          Mover mover(
              [&]() -> std::function<void()> {
                auto in_flight = std::make_shared<Scenario::InFlight>(sc.Start(path, true, true));
                return [in_flight] { in_flight->Wait(); };
              },
              2 * sc.bytes());
          const Interference in = MeasureInterference(mm, mover, matmuls, period_ms / 1e3);
          if (in.with_products == 0 || in.alone_products == 0) {
            throw Failure{
                "interference: no product ran wholly inside an on- or off-period "
                "(raise --matmuls or --period-ms)"};
          }
          for (Row& r : scenario_rows) {
            if (r.path == path && r.direction == "both") {
              r.has_slowdown = true;
              r.matmul_slowdown_pct = in.slowdown_pct;
              r.matmul_noise_pct = in.noise_pct;
              r.transfer_gbps_during_matmul = in.gbps;
            }
          }
        }
      }
      for (Row& r : scenario_rows) {
        const int d = r.direction == "d2h" ? 0 : r.direction == "h2d" ? 1 : 2;
        r.ratio = limit[d] > 0 ? r.gbps / limit[d] : 0;
        rows.push_back(r);
      }
      if (!json)
        io.err << "[bench transfer] " << spec.name << " done (host arena pinned in "
               << sc.pin_seconds() << " s)\n";
    }
  } catch (const Failure& f) {
    io.err << "cachepawl bench transfer: " << f.what << "\n";
    return kExitFailure;
  }
  if (json) {
    nlohmann::json out;
    out["device"] = cuda::DescribeDevice(0);
    out["matmul"] = matmul_engine;
    out["matmul_alone_ms"] = matmul_alone_s * 1e3;
    out["interference_products"] = matmuls;
    out["interference_period_ms"] = period_ms;
    out["priority"] = priority;
    out["kernel_ctas"] = ctas;
    out["staging_mib"] = staging_mib;
    out["staging_chunks"] = staging_chunks;
    out["rows"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j = {{"scenario", r.scenario},   {"path", r.path},
                          {"direction", r.direction}, {"unit_bytes", r.unit_bytes},
                          {"units", r.units},         {"bytes", r.bytes},
                          {"gbps", r.gbps},           {"ratio_to_limit", r.ratio},
                          {"verified", r.verified}};
      if (r.has_slowdown) {
        j["matmul_slowdown_pct"] = r.matmul_slowdown_pct;
        j["matmul_noise_pct"] = r.matmul_noise_pct;
        j["gbps_during_matmul"] = r.transfer_gbps_during_matmul;
      }
      out["rows"].push_back(j);
    }
    io.out << out.dump(1) << "\n";
  } else {
    io.out << "device: " << cuda::DescribeDevice(0) << "\nmatrix product: " << matmul_engine
           << ", 8192x8192x8192, " << std::fixed << std::setprecision(3) << matmul_alone_s * 1e3
           << " ms each alone\n";
    io.out << "GB/s (ratio to the contiguous limit of the same run); slowdown: matrix-product loop "
              "while the path moves data both ways, +- the same comparison between alone "
              "periods (GB/s moved meanwhile)\n";
    io.out << std::left << std::setw(17) << "scenario" << std::setw(14) << "path" << std::right
           << std::setw(16) << "d2h" << std::setw(16) << "h2d" << std::setw(16) << "both"
           << std::setw(26) << "matmul slowdown"
           << "\n";
    for (size_t i = 0; i + 2 < rows.size(); i += 3) {
      auto cell = [](const Row& r) {
        std::ostringstream s;
        s << std::fixed << std::setprecision(1) << r.gbps << " (" << std::setprecision(2) << r.ratio
          << ")";
        return s.str();
      };
      std::ostringstream slow;
      if (rows[i + 2].has_slowdown) {
        slow << std::fixed << std::setprecision(1) << rows[i + 2].matmul_slowdown_pct << "% +-"
             << std::abs(rows[i + 2].matmul_noise_pct) << " ("
             << rows[i + 2].transfer_gbps_during_matmul << ")";
      }
      io.out << std::left << std::setw(17) << rows[i].scenario << std::setw(14) << rows[i].path
             << std::right << std::setw(16) << cell(rows[i]) << std::setw(16) << cell(rows[i + 1])
             << std::setw(16) << cell(rows[i + 2]) << std::setw(26) << slow.str() << "\n";
    }
  }
  if (!mismatch.empty()) {
    io.err << "cachepawl bench transfer: WRONG BYTES: " << mismatch << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

#else  // !CACHEPAWL_HAVE_CUDA

int RunBenchTransfer(const std::vector<std::string>& args, CommandIo& io) {
  (void)args;
  io.err << "cachepawl bench transfer: built without CUDA\n";
  return kExitFailure;
}

#endif

CommandRegistration reg("bench transfer",
                        "device<->host transfer engine vs per-page copies and the link's limit",
                        &RunBenchTransfer);

}  // namespace
}  // namespace cachepawl::tools
