// The benchmark's bf16 matrix-product kernel (see bench_matmul_kernel.h). No spdlog, fmt or
// RocksDB headers here (nvcc's C++ dialect cannot build them).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "tools/bench/bench_matmul_kernel.h"

namespace cachepawl::tools {

namespace {

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

int LaunchBf16Matmul(const void* a, const void* b, void* c, int n, void* stream) {
  dim3 block(32, 32);
  dim3 grid((n + 31) / 32, (n + 31) / 32);
  Bf16MatmulKernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b),
      static_cast<__nv_bfloat16*>(c), n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cachepawl::tools
