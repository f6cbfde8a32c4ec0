// Move-only RAII owners of CUDA resources: device memory (DeviceBuffer), pinned host memory
// (PinnedBuffer), registrations of host memory (HostRegistration), streams (Stream) and events
// (Event). Each is made by a factory that returns
// StatusOr (never throws); every CUDA return code goes through cuda::CheckCuda
// (cuda/cuda_status.h), so a failure names the call and the CUDA error. The destructor frees
// the resource and ignores errors (a destructor has no one to report them to).
//
// The header is CUDA-free: streams and events are handed out as CUstream_st* / CUevent_st*,
// which are exactly cudaStream_t / cudaEvent_t in files that include the CUDA runtime. In a
// build without CUDA every factory returns Unavailable, so no object is ever non-empty there.
// A default-constructed or moved-from object is empty (null handle, size 0) and owns nothing.
//
// Thread safety: an object is not synchronized; const methods may be called concurrently when
// the CUDA call behind them may (recording an event, querying, synchronizing).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "vocab/status.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace cachepawl::cuda {

// cudaMalloc'd memory on one GPU.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Makes `device` current on the calling thread, then cudaMalloc of `bytes`. Errors:
  // InvalidArgument (no such GPU), NoSpace (out of device memory), Internal (another CUDA
  // error), Unavailable (built without CUDA).
  static StatusOr<DeviceBuffer> Allocate(int device, size_t bytes);
  ~DeviceBuffer();  // cudaFree, with its device made current
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return bytes_; }
  int device() const { return device_; }

 private:
  void Free();
  int device_ = -1;
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory from cudaHostAlloc (portable: pinned for every GPU's context).
class PinnedBuffer {
 public:
  enum class Mapping : uint8_t {
    kHostOnly = 0,  // cudaHostAllocPortable
    kMapped = 1,    // also cudaHostAllocMapped: the GPU can address it (DevicePointer)
  };
  PinnedBuffer() = default;
  // Internal naming the call on failure; Unavailable when built without CUDA.
  static StatusOr<PinnedBuffer> Allocate(size_t bytes, Mapping mapping = Mapping::kHostOnly);
  ~PinnedBuffer();  // cudaFreeHost
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return bytes_; }
  // The device address of data() (cudaHostGetDevicePointer); for Mapping::kMapped buffers.
  StatusOr<void*> DevicePointer() const;

 private:
  void Free();
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

// A cudaHostRegister'ed range of host memory that the caller owns (portable and mapped: pinned
// for every GPU's context). The memory must stay mapped until the registration is gone.
class HostRegistration {
 public:
  HostRegistration() = default;
  // Registers [ptr, ptr+bytes), both 4 KiB aligned. Unavailable without a usable GPU (or built
  // without CUDA); Internal naming cudaHostRegister and the size otherwise.
  static StatusOr<HostRegistration> Register(void* ptr, size_t bytes);
  ~HostRegistration();  // cudaHostUnregister
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void Unregister();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream (cudaStreamNonBlocking: no implicit synchronization with the legacy
// default stream) on the device current when it was created.
class Stream {
 public:
  Stream() = default;
  // `priority`: a CUDA stream priority (lower numbers run first; 0, the default, is the least).
  static StatusOr<Stream> Create(int priority = 0);
  ~Stream();  // cudaStreamDestroy (work already enqueued still runs)
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream_st* get() const { return stream_; }
  Status Synchronize() const;  // cudaStreamSynchronize
  // cudaStreamQuery: true once every enqueued piece of work has finished, false before.
  StatusOr<bool> Finished() const;
  // Polls Finished() every millisecond, so that a caller (a test, a tool) cannot hang on a stream
  // that never finishes: OK once it has finished, TimedOut after `limit`, the CUDA error of
  // cudaStreamQuery otherwise.
  Status WaitFinished(std::chrono::milliseconds limit) const;

 private:
  CUstream_st* stream_ = nullptr;
};

// An event. Without kTiming it cannot time (cudaEventDisableTiming) and records faster.
class Event {
 public:
  enum Flags : unsigned {
    kNoTiming = 0,
    kTiming = 1u << 0,        // ElapsedSeconds works on it
    kBlockingSync = 1u << 1,  // Synchronize sleeps instead of spinning (cudaEventBlockingSync)
  };
  Event() = default;
  static StatusOr<Event> Create(unsigned flags = kNoTiming);
  ~Event();  // cudaEventDestroy
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  CUevent_st* get() const { return event_; }
  explicit operator bool() const { return event_ != nullptr; }
  Status Record(CUstream_st* stream) const;  // cudaEventRecord
  Status Record(const Stream& stream) const { return Record(stream.get()); }
  Status Synchronize() const;  // cudaEventSynchronize
  // cudaEventQuery: true once the work before the last Record has finished, false before.
  StatusOr<bool> Finished() const;
  // Makes `stream` wait (on the GPU) for the work before this event's last Record.
  Status MakeWait(CUstream_st* stream) const;  // cudaStreamWaitEvent
  // Seconds between two recorded events, both created with kTiming (cudaEventElapsedTime).
  static StatusOr<double> ElapsedSeconds(const Event& start, const Event& end);

 private:
  CUevent_st* event_ = nullptr;
};

}  // namespace cachepawl::cuda
