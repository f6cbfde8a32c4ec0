// Gather/scatter kernels of the device mover: SMs copy scattered layer-first pieces of pages
// and states between the device pools and a contiguous device staging buffer (HBM only; the
// PCIe link is crossed by copy engines). Plain C++ declarations: no CUDA headers, callable from
// .cc files; implemented in transfer_kernels.cu (CUDA builds only).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cachepawl::cuda {

// One segment of a page-first record (layer a's K or V; layer s's conv or SSM state): slot i's
// bytes are at device_base + i * device_stride and at record_offset in the record.
struct KernelSegment {
  uint64_t device_base;
  uint64_t device_stride;
  uint64_t record_offset;
  uint64_t bytes;
};

// A piece of one segment copied by one warp: `bytes` at `offset` within the segment.
struct KernelTile {
  uint32_t segment;
  uint32_t bytes;
  uint64_t offset;
};

// Tiles [tile_begin, tile_begin + tile_count) of the record of `slot`; tile t goes to (or comes
// from) staging + staging_record_base + segments[tiles[t].segment].record_offset +
// tiles[t].offset. tile_prefix: the number of tiles of the jobs before this one in the launch.
struct KernelJob {
  uint64_t slot;
  int64_t staging_record_base;
  uint32_t tile_begin;
  uint32_t tile_count;
  uint32_t tile_prefix;
  uint32_t unused;
};

// Device-resident tables of one kind (uploaded once by the device mover).
struct KernelTables {
  const KernelSegment* segments;
  const KernelTile* tiles;
};

// Jobs one launch takes (kernel parameters hold them: no host buffer outlives the call).
inline constexpr uint32_t kMaxJobsPerLaunch = 900;

// Enqueues one gather (`to_staging`) or scatter launch of `jobs` (at most kMaxJobsPerLaunch,
// tile_prefix filled in) on `stream` (a cudaStream_t) with `ctas` CTAs of 256 threads. Returns
// the cudaError_t of the launch (0 = success).
int LaunchGatherScatter(const KernelTables& tables, std::byte* staging, const KernelJob* jobs,
                        uint32_t num_jobs, bool to_staging, uint32_t ctas, void* stream);

}  // namespace cachepawl::cuda
