// `cachepawl bench store` (tools/bench/cmd_bench_store.cc): the pieces its files share.
//
//   bench_store_setup.cc   layouts, sizes and budgets, record content, bench-owned memory
//   bench_store_views.cc   the views through which the bench fills, poisons and checks a pool
//   bench_store_peers.cc   concurrent rounds and their timing, the DeviceMover peer and the
//                          contiguous-copy limit
//   bench_store_run.h/.cc  one layout's run through the Store: set-up, bookkeeping, rounds
//   bench_store_host.cc    the host-resident phase and the lookups
//   bench_store_disk.cc    the disk-resident phase
//   bench_store_report.cc  rows, JSON and the tables
//
// Everything here is tool code: errors are Status values, nothing throws.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_resources.h"
#include "tiers/host_arena.h"
#include "transfer/device_mover.h"
#include "transfer/transfer_unit.h"
#include "vocab/attach_options.h"
#include "vocab/device_pool.h"
#include "vocab/fence.h"
#include "vocab/internal/stage_profile.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {
class Store;
}

namespace cachepawl::tools::bench_store {

using Clock = std::chrono::steady_clock;

inline constexpr char kHybrid128Name[] = "hybrid-128mib-state";
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kLookupPromptPages = 2048;
inline constexpr uint8_t kPoison = 0x5A;
// VRAM kept out of the pools in GPU mode: the staging rings of the store's and the peer's
// device movers (2 x 256 MiB each) and CUDA's own needs.
inline constexpr uint64_t kGpuReserveBytes = uint64_t{2} << 30;

// ---- Configuration (flags, after the --quick preset is applied) ----
struct Config {
  std::vector<std::string> layout_names;
  std::vector<ModelLayout> layouts;  // resolved, same order
  std::vector<uint64_t> pages;
  std::vector<uint32_t> threads;
  std::vector<std::string> pools;  // "owned", "registered"
  uint64_t host_bytes = 0, device_bytes = 0, disk_bytes = 0;
  std::optional<uint64_t>
      host_free_target;  // StoreOptions::host_free_target_bytes (unset: default)
  int iters = 0, disk_iters = 0, lookup_iters = 0;
  std::string dir;
  bool gpu = false;  // decided once at start: a GPU is usable and --cpu was not given
  bool json = false, quick = false, dry_run = false;
  // Per-stage time per operation (vocab/internal/stage_profile.h) in rows.
  bool profile_stages = false;
  // --processes N (N >= 1): every store is an owner (Store::Serve, in this process, without
  // GPU pinning of its own) and the bench's calls go through a store attached to it
  // (Store::Attach); N - 1 more processes attach and look up without pause during the lookups.
  uint32_t processes = 0;       // 0: the store in this process (Store::Open)
  uint32_t poll_spin_us = 200;  // ServeOptions / AttachOptions::poll_spin_us of those stores
  uint32_t load_split_pages = AttachOptions().load_split_pages;  // of the attached stores
  // --mover-polling off: every device mover (the stores', the attached stores', the peer's)
  // sleeps at once on a copy's end and hands every operation to its dispatcher thread
  // (completion_spin_us = wait_spin_us = 0, inline_dispatch false), as before they polled.
  bool mover_polling = true;
  std::string self;  // this program (--processes starts it again as a lookup load)
  uint64_t seed = 1;
  // Cases not started once this many seconds have passed since `started` are skipped (0: no
  // limit): a run that must end within a window still reports what it measured.
  double max_seconds = 0;
  Clock::time_point started;
};

// The 128 MiB-state hybrid: 4 attention layers (8 KV heads of 128, bf16) and 32 Mamba-2 layers
// (128 heads of 64, d_state 128: 4 MiB of fp32 state plus the conv state each).
ModelLayout Hybrid128MiBStateLayout();
// kHybrid128Name, a preset or a JSON layout file. InvalidArgument naming `name` otherwise, or
// when the layout has no attention layer (a pure SSM layout: the bench's cases are N-page
// requests, and such a layout's requests move one state and no page).
StatusOr<ModelLayout> ResolveBenchLayout(const std::string& name);

// ---- Sizes and budgets ----
// A request of N pages moves, each way: the full-attention KV record of every page
// (Kind::kKV), the windowed layers' record (Kind::kWindowKV) of the pages a Load at its depth
// reads (the last `window_pages`; a Save keeps it for those, or for every page when the layout
// has no state: any depth is reusable then), and the state. Without windowed layers that is N
// whole KV pages and the state.
struct Sizes {
  uint64_t page_record = 0, state_record = 0;  // a whole device KV page (all layers) / a state
  uint64_t kv_record = 0, window_record = 0;   // a page's kKV and kWindowKV records
  uint64_t page_slot = 0, window_slot = 0, state_slot = 0;  // host slot bytes of each record
  uint64_t window_pages = 0;       // pages a Load takes windowed KV of (0: no windowed layers)
  bool window_every_page = false;  // a Save keeps every page's windowed KV (no state)
  bool ssm = false;
  uint64_t LoadedWindowPages(uint64_t pages) const { return std::min(pages, window_pages); }
  uint64_t SavedWindowPages(uint64_t pages) const {
    return window_every_page ? pages : LoadedWindowPages(pages);
  }
  uint64_t LoadBytes(uint64_t pages) const {
    return pages * kv_record + LoadedWindowPages(pages) * window_record + state_record;
  }
  uint64_t SaveBytes(uint64_t pages) const {
    return pages * kv_record + SavedWindowPages(pages) * window_record + state_record;
  }
  // The larger of the two (buffers are sized by it).
  uint64_t RequestBytes(uint64_t pages) const { return SaveBytes(pages); }
  uint64_t RequestSlotBytes(uint64_t pages) const {
    return pages * page_slot + SavedWindowPages(pages) * window_slot + state_slot;
  }
};
Sizes SizesOf(const ModelLayout& layout);

// Bytes of each device pool (store-owned, or the bench's own region): half of what is left of
// --device-bytes after the GPU reserve.
uint64_t PoolBytes(const Config& c);
// An upper bound of the host memory a run takes at its peak (the host phase): the store's host
// tier and the mover's arena (each at most host_bytes), the limit's host buffer (at most a pool),
// and in CPU mode the two device pools and the bench pool's memory, which are host memory too.
uint64_t HostMemoryNeed(const Config& c);
// Host tier bytes a host-phase case needs (its load prefixes and one save round in flight, with
// room for the arena's chunk and best-fit waste), and the same for a disk-phase store.
uint64_t HostPhaseTierNeed(const Sizes& s, uint32_t threads, uint64_t pages);
uint64_t DiskPhaseTierNeed(const Sizes& s, uint32_t threads, uint64_t pages);
// "" when (threads, pages) fits the budgets of the host phase (device pools, host tier, the
// peer's arena and the limit's buffers), otherwise why not, naming the flag.
std::string HostCaseFit(const Config& c, const Sizes& s, uint32_t threads, uint64_t pages);
// The same for the disk phase (adds the disk tier).
std::string DiskCaseFit(const Config& c, const Sizes& s, uint32_t threads, uint64_t pages);

// ---- Record content ----
// Seed of record `index` (pages 0..P-1, then the state at P) of `thread` in one case.
uint64_t RecordSeed(uint64_t case_seed, uint32_t thread, uint64_t index, Kind kind);
// Deterministic random bytes from `seed` (never all zero): the whole record, or its bytes
// [offset, offset + out.size()).
void FillRecord(uint64_t seed, std::span<std::byte> out);
void FillRecordAt(uint64_t seed, uint64_t offset, std::span<std::byte> out);
// Index of the first byte of `got` that differs from FillRecord(seed), or npos.
size_t FirstMismatch(uint64_t seed, std::span<const std::byte> got, uint64_t record_offset = 0);

// ---- Bench-owned memory ----
// Device memory (cudaMalloc) in GPU mode, page-aligned host memory in CPU mode; or pinned host
// memory (cudaHostAlloc) in GPU mode. Freed by the destructor.
class Memory {
 public:
  enum class Where : uint8_t { kDevice, kHost };
  static StatusOr<std::unique_ptr<Memory>> Allocate(Where where, bool gpu, uint64_t bytes);
  ~Memory();
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  std::byte* data() const { return data_; }
  uint64_t size() const { return bytes_; }

 private:
  Memory() = default;
  bool mapped_ = false;        // CPU mode: an anonymous mapping
  cuda::DeviceBuffer device_;  // GPU mode, kDevice
  cuda::PinnedBuffer pinned_;  // GPU mode, kHost
  std::byte* data_ = nullptr;
  uint64_t bytes_ = 0;
};

// Synchronous copy / fill that works on device memory in GPU mode and host memory in both.
Status CopyBytes(void* dst, const void* src, uint64_t bytes, bool gpu);
Status FillBytes(void* dst, uint8_t value, uint64_t bytes, bool gpu);
// Fills `bytes` at `dst` with random data (a tiled random block), `gpu`: dst is device memory.
Status FillRandom(std::byte* dst, uint64_t bytes, bool gpu, uint64_t seed);

// The bench's own pool region (its "engine's" KV and state tensors), one per layout: described
// layer-first (registered with the store; the registered peer) or block-contiguous (the peer of
// the store-owned pool, which DevicePoolArena lays out that way).
struct BenchPool {
  std::unique_ptr<Memory> memory;
  uint64_t num_pages = 0, num_states = 0;
  DevicePoolDescription layer_first, block;
};
StatusOr<BenchPool> MakeBenchPool(const ModelLayout& layout, bool gpu, uint64_t num_pages,
                                  uint64_t num_states);

// Reused host buffers for staging records (pinned in GPU mode, so copies to and from the device
// run at the link's speed; plain memory in CPU mode, faulted in once). Thread-safe.
class HostBuffers {
 public:
  explicit HostBuffers(bool gpu) : gpu_(gpu) {}
  ~HostBuffers();
  HostBuffers(const HostBuffers&) = delete;
  HostBuffers& operator=(const HostBuffers&) = delete;
  // One caller's buffer, returned to the pool when the lease ends.
  class Lease {
   public:
    explicit Lease(HostBuffers* owner) : owner_(owner) {}
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    // At least `bytes` bytes (the previous contents are lost when it has to grow).
    StatusOr<std::byte*> Get(uint64_t bytes);

   private:
    HostBuffers* const owner_;
    std::unique_ptr<Memory> memory_;
  };

 private:
  StatusOr<std::unique_ptr<Memory>> Take(uint64_t bytes);
  void Give(std::unique_ptr<Memory> m);
  const bool gpu_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Memory>> free_;  // guarded by mu_
};

// Records staged or checked at once: runs of consecutive slots are cut at this many bytes, and
// a thread's request is split into pieces of this size for the workers that check it.
inline constexpr uint64_t kPieceBytes = uint64_t{16} << 20;

// How the bench writes, poisons and checks records of one device pool. Thread-safe.
class PoolView {
 public:
  virtual ~PoolView() = default;
  // Writes record seeds[i] into slots[i] (all of `kind`).
  virtual Status Write(Kind kind, std::span<const uint64_t> slots,
                       std::span<const uint64_t> seeds) = 0;
  virtual Status Poison(Kind kind, std::span<const uint64_t> slots) = 0;
  // "" when every byte of slots[i] equals record seeds[i]; else where the first difference is.
  virtual StatusOr<std::string> Verify(Kind kind, std::span<const uint64_t> slots,
                                       std::span<const uint64_t> seeds) = 0;
};
// Through Store::WriteDeviceRecord / ReadDeviceRecord (the store-owned pool).
std::unique_ptr<PoolView> MakeOwnedView(Store* store, const ModelLayout& layout,
                                        HostBuffers* buffers);
// Straight to the bench's memory through `pool.layer_first` or `pool.block`.
std::unique_ptr<PoolView> MakeBenchView(const ModelLayout& layout, const BenchPool& pool,
                                        bool block, bool gpu, HostBuffers* buffers);

// ---- Per-thread device slots of one case ----
struct ThreadSlots {
  std::vector<uint64_t> src_pages, dst_pages;  // save sources, load destinations
  std::optional<uint64_t> src_state, dst_state;
  std::vector<uint64_t> page_seeds;    // record seeds of pages 0..P-1 (Kind::kKV)
  std::vector<uint64_t> window_seeds;  // and of their windowed records (Kind::kWindowKV)
  uint64_t state_seed = 0;
};
// The bench pool's fixed mapping: thread t's sources are pages [2tP, 2tP+P), destinations
// [2tP+P, 2tP+2P), states 2t and 2t+1.
ThreadSlots BenchSlots(uint32_t thread, uint64_t pages, bool ssm);
// Every thread's sources (pages, then the state) get their records; destinations get the
// poison; destinations are checked. In pieces on several workers (`page_bytes`: a KV record).
Status WriteSources(PoolView& view, const std::vector<ThreadSlots>& all, const Sizes& sizes);
Status PoisonDestinations(PoolView& view, const std::vector<ThreadSlots>& all, const Sizes& sizes);
// Per thread: "" or where its first wrong byte is.
StatusOr<std::vector<std::string>> VerifyDestinations(PoolView& view,
                                                      const std::vector<ThreadSlots>& all,
                                                      const Sizes& sizes);

// ---- Rounds: every thread issues its request at once ----
enum class Op : uint8_t { kLoad, kSave, kBoth };  // host->device, device->host, both at once
const char* OpName(Op op);

struct ThreadTimes {
  Clock::time_point start, load_end, save_end;
  bool load = false, save = false;  // which ends were set
};
struct Samples;
using RoundFn = std::function<Status(uint32_t thread, ThreadTimes& times)>;
// Runs fn(t, times) on `threads` threads released together (fn sets times.start right before
// it issues its request); adds each request's latency and the round's wall and per-direction
// times (from the first start) to `out`. The first error of a thread, if any.
// `times_out`: each thread's times, when the caller needs them.
Status RunRound(uint32_t threads, const RoundFn& fn, Samples* out,
                std::vector<ThreadTimes>* times_out = nullptr);
// Waits for `fence`; its completion time (taken by a callback on the completing thread).
StatusOr<Clock::time_point> WaitStamped(const Fence& fence);
// fn(0..n-1) on up to hardware_concurrency threads; the first error.
Status ParallelFor(size_t n, const std::function<Status(size_t)>& fn);

// The DeviceMover alone, over its own HostArena and a pool description: the same units as
// the store's requests (per thread: its pages and state), host->device and device->host.
class MoverPeer {
 public:
  // `polling`: Config::mover_polling.
  static StatusOr<std::unique_ptr<MoverPeer>> Create(const ModelLayout& layout,
                                                     uint64_t arena_bytes, bool gpu, bool polling);
  ~MoverPeer();
  MoverPeer(const MoverPeer&) = delete;
  MoverPeer& operator=(const MoverPeer&) = delete;
  // A device mover over `pool` (replaces the previous one).
  Status UsePool(const DevicePoolDescription& pool);
  // Host slots for one case: per thread, load sources holding its records and save
  // destinations.
  Status Prepare(const std::vector<ThreadSlots>& slots);
  Status Round(Op op, Samples* out);
  // "" when every save destination holds its record.
  StatusOr<std::string> VerifySaved();
  void Release();

 private:
  MoverPeer() = default;
  ModelLayout layout_;
  bool gpu_ = false;
  bool polling_ = true;
  std::vector<std::vector<uint64_t>> save_seeds_;  // per thread: each save unit's record seed
  std::unique_ptr<HostArena> arena_;
  std::unique_ptr<DeviceMover> mover_;
  std::vector<ThreadSlots> slots_;
  std::vector<Operation> load_ops_, save_ops_;
};

// The contiguous limit: per thread, one copy of the request's bytes between a pinned host
// buffer and device memory (cudaMemcpyAsync on its own stream; memcpy in CPU mode), each way or
// both at once. Uses `device` (the bench pool's memory) as raw bytes; Create fills its host
// buffer and all of `device` with random bytes.
class LimitPeer {
 public:
  static StatusOr<std::unique_ptr<LimitPeer>> Create(bool gpu, std::byte* device,
                                                     uint64_t device_bytes, uint64_t host_bytes,
                                                     uint32_t max_threads);
  ~LimitPeer();
  LimitPeer(const LimitPeer&) = delete;
  LimitPeer& operator=(const LimitPeer&) = delete;
  // Per thread: `load_bytes` host->device and/or `save_bytes` device->host.
  Status Round(Op op, uint32_t threads, uint64_t load_bytes, uint64_t save_bytes, Samples* out);

 private:
  LimitPeer() = default;
  bool gpu_ = false;
  std::byte* device_ = nullptr;
  uint64_t device_bytes_ = 0;
  std::unique_ptr<Memory> host_;
  std::vector<cuda::Stream> streams_;  // GPU mode: two per thread (load, save)
};

// ---- Results ----
struct Samples {
  std::vector<double> latency_us;               // one per request
  std::vector<double> round_s, load_s, save_s;  // one per round: wall, and per direction
  uint32_t threads = 0;
  uint64_t bytes = 0;       // record bytes per request (a Load's, or a Save's for Save rounds)
  uint64_t save_bytes = 0;  // a Save's, when `both` rounds move other bytes than the Load's
  uint64_t SaveBytes() const { return save_bytes != 0 ? save_bytes : bytes; }
  // Aggregate GB/s over the median round: both directions for `both`.
  double Gbps(bool both) const;
  double DirectionGbps(bool load) const;
};
double Percentile(std::vector<double> v, double p);

// Stage profile (vocab/internal/stage_profile.h) of some rounds, divided by the operations
// they ran: microseconds per stage and counts per counter, in the profile's order; stages that did
// not occur are left out.
struct StagesPerOp {
  uint64_t ops = 0;
  std::vector<std::pair<std::string, double>> us;
  std::vector<std::pair<std::string, double>> counts;
};
// Reads the profile since the last call (or profile::Reset) as per-operation figures, then
// resets it.
StagesPerOp TakeStages(uint64_t ops);
// `t` (summed over some rounds) as per-operation figures.
StagesPerOp ToStagesPerOp(const profile::Totals& t, uint64_t ops);

struct Row {
  std::string layout, pool, tier, op;  // op: load, save, both
  uint64_t pages = 0;
  uint32_t threads = 0;
  bool state = false;
  uint64_t bytes = 0;  // record bytes per request (each direction)
  int iters = 0;
  double p50_us = 0, p99_us = 0, gbps = 0, load_gbps = 0, save_gbps = 0;
  std::optional<double> mover_p50_us, mover_gbps, limit_gbps;
  uint64_t verified_loads = 0;  // loads whose every byte was compared
  uint64_t mismatches = 0;
  // --profile-stages: the store's timed rounds and the mover peer's, per operation.
  std::optional<StagesPerOp> stages, mover_stages;
};

struct LookupRow {
  std::string layout, op;  // lookup, lookup_hashes
  uint32_t threads = 0;
  uint64_t prompt_pages = 0, hit_pages = 0;
  uint64_t calls = 0;
  double p50_us = 0, p99_us = 0, calls_per_s = 0;
  std::optional<StagesPerOp> stages;  // --profile-stages: per call
};

struct Skip {
  std::string layout, pool, tier;
  uint64_t pages = 0;
  uint32_t threads = 0;
  std::string reason;
};

struct Report {
  std::vector<Row> rows;
  std::vector<LookupRow> lookups;
  std::vector<Skip> skips;
  std::vector<std::string> mismatches;  // wrong bytes (exit 1)
  std::vector<std::string> errors;      // store or setup failures (exit 1)
  double seconds = 0;
};

// Runs every case of layout `index`: per pool form, the host-resident phase then the
// disk-resident phase (disk tier in `work_dir`), appending to `report`. Per-case failures go into
// the report; a returned error means the layout could not be set up at all.
Status RunLayout(const Config& c, size_t index, const std::string& work_dir, Report* report,
                 std::ostream& progress);

}  // namespace cachepawl::tools::bench_store
