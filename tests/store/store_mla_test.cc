// Layouts whose layers keep one tensor of a pair through the store: an MLA layer (one latent per
// token, no V) and a lightning layer (a state, no conv). A store-owned pool and an engine's
// per-layer pool without the missing tensors; pages and states saved, evicted to disk, reopened
// in the same folder and loaded back byte for byte.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_checks.h"
#include "tests/store/store_test_util.h"
#include "vocab/device_pool.h"

namespace cachepawl {
namespace {

class StoreMlaTest : public ::testing::Test {
 protected:
  StoreOptions Options(uint64_t device_pool_bytes) {
    return CpuStoreOptions(TinyMla(), 64 * 8192, device_pool_bytes, 8 << 20, dir_.str() + "/store");
  }
  testing::TempDir dir_;
};

TEST_F(StoreMlaTest, PagesAndStatesRoundTripThroughHostAndDisk) {
  // Latent 4 tokens * 24 * 2 = 192 bytes, layer 2's K and V 4 * 2 * 16 * 2 = 256 each.
  ASSERT_EQ(TinyMla().KvPageBytes(), 192u + 2 * 256u);
  const StoreOptions o = Options(4 << 20);
  const auto prompt = Tokens(7, 4 * 6);
  {
    auto store = Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    SaveAll(store->get(), "", prompt, true);
    auto m = (*store)->Lookup("", prompt);
    ASSERT_TRUE(m.ok());
    ASSERT_EQ(m->reusable_pages, 6u);
    EXPECT_TRUE(LoadAndVerify(store->get(), *m).ok());
    ASSERT_TRUE((*store)->Close().ok());
  }
  // Reopened on the same folder: the disk tier serves what was saved, every byte checked.
  auto store = Store::Open(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto m = (*store)->Lookup("", prompt);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->reusable_pages, 6u);
  EXPECT_EQ(m->page_tiers[0], Tier::kDisk);
  EXPECT_TRUE(LoadAndVerify(store->get(), *m).ok());
  EXPECT_TRUE((*store)->Close().ok());
}

TEST_F(StoreMlaTest, AnEnginePoolWithoutAVTensorForTheMlaLayerRoundTrips) {
  const ModelLayout layout = TinyMla();
  auto opened = Store::Open(Options(0));  // the engine registers its own pool, per layer
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store* store = opened->get();
  constexpr uint64_t kPages = 4, kStates = 2;
  std::vector<std::vector<std::byte>> tensors;
  tensors.reserve(8);
  auto tensor = [&](uint64_t bytes) {
    tensors.emplace_back(bytes);
    return tensors.back().data();
  };
  const std::vector<std::byte*> k = {tensor(kPages * 192), tensor(kPages * 256)};
  const std::vector<std::byte*> conv = {tensor(kStates * layout.ConvStateBytes(0))};
  const std::vector<std::byte*> ssm = {tensor(kStates * layout.SsmStateBytes(0))};
  // Layer 2's V, and none for the MLA layer: registration refuses a missing V elsewhere.
  std::vector<std::byte*> v = {nullptr, nullptr};
  Status refused = store->RegisterDevicePool(
      DevicePoolDescription::LayerFirst(layout, -1, kPages, k, v, false, kStates, conv, ssm));
  ASSERT_TRUE(refused.IsInvalidArgument()) << refused.ToString();
  EXPECT_NE(refused.message().find("device_pool.attention[1].v_base: null"), std::string::npos)
      << refused.ToString();
  v[1] = tensor(kPages * 256);
  ASSERT_TRUE(store
                  ->RegisterDevicePool(DevicePoolDescription::LayerFirst(layout, -1, kPages, k, v,
                                                                         false, kStates, conv, ssm))
                  .ok());
  for (size_t i = 0; i < tensors.size(); ++i) testing::FillRandom(tensors[i], 11 + i);
  SaveThenLoadBack(store, Tokens(3, 8), {0, 1}, 0, {2, 3}, 1);
  auto rows = [](const std::byte* base, uint64_t bytes, uint64_t first, uint64_t n) {
    return std::vector<std::byte>(base + first * bytes, base + (first + n) * bytes);
  };
  EXPECT_EQ(rows(k[0], 192, 2, 2), rows(k[0], 192, 0, 2)) << "the MLA latent";
  EXPECT_EQ(rows(k[1], 256, 2, 2), rows(k[1], 256, 0, 2)) << "layer 2's K";
  EXPECT_EQ(rows(v[1], 256, 2, 2), rows(v[1], 256, 0, 2)) << "layer 2's V";
  const uint64_t cb = layout.ConvStateBytes(0), sb = layout.SsmStateBytes(0);
  EXPECT_EQ(rows(conv[0], cb, 1, 1), rows(conv[0], cb, 0, 1)) << "the KDA conv state";
  EXPECT_EQ(rows(ssm[0], sb, 1, 1), rows(ssm[0], sb, 0, 1)) << "the KDA recurrent state";
  EXPECT_TRUE(store->Close().ok());
}

TEST_F(StoreMlaTest, ALightningStateWithoutAConvRoundTripsThroughAnEnginePool) {
  const ModelLayout layout = TinyLightning();
  auto opened =
      Store::Open(CpuStoreOptions(layout, 64 * 8192, 0, 8 << 20, dir_.str() + "/lightning"));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store* store = opened->get();
  constexpr uint64_t kPages = 2, kStates = 2;
  std::vector<std::vector<std::byte>> tensors;
  tensors.reserve(8);
  auto tensor = [&](uint64_t bytes) {
    tensors.emplace_back(bytes);
    return tensors.back().data();
  };
  const uint64_t kb = layout.KBytesPerPage(0);
  const std::vector<std::byte*> k = {tensor(kPages * kb)}, v = {tensor(kPages * kb)};
  const uint64_t lightning = layout.SsmStateBytes(0);
  const uint64_t cb = layout.ConvStateBytes(1), sb = layout.SsmStateBytes(1);
  ASSERT_EQ(layout.ConvStateBytes(0), 0u);
  std::vector<std::byte*> conv = {nullptr, tensor(kStates * cb)};
  const std::vector<std::byte*> ssm = {tensor(kStates * lightning), tensor(kStates * sb)};
  ASSERT_TRUE(store
                  ->RegisterDevicePool(DevicePoolDescription::LayerFirst(layout, -1, kPages, k, v,
                                                                         false, kStates, conv, ssm))
                  .ok());
  for (size_t i = 0; i < tensors.size(); ++i) testing::FillRandom(tensors[i], 31 + i);
  SaveThenLoadBack(store, Tokens(9, 4), {0}, 0, {1}, 1);
  auto row = [](const std::byte* base, uint64_t bytes, uint64_t i) {
    return std::vector<std::byte>(base + i * bytes, base + (i + 1) * bytes);
  };
  EXPECT_EQ(row(k[0], kb, 1), row(k[0], kb, 0));
  EXPECT_EQ(row(v[0], kb, 1), row(v[0], kb, 0));
  EXPECT_EQ(row(ssm[0], lightning, 1), row(ssm[0], lightning, 0)) << "the lightning state";
  EXPECT_EQ(row(conv[1], cb, 1), row(conv[1], cb, 0));
  EXPECT_EQ(row(ssm[1], sb, 1), row(ssm[1], sb, 0));
  EXPECT_TRUE(store->Close().ok());
}

}  // namespace
}  // namespace cachepawl
