// StressStream: how a stress thread waits for a fence on the "GPU side" (Fence::StreamWait).
//
// In GPU mode it owns a CUDA stream (non-blocking): Wait makes the stream wait for the fence and
// then synchronizes the stream, as an engine whose next kernel reads the loaded pages would. In
// CPU mode (no CUDA in the build, or no GPU at run time) there is no stream: StreamWait(nullptr)
// blocks on the CPU. This file compiles without CUDA.
//
// Thread safety: one per thread; not shared.
#pragma once

#include "cuda/cuda_resources.h"
#include "vocab/fence.h"
#include "vocab/status.h"

namespace cachepawl::tools {

class StressStream {
 public:
  StressStream() = default;  // CPU mode
  StressStream(const StressStream&) = delete;
  StressStream& operator=(const StressStream&) = delete;

  // GPU mode: creates the stream on the current device. Internal naming the CUDA call on failure;
  // Unavailable when the build has no CUDA.
  Status Open(bool gpu);

  // Fence::StreamWait on the stream (and then a stream synchronize), or on the CPU without one.
  // `gpu_side` false: a fence without GPU work (a prefetch's) is always waited for on the CPU.
  Status Wait(const Fence& fence, bool gpu_side = true) const;

 private:
  cuda::Stream stream_;  // GPU mode; empty in CPU mode
};

}  // namespace cachepawl::tools
