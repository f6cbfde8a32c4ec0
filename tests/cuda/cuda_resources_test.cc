// cuda/ without a GPU (every CI machine): CheckCuda and CheckCu turn return codes into Status, and
// every RAII wrapper's factory fails with a Status, never a crash; empty wrappers destruct and
// move safely. (With a GPU the factories are exercised by cuda_resources_gpu_test.cc.)
#include "cuda/cuda_resources.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <utility>

#include "cuda/cuda_status.h"
#include "cuda/gpu_runtime.h"

namespace cachepawl::cuda {
namespace {

TEST(CudaStatusTest, ZeroIsOkAndAnythingElseNamesTheCall) {
  EXPECT_TRUE(CheckCuda(0, "cudaMalloc").ok());
  const Status s = CheckCuda(2, "cudaMalloc(4096)");
  EXPECT_TRUE(s.IsInternal()) << s.ToString();
  EXPECT_EQ(s.message().rfind("cudaMalloc(4096) failed: ", 0), 0u) << s.ToString();
  EXPECT_TRUE(CheckCu(0, "cuStreamWaitValue32").ok());
  const Status d = CheckCu(700, "cuStreamWaitValue32");
  EXPECT_TRUE(d.IsInternal()) << d.ToString();
  EXPECT_EQ(d.message(), "cuStreamWaitValue32 failed: CUresult 700");
}

TEST(CudaResourcesTest, WithoutAGpuEveryFactoryFailsWithAStatus) {
  if (GpuAvailable()) GTEST_SKIP() << "a GPU is present: cuda_resources_gpu_test.cc covers it";
  EXPECT_FALSE(DeviceBuffer::Allocate(0, 4096).ok());
  EXPECT_FALSE(PinnedBuffer::Allocate(4096).ok());
  alignas(4096) static char page[4096];
  const auto registration = HostRegistration::Register(page, sizeof(page));
  ASSERT_FALSE(registration.ok());
  EXPECT_TRUE(registration.status().IsUnavailable()) << registration.status().ToString();
  EXPECT_FALSE(Stream::Create().ok());
  EXPECT_FALSE(Event::Create(Event::kTiming).ok());
}

TEST(CudaResourcesTest, EmptyWrappersMoveAndDestructSafely) {
  DeviceBuffer d;
  DeviceBuffer d2(std::move(d));
  EXPECT_EQ(d2.data(), nullptr);
  PinnedBuffer p;
  PinnedBuffer p2 = std::move(p);
  EXPECT_EQ(p2.data(), nullptr);
  HostRegistration r;
  HostRegistration r2 = std::move(r);
  EXPECT_EQ(r2.data(), nullptr);
  EXPECT_EQ(r2.size(), 0u);
  Stream s;
  Stream s2 = std::move(s);
  EXPECT_EQ(s2.get(), nullptr);
  Event e;
  Event e2 = std::move(e);
  EXPECT_FALSE(static_cast<bool>(e2));
}

}  // namespace
}  // namespace cachepawl::cuda
