// TransferQueue: where the store hands the device <-> host copies of a Load or a Save. The device
// mover (transfer/device_mover.h) runs them on this process's GPU (or in CPU mode); an owner
// store hands an attached client's copies to that client, which runs them with its own mover
// (ipc/store_server.h). The contract is the device mover's: Submit never waits for the
// transfer; the fence always fires, OK only once every unit's bytes landed; operations of one
// direction complete in submission order. Thread safety: Submit may be called from any thread.
#pragma once

#include "transfer/transfer_unit.h"
#include "vocab/fence.h"

namespace cachepawl {

class TransferQueue {
 public:
  virtual ~TransferQueue() = default;
  virtual Fence Submit(Operation op) = 0;
  // True when the copies run on a GPU of this process (a Load's fence then gets a GPU-side
  // stream wait); false in CPU mode and for copies another process runs.
  virtual bool gpu_mode() const = 0;
};

}  // namespace cachepawl
