// The Store end to end on a GPU: the store-owned device pool in VRAM, the CUDA transfer path,
// host and disk tiers real. Label `gpu`: skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "cuda/cuda_resources.h"
#include "cuda/gpu_runtime.h"
#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_util.h"

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl {
namespace {

class StoreGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::GpuAvailable()) GTEST_SKIP() << "no GPU: " << cuda::DescribeDevice(0);
  }
  testing::TempDir dir_;
};

TEST_F(StoreGpuTest, SaveEvictReopenLoadEveryByteOnTheGpu) {
#if CACHEPAWL_HAVE_CUDA
  StoreOptions o;
  o.layout_name = "jamba-v0.1";
  o.host_bytes = 96ull << 20;  // a few Jamba states (16 MiB each) and pages: forces eviction
  o.disk_dir = dir_.str();
  o.disk_bytes = 1ull << 30;
  o.device_pool_bytes = 256ull << 20;
  o.cuda_device = 0;
  std::vector<std::vector<uint32_t>> prompts;
  for (uint32_t r = 0; r < 6; ++r) {
    std::vector<uint32_t> t(16 * 8);
    std::iota(t.begin(), t.end(), 1000 * (r + 1));
    prompts.push_back(t);
  }
  {
    auto opened = Store::Open(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    auto store = std::move(opened).value();
    ASSERT_TRUE(store->gpu_mode());
    const ModelLayout& layout = store->layout();
    for (const auto& prompt : prompts) {
      auto hashes = store->HashTokens("", prompt);
      std::vector<uint64_t> pages;
      for (const auto& h : hashes) {
        auto p = store->AllocateDeviceSlot(Kind::kKV);
        ASSERT_TRUE(p.ok());
        ASSERT_TRUE(store->WriteDeviceRecord(Kind::kKV, *p, Content(layout, h, Kind::kKV)).ok());
        pages.push_back(*p);
      }
      auto s = store->AllocateDeviceSlot(Kind::kMamba);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE(
          store->WriteDeviceRecord(Kind::kMamba, *s, Content(layout, hashes.back(), Kind::kMamba))
              .ok());
      const SaveRequest req = WholePromptSave(prompt, pages, *s);
      auto f = store->Save(req);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      ASSERT_TRUE(f->Wait(std::chrono::seconds(60)).ok());
      for (uint64_t p : pages) ASSERT_TRUE(store->FreeDeviceSlot(Kind::kKV, p).ok());
      ASSERT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *s).ok());
    }
    EXPECT_GT(
        store->Stats().evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kMamba)],
        0u);
    ASSERT_TRUE(store->Close().ok());
  }
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto store = std::move(opened).value();
  const ModelLayout& layout = store->layout();
  auto owned_stream = cuda::Stream::Create();  // non-blocking
  ASSERT_TRUE(owned_stream.ok()) << owned_stream.status().ToString();
  cudaStream_t stream = owned_stream->get();
  for (int pass = 0; pass < 2; ++pass) {  // pass 0: disk hits; pass 1: host hits
    for (const auto& prompt : prompts) {
      auto m = store->Lookup("", prompt);
      ASSERT_TRUE(m.ok());
      ASSERT_EQ(m->reusable_pages, 8u);
      std::vector<uint64_t> pages;
      const std::vector<std::byte> poison(layout.RecordBytes(Kind::kKV), std::byte{0xA5});
      for (size_t i = 0; i < 8; ++i) {
        auto p = store->AllocateDeviceSlot(Kind::kKV);
        ASSERT_TRUE(p.ok());
        ASSERT_TRUE(store->WriteDeviceRecord(Kind::kKV, *p, poison).ok());
        pages.push_back(*p);
      }
      auto s = store->AllocateDeviceSlot(Kind::kMamba);
      ASSERT_TRUE(s.ok());
      auto f = store->Load(*m, pages, *s);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      // The engine's way: its stream waits on the GPU; then check the fence's status.
      Status sw = f->StreamWait(stream);
      if (sw.IsUnavailable()) {
        ASSERT_TRUE(f->Wait(std::chrono::seconds(60)).ok());
      } else {
        ASSERT_TRUE(sw.ok()) << sw.ToString();
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        ASSERT_TRUE(f->Wait(std::chrono::seconds(60)).ok());
      }
      for (size_t i = 0; i < 8; ++i) {
        std::vector<std::byte> got(layout.RecordBytes(Kind::kKV));
        ASSERT_TRUE(store->ReadDeviceRecord(Kind::kKV, pages[i], got).ok());
        EXPECT_TRUE(got == Content(layout, m->hashes[i], Kind::kKV))
            << "pass " << pass << " page " << i;
      }
      std::vector<std::byte> state(layout.RecordBytes(Kind::kMamba));
      ASSERT_TRUE(store->ReadDeviceRecord(Kind::kMamba, *s, state).ok());
      EXPECT_TRUE(state == Content(layout, m->hashes[7], Kind::kMamba)) << "pass " << pass;
      for (uint64_t p : pages) ASSERT_TRUE(store->FreeDeviceSlot(Kind::kKV, p).ok());
      ASSERT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *s).ok());
    }
  }
  EXPECT_EQ(store->Stats().checksum_failures, 0u);
  ASSERT_TRUE(store->Close().ok());
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace cachepawl
