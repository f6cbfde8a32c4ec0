#include "cuda/gpu_runtime.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl::cuda {

#if CACHEPAWL_HAVE_CUDA
namespace {

Status CudaError(const char* call, cudaError_t err) {
  return Status::Internal(std::string(call) + " failed: " + cudaGetErrorName(err) + " (" +
                          cudaGetErrorString(err) + ")");
}

}  // namespace
#endif

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
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "GPU " + std::to_string(device);
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, " +
         std::to_string(prop.totalGlobalMem >> 20) + " MiB, driver API " +
         std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) + ")";
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
  cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return CudaError("cudaGetDeviceProperties", err);
  GpuProperties p;
  p.name = prop.name;
  p.compute_major = prop.major;
  p.compute_minor = prop.minor;
  p.sm_count = prop.multiProcessorCount;
  p.total_bytes = prop.totalGlobalMem;
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess) {
    p.pci_bus_id = bus;
    for (char& c : p.pci_bus_id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  (void)cudaDriverGetVersion(&p.driver_version);
  (void)cudaRuntimeGetVersion(&p.runtime_version);
  int previous = 0;
  (void)cudaGetDevice(&previous);
  if ((err = cudaSetDevice(device)) != cudaSuccess) return CudaError("cudaSetDevice", err);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  err = cudaMemGetInfo(&free_bytes, &total_bytes);
  (void)cudaSetDevice(previous);
  if (err != cudaSuccess) return CudaError("cudaMemGetInfo", err);
  p.free_bytes = free_bytes;
  return p;
#else
  (void)device;
  return Status::Unavailable("no GPU (built without CUDA)");
#endif
}

Status SetDevice(int device) {
#if CACHEPAWL_HAVE_CUDA
  if (device < 0 || device >= DeviceCount()) {
    return Status::InvalidArgument("device: " + std::to_string(device) + " (" +
                                   std::to_string(DeviceCount()) + " GPUs visible)");
  }
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError("cudaSetDevice", err);
  return Status::OK();
#else
  (void)device;
  return Status::Unavailable("built without CUDA");
#endif
}

Status HostRegister(void* ptr, size_t bytes) {
#if CACHEPAWL_HAVE_CUDA
  if (DeviceCount() == 0) return Status::Unavailable("cudaHostRegister: no GPU");
  cudaError_t err = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return CudaError("cudaHostRegister", err).WithContext(std::to_string(bytes) + " bytes");
  }
  return Status::OK();
#else
  (void)ptr;
  (void)bytes;
  return Status::Unavailable("cudaHostRegister: built without CUDA");
#endif
}

Status HostUnregister(void* ptr) {
#if CACHEPAWL_HAVE_CUDA
  cudaError_t err = cudaHostUnregister(ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return CudaError("cudaHostUnregister", err);
  }
  return Status::OK();
#else
  (void)ptr;
  return Status::Unavailable("cudaHostUnregister: built without CUDA");
#endif
}

StatusOr<void*> DeviceAlloc(int device, size_t bytes) {
#if CACHEPAWL_HAVE_CUDA
  CACHEPAWL_RETURN_IF_ERROR(SetDevice(device));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) {
      return Status::NoSpace("cudaMalloc of " + std::to_string(bytes) + " bytes on GPU " +
                             std::to_string(device) + ": out of device memory");
    }
    return CudaError("cudaMalloc", err);
  }
  return p;
#else
  (void)device;
  (void)bytes;
  return Status::Unavailable("cudaMalloc: built without CUDA");
#endif
}

void DeviceFree(int device, void* ptr) {
#if CACHEPAWL_HAVE_CUDA
  if (ptr == nullptr) return;
  (void)cudaSetDevice(device);
  (void)cudaFree(ptr);
#else
  (void)device;
  (void)ptr;
#endif
}

Status CheckDevicePointer(const void* ptr, int device, const std::string& what) {
#if CACHEPAWL_HAVE_CUDA
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::InvalidArgument(what + ": cudaPointerGetAttributes failed (" +
                                   cudaGetErrorName(err) + ")");
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
  if (err != cudaSuccess) return CudaError("cudaMemcpy", err);
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
  StatusOr<void*> Take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        void* p = free_.back();
        free_.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, kBounceBytes, cudaHostAllocPortable);
    if (err != cudaSuccess) return CudaError("cudaHostAlloc (bounce buffer)", err);
    return p;
  }
  void Give(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(p);
  }

 private:
  std::mutex mu_;
  std::vector<void*> free_;  // guarded by mu_
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
  void* bounce[2] = {nullptr, nullptr};
  cudaEvent_t drained[2] = {nullptr, nullptr};
  Status st;
  for (int b = 0; b < buffers && st.ok(); ++b) {
    auto taken = Bounces().Take();
    if (!taken.ok()) {
      st = taken.status();
      break;
    }
    bounce[b] = *taken;
    if (buffers > 1) {
      cudaError_t err = cudaEventCreateWithFlags(&drained[b], cudaEventDisableTiming);
      if (err != cudaSuccess) st = CudaError("cudaEventCreateWithFlags", err);
    }
  }
  const cudaStream_t stream = cudaStreamPerThread;
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  for (size_t off = 0, k = 0; st.ok() && off < bytes; off += kBounceBytes, ++k) {
    const size_t n = std::min(kBounceBytes, bytes - off);
    const int b = static_cast<int>(k % buffers);
    auto* buf = static_cast<std::byte*>(bounce[b]);
    cudaError_t err = cudaSuccess;
    if (to_device) {
      // Before refilling a buffer, its previous copy must have left it.
      if (k >= static_cast<size_t>(buffers)) {
        err = buffers > 1 ? cudaEventSynchronize(drained[b]) : cudaStreamSynchronize(stream);
      }
      if (err == cudaSuccess) {
        std::memcpy(buf, s + off, n);
        err = cudaMemcpyAsync(d + off, buf, n, cudaMemcpyHostToDevice, stream);
      }
      if (err == cudaSuccess && buffers > 1) err = cudaEventRecord(drained[b], stream);
    } else {
      err = cudaMemcpyAsync(buf, s + off, n, cudaMemcpyDeviceToHost, stream);
      if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
      if (err == cudaSuccess) std::memcpy(d + off, buf, n);
    }
    if (err != cudaSuccess)
      st = CudaError(to_device ? "staged copy to device" : "staged copy to host", err);
  }
  cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess && st.ok()) st = CudaError("cudaStreamSynchronize", err);
  for (int b = 0; b < 2; ++b) {
    if (drained[b] != nullptr) (void)cudaEventDestroy(drained[b]);
    if (bounce[b] != nullptr) Bounces().Give(bounce[b]);
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
  if (err != cudaSuccess) return CudaError("cudaMemset", err);
  return Status::OK();
#else
  (void)dst;
  (void)byte_value;
  (void)bytes;
  return Status::Unavailable("cudaMemset: built without CUDA");
#endif
}

}  // namespace cachepawl::cuda
