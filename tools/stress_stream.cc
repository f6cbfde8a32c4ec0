#include "tools/stress_stream.h"

#include <string>

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl::tools {

StressStream::~StressStream() {
#if CACHEPAWL_HAVE_CUDA
  if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

Status StressStream::Open(bool gpu) {
  if (!gpu) return Status::OK();
#if CACHEPAWL_HAVE_CUDA
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    return Status::Internal(std::string("cudaStreamCreateWithFlags: ") + cudaGetErrorString(e));
  }
  stream_ = s;
  return Status::OK();
#else
  return Status::Unavailable("StressStream: this build has no CUDA");
#endif
}

Status StressStream::Wait(const Fence& fence, bool gpu_side) const {
  if (stream_ == nullptr || !gpu_side) return fence.StreamWait(nullptr);
  CACHEPAWL_RETURN_IF_ERROR(fence.StreamWait(stream_));
#if CACHEPAWL_HAVE_CUDA
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) {
    return Status::Internal(std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e));
  }
#endif
  // The stream waited for the device work; the fence's status is the operation's.
  return fence.Wait();
}

}  // namespace cachepawl::tools
