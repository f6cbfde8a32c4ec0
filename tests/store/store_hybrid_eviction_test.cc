// The Store under StoreOptions::eviction_policy: the hybrid policy keeps reusable prefixes (a
// hit state and the KV it needs) where LRU evicts a recently hit state before KV no state can
// use; under write-back a state goes to disk with its KV prefix and useless KV is not written;
// the layout's prefill cost estimate. CPU mode, real host and disk tiers.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_checks.h"
#include "tests/store/store_test_util.h"
#include "vocab/model_layout.h"

namespace cachepawl {
namespace {

constexpr uint64_t kSlot = 8192;  // a host slot: a 4 KiB header block and a 4 KiB payload

class StoreHybridEvictionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> Open(EvictionPolicy policy, uint64_t host_slots, uint64_t disk_bytes,
                              WritePolicy write = WritePolicy::kWriteThrough) {
    StoreOptions o = CpuStoreOptions(TinyHybrid(), host_slots * kSlot, 4 << 20, disk_bytes,
                                     dir_.str() + "/store-" + std::to_string(opened_++));
    o.eviction_policy = policy;
    o.write_policy = write;
    auto s = Store::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  static void Save(Store* store, const std::vector<uint32_t>& tokens, size_t state_pages) {
    SaveAll(store, "", tokens, /*with_state=*/true, state_pages);
  }

  // A shared prefix (2 pages, a state at 2) looked up after each of `rounds` one-off prompts
  // of 6 pages whose state is at page 2 (4 pages past it that no state can use). Returns how
  // many lookups of the shared prefix missed.
  int SharedPrefixMisses(Store* store, int rounds) {
    const std::vector<uint32_t> shared = Tokens(1, 2 * 4);
    Save(store, shared, 2);
    int misses = 0;
    for (int r = 0; r < rounds; ++r) {
      Save(store, Tokens(1000 * (r + 1), 6 * 4), 2);
      auto m = store->Lookup("", shared);
      EXPECT_TRUE(m.ok());
      if (!m.ok() || m->reusable_pages != 2) {
        ++misses;
        Save(store, shared, 2);  // recomputed, saved again
        continue;
      }
      EXPECT_TRUE(LoadAndVerify(store, *m).ok());
    }
    return misses;
  }

  testing::TempDir dir_;
  int opened_ = 0;
};

TEST_F(StoreHybridEvictionTest, HybridKeepsAHitPrefixUnderPressure) {
  // Host memory for 12 records, no disk: a one-off prompt (7 records) and the shared prefix
  // (3) fit, two one-offs do not. Hybrid eviction frees the one-offs' useless pages and their
  // states (never hit) first: the shared prefix, hit after every one-off, always stays. (LRU
  // frees states before any KV page, so whether the shared state survives depends on when the
  // one-offs' states were published: often it does not.)
  auto hybrid = Open(EvictionPolicy::kHybrid, 12, 0);
  ASSERT_NE(hybrid, nullptr);
  EXPECT_EQ(SharedPrefixMisses(hybrid.get(), 10), 0);
  const StoreStats st = hybrid->Stats();
  EXPECT_GT(st.evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kKV)], 20u);
  EXPECT_GT(st.evictions[static_cast<int>(Tier::kHost)][static_cast<int>(Kind::kMamba)], 5u);
  // The LRU path under the same pressure serves only right bytes (checked by every load).
  auto lru = Open(EvictionPolicy::kLru, 12, 0);
  ASSERT_NE(lru, nullptr);
  (void)SharedPrefixMisses(lru.get(), 10);
}

TEST_F(StoreHybridEvictionTest, WriteBackTakesAStatesKvAlongAndDropsUselessKv) {
  // Host memory for 8 records, write-back to disk: evicting a state writes it with its KV
  // prefix; the one-offs' pages past their states are dropped, never written.
  auto store = Open(EvictionPolicy::kHybrid, 8, 8 << 20, WritePolicy::kWriteBack);
  ASSERT_NE(store, nullptr);
  const std::vector<uint32_t> first = Tokens(1, 3 * 4);
  Save(store.get(), first, 3);
  for (int r = 0; r < 6; ++r) Save(store.get(), Tokens(1000 * (r + 1), 6 * 4), 2);
  const StoreStats st = store->Stats();
  EXPECT_GT(st.disk_admission_refused, 0u);
  auto m = store->Lookup("", first);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 3u);  // its state and every page it needs are still there
  EXPECT_TRUE(LoadAndVerify(store.get(), *m).ok());
}

TEST_F(StoreHybridEvictionTest, AFullDiskMakesRoomForALargeStateWithStates) {
  // States 16x the size of a page (as Jamba's: 15 MiB against 256 KiB) and a disk of about
  // 12 states, write-through. The disk also holds pages no state can use (past each prompt's
  // state), which hybrid eviction frees first for pages; a state is one contiguous extent that
  // freed pages seldom make, so a waiting state is given room by evicting a state. Every state
  // write lands: none is refused for lack of space.
  ModelLayout big = TinyHybrid();
  big.model = "test/tiny-big-state";
  for (SsmLayerSpec& l : big.ssm_layers) l.ssm_shape = {8, 8, 100};  // 25.6 KB per layer
  StoreOptions o = CpuStoreOptions(big, 64 * kSlot, 4 << 20, 1 << 20, dir_.str() + "/big");
  o.eviction_policy = EvictionPolicy::kHybrid;
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store* store = opened->get();
  for (int r = 0; r < 30; ++r) Save(store, Tokens(1000 * (r + 1), 6 * 4), 2);
  const StoreStats st = store->Stats();
  EXPECT_EQ(st.no_space_errors, 0u);
  EXPECT_GT(st.evictions[static_cast<int>(Tier::kDisk)][static_cast<int>(Kind::kMamba)], 0u);
  auto m = store->Lookup("", Tokens(1000 * 30, 6 * 4));
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 2u);
  EXPECT_TRUE(LoadAndVerify(store, *m).ok());
}

TEST(ModelLayoutPrefillCostTest, EstimatesFromTheLayersShapes) {
  // TinyHybrid: attention layers h = 4 * 2 heads * 16 = 128 (24 h^2 per token, 2 h d^2), SSM
  // layers h = 2 * 4 / 2 = 4 channels (24 h^2).
  const ModelLayout::PrefillCost c = TinyHybrid().EstimatedPrefillCost();
  EXPECT_DOUBLE_EQ(c.per_token, 2 * 24.0 * 128 * 128 + 2 * 24.0 * 4 * 4);
  EXPECT_DOUBLE_EQ(c.per_token_squared, 2 * 2.0 * 128);
  // A windowed attention layer is linear in the prefix: 4 h w per token.
  ModelLayout windowed = TinyHybrid();
  windowed.attention_layers[1].sliding_window = 64;
  const ModelLayout::PrefillCost w = windowed.EstimatedPrefillCost();
  EXPECT_DOUBLE_EQ(w.per_token, c.per_token + 4.0 * 128 * 64);
  EXPECT_DOUBLE_EQ(w.per_token_squared, 2.0 * 128);
}

TEST(ModelLayoutPrefillCostTest, CoversMlaKdaAndLightningLayers) {
  // TinyMla: the MLA layer's latent counts as one KV head of its width, h = 4 * 1 * 24 = 96,
  // quadratic like any full attention; layer 2 h = 128; the KDA state [2, 4, 4] h = 8 / 2 = 4.
  const ModelLayout::PrefillCost m = TinyMla().EstimatedPrefillCost();
  EXPECT_DOUBLE_EQ(m.per_token, 24.0 * 96 * 96 + 24.0 * 128 * 128 + 24.0 * 4 * 4);
  EXPECT_DOUBLE_EQ(m.per_token_squared, 2.0 * 96 + 2.0 * 128);
  // TinyLightning: a lightning state [2, 4, 4] is linear in the prefix like any recurrent
  // layer, h = 4, beside attention h = 128 and Mamba-2 h = 4.
  const ModelLayout::PrefillCost l = TinyLightning().EstimatedPrefillCost();
  EXPECT_DOUBLE_EQ(l.per_token, 24.0 * 128 * 128 + 2 * 24.0 * 4 * 4);
  EXPECT_DOUBLE_EQ(l.per_token_squared, 2.0 * 128);
}

}  // namespace
}  // namespace cachepawl
