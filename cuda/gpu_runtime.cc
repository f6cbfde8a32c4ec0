#include "cuda/gpu_runtime.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_resources.h"
#include "cuda/cuda_status.h"

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl::cuda {

bool BuiltWithCuda() { return CACHEPAWL_HAVE_CUDA != 0; }

int DeviceCount() {
#if CACHEPAWL_HAVE_CUDA
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky "no device" error
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

std::string DescribeDevice(int device) {
#if CACHEPAWL_HAVE_CUDA
  if (DeviceCount() == 0) return "no GPU (cudaGetDeviceCount failed or found none)";
  if (device < 0 || device >= DeviceCount()) return "no GPU " + std::to_string(device);
  cudaDeviceProp prop{};
  const Status props = CheckCuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  if (!props.ok()) return "GPU " + std::to_string(device) + " (" + props.message() + ")";
  // Optional in a description: a failed query reads "driver API unknown".
  int driver = 0;
  const bool have_driver = CheckCuda(cudaDriverGetVersion(&driver), "cudaDriverGetVersion").ok();
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, " +
         std::to_string(prop.totalGlobalMem >> 20) + " MiB, driver API " +
         (have_driver ? std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10)
                      : std::string("unknown")) +
         ")";
#else
  (void)device;
  return "no GPU (built without CUDA)";
#endif
}

StatusOr<GpuProperties> QueryDevice(int device) {
#if CACHEPAWL_HAVE_CUDA
  if (device < 0 || device >= DeviceCount()) {
    return Status::Unavailable("GPU " + std::to_string(device) + ": " + DescribeDevice(device));
  }
  cudaDeviceProp prop{};
  CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  GpuProperties p;
  p.name = prop.name;
  p.compute_major = prop.major;
  p.compute_minor = prop.minor;
  p.sm_count = prop.multiProcessorCount;
  p.total_bytes = prop.totalGlobalMem;
  // Optional facts, as GpuProperties documents them: the bus id only locates the PCIe link in
  // sysfs ("" when the query fails), the versions are 0 when theirs fails. A failed query is
  // cleared, so that it is not an error of the caller's later calls.
  char bus[32] = {};
  if (CheckCuda(cudaDeviceGetPCIBusId(bus, sizeof(bus), device), "cudaDeviceGetPCIBusId").ok()) {
    p.pci_bus_id = bus;
    for (char& c : p.pci_bus_id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  } else {
    (void)cudaGetLastError();
  }
  if (!CheckCuda(cudaDriverGetVersion(&p.driver_version), "cudaDriverGetVersion").ok()) {
    p.driver_version = 0;
    (void)cudaGetLastError();
  }
  if (!CheckCuda(cudaRuntimeGetVersion(&p.runtime_version), "cudaRuntimeGetVersion").ok()) {
    p.runtime_version = 0;
    (void)cudaGetLastError();
  }
  // The caller's current device, made current again below (when even that query fails, the
  // caller has none this thread knows of: `device` stays current).
  int previous = device;
  if (!CheckCuda(cudaGetDevice(&previous), "cudaGetDevice").ok()) {
    previous = device;
    (void)cudaGetLastError();
  }
  CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  const Status info = CheckCuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  // The caller's device must be current again: its later calls would go to the wrong GPU.
  const Status restored =
      CheckCuda(cudaSetDevice(previous), "cudaSetDevice").WithContext("restoring the caller's GPU");
  CACHEPAWL_RETURN_IF_ERROR(info);
  CACHEPAWL_RETURN_IF_ERROR(restored);
  p.free_bytes = free_bytes;
  return p;
#else
  (void)device;
  return Status::Unavailable("no GPU (built without CUDA)");
#endif
}

Status ValidateGpuMode(GpuMode mode, const std::string& field) {
  if (mode != GpuMode::kAuto && mode != GpuMode::kOn && mode != GpuMode::kOff) {
    return Status::InvalidArgument(field + ": " + std::to_string(static_cast<int>(mode)) +
                                   " (must be kAuto, kOn or kOff)");
  }
  return Status::OK();
}

StatusOr<bool> ResolveGpuMode(GpuMode mode, const std::string& field, int device) {
  if (mode == GpuMode::kOn && !GpuAvailable()) {
    return Status::Unavailable(field + ": kOn but no GPU is usable (" + DescribeDevice(device) +
                               ")");
  }
  return mode == GpuMode::kOn || (mode == GpuMode::kAuto && GpuAvailable());
}

Status SetDevice(int device) {
#if CACHEPAWL_HAVE_CUDA
  if (device < 0 || device >= DeviceCount()) {
    return Status::InvalidArgument("device: " + std::to_string(device) + " (" +
                                   std::to_string(DeviceCount()) + " GPUs visible)");
  }
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CheckCuda(err, "cudaSetDevice");
  return Status::OK();
#else
  (void)device;
  return Status::Unavailable("built without CUDA");
#endif
}

Status CheckDevicePointer(const void* ptr, int device, const std::string& what) {
#if CACHEPAWL_HAVE_CUDA
  cudaPointerAttributes attr{};
  const Status queried =
      CheckCuda(cudaPointerGetAttributes(&attr, ptr), "cudaPointerGetAttributes");
  if (!queried.ok()) {
    (void)cudaGetLastError();
    return Status::InvalidArgument(what + ": " + queried.message());
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return Status::InvalidArgument(what + ": not device memory (memory type " +
                                   std::to_string(static_cast<int>(attr.type)) + ")");
  }
  if (attr.device != device) {
    return Status::InvalidArgument(what + ": memory of GPU " + std::to_string(attr.device) +
                                   ", expected GPU " + std::to_string(device));
  }
  return Status::OK();
#else
  (void)ptr;
  (void)device;
  return Status::Unavailable(what + ": built without CUDA");
#endif
}

Status CopySync(void* dst, const void* src, size_t bytes) {
#if CACHEPAWL_HAVE_CUDA
  cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (err != cudaSuccess) return CheckCuda(err, "cudaMemcpy");
  return Status::OK();
#else
  (void)dst;
  (void)src;
  (void)bytes;
  return Status::Unavailable("cudaMemcpy: built without CUDA");
#endif
}

#if CACHEPAWL_HAVE_CUDA
namespace {

constexpr size_t kBounceBytes = size_t{8} << 20;

// Pinned bounce buffers shared by every CopyStaged caller (never freed: bounded by the number of
// threads copying at once).
class BouncePool {
 public:
  StatusOr<PinnedBuffer> Take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        PinnedBuffer p = std::move(free_.back());
        free_.pop_back();
        return p;
      }
    }
    auto p = PinnedBuffer::Allocate(kBounceBytes);
    if (!p.ok()) return p.status().WithContext("bounce buffer");
    return p;
  }
  void Give(PinnedBuffer p) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(p));
  }

 private:
  std::mutex mu_;
  std::vector<PinnedBuffer> free_;  // guarded by mu_
};

BouncePool& Bounces() {
  static BouncePool* pool = new BouncePool();  // outlives every caller
  return *pool;
}

}  // namespace
#endif

Status CopyStaged(void* dst, const void* src, size_t bytes, bool to_device) {
#if CACHEPAWL_HAVE_CUDA
  if (bytes == 0) return Status::OK();
  // One bounce buffer for a record that fits in one; two for larger ones (host -> device: the CPU
  // fills one while the copy engine drains the other, each reused once its event fired).
  const size_t pieces = (bytes + kBounceBytes - 1) / kBounceBytes;
  const int buffers = pieces > 1 && to_device ? 2 : 1;
  PinnedBuffer bounce[2];
  Event drained[2];
  Status st;
  for (int b = 0; b < buffers && st.ok(); ++b) {
    auto taken = Bounces().Take();
    if (!taken.ok()) {
      st = taken.status();
      break;
    }
    bounce[b] = std::move(taken).value();
    if (buffers > 1) {
      auto event = Event::Create();
      if (event.ok()) {
        drained[b] = std::move(event).value();
      } else {
        st = event.status();
      }
    }
  }
  const cudaStream_t stream = cudaStreamPerThread;
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  for (size_t off = 0, k = 0; st.ok() && off < bytes; off += kBounceBytes, ++k) {
    const size_t n = std::min(kBounceBytes, bytes - off);
    const int b = static_cast<int>(k % buffers);
    std::byte* buf = bounce[b].data();
    cudaError_t err = cudaSuccess;
    if (to_device) {
      // Before refilling a buffer, its previous copy must have left it.
      if (k >= static_cast<size_t>(buffers)) {
        err = buffers > 1 ? cudaEventSynchronize(drained[b].get()) : cudaStreamSynchronize(stream);
      }
      if (err == cudaSuccess) {
        std::memcpy(buf, s + off, n);
        err = cudaMemcpyAsync(d + off, buf, n, cudaMemcpyHostToDevice, stream);
      }
      if (err == cudaSuccess && buffers > 1) err = cudaEventRecord(drained[b].get(), stream);
    } else {
      err = cudaMemcpyAsync(buf, s + off, n, cudaMemcpyDeviceToHost, stream);
      if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
      if (err == cudaSuccess) std::memcpy(d + off, buf, n);
    }
    if (err != cudaSuccess)
      st = CheckCuda(err, to_device ? "staged copy to device" : "staged copy to host");
  }
  cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess && st.ok()) st = CheckCuda(err, "cudaStreamSynchronize");
  for (PinnedBuffer& b : bounce) {
    if (b.data() != nullptr) Bounces().Give(std::move(b));
  }
  return st;
#else
  (void)dst;
  (void)src;
  (void)bytes;
  (void)to_device;
  return Status::Unavailable("cudaMemcpyAsync: built without CUDA");
#endif
}

Status FillSync(void* dst, int byte_value, size_t bytes) {
#if CACHEPAWL_HAVE_CUDA
  cudaError_t err = cudaMemset(dst, byte_value, bytes);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) return CheckCuda(err, "cudaMemset");
  return Status::OK();
#else
  (void)dst;
  (void)byte_value;
  (void)bytes;
  return Status::Unavailable("cudaMemset: built without CUDA");
#endif
}

}  // namespace cachepawl::cuda
