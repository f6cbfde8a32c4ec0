// Gather/scatter kernels (see transfer_kernels.h). Each warp copies whole tiles with 16-byte
// accesses when both sides allow it, 16 loads in flight per lane.
#include <cuda_runtime.h>

#include "cuda/transfer_kernels.h"

namespace cachepawl::cuda {

namespace {

constexpr int kThreads = 256;
constexpr uint32_t kWarps = kThreads / 32;
// 16-byte loads a lane keeps in flight: a warp moves 8 KiB per step, a CTA 64 KiB, so one SM
// keeps enough bytes in flight to approach its share of HBM bandwidth (a CTA that waits on one
// load at a time moves a few GB/s and holds its SM many times longer for the same bytes).
constexpr uint32_t kUnroll = 16;

template <uint32_t N>
struct GatherScatterParams {
  KernelTables tables;
  char* staging;
  uint32_t num_jobs;
  uint32_t total_tiles;
  uint32_t to_staging;
  KernelJob jobs[N];
};

// One warp copies `n` 16-byte words; dst, src 16-byte aligned.
__device__ __forceinline__ void WarpCopy16(char* __restrict__ dst, const char* __restrict__ src,
                                           uint32_t n, uint32_t lane) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (uint32_t base = 0; base < n; base += 32 * kUnroll) {
    uint4 r[kUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + u * 32 + lane;
      if (i < n) r[u] = s[i];
    }
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + u * 32 + lane;
      if (i < n) d[i] = r[u];
    }
  }
}

// One warp copies one tile, with 16-byte accesses when both sides allow it.
__device__ __forceinline__ void WarpCopyTile(char* __restrict__ dst, const char* __restrict__ src,
                                             uint32_t bytes, uint32_t lane) {
  const uintptr_t align =
      reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes;
  if ((align & 15) == 0) {
    WarpCopy16(dst, src, bytes / 16, lane);
  } else if (((reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src)) & 15) == 0 &&
             bytes >= 64) {
    // Same misalignment on both sides: bytes up to a 16-byte boundary, 16-byte body, tail.
    const uint32_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    if (lane < head) dst[lane] = src[lane];
    const uint32_t body = (bytes - head) & ~15u;
    WarpCopy16(dst + head, src + head, body / 16, lane);
    const uint32_t tail = bytes - head - body;
    if (lane < tail) dst[head + body + lane] = src[head + body + lane];
  } else if ((align & 3) == 0) {
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    for (uint32_t i = lane; i < bytes / 4; i += 32) d[i] = s[i];
  } else {
    for (uint32_t i = lane; i < bytes; i += 32) dst[i] = src[i];
  }
}

template <uint32_t N>
__global__ void __launch_bounds__(kThreads)
    GatherScatterKernel(const __grid_constant__ GatherScatterParams<N> p) {
  // Each warp takes whole tiles: the warps of a CTA work on different tiles at once.
  const uint32_t lane = threadIdx.x & 31;
  const uint32_t warps = gridDim.x * kWarps;
  for (uint32_t item = blockIdx.x * kWarps + threadIdx.x / 32; item < p.total_tiles;
       item += warps) {
    // The job holding `item`: the last one whose tile_prefix <= item.
    uint32_t lo = 0, hi = p.num_jobs;
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      if (p.jobs[mid].tile_prefix <= item) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const KernelJob& job = p.jobs[lo];
    const KernelTile tile = p.tables.tiles[job.tile_begin + (item - job.tile_prefix)];
    const KernelSegment seg = p.tables.segments[tile.segment];
    char* dev =
        reinterpret_cast<char*>(seg.device_base + job.slot * seg.device_stride + tile.offset);
    char* stg = p.staging +
                (job.staging_record_base + static_cast<int64_t>(seg.record_offset + tile.offset));
    if (p.to_staging) {
      WarpCopyTile(stg, dev, tile.bytes, lane);
    } else {
      WarpCopyTile(dev, stg, tile.bytes, lane);
    }
  }
}

template <uint32_t N>
int Launch(const KernelTables& tables, std::byte* staging, const KernelJob* jobs, uint32_t num_jobs,
           bool to_staging, uint32_t ctas, cudaStream_t stream) {
  GatherScatterParams<N> p;
  p.tables = tables;
  p.staging = reinterpret_cast<char*>(staging);
  p.num_jobs = num_jobs;
  p.to_staging = to_staging ? 1 : 0;
  uint32_t total = 0;
  for (uint32_t j = 0; j < num_jobs; ++j) {
    p.jobs[j] = jobs[j];
    p.jobs[j].tile_prefix = total;
    total += jobs[j].tile_count;
  }
  p.total_tiles = total;
  if (total == 0) return 0;
  const uint32_t needed = (total + kWarps - 1) / kWarps;  // a warp per tile at most
  const uint32_t grid = ctas < needed ? ctas : needed;
  GatherScatterKernel<N><<<grid, kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchGatherScatter(const KernelTables& tables, std::byte* staging, const KernelJob* jobs,
                        uint32_t num_jobs, bool to_staging, uint32_t ctas, void* stream) {
  if (num_jobs == 0) return 0;
  if (num_jobs > kMaxJobsPerLaunch) return static_cast<int>(cudaErrorInvalidValue);
  if (ctas == 0) ctas = 1;
  auto s = static_cast<cudaStream_t>(stream);
  if (num_jobs <= 32) return Launch<32>(tables, staging, jobs, num_jobs, to_staging, ctas, s);
  return Launch<kMaxJobsPerLaunch>(tables, staging, jobs, num_jobs, to_staging, ctas, s);
}

}  // namespace cachepawl::cuda
