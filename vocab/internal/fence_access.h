// FenceAccess: what the library (the device mover, the Store) attaches to a Fence it
// completes: the GPU-side wait of its operation (vocab/fence.h, StreamWait). Not
// installed: the fence's state is private to vocab/fence.cc.
//
// Thread safety: every function may be called from any thread (each takes the fence's mutex).
#pragma once

#include <functional>

#include "vocab/fence.h"
#include "vocab/status.h"

namespace cachepawl::internal {

class FenceAccess {
 public:
  // True for a default-constructed Fence (no operation behind it).
  static bool Empty(const Fence& fence);
  // The function that makes a stream wait for `fence`'s device work; empty when none is
  // attached (CPU mode, or not attached yet).
  static std::function<Status(void*)> StreamWaiter(const Fence& fence);
  // Attaches it (replacing any). No effect on an empty fence.
  static void SetStreamWaiter(const Fence& fence, std::function<Status(void*)> waiter);
};

}  // namespace cachepawl::internal
