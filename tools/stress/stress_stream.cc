#include "tools/stress/stress_stream.h"

namespace cachepawl::tools {

Status StressStream::Open(bool gpu) {
  if (!gpu) return Status::OK();
  CACHEPAWL_ASSIGN_OR_RETURN(stream_, cuda::Stream::Create());
  return Status::OK();
}

Status StressStream::Wait(const Fence& fence, bool gpu_side) const {
  if (stream_.get() == nullptr || !gpu_side) return fence.StreamWait(nullptr);
  CACHEPAWL_RETURN_IF_ERROR(fence.StreamWait(stream_.get()));
  CACHEPAWL_RETURN_IF_ERROR(stream_.Synchronize());
  // The stream waited for the device work; the fence's status is the operation's.
  return fence.Wait();
}

}  // namespace cachepawl::tools
