// Tests only: a Store whose device mover has faults injected (the seam the CUDA fault tests
// use, as the disk fault tests use tiers' BlockIo). Not installed; engines never need it.
//
// OpenStoreWithFaults opens a store exactly as Store::Open does, then hands `faults` to every
// device mover the store creates (the store-owned pool's, or one RegisterDevicePool
// creates). The functions are called on the device mover's threads, concurrently with the caller's;
// they must be thread-safe.
#pragma once

#include <functional>
#include <memory>

#include "store/store.h"
#include "transfer/device_mover.h"

namespace cachepawl {

struct StoreFaultInjection {
  // Before each operation runs (any mode): a non-OK status fails it (DeviceMoverOptions::
  // fault_injection).
  std::function<Status(const Operation&)> before_operation;
  // GPU mode: before each CUDA call of a site, a cudaError_t to act as if returned
  // (DeviceMoverOptions::cuda_fault).
  std::function<int(CudaFaultSite)> cuda_call;
};

StatusOr<std::unique_ptr<Store>> OpenStoreWithFaults(const StoreOptions& options,
                                                     StoreFaultInjection faults);

}  // namespace cachepawl
