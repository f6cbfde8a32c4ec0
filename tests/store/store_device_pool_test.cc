// A registered device pool taken away and replaced (Store::UnregisterDevicePool), in CPU mode:
// the pool is host memory described as a device pool (device -1). The GPU fault suite
// (store_cuda_faults_gpu_test.cc) does the same on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "store/store.h"
#include "tests/store/store_test_util.h"
#include "vocab/device_pool.h"

namespace cachepawl {
namespace {

constexpr uint64_t kPages = 64, kStates = 16;
constexpr size_t kPrompts = 8, kPagesPerPrompt = 2;

// Host memory standing in for an engine's KV and state tensors (record form, block-contiguous).
struct HostPool {
  std::vector<std::byte> kv, states;
  DevicePoolDescription desc;
  explicit HostPool(const ModelLayout& l)
      : kv(kPages * l.RecordBytes(Kind::kKV)), states(kStates * l.RecordBytes(Kind::kMamba)) {
    desc = DevicePoolDescription::BlockContiguous(l, -1, kv.data(), kPages, 0, states.data(),
                                                  kStates, 0);
  }
  std::byte* Page(const ModelLayout& l, uint64_t p) {
    return kv.data() + p * l.RecordBytes(Kind::kKV);
  }
  std::byte* State(const ModelLayout& l, uint64_t s) {
    return states.data() + s * l.RecordBytes(Kind::kMamba);
  }
};

class StoreDevicePoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o = CpuStoreOptions(TinyHybrid(), 256 * 8192, 0, 0, "");
    auto store = Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  std::vector<uint32_t> Prompt(size_t i) const {
    return Tokens(static_cast<uint32_t>(1000 * (i + 1)), kPagesPerPrompt * 4);
  }

  // Saves prompt i from pages [i * kPagesPerPrompt, ...) and state slot i % kStates of `pool`.
  void SavePrompt(HostPool& pool, size_t i) {
    const ModelLayout& l = store_->layout();
    auto tokens = Prompt(i);
    auto hashes = store_->HashTokens("", tokens);
    std::vector<uint64_t> pages;
    for (size_t p = 0; p < hashes.size(); ++p) {
      const uint64_t slot = i * kPagesPerPrompt + p;
      const auto bytes = Content(l, hashes[p], Kind::kKV);
      std::memcpy(pool.Page(l, slot), bytes.data(), bytes.size());
      pages.push_back(slot);
    }
    const auto state = Content(l, hashes.back(), Kind::kMamba);
    std::memcpy(pool.State(l, i % kStates), state.data(), state.size());
    const SaveRequest req = WholePromptSave(tokens, pages, i % kStates);
    auto f = store_->Save(req);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(f->Wait(std::chrono::seconds(30)).ok());
  }

  // Loads prompt i into pages [first, first + kPagesPerPrompt) and state slot `state` of `pool`
  // (poisoned first) and compares every byte. The load's status.
  Status LoadAndCompare(HostPool& pool, size_t i, uint64_t first, uint64_t state) {
    const ModelLayout& l = store_->layout();
    auto m = store_->Lookup("", Prompt(i));
    if (!m.ok()) return m.status();
    if (m->reusable_pages != kPagesPerPrompt) return Status::NotFound("not reusable");
    std::vector<uint64_t> pages;
    for (uint64_t p = 0; p < kPagesPerPrompt; ++p) {
      std::memset(pool.Page(l, first + p), 0xEE, l.RecordBytes(Kind::kKV));
      pages.push_back(first + p);
    }
    std::memset(pool.State(l, state), 0xEE, l.RecordBytes(Kind::kMamba));
    auto f = store_->Load(*m, pages, state);
    if (!f.ok()) return f.status();
    Status s = f->Wait(std::chrono::seconds(30));
    if (!s.ok()) return s;
    for (uint64_t p = 0; p < kPagesPerPrompt; ++p) {
      const auto want = Content(l, m->hashes[p], Kind::kKV);
      EXPECT_EQ(std::memcmp(pool.Page(l, first + p), want.data(), want.size()), 0)
          << "prompt " << i << " page " << p;
    }
    const auto want = Content(l, m->hashes.back(), Kind::kMamba);
    EXPECT_EQ(std::memcmp(pool.State(l, state), want.data(), want.size()), 0) << "prompt " << i;
    return Status::OK();
  }

  std::unique_ptr<Store> store_;
};

TEST_F(StoreDevicePoolTest, UnregisterIsRefusedWithoutARegisteredPool) {
  Status none = store_->UnregisterDevicePool();
  EXPECT_TRUE(none.IsFailedPrecondition()) << none.ToString();
  EXPECT_NE(none.message().find("no device pool is registered"), std::string::npos);
  StoreOptions owned = CpuStoreOptions(TinyHybrid(), 64 * 8192, 1 << 20, 0, "");
  auto s = Store::Open(owned);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status refused = (*s)->UnregisterDevicePool();
  EXPECT_TRUE(refused.IsFailedPrecondition()) << refused.ToString();
  EXPECT_NE(refused.message().find("store-owned"), std::string::npos) << refused.ToString();
  ASSERT_TRUE((*s)->Close().ok());
  EXPECT_TRUE((*s)->UnregisterDevicePool().IsFailedPrecondition());
}

TEST_F(StoreDevicePoolTest,
       APoolUnregisteredWhileOperationsRunIsNeverTouchedAfterAndANewOneServes) {
  const ModelLayout& l = store_->layout();
  auto first = std::make_unique<HostPool>(l);
  ASSERT_TRUE(store_->RegisterDevicePool(first->desc).ok());
  for (size_t i = 0; i < kPrompts; ++i) SavePrompt(*first, i);
  // Threads load saved prompts into their own pages of the pool (and save them again: a refresh
  // that copies device to host) until the store refuses.
  constexpr int kThreads = 4;
  std::atomic<int> loads_ok{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uint64_t page_base = kPrompts * kPagesPerPrompt + t * kPagesPerPrompt;
      const uint64_t state = kStates - 1 - t;
      for (size_t n = 0;; ++n) {
        Status s = LoadAndCompare(*first, (t + n) % kPrompts, page_base, state);
        if (s.ok()) {
          ++loads_ok;
        } else if (s.IsFailedPrecondition()) {
          ++refused;
          return;
        } else {
          ++other;
          ADD_FAILURE() << s.ToString();
          return;
        }
      }
    });
  }
  while (loads_ok.load() < 40) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(store_->UnregisterDevicePool().ok());
  for (auto& th : threads) th.join();  // each one's next call is refused
  // From here no byte of the first pool may change: poison it, try to load and save through
  // the store, give stray writers time, and look again.
  std::memset(first->kv.data(), 0x5A, first->kv.size());
  std::memset(first->states.data(), 0x5A, first->states.size());
  const auto tokens = Prompt(0);
  const std::vector<uint64_t> pages{0, 1};
  auto m = store_->Lookup("", tokens);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, kPagesPerPrompt);  // the host tier keeps what was saved
  Status load_refused = store_->Load(*m, pages, 0).status();
  EXPECT_TRUE(load_refused.IsFailedPrecondition()) << load_refused.ToString();
  SaveRequest again;
  again.tokens = tokens;
  again.device_pages = pages;
  Status save_refused = store_->Save(again).status();
  EXPECT_TRUE(save_refused.IsFailedPrecondition()) << save_refused.ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(refused.load(), kThreads);
  EXPECT_EQ(other.load(), 0);
  EXPECT_TRUE(std::all_of(first->kv.begin(), first->kv.end(), [](std::byte b) {
    return b == std::byte{0x5A};
  })) << "the unregistered pool's KV was written after UnregisterDevicePool returned";
  EXPECT_TRUE(std::all_of(first->states.begin(), first->states.end(),
                          [](std::byte b) { return b == std::byte{0x5A}; }));
  EXPECT_TRUE(store_->UnregisterDevicePool().IsFailedPrecondition());
  first.reset();  // the engine frees its tensors

  // A new pool (another size of KV cache, say): everything saved is still served, byte-exact.
  HostPool second(l);
  ASSERT_TRUE(store_->RegisterDevicePool(second.desc).ok());
  for (size_t i = 0; i < kPrompts; ++i) {
    EXPECT_TRUE(LoadAndCompare(second, i, 2 * kPagesPerPrompt * i, i % kStates).ok()) << i;
  }
  SavePrompt(second, kPrompts);  // and saves work again
  EXPECT_TRUE(LoadAndCompare(second, kPrompts, 0, 0).ok());
  EXPECT_TRUE(store_->RegisterDevicePool(second.desc).IsFailedPrecondition());
}

}  // namespace
}  // namespace cachepawl
