// The transfer benchmark's fallback matrix product (`cachepawl bench transfer`, interference
// loop): a bf16 C = A * B kernel without tensor cores, used when cuBLAS cannot be loaded. Plain
// C++ declarations, no CUDA headers; implemented in bench_matmul_kernel.cu, which is built only
// when CUDA is on (like every user of it).
//
// Thread safety: the launch may be called from any thread (it only enqueues on `stream`).
#pragma once

namespace cachepawl::tools {

// Enqueues C = A * B (n x n bf16, row-major, fp32 accumulation; 32x32 tiles through shared
// memory) on `stream` (a cudaStream_t). Returns the cudaError_t of the launch (0 = success).
int LaunchBf16Matmul(const void* a, const void* b, void* c, int n, void* stream);

}  // namespace cachepawl::tools
