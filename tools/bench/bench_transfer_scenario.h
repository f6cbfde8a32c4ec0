// The scenario set-up of `cachepawl bench transfer`: per scenario (a layout, a kind, how many
// units one operation moves), the device pools (layer-first and block-contiguous), the pinned
// host slots, the device movers over both pools, the pieces of the per-piece baselines and a
// contiguous buffer pair for the link's limit; and one iteration of each path in each
// direction, the poisoning of its destinations before it and the check of every destination
// byte after it. Paths: "ours", "ours_block", "memcpy_piece", "memcpy_batch", "contiguous"
// (tools/bench/cmd_bench_transfer.cc says what each measures). Built only with CUDA; no exceptions.
//
// Thread safety: a Scenario is driven by one thread at a time (the command's, or the
// interference Mover's while the command waits in MeasureInterference).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_resources.h"
#include "tiers/host_arena.h"
#include "transfer/device_mover.h"
#include "vocab/device_pool.h"
#include "vocab/fence.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl::tools {

struct ScenarioSpec {
  std::string name;
  ModelLayout layout;
  Kind kind;
  uint64_t units;       // per operation
  uint64_t pool_slots;  // sources in [0, pool/2), destinations in [pool/2, pool)
};

// The five scenarios, in --scenarios order: llama-kv, jamba-kv, mamba-1, mamba-16, mamba-128.
std::vector<ScenarioSpec> AllScenarios();

// One scenario's buffers: layer-first and block-contiguous pools, pinned host slots, and a
// contiguous pair for the limit. Sources are random (mirrored on the host for the checks).
class Scenario {
 public:
  // Allocates and fills everything on the current GPU; the movers get `mover_options`.
  static StatusOr<std::unique_ptr<Scenario>> Create(const ScenarioSpec& spec,
                                                    const DeviceMoverOptions& mover_options,
                                                    uint64_t seed);
  ~Scenario();
  Scenario(const Scenario&) = delete;
  Scenario& operator=(const Scenario&) = delete;

  uint64_t bytes() const { return rec_ * spec_.units; }
  uint64_t record_bytes() const { return rec_; }
  double pin_seconds() const { return pin_seconds_; }

  // Poisons the destinations of the given directions (outside timing).
  Status Poison(const std::string& path, bool d2h, bool h2d);

  // One iteration of `path` in the given directions, enqueued: Wait() returns once it is done.
  // Iterations of one path run in order (the mover's queues, or the path's streams).
  class InFlight {
   public:
    Status Wait();

   private:
    friend class Scenario;
    Fence fw_, fl_;
    const cuda::Event* events_[2] = {nullptr, nullptr};  // the Scenario's; two rounds live
  };
  StatusOr<InFlight> Start(const std::string& path, bool d2h, bool h2d);

  // Runs one iteration of `path` in the given directions; returns wall seconds.
  StatusOr<double> Run(const std::string& path, bool d2h, bool h2d);

  // Compares every destination byte of the last iteration; returns "" or what differs.
  StatusOr<std::string> Verify(const std::string& path, bool d2h, bool h2d);

 private:
  struct Piece {
    std::byte* dev;
    std::byte* host;
    uint64_t bytes;
  };
  explicit Scenario(const ScenarioSpec& spec);
  Status Init(const DeviceMoverOptions& mover_options, uint64_t seed);
  Operation Op(Direction d) const;
  Status StartCopies(const std::string& path, bool d2h, bool h2d);
  StatusOr<std::string> VerifyPools(const std::string& path, bool d2h, bool h2d);

  ScenarioSpec spec_;
  ModelLayout l_;
  uint64_t rec_;
  std::vector<LayerSegment> segs_;           // the record's tensors, one layer-first tensor each
  std::vector<cuda::DeviceBuffer> tensors_;  // [t]: pool_slots pieces of segs_[t]
  std::vector<std::vector<std::byte>> mirrors_;
  cuda::DeviceBuffer block_;
  std::vector<std::byte> block_mirror_;
  DevicePoolDescription layer_first_desc_, block_desc_;
  std::vector<uint64_t> src_, dst_;
  std::unique_ptr<HostArena> arena_;
  double pin_seconds_ = 0;
  std::vector<HostSlotId> w_, r_;
  std::unique_ptr<DeviceMover> mover_, mover_block_;
  std::vector<Piece> save_pieces_, load_pieces_;
  cuda::DeviceBuffer contig_dev_;
  cuda::PinnedBuffer contig_host_;
  std::vector<std::byte> contig_d2h_expected_;
  cuda::Stream s_d2h_, s_h2d_;
  cuda::Event events_[2][2];
  int next_events_ = 0;
};

}  // namespace cachepawl::tools
