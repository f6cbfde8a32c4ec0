// Internal to the device mover: how an Operation becomes staged chunks, kernel jobs and
// copy-engine runs. Pure CPU code (no CUDA), shared by the CPU and GPU backends and tested in CI.
//
// A RecordMap says, for one kind, where each segment of a page-first record (layout order: per
// attention layer K then V; per SSM layer conv then SSM) lives in the device pool, and cuts the
// record into tiles of at most tile_bytes that never cross a segment. A kernel job copies a range
// of one unit's tiles between the pool and a staging chunk. A record that is one contiguous piece
// on the device ("direct": block-contiguous pools) is moved by copy engines alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "transfer/transfer_unit.h"
#include "vocab/device_pool.h"
#include "vocab/fence.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl::internal {

struct RecordMap {
  struct Segment {
    uint64_t record_offset = 0;
    uint64_t bytes = 0;
    uintptr_t device_base = 0;  // slot i's piece is at device_base + i * device_stride
    uint64_t device_stride = 0;
    int attention_layer = -1;  // index into layout.attention_layers, -1 for SSM segments
  };
  struct Tile {
    uint32_t segment = 0;
    uint64_t offset = 0;  // within the segment
    uint64_t bytes = 0;
  };
  Kind kind = Kind::kKV;
  uint64_t record_bytes = 0;
  std::vector<Segment> segments;
  std::vector<Tile> tiles;
  std::vector<uint64_t> tile_offset;  // record offset of tile t; tile_offset[tiles.size()] = bytes
  // KV: tiles of attention layer a are [layer_tiles[a], layer_tiles[a + 1]).
  std::vector<uint32_t> layer_tiles;
  uint64_t num_slots = 0;
  // The whole record of slot i is contiguous at direct_base + i * direct_stride.
  bool direct = false;
  uintptr_t direct_base = 0;
  uint64_t direct_stride = 0;

  static RecordMap Build(const ModelLayout& layout, const DevicePoolDescription& pool, Kind kind,
                         uint64_t tile_bytes);
  uintptr_t DeviceAddress(uint32_t tile, uint64_t slot) const {
    const Tile& t = tiles[tile];
    const Segment& s = segments[t.segment];
    return s.device_base + slot * s.device_stride + t.offset;
  }
};

// One kernel job: tiles [tile_begin, tile_begin + tile_count) of the record of `slot`; tile t's
// bytes are at staging offset staging_record_base + map.tile_offset[t] (relative to the chunk).
struct KernelJob {
  uint64_t slot = 0;
  uint32_t tile_begin = 0;
  uint32_t tile_count = 0;
  int64_t staging_record_base = 0;
};

// A copy-engine run: `height` rows of `width` bytes; row r is at host + r * host_pitch and at
// other + r * other_pitch, where `other` is a staging offset (staged) or a device address
// (direct). height == 1 is a plain copy. Every byte a run spans on the host, gaps between rows
// included, lies in one host region (`host_region`: one registration with CUDA): a copy-engine
// call whose host range crosses two registrations fails (cudaMemcpy2DAsync: invalid argument),
// even when the two are adjacent in virtual memory.
struct CopyRun {
  std::byte* host = nullptr;
  int host_region = 0;
  uint64_t host_pitch = 0;
  uint64_t other = 0;
  uint64_t other_pitch = 0;
  uint64_t width = 0;
  uint64_t height = 1;
  uint64_t bytes() const { return width * height; }
};

// Where a unit's host slot is: its payload and the host region (HostMemory::RegionOf) holding it.
struct HostPlacement {
  std::byte* payload = nullptr;
  int region = 0;
};

// Appends the copy (host, other, bytes) to `runs`, merging it into the last run when it extends
// it (contiguous on both sides: the run grows; or the next row of a constant-pitch 2-D run) and
// lies in the same host region; never across regions.
void AppendCopy(std::vector<CopyRun>& runs, std::byte* host, int host_region, uint64_t other,
                uint64_t bytes);

struct StagedChunk {
  std::vector<KernelJob> jobs[kNumKinds];
  std::vector<CopyRun> copies;  // `other` = offset in the staging chunk
  uint64_t staging_bytes = 0;   // bytes of the chunk in use
};

struct PlannedOperation {
  uint64_t seq = 0;  // 1, 2, ... per direction
  Direction direction = Direction::kLoad;
  bool per_layer = false;
  size_t num_layers = 0;
  std::vector<StagedChunk> chunks;
  std::vector<CopyRun> direct;  // `other` = device address
  uint64_t units = 0;
  uint64_t bytes = 0;
  Operation op;            // kept for fault injection and diagnostics
  Status pre_status;       // non-OK: fail in order without moving bytes
  uint64_t queued_at = 0;  // profile::Now() when queued (0: not profiled)
  FenceCompleter completer;
  // Runs just before the fence fires (the mover's counters), so waiters see them updated.
  std::function<void(const Status&)> before_complete;

  // Fires the fence (and every pending layer) with `status`.
  void Finish(const Status& status) {
    if (before_complete) before_complete(status);
    completer.Complete(status);
  }
};

// Cuts the staged units of `op` into chunks of at most `chunk_bytes` (records split at tile
// boundaries when needed) and the direct units into copy runs. `host[i]` is where unit i's host
// slot is. Units must have been validated.
void PlanOperation(const Operation& op, const std::vector<HostPlacement>& host,
                   const RecordMap* const maps[kNumKinds], uint64_t chunk_bytes,
                   PlannedOperation* out);

// The jobs of `jobs` restricted to tiles [tile_lo, tile_hi) (for per-layer scatter launches).
std::vector<KernelJob> RestrictJobs(const std::vector<KernelJob>& jobs, uint32_t tile_lo,
                                    uint32_t tile_hi);

}  // namespace cachepawl::internal
