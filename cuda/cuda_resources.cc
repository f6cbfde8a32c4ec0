#include "cuda/cuda_resources.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "cuda/cuda_status.h"
#include "cuda/gpu_runtime.h"

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl::cuda {

namespace {
#if !CACHEPAWL_HAVE_CUDA
Status NoCuda(const char* call) {
  return Status::Unavailable(std::string(call) + ": built without CUDA");
}
#endif
}  // namespace

// ---- DeviceBuffer ----

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int device, size_t bytes) {
#if CACHEPAWL_HAVE_CUDA
  CACHEPAWL_RETURN_IF_ERROR(SetDevice(device));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) {
      return Status::NoSpace("cudaMalloc of " + std::to_string(bytes) + " bytes on GPU " +
                             std::to_string(device) + ": out of device memory");
    }
    return CheckCuda(err, "cudaMalloc");
  }
  DeviceBuffer b;
  b.device_ = device;
  b.data_ = static_cast<std::byte*>(p);
  b.bytes_ = bytes;
  return b;
#else
  (void)device;
  (void)bytes;
  return NoCuda("cudaMalloc");
#endif
}

void DeviceBuffer::Free() {
#if CACHEPAWL_HAVE_CUDA
  if (data_ != nullptr) {
    (void)cudaSetDevice(device_);
    (void)cudaFree(data_);
  }
#endif
  device_ = -1;
  data_ = nullptr;
  bytes_ = 0;
}

DeviceBuffer::~DeviceBuffer() { Free(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::exchange(other.device_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Free();
    device_ = std::exchange(other.device_, -1);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// ---- PinnedBuffer ----

StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes, Mapping mapping) {
#if CACHEPAWL_HAVE_CUDA
  void* p = nullptr;
  const unsigned flags =
      cudaHostAllocPortable | (mapping == Mapping::kMapped ? cudaHostAllocMapped : 0u);
  CACHEPAWL_RETURN_IF_ERROR(CheckCuda(cudaHostAlloc(&p, bytes, flags), "cudaHostAlloc")
                                .WithContext(std::to_string(bytes) + " bytes"));
  PinnedBuffer b;
  b.data_ = static_cast<std::byte*>(p);
  b.bytes_ = bytes;
  return b;
#else
  (void)bytes;
  (void)mapping;
  return NoCuda("cudaHostAlloc");
#endif
}

void PinnedBuffer::Free() {
#if CACHEPAWL_HAVE_CUDA
  if (data_ != nullptr) (void)cudaFreeHost(data_);
#endif
  data_ = nullptr;
  bytes_ = 0;
}

PinnedBuffer::~PinnedBuffer() { Free(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Free();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

StatusOr<void*> PinnedBuffer::DevicePointer() const {
#if CACHEPAWL_HAVE_CUDA
  void* device = nullptr;
  CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device, data_, 0));
  return device;
#else
  return NoCuda("cudaHostGetDevicePointer");
#endif
}

// ---- HostRegistration ----

StatusOr<HostRegistration> HostRegistration::Register(void* ptr, size_t bytes) {
#if CACHEPAWL_HAVE_CUDA
  if (DeviceCount() == 0) return Status::Unavailable("cudaHostRegister: no GPU");
  const cudaError_t err =
      cudaHostRegister(ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return CheckCuda(err, "cudaHostRegister").WithContext(std::to_string(bytes) + " bytes");
  }
  HostRegistration r;
  r.ptr_ = ptr;
  r.bytes_ = bytes;
  return r;
#else
  (void)ptr;
  (void)bytes;
  return NoCuda("cudaHostRegister");
#endif
}

void HostRegistration::Unregister() {
#if CACHEPAWL_HAVE_CUDA
  if (ptr_ != nullptr && cudaHostUnregister(ptr_) != cudaSuccess) (void)cudaGetLastError();
#endif
  ptr_ = nullptr;
  bytes_ = 0;
}

HostRegistration::~HostRegistration() { Unregister(); }

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    Unregister();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// ---- Stream ----

StatusOr<Stream> Stream::Create(int priority) {
#if CACHEPAWL_HAVE_CUDA
  cudaStream_t s = nullptr;
  CACHEPAWL_RETURN_IF_ERROR(
      CheckCuda(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority),
                "cudaStreamCreateWithPriority"));
  Stream stream;
  stream.stream_ = s;
  return stream;
#else
  (void)priority;
  return NoCuda("cudaStreamCreateWithPriority");
#endif
}

Stream::~Stream() {
#if CACHEPAWL_HAVE_CUDA
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
#endif
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Stream dying(std::move(*this));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

Status Stream::Synchronize() const {
#if CACHEPAWL_HAVE_CUDA
  return CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
#else
  return NoCuda("cudaStreamSynchronize");
#endif
}

StatusOr<bool> Stream::Finished() const {
#if CACHEPAWL_HAVE_CUDA
  const cudaError_t err = cudaStreamQuery(stream_);
  if (err == cudaErrorNotReady) return false;
  CACHEPAWL_RETURN_IF_ERROR(CheckCuda(err, "cudaStreamQuery"));
  return true;
#else
  return NoCuda("cudaStreamQuery");
#endif
}

Status Stream::WaitFinished(std::chrono::milliseconds limit) const {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (true) {
    auto finished = Finished();
    if (!finished.ok()) return finished.status();
    if (*finished) return Status::OK();
    if (std::chrono::steady_clock::now() >= end) {
      return Status::TimedOut("stream not finished after " + std::to_string(limit.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---- Event ----

StatusOr<Event> Event::Create(unsigned flags) {
#if CACHEPAWL_HAVE_CUDA
  unsigned cuda_flags = (flags & kTiming) != 0 ? cudaEventDefault : cudaEventDisableTiming;
  if ((flags & kBlockingSync) != 0) cuda_flags |= cudaEventBlockingSync;
  cudaEvent_t e = nullptr;
  CACHEPAWL_RETURN_IF_ERROR(
      CheckCuda(cudaEventCreateWithFlags(&e, cuda_flags), "cudaEventCreateWithFlags"));
  Event event;
  event.event_ = e;
  return event;
#else
  (void)flags;
  return NoCuda("cudaEventCreateWithFlags");
#endif
}

Event::~Event() {
#if CACHEPAWL_HAVE_CUDA
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
#endif
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event dying(std::move(*this));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

Status Event::Record(CUstream_st* stream) const {
#if CACHEPAWL_HAVE_CUDA
  return CheckCuda(cudaEventRecord(event_, stream), "cudaEventRecord");
#else
  (void)stream;
  return NoCuda("cudaEventRecord");
#endif
}

Status Event::Synchronize() const {
#if CACHEPAWL_HAVE_CUDA
  return CheckCuda(cudaEventSynchronize(event_), "cudaEventSynchronize");
#else
  return NoCuda("cudaEventSynchronize");
#endif
}

StatusOr<bool> Event::Finished() const {
#if CACHEPAWL_HAVE_CUDA
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;
  CACHEPAWL_RETURN_IF_ERROR(CheckCuda(err, "cudaEventQuery"));
  return true;
#else
  return NoCuda("cudaEventQuery");
#endif
}

Status Event::MakeWait(CUstream_st* stream) const {
#if CACHEPAWL_HAVE_CUDA
  return CheckCuda(cudaStreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent");
#else
  (void)stream;
  return NoCuda("cudaStreamWaitEvent");
#endif
}

StatusOr<double> Event::ElapsedSeconds(const Event& start, const Event& end) {
#if CACHEPAWL_HAVE_CUDA
  float ms = 0;
  CACHEPAWL_RETURN_IF_ERROR(
      CheckCuda(cudaEventElapsedTime(&ms, start.event_, end.event_), "cudaEventElapsedTime"));
  return ms / 1e3;
#else
  (void)start;
  (void)end;
  return NoCuda("cudaEventElapsedTime");
#endif
}

}  // namespace cachepawl::cuda
