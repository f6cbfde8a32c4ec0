// cuda/'s RAII wrappers on a GPU (skips without one): bytes go host -> device -> host through
// pinned, device and registered memory on a Stream, bracketed by timing Events; every byte is
// compared against a pattern the destination was poisoned before.
#include <gtest/gtest.h>

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "cuda/cuda_resources.h"
#include "cuda/cuda_status.h"
#include "cuda/gpu_runtime.h"

namespace cachepawl::cuda {
namespace {

#if CACHEPAWL_HAVE_CUDA                      // (the copies below are runtime API calls)
constexpr size_t kBytes = size_t{64} << 20;  // 64 MiB: large enough that copies take a while

struct FreeAligned {
  void operator()(void* p) const { std::free(p); }
};

TEST(CudaResourcesGpuTest, BytesRoundTripThroughPinnedDeviceAndRegisteredMemory) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU: " << DescribeDevice(0);
  auto pinned = PinnedBuffer::Allocate(kBytes);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  auto device = DeviceBuffer::Allocate(0, kBytes);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  std::unique_ptr<std::byte, FreeAligned> host(
      static_cast<std::byte*>(std::aligned_alloc(4096, kBytes)));
  ASSERT_NE(host, nullptr);
  auto registered = HostRegistration::Register(host.get(), kBytes);
  ASSERT_TRUE(registered.ok()) << registered.status().ToString();
  EXPECT_EQ(registered->data(), host.get());
  EXPECT_EQ(registered->size(), kBytes);
  auto stream = Stream::Create(-1);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  auto start = Event::Create(Event::kTiming);
  auto end = Event::Create(Event::kTiming);
  ASSERT_TRUE(start.ok() && end.ok());

  for (size_t i = 0; i < kBytes; ++i) {
    pinned->data()[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);  // never all zeros
  }
  std::memset(host.get(), 0xA5, kBytes);  // poison
  ASSERT_TRUE(start->Record(*stream).ok());
  ASSERT_TRUE(CheckCuda(cudaMemcpyAsync(device->data(), pinned->data(), kBytes,
                                        cudaMemcpyHostToDevice, stream->get()),
                        "cudaMemcpyAsync")
                  .ok());
  ASSERT_TRUE(CheckCuda(cudaMemcpyAsync(host.get(), device->data(), kBytes, cudaMemcpyDeviceToHost,
                                        stream->get()),
                        "cudaMemcpyAsync")
                  .ok());
  ASSERT_TRUE(end->Record(*stream).ok());
  ASSERT_TRUE(stream->WaitFinished(std::chrono::seconds(30)).ok());
  auto finished = end->Finished();
  ASSERT_TRUE(finished.ok());
  EXPECT_TRUE(*finished);
  auto seconds = Event::ElapsedSeconds(*start, *end);
  ASSERT_TRUE(seconds.ok()) << seconds.status().ToString();
  EXPECT_GT(*seconds, 0.0);
  EXPECT_EQ(std::memcmp(host.get(), pinned->data(), kBytes), 0);

  // A moved-from wrapper owns nothing; the new owner frees once.
  DeviceBuffer moved = std::move(device).value();
  EXPECT_NE(moved.data(), nullptr);
  HostRegistration taken = std::move(registered).value();
  EXPECT_EQ(taken.data(), host.get());
}

#endif  // CACHEPAWL_HAVE_CUDA

TEST(CudaResourcesGpuTest, AnEmptyStreamHasFinished) {
  if (!GpuAvailable()) GTEST_SKIP() << "no GPU: " << DescribeDevice(0);
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  // An empty stream has finished at once.
  EXPECT_TRUE(stream->WaitFinished(std::chrono::milliseconds(1000)).ok());
  auto finished = stream->Finished();
  ASSERT_TRUE(finished.ok());
  EXPECT_TRUE(*finished);
}

}  // namespace
}  // namespace cachepawl::cuda
