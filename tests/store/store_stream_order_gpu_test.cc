// Stream ordering through the public API, with no CPU wait before the bytes are taken: the
// engine's stream waits on a Load's fence (Fence::StreamWait), the same stream then copies the
// loaded pages and state out of the engine's pool, and only then does the CPU wait, on that
// stream. A stream wait that did not hold the stream (a DeferredStreamWaiter resolved empty, say)
// copies the poison the pool held before the Load, and fails here; every other GPU test waits
// on the fence from the CPU first and would pass. Label `gpu`: skips, saying so, without a GPU.
//
// Negative control: with CACHEPAWL_TEST_SKIP_STREAM_WAIT=1 in the environment the stream wait is
// left out, and this test must fail (run by hand to show that it can).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/cuda_resources.h"
#include "cuda/gpu_runtime.h"
#include "layouts/layout_presets.h"
#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_util.h"
#include "vocab/device_pool.h"

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl {
namespace {

class StoreStreamOrderGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::GpuAvailable()) GTEST_SKIP() << "no GPU: " << cuda::DescribeDevice(0);
  }
  testing::TempDir dir_;
};

TEST_F(StoreStreamOrderGpuTest, ALoadFenceOrdersTheEnginesStreamBeforeAnyCpuWait) {
#if CACHEPAWL_HAVE_CUDA
  constexpr uint64_t kPromptPages = 8, kPrompts = 6;
  constexpr uint64_t kPoolPages = 2 * kPromptPages, kStates = 2;
  StoreOptions o;
  o.layout_name = "jamba-v0.1";
  o.host_bytes = 128ull << 20;
  o.disk_dir = dir_.str();
  o.disk_bytes = 1ull << 30;
  o.cuda_device = 0;
  auto layout = ResolveLayout(o.layout_name, o.page_size_tokens);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const uint64_t page_bytes = layout->KvPageBytes(), state_bytes = layout->MambaSlotBytes();
  ASSERT_EQ(page_bytes, layout->RecordBytes(Kind::kKV));
  ASSERT_EQ(state_bytes, layout->RecordBytes(Kind::kMamba));

  // The engine's pool, block-contiguous: pages [0, 8) and state 0 are saved from, pages [8, 16)
  // and state 1 are loaded into.
  auto kv = cuda::DeviceBuffer::Allocate(0, kPoolPages * page_bytes);
  auto states = cuda::DeviceBuffer::Allocate(0, kStates * state_bytes);
  ASSERT_TRUE(kv.ok() && states.ok());
  const DevicePoolDescription pool = DevicePoolDescription::BlockContiguous(
      *layout, 0, kv->data(), kPoolPages, 0, states->data(), kStates, 0);
  std::vector<std::vector<uint32_t>> prompts;
  for (uint32_t r = 0; r < kPrompts; ++r) {
    std::vector<uint32_t> t(kPromptPages * layout->page_size_tokens);
    std::iota(t.begin(), t.end(), 5000 * (r + 1));
    prompts.push_back(std::move(t));
  }
  {
    auto opened = Store::Open(o);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    Store& store = **opened;
    ASSERT_TRUE(store.RegisterDevicePool(pool).ok());
    for (const auto& prompt : prompts) {
      const auto hashes = store.HashTokens("", prompt);
      std::vector<uint64_t> pages(kPromptPages);
      for (uint64_t p = 0; p < kPromptPages; ++p) {
        pages[p] = p;
        const auto bytes = Content(*layout, hashes[p], Kind::kKV);
        ASSERT_EQ(cudaMemcpy(kv->data() + p * page_bytes, bytes.data(), page_bytes,
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
      const auto state = Content(*layout, hashes.back(), Kind::kMamba);
      ASSERT_EQ(cudaMemcpy(states->data(), state.data(), state_bytes, cudaMemcpyHostToDevice),
                cudaSuccess);
      auto f = store.Save(WholePromptSave(prompt, pages, 0));
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      ASSERT_TRUE(f->Wait(std::chrono::seconds(60)).ok());
    }
    ASSERT_TRUE(store.Close().ok());
  }
  // A new store over the same folder: every Load reads the disk first, so it is still running
  // when the engine's stream is handed its wait.
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  ASSERT_TRUE(store.RegisterDevicePool(pool).ok());
  auto engine_stream = cuda::Stream::Create();
  ASSERT_TRUE(engine_stream.ok()) << engine_stream.status().ToString();
  cudaStream_t stream = engine_stream->get();
  auto out_pages = cuda::PinnedBuffer::Allocate(kPromptPages * page_bytes);
  auto out_state = cuda::PinnedBuffer::Allocate(state_bytes);
  ASSERT_TRUE(out_pages.ok() && out_state.ok());
  std::vector<uint64_t> load_pages(kPromptPages);
  std::iota(load_pages.begin(), load_pages.end(), kPromptPages);
  int unfinished_at_enqueue = 0;
  const char* skip = std::getenv("CACHEPAWL_TEST_SKIP_STREAM_WAIT");
  const bool skip_stream_wait = skip != nullptr && std::string(skip) == "1";
  for (const auto& prompt : prompts) {
    auto m = store.Lookup("", prompt);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_EQ(m->reusable_pages, kPromptPages);
    ASSERT_EQ(m->page_tiers[0], Tier::kDisk);
    // Poison where the Load goes, and where the copies out land.
    ASSERT_EQ(cudaMemset(kv->data() + kPromptPages * page_bytes, 0xA5, kPromptPages * page_bytes),
              cudaSuccess);
    ASSERT_EQ(cudaMemset(states->data() + state_bytes, 0xA5, state_bytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::memset(out_pages->data(), 0x5A, kPromptPages * page_bytes);
    std::memset(out_state->data(), 0x5A, state_bytes);

    auto f = store.Load(*m, load_pages, uint64_t{1});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    if (!skip_stream_wait) {
      ASSERT_TRUE(f->StreamWait(stream).ok());
    }
    ASSERT_EQ(cudaMemcpyAsync(out_pages->data(), kv->data() + kPromptPages * page_bytes,
                              kPromptPages * page_bytes, cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(out_state->data(), states->data() + state_bytes, state_bytes,
                              cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    // Whether the Load was still running when the copies were enqueued (else this round proves
    // nothing about the ordering; the test asks that some rounds do).
    if (!f->Ready()) ++unfinished_at_enqueue;
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the first CPU wait
    for (uint64_t p = 0; p < kPromptPages; ++p) {
      const auto want = Content(*layout, m->hashes[p], Kind::kKV);
      EXPECT_EQ(std::memcmp(out_pages->data() + p * page_bytes, want.data(), page_bytes), 0)
          << "page " << p << ": the copy after the stream wait did not see the loaded bytes";
    }
    const auto want_state = Content(*layout, m->hashes.back(), Kind::kMamba);
    EXPECT_EQ(std::memcmp(out_state->data(), want_state.data(), state_bytes), 0)
        << "state: the copy after the stream wait did not see the loaded bytes";
    ASSERT_TRUE(f->Wait(std::chrono::seconds(60)).ok());
  }
  EXPECT_GT(unfinished_at_enqueue, 0)
      << "every Load had finished before its copies were enqueued: nothing was ordered";
  EXPECT_EQ(store.Stats().checksum_failures, 0u);
  ASSERT_TRUE(store.Close().ok());
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace cachepawl
