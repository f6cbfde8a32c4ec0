// Gather/scatter kernels (see transfer_kernels.h). Each CTA copies whole tiles with 16-byte
// accesses when both sides allow it, four loads in flight per thread.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/transfer_kernels.h"

namespace cachepawl::cuda {

namespace {

constexpr int kThreads = 256;

template <uint32_t N>
struct GatherScatterParams {
  KernelTables tables;
  char* staging;
  uint32_t num_jobs;
  uint32_t total_tiles;
  uint32_t to_staging;
  KernelJob jobs[N];
};

// dst, src 16-byte aligned; bytes a multiple of 16.
__device__ __forceinline__ void CopyAligned16(char* __restrict__ dst, const char* __restrict__ src,
                                              uint32_t bytes) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  const uint32_t n = bytes / 16;
  uint32_t i = threadIdx.x;
  for (; i + 3 * kThreads < n; i += 4 * kThreads) {
    const uint4 a = s[i], b = s[i + kThreads], c = s[i + 2 * kThreads], e = s[i + 3 * kThreads];
    d[i] = a;
    d[i + kThreads] = b;
    d[i + 2 * kThreads] = c;
    d[i + 3 * kThreads] = e;
  }
  for (; i < n; i += kThreads) d[i] = s[i];
}

__device__ __forceinline__ void CopyTile(char* __restrict__ dst, const char* __restrict__ src,
                                         uint32_t bytes) {
  const uintptr_t align =
      reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes;
  if ((align & 15) == 0) {
    CopyAligned16(dst, src, bytes);
  } else if (((reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src)) & 15) == 0 &&
             bytes >= 64) {
    // Same misalignment on both sides: bytes up to a 16-byte boundary, 16-byte body, tail.
    const uint32_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    if (threadIdx.x < head) dst[threadIdx.x] = src[threadIdx.x];
    const uint32_t body = (bytes - head) & ~15u;
    CopyAligned16(dst + head, src + head, body);
    const uint32_t tail = bytes - head - body;
    if (threadIdx.x < tail) dst[head + body + threadIdx.x] = src[head + body + threadIdx.x];
  } else if ((align & 3) == 0) {
    const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
    uint32_t* d = reinterpret_cast<uint32_t*>(dst);
    for (uint32_t i = threadIdx.x; i < bytes / 4; i += kThreads) d[i] = s[i];
  } else {
    for (uint32_t i = threadIdx.x; i < bytes; i += kThreads) dst[i] = src[i];
  }
}

template <uint32_t N>
__global__ void __launch_bounds__(kThreads)
    GatherScatterKernel(const __grid_constant__ GatherScatterParams<N> p) {
  for (uint32_t item = blockIdx.x; item < p.total_tiles; item += gridDim.x) {
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
      CopyTile(stg, dev, tile.bytes);
    } else {
      CopyTile(dev, stg, tile.bytes);
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
  const uint32_t grid = ctas < total ? ctas : total;
  GatherScatterKernel<N><<<grid, kThreads, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

// C = A * B in bf16 with fp32 accumulation; 32x32 tiles through shared memory, no tensor cores.
__global__ void Bf16MatmulKernel(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c,
                                 int n) {
  __shared__ float as[32][33];
  __shared__ float bs[32][33];
  const int row = blockIdx.y * 32 + threadIdx.y;
  const int col = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < n; k0 += 32) {
    as[threadIdx.y][threadIdx.x] =
        row < n && k0 + threadIdx.x < n ? __bfloat162float(a[row * n + k0 + threadIdx.x]) : 0.f;
    bs[threadIdx.y][threadIdx.x] =
        k0 + threadIdx.y < n && col < n ? __bfloat162float(b[(k0 + threadIdx.y) * n + col]) : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 32; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = __float2bfloat16(acc);
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

int LaunchBf16Matmul(const void* a, const void* b, void* c, int n, void* stream) {
  dim3 block(32, 32);
  dim3 grid((n + 31) / 32, (n + 31) / 32);
  Bf16MatmulKernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b),
      static_cast<__nv_bfloat16*>(c), n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cachepawl::cuda
