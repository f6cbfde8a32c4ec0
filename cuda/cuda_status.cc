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

Status CheckCu(int result, std::string_view call) {
  if (result == 0) return Status::OK();
  std::string message(call);
  message += " failed: CUresult ";
  message += std::to_string(result);
  return Status::Internal(message);
}

}  // namespace cachepawl::cuda
