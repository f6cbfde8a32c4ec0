// FenceAccess: what the library (the device mover, the Store) attaches to a Fence it
// completes: the GPU-side wait of its operation (vocab/fence.h, StreamWait). Not
// installed: the fence's state is private to vocab/fence.cc.
//
// Thread safety: every function may be called from any thread (each takes the fence's mutex).
#pragma once

#include <cstdint>
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
  // Fence::Wait polls for up to `microseconds` before it sleeps (0, the default: it sleeps at
  // once). Set by a producer whose operations end within about that time and whose waiter's
  // wake-up would cost a noticeable part of them (GPU copies of a few MiB). No effect on an empty
  // fence; a Wait already sleeping is not affected.
  static void SetWaitSpin(const Fence& fence, uint32_t microseconds);
  static uint32_t WaitSpin(const Fence& fence);
};

}  // namespace cachepawl::internal
