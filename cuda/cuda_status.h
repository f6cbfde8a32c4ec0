// The one place that turns a CUDA runtime return code (a cudaError_t) or a driver API result (a
// CUresult) into a Status. CUDA-free: callable from any .cc file; a cudaError_t converts to int
// implicitly.
//
//   CACHEPAWL_RETURN_IF_ERROR(cuda::CheckCuda(cudaStreamSynchronize(s), "cudaStreamSynchronize"));
//   CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));   // names the call by its text
//
// Thread safety: CheckCuda and CheckCu may be called from any thread.
#pragma once

#include <string_view>

#include "vocab/status.h"

namespace cachepawl::cuda {

// OK for 0 (cudaSuccess); otherwise Internal "<call> failed: <error name> (<error string>)",
// e.g. "cudaMalloc failed: cudaErrorMemoryAllocation (out of memory)". Leaves the runtime's
// last error as it is. In a build without CUDA a non-zero code reads "CUDA error <code>".
Status CheckCuda(int error, std::string_view call);

// The same for a CUDA driver API result (a CUresult, fetched through a driver entry point: libcuda
// is never linked): OK for 0 (CUDA_SUCCESS); otherwise Internal "<call> failed: CUresult <code>".
Status CheckCu(int result, std::string_view call);

}  // namespace cachepawl::cuda

// Returns the Status of CheckCuda from the enclosing function when `call` (a CUDA runtime call
// returning cudaError_t) fails; the message names the call as written.
#define CACHEPAWL_CUDA_RETURN_IF_ERROR(call) \
  CACHEPAWL_RETURN_IF_ERROR(::cachepawl::cuda::CheckCuda(static_cast<int>(call), #call))
