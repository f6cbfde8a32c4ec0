// Thin, CUDA-free wrappers over the few CUDA runtime calls that code outside cuda/ needs (device
// queries, device selection, copies; host registration is cuda::HostRegistration in
// cuda/cuda_resources.h). Callable from any .cc file: without CUDA in
// the build, or without a usable GPU at run time, they report Unavailable.
//
// "No GPU" is decided once per process: any failure of cudaGetDeviceCount (no driver, no
// device, CUDA_VISIBLE_DEVICES="") means CPU mode.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "vocab/status.h"

namespace cachepawl::cuda {

// True when this build has the CUDA data path (CACHEPAWL_HAVE_CUDA).
bool BuiltWithCuda();
// Number of usable GPUs; 0 when the build has no CUDA or the runtime reports an error.
int DeviceCount();
inline bool GpuAvailable() { return DeviceCount() > 0; }
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, driver 13.0)" or "no GPU (...why...)".
std::string DescribeDevice(int device);

// What the CUDA runtime says of one GPU (for `cachepawl info`).
struct GpuProperties {
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;  // cudaMemGetInfo: creates the device's context on first use
  std::string pci_bus_id;   // "0000:3b:00.0" (lower case, as sysfs names it); "" if unknown
  int driver_version = 0;   // cudaDriverGetVersion, e.g. 13000; 0 if unknown
  int runtime_version = 0;  // cudaRuntimeGetVersion; 0 if unknown
};
// Unavailable when there is no such GPU (or no CUDA); Internal naming the call that failed. The
// calling thread's current GPU is the same afterwards (an error when it cannot be made current
// again).
StatusOr<GpuProperties> QueryDevice(int device);

// How an option picks between GPU mode and CPU mode (host_arena.pin, device_pool_arena.use_gpu).
enum class GpuMode : uint8_t {
  kAuto = 0,  // GPU mode when a GPU is usable, CPU mode otherwise
  kOn = 1,    // GPU mode; Unavailable without a usable GPU
  kOff = 2,   // CPU mode
};
// InvalidArgument "<field>: <value> (must be kAuto, kOn or kOff)" unless `mode` is one of the three
// values above.
Status ValidateGpuMode(GpuMode mode, const std::string& field);
// True for GPU mode. Unavailable "<field>: kOn but no GPU is usable (<why>)" for kOn without a
// GPU (`device`: the GPU the caller would use, for the message).
StatusOr<bool> ResolveGpuMode(GpuMode mode, const std::string& field, int device);

// Makes `device` current on the calling thread. InvalidArgument when out of range.
Status SetDevice(int device);

// OK when [ptr, ptr+bytes) is device memory of `device` (cudaPointerGetAttributes);
// InvalidArgument naming `what` otherwise.
Status CheckDevicePointer(const void* ptr, int device, const std::string& what);

// Synchronous copies and fills, for tests and tools (device or host pointers; cudaMemcpyDefault).
Status CopySync(void* dst, const void* src, size_t bytes);
Status FillSync(void* dst, int byte_value, size_t bytes);

// Synchronous copy between pageable host memory and device memory (either direction), staged
// through pinned bounce buffers on the calling thread's per-thread stream, so that copies from
// several threads run side by side (pageable cudaMemcpy serialized them: docs/PERFORMANCE.md,
// "Requests in flight", has the figures). The bounce buffers (8 MiB each; two per
// host->device call of more than 8 MiB, else one) come from a process-wide pool that grows to
// the number of concurrent callers and lives until the process exits. A failed copy may have
// written any part of `dst`.
Status CopyStaged(void* dst, const void* src, size_t bytes, bool to_device);

}  // namespace cachepawl::cuda
