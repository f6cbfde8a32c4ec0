// CUDA faults under the Store, on a GPU: device allocations that fail, invalid device slots,
// errors inside copies, kernel launches and completions (injected at the CUDA call sites
// through the device mover's seam, store/store_faults.h), and a device pool unregistered
// while operations run. Each time: every fence fires, streams waiting on failed fences are
// released, nothing wrong is served, and the store serves the next operation. Label `gpu`:
// skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/cuda_resources.h"
#include "cuda/gpu_runtime.h"
#include "store/store.h"
#include "store/store_faults.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_checks.h"
#include "tests/store/store_test_util.h"
#include "vocab/device_pool.h"

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl {
namespace {

#if CACHEPAWL_HAVE_CUDA

constexpr uint64_t kPages = 64, kStates = 16;
constexpr size_t kPagesPerPrompt = 4;

// The engine's tensors in VRAM, one per layer and K/V (layer-first: the device mover gathers
// and scatters them with kernels through its staging ring), filled with random bytes.
class GpuPool {
 public:
  GpuPool(const ModelLayout& l, uint64_t seed) : layout_(l) {
    std::vector<std::byte*> k, v, conv, ssm;
    for (size_t a = 0; a < l.attention_layers.size(); ++a) {
      k.push_back(Tensor(kPages * l.KBytesPerPage(a), seed++));
      v.push_back(Tensor(kPages * l.KBytesPerPage(a), seed++));
    }
    for (size_t i = 0; i < l.ssm_layers.size(); ++i) {
      conv.push_back(Tensor(kStates * l.ConvStateBytes(i), seed++));
      ssm.push_back(Tensor(kStates * l.SsmStateBytes(i), seed++));
    }
    desc_ = DevicePoolDescription::LayerFirst(l, 0, kPages, k, v, false, kStates, conv, ssm);
  }
  const DevicePoolDescription& desc() const { return desc_; }

  // Bytes of page `p` (every layer's K and V) or state slot `s` (every layer), copied out.
  std::vector<std::byte> Page(uint64_t p) const { return Slots(false, p); }
  std::vector<std::byte> State(uint64_t s) const { return Slots(true, s); }
  // Fills page `p` / state `s` with `value` (a poison before a load).
  void Poison(bool state, uint64_t slot, int value) {
    for (const Tensor_& t : tensors_) {
      if (t.state != state) continue;
      const uint64_t each = t.memory.size() / (state ? kStates : kPages);
      EXPECT_EQ(cudaMemset(t.memory.data() + slot * each, value, each), cudaSuccess);
    }
  }
  void PoisonAll(int value) {
    for (const Tensor_& t : tensors_) {
      EXPECT_EQ(cudaMemset(t.memory.data(), value, t.memory.size()), cudaSuccess);
    }
  }
  bool AllAre(int value) const {
    for (const Tensor_& t : tensors_) {
      std::vector<std::byte> host(t.memory.size());
      if (cudaMemcpy(host.data(), t.memory.data(), t.memory.size(), cudaMemcpyDeviceToHost) !=
          cudaSuccess) {
        return false;
      }
      for (std::byte b : host) {
        if (b != static_cast<std::byte>(value)) return false;
      }
    }
    return true;
  }

 private:
  struct Tensor_ {
    cuda::DeviceBuffer memory;  // freed with the pool
    bool state;
  };
  std::byte* Tensor(uint64_t bytes, uint64_t seed) {
    auto allocated = cuda::DeviceBuffer::Allocate(0, bytes);
    EXPECT_TRUE(allocated.ok()) << allocated.status().ToString();
    cuda::DeviceBuffer memory =
        allocated.ok() ? std::move(allocated).value() : cuda::DeviceBuffer();
    std::vector<std::byte> host(bytes);
    testing::FillRandom(host, seed);
    EXPECT_EQ(cudaMemcpy(memory.data(), host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    const bool state = tensors_.size() >= 2 * layout_.attention_layers.size();
    tensors_.push_back({std::move(memory), state});
    return tensors_.back().memory.data();
  }
  std::vector<std::byte> Slots(bool state, uint64_t slot) const {
    std::vector<std::byte> out;
    for (const Tensor_& t : tensors_) {
      if (t.state != state) continue;
      const uint64_t each = t.memory.size() / (state ? kStates : kPages);
      std::vector<std::byte> part(each);
      EXPECT_EQ(
          cudaMemcpy(part.data(), t.memory.data() + slot * each, each, cudaMemcpyDeviceToHost),
          cudaSuccess);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
  const ModelLayout layout_;
  std::vector<Tensor_> tensors_;
  DevicePoolDescription desc_;
};

class StoreCudaFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::GpuAvailable()) GTEST_SKIP() << "no GPU: " << cuda::DescribeDevice(0);
    layout_ = TinyHybrid();
  }
  StoreOptions Options() const {
    StoreOptions o;
    o.layout = layout_;
    o.host_bytes = 64ull << 20;
    o.cuda_device = 0;
    o.staging_bytes = 4ull << 20;
    return o;
  }
  std::vector<uint32_t> Prompt(size_t i) const {
    return Tokens(static_cast<uint32_t>(7000 * (i + 1)), kPagesPerPrompt * 4);
  }
  // Saves prompt i from pages [i * kPagesPerPrompt ...) and state slot i of `pool`, fills
  // first. The fence's status (waited for).
  Status SavePrompt(Store& store, size_t i) {
    std::vector<uint64_t> pages;
    for (size_t p = 0; p < kPagesPerPrompt; ++p) pages.push_back(i * kPagesPerPrompt + p);
    const auto tokens = Prompt(i);
    const SaveRequest req = WholePromptSave(tokens, pages, i % kStates);
    auto f = store.Save(req);
    if (!f.ok()) return f.status();
    return f->Wait(std::chrono::seconds(60));
  }
  // What prompt i was saved from in `pool`: its pages' bytes, then its state's.
  std::vector<std::byte> Saved(const GpuPool& pool, size_t i) const {
    std::vector<std::byte> out;
    for (uint64_t p = 0; p < kPagesPerPrompt; ++p) {
      const auto page = pool.Page(i * kPagesPerPrompt + p);
      out.insert(out.end(), page.begin(), page.end());
    }
    const auto state = pool.State(i % kStates);
    out.insert(out.end(), state.begin(), state.end());
    return out;
  }
  // Loads prompt i (when reusable) into the last pages and state slot of `pool`, poisoned first,
  // with a user stream waiting on the fence; when the fence is OK, compares every byte with
  // `expected` (Saved() of the pool it was saved from; default: `pool`). NotFound for a miss;
  // the fence's status otherwise.
  Status LoadPrompt(Store& store, GpuPool& pool, size_t i, const cuda::Stream& user,
                    const std::vector<std::byte>* expected = nullptr) {
    auto m = store.Lookup("", Prompt(i));
    if (!m.ok()) return m.status();
    if (m->reusable_pages != kPagesPerPrompt) return Status::NotFound("not reusable");
    const uint64_t first = kPages - kPagesPerPrompt, state = kStates - 1;
    std::vector<uint64_t> pages;
    for (uint64_t p = 0; p < kPagesPerPrompt; ++p) {
      pool.Poison(false, first + p, 0xEE);
      pages.push_back(first + p);
    }
    pool.Poison(true, state, 0xEE);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto f = store.Load(*m, pages, state);
    if (!f.ok()) return f.status();
    EXPECT_TRUE(f->StreamWait(user.get()).ok());
    const Status finished = user.WaitFinished(std::chrono::seconds(60));
    EXPECT_TRUE(finished.ok()) << "a waiting stream hung: " << finished.ToString();
    Status s = f->Wait(std::chrono::seconds(60));
    EXPECT_FALSE(s.IsTimedOut()) << "a fence never fired";
    if (!s.ok()) return s;
    std::vector<std::byte> got;
    for (uint64_t p = 0; p < kPagesPerPrompt; ++p) {
      const auto page = pool.Page(first + p);
      got.insert(got.end(), page.begin(), page.end());
    }
    const auto loaded_state = pool.State(state);
    got.insert(got.end(), loaded_state.begin(), loaded_state.end());
    EXPECT_TRUE(got == (expected != nullptr ? *expected : Saved(pool, i)))
        << "prompt " << i << ": wrong bytes served";
    return Status::OK();
  }
  ModelLayout layout_;
};

TEST_F(StoreCudaFaultsTest, FailedDeviceAllocationsAreClearErrorsAndTheStoreStaysUsable) {
  // A store-owned pool larger than the GPU: a real cudaMalloc failure.
  StoreOptions huge = Options();
  huge.device_pool_bytes = 1ull << 50;
  auto refused = Store::Open(huge);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("device pool"), std::string::npos)
      << refused.status().ToString();
  // The staging ring's allocation fails once (injected) while registering a pool: a clear
  // error, and the next registration works.
  std::atomic<int> allocations{0};
  StoreFaultInjection faults;
  faults.cuda_call = [&](CudaFaultSite site) {
    if (site != CudaFaultSite::kStagingAlloc) return 0;
    return ++allocations == 1 ? static_cast<int>(cudaErrorMemoryAllocation) : 0;
  };
  auto opened = OpenStoreWithFaults(Options(), faults);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  GpuPool pool(layout_, 1);
  Status first = store.RegisterDevicePool(pool.desc());
  ASSERT_FALSE(first.ok());
  EXPECT_NE(first.message().find("cudaErrorMemoryAllocation"), std::string::npos)
      << first.ToString();
  const Status no_pool = SavePrompt(store, 0);
  EXPECT_TRUE(no_pool.IsFailedPrecondition()) << no_pool.ToString();
  ASSERT_TRUE(store.RegisterDevicePool(pool.desc()).ok());
  ASSERT_TRUE(SavePrompt(store, 0).ok());
  auto user_stream = cuda::Stream::Create();  // non-blocking
  ASSERT_TRUE(user_stream.ok()) << user_stream.status().ToString();
  const cuda::Stream& user = *user_stream;
  EXPECT_TRUE(LoadPrompt(store, pool, 0, user).ok());
  ASSERT_TRUE(store.Close().ok());
}

TEST_F(StoreCudaFaultsTest, InvalidDeviceSlotsAreRefusedByNameAndTheStoreStaysUsable) {
  auto opened = Store::Open(Options());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  GpuPool pool(layout_, 2);
  ASSERT_TRUE(store.RegisterDevicePool(pool.desc()).ok());
  const auto tokens = Prompt(0);
  const std::vector<uint64_t> bad_pages{0, 1, 2, kPages + 5};
  SaveRequest req = WholePromptSave(tokens, bad_pages, 0);
  auto f = store.Save(req);
  const Status s = f.ok() ? f->Wait(std::chrono::seconds(60)) : f.status();
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find(std::to_string(kPages + 5)), std::string::npos) << s.ToString();
  const std::vector<uint64_t> good_pages{0, 1, 2, 3};  // (a span must not outlive its vector)
  req.device_pages = good_pages;
  req.device_state_slot = kStates;  // one past the last state slot
  f = store.Save(req);
  const Status st = f.ok() ? f->Wait(std::chrono::seconds(60)) : f.status();
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  // Nothing half-saved is served; a good save and load work.
  auto user_stream = cuda::Stream::Create();  // non-blocking
  ASSERT_TRUE(user_stream.ok()) << user_stream.status().ToString();
  const cuda::Stream& user = *user_stream;
  const Status miss = LoadPrompt(store, pool, 0, user);
  EXPECT_TRUE(miss.ok() || miss.IsNotFound()) << miss.ToString();
  ASSERT_TRUE(SavePrompt(store, 0).ok());
  EXPECT_TRUE(LoadPrompt(store, pool, 0, user).ok());
}

// Every third CUDA call of one site fails while prompts are saved and loaded; then the faults
// stop. Failed saves leave nothing that serves wrong bytes; everything the store still serves
// is exact; saves and loads after work.
TEST_F(StoreCudaFaultsTest, ErrorsInCopiesKernelsAndCompletionsFailFencesAndServeNothingWrong) {
  const std::pair<CudaFaultSite, int> sites[] = {
      {CudaFaultSite::kCopy, static_cast<int>(cudaErrorInvalidValue)},
      {CudaFaultSite::kKernelLaunch, static_cast<int>(cudaErrorInvalidConfiguration)},
      {CudaFaultSite::kCompletion, static_cast<int>(cudaErrorLaunchFailure)}};
  constexpr size_t kPrompts = 12;
  for (const auto& [site, error] : sites) {
    SCOPED_TRACE(static_cast<int>(site));
    std::atomic<bool> armed{true};
    std::atomic<uint64_t> calls{0}, injected{0};
    StoreFaultInjection faults;
    faults.cuda_call = [&, site = site, error = error](CudaFaultSite at) {
      if (at != site || !armed.load()) return 0;
      if (++calls % 3 != 0) return 0;
      ++injected;
      return error;
    };
    auto opened = OpenStoreWithFaults(Options(), faults);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    Store& store = **opened;
    GpuPool pool(layout_, 10 + static_cast<uint64_t>(site));
    ASSERT_TRUE(store.RegisterDevicePool(pool.desc()).ok());
    auto user_stream = cuda::Stream::Create();  // non-blocking
    ASSERT_TRUE(user_stream.ok()) << user_stream.status().ToString();
    const cuda::Stream& user = *user_stream;
    int failed = 0, served = 0;
    for (size_t i = 0; i < kPrompts; ++i) {
      if (!SavePrompt(store, i).ok()) ++failed;
      for (size_t j = 0; j <= i; ++j) {
        const Status s = LoadPrompt(store, pool, j, user);
        if (s.ok()) {
          ++served;
        } else if (!s.IsNotFound()) {
          ++failed;
        }
      }
    }
    EXPECT_GT(injected.load(), 0u) << "the site was never reached";
    EXPECT_GT(failed, 0);
    EXPECT_GT(served, 0);
    EXPECT_GT(store.Stats().failed_operations, 0u);
    // The faults stop: what is still cached is exact, and everything can be saved and loaded.
    armed = false;
    for (size_t i = 0; i < kPrompts; ++i) {
      const Status s = LoadPrompt(store, pool, i, user);
      EXPECT_TRUE(s.ok() || s.IsNotFound()) << i << ": " << s.ToString();
    }
    for (size_t i = 0; i < kPrompts; ++i) ASSERT_TRUE(SavePrompt(store, i).ok()) << i;
    for (size_t i = 0; i < kPrompts; ++i) EXPECT_TRUE(LoadPrompt(store, pool, i, user).ok()) << i;
    ASSERT_TRUE(store.Close().ok());
  }
}

TEST_F(StoreCudaFaultsTest, APoolUnregisteredWhileOperationsRunIsNeverTouchedAfter) {
  auto opened = Store::Open(Options());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  auto first = std::make_unique<GpuPool>(layout_, 20);
  ASSERT_TRUE(store.RegisterDevicePool(first->desc()).ok());
  constexpr size_t kPrompts = 8;
  std::vector<std::vector<std::byte>> saved;
  for (size_t i = 0; i < kPrompts; ++i) {
    ASSERT_TRUE(SavePrompt(store, i).ok());
    saved.push_back(Saved(*first, i));
  }
  // Threads keep loading (pages past the saved ones) and saving until the store refuses.
  std::atomic<int> ops{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> pages;
      for (uint64_t p = 0; p < kPagesPerPrompt; ++p) {
        pages.push_back(kPrompts * kPagesPerPrompt + t * kPagesPerPrompt + p);
      }
      for (size_t n = 0;; ++n) {
        auto m = store.Lookup("", Prompt((t + n) % kPrompts));
        if (!m.ok() || m->reusable_pages != kPagesPerPrompt) {
          ++other;
          return;
        }
        auto f = store.Load(*m, pages, kStates - 1 - t);
        if (!f.ok()) {
          f.status().IsFailedPrecondition() ? ++refused : ++other;
          return;
        }
        if (!f->Wait(std::chrono::seconds(60)).ok()) ++other;
        ++ops;
      }
    });
  }
  while (ops.load() < 40) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(store.UnregisterDevicePool().ok());
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), 4);
  EXPECT_EQ(other.load(), 0);
  first->PoisonAll(0x5A);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(first->AllAre(0x5A)) << "the pool was written after UnregisterDevicePool returned";
  first.reset();  // cudaFree of every tensor
  // A new pool: the prompts saved through the first one are served, byte-exact, and saves work.
  GpuPool second(layout_, 30);
  ASSERT_TRUE(store.RegisterDevicePool(second.desc()).ok());
  auto user_stream = cuda::Stream::Create();  // non-blocking
  ASSERT_TRUE(user_stream.ok()) << user_stream.status().ToString();
  const cuda::Stream& user = *user_stream;
  for (size_t i = 0; i < kPrompts; ++i) {
    EXPECT_TRUE(LoadPrompt(store, second, i, user, &saved[i]).ok()) << i;
  }
  ASSERT_TRUE(SavePrompt(store, kPrompts).ok());
  EXPECT_TRUE(LoadPrompt(store, second, kPrompts, user).ok());
  ASSERT_TRUE(store.Close().ok());
}

#else  // !CACHEPAWL_HAVE_CUDA

TEST(StoreCudaFaultsTest, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace cachepawl
