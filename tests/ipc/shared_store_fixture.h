// What the shared-store tests share: their fixture (an owner in the test's process, attach
// options, a wait on the owner's stats) and the prompts they save and load (as
// tests/ipc/ipc_peer_main.cc does): the prompt of a seed, its pages' and state's contents by hash
// (and, for a tensor-parallel rank, by rank: tests/store/store_test_util.h Content), every loaded
// byte compared.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "store/store.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {

inline constexpr uint64_t kMiB = 1ull << 20;

class SharedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { socket_ = dir_.str() + "/owner.sock"; }

  // An owner in this process: `layout` (TinyHybrid), CPU mode, its own device pool.
  std::unique_ptr<Store> Serve(uint64_t host_bytes, uint32_t host_space_wait_ms = 30000,
                               const ModelLayout& layout = TinyHybrid(),
                               uint32_t tp_partial_timeout_ms = 30000) {
    StoreOptions o = CpuStoreOptions(layout, host_bytes, 4 * kMiB, 0, "");
    o.host_space_wait_ms = host_space_wait_ms;
    o.tp_partial_timeout_ms = tp_partial_timeout_ms;
    ServeOptions so;
    so.socket_path = socket_;
    so.dead_client_grace_ms = 2000;
    auto store = Store::Serve(o, so);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  AttachOptions Attaching() const {
    AttachOptions ao;
    ao.socket_path = socket_;
    ao.cuda_device = -1;
    ao.device_pool_bytes = 4 * kMiB;
    ao.call_timeout_ms = 2000;
    ao.owner_timeout_ms = 2000;
    return ao;
  }
  // Polls the owner's stats until `done` holds (at most `limit`); the time it took.
  template <typename Pred>
  std::chrono::milliseconds WaitFor(Store& store, Pred done,
                                    std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto start = std::chrono::steady_clock::now();
    while (!done(store.Stats()) && std::chrono::steady_clock::now() - start < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  }

  testing::TempDir dir_;
  std::string socket_;
};

// Saves the prompt of `seed` from `store`'s own pool (as ipc_peer does: contents by hash).
inline void SavePrompt(Store& store, uint64_t seed, size_t pages) {
  const ModelLayout& layout = store.layout();
  const auto tokens = Tokens(static_cast<uint32_t>(seed * 100000), pages * layout.page_size_tokens);
  const auto hashes = store.HashTokens("", tokens);
  std::vector<uint64_t> slots;
  for (size_t i = 0; i < pages; ++i) {
    slots.push_back(*store.AllocateDeviceSlot(Kind::kKV));
    ASSERT_TRUE(
        store.WriteDeviceRecord(Kind::kKV, slots.back(), Content(layout, hashes[i], Kind::kKV))
            .ok());
  }
  const uint64_t state = *store.AllocateDeviceSlot(Kind::kMamba);
  ASSERT_TRUE(
      store.WriteDeviceRecord(Kind::kMamba, state, Content(layout, hashes.back(), Kind::kMamba))
          .ok());
  auto fence = store.Save(WholePromptSave(tokens, slots, state));
  ASSERT_TRUE(fence.ok()) << fence.status().ToString();
  ASSERT_TRUE(fence->Wait().ok());
  for (uint64_t s : slots) ASSERT_TRUE(store.FreeDeviceSlot(Kind::kKV, s).ok());
  ASSERT_TRUE(store.FreeDeviceSlot(Kind::kMamba, state).ok());
}

// Loads the prompt of `seed` into `store`'s pool and compares every byte.
inline void LoadAndVerify(Store& store, uint64_t seed, size_t pages) {
  const ModelLayout& layout = store.layout();
  const auto tokens = Tokens(static_cast<uint32_t>(seed * 100000), pages * layout.page_size_tokens);
  auto match = store.Lookup("", tokens);
  ASSERT_TRUE(match.ok()) << match.status().ToString();
  ASSERT_EQ(match->reusable_pages, pages);
  std::vector<uint64_t> slots;
  std::vector<std::byte> poison(layout.KvPageBytes(), std::byte{0xEE});
  for (size_t i = 0; i < pages; ++i) {
    slots.push_back(*store.AllocateDeviceSlot(Kind::kKV));
    ASSERT_TRUE(store.WriteDeviceRecord(Kind::kKV, slots.back(), poison).ok());
  }
  const uint64_t state = *store.AllocateDeviceSlot(Kind::kMamba);
  auto fence = store.Load(*match, slots, state);
  ASSERT_TRUE(fence.ok()) << fence.status().ToString();
  ASSERT_TRUE(fence->Wait().ok()) << fence->status().ToString();
  std::vector<std::byte> got(layout.KvPageBytes());
  for (size_t i = 0; i < pages; ++i) {
    ASSERT_TRUE(store.ReadDeviceRecord(Kind::kKV, slots[i], got).ok());
    ASSERT_EQ(got, Content(layout, match->hashes[i], Kind::kKV)) << "page " << i;
  }
  std::vector<std::byte> s(layout.RecordBytes(Kind::kMamba));
  ASSERT_TRUE(store.ReadDeviceRecord(Kind::kMamba, state, s).ok());
  ASSERT_EQ(s, Content(layout, match->hashes.back(), Kind::kMamba));
  for (uint64_t slot : slots) ASSERT_TRUE(store.FreeDeviceSlot(Kind::kKV, slot).ok());
  ASSERT_TRUE(store.FreeDeviceSlot(Kind::kMamba, state).ok());
}

}  // namespace cachepawl
