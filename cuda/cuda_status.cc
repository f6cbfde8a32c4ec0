#include "cuda/cuda_status.h"

#include <string>

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl::cuda {

Status CheckCuda(int error, std::string_view call) {
  if (error == 0) return Status::OK();
  std::string message(call);
  message += " failed: ";
#if CACHEPAWL_HAVE_CUDA
  const auto err = static_cast<cudaError_t>(error);
  message += cudaGetErrorName(err);
  message += " (";
  message += cudaGetErrorString(err);
  message += ")";
#else
  message += "CUDA error ";
  message += std::to_string(error);
#endif
  return Status::Internal(message);
}

}  // namespace cachepawl::cuda
