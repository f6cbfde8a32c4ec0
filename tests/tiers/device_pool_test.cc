// DevicePoolDescription::Validate on host-memory pools (device -1): builders, sizes, strides,
// overlap, alignment, and the errors that name the field.
#include "vocab/device_pool.h"

#include <gtest/gtest.h>

#include <vector>

#include "cuda/gpu_runtime.h"

namespace cachepawl {
namespace {

ModelLayout TwoByTwo() {
  ModelLayout l;
  l.model = "two-by-two";
  l.num_layers = 4;
  l.page_size_tokens = 16;
  l.attention_layers = {{0, 2, 64, DType::kBf16, 0}, {2, 2, 64, DType::kBf16, 0}};  // K: 4 KiB
  l.ssm_layers = {{1, "mamba2", {256, 3}, DType::kBf16, {256, 16}, DType::kFp32},
                  {3, "mamba2", {256, 3}, DType::kBf16, {256, 16}, DType::kFp32}};
  return l;
}

struct Buffers {
  std::vector<std::vector<std::byte>> store;
  std::byte* New(size_t n) {
    store.emplace_back(n + 16);
    auto p = reinterpret_cast<uintptr_t>(store.back().data());
    return reinterpret_cast<std::byte*>((p + 15) / 16 * 16);
  }
};

DevicePoolDescription LayerFirstPool(const ModelLayout& l, Buffers& b, uint64_t pages,
                                     uint64_t states, bool interleaved) {
  std::vector<std::byte*> k, v, conv, ssm;
  for (size_t a = 0; a < l.attention_layers.size(); ++a) {
    k.push_back(b.New(l.KBytesPerPage(a) * pages * (interleaved ? 2 : 1)));
    v.push_back(b.New(l.KBytesPerPage(a) * pages));
  }
  for (size_t s = 0; s < l.ssm_layers.size(); ++s) {
    conv.push_back(b.New(l.ConvStateBytes(s) * states));
    ssm.push_back(b.New(l.SsmStateBytes(s) * states));
  }
  return DevicePoolDescription::LayerFirst(l, -1, pages, k, v, interleaved, states, conv, ssm);
}

TEST(DevicePoolDescription, BuildersProduceValidPools) {
  const ModelLayout l = TwoByTwo();
  Buffers b;
  EXPECT_TRUE(LayerFirstPool(l, b, 8, 3, false).Validate(l).ok());
  EXPECT_TRUE(LayerFirstPool(l, b, 8, 3, true).Validate(l).ok());
  std::byte* kv = b.New(l.KvPageBytes() * 8);
  std::byte* st = b.New(l.MambaSlotBytes() * 3);
  auto d = DevicePoolDescription::BlockContiguous(l, -1, kv, 8, 0, st, 3, 0);
  EXPECT_TRUE(d.Validate(l).ok()) << d.Validate(l).ToString();
  EXPECT_EQ(d.K(1, 2), kv + 2 * l.KvPageBytes() + l.KSegment(1).offset);
  EXPECT_EQ(d.Ssm(1, 2), st + 2 * l.MambaSlotBytes() + l.SsmSegment(1).offset);
}

TEST(DevicePoolDescription, RejectsWrongLayerCounts) {
  const ModelLayout l = TwoByTwo();
  Buffers b;
  auto d = LayerFirstPool(l, b, 8, 3, false);
  d.attention.pop_back();
  EXPECT_NE(d.Validate(l).message().find("device_pool.attention: 1 entries"), std::string::npos);
  d = LayerFirstPool(l, b, 8, 3, false);
  d.ssm.push_back(d.ssm[0]);
  EXPECT_NE(d.Validate(l).message().find("device_pool.ssm: 3 entries"), std::string::npos);
  d = LayerFirstPool(l, b, 8, 3, false);
  d.num_pages = 0;
  d.num_state_slots = 0;
  EXPECT_TRUE(d.Validate(l).IsInvalidArgument());
  ModelLayout kv_only = l;
  kv_only.ssm_layers.clear();
  d = LayerFirstPool(l, b, 8, 3, false);
  EXPECT_NE(d.Validate(kv_only).message().find("num_state_slots: 3"), std::string::npos);
  d.device = -3;
  EXPECT_NE(d.Validate(l).message().find("device_pool.device: -3"), std::string::npos);
}

TEST(DevicePoolDescription, RejectsNullAndSmallStridesButNotMisalignment) {
  const ModelLayout l = TwoByTwo();
  Buffers b;
  auto d = LayerFirstPool(l, b, 8, 3, false);
  d.attention[1].v_base = nullptr;
  EXPECT_NE(d.Validate(l).message().find("device_pool.attention[1].v_base: null"),
            std::string::npos);
  d = LayerFirstPool(l, b, 8, 3, false);
  d.attention[0].k_page_stride = 1024;
  EXPECT_NE(d.Validate(l).message().find("device_pool.attention[0].k_page_stride: 1024"),
            std::string::npos)
      << d.Validate(l).ToString();
  d = LayerFirstPool(l, b, 8, 3, false);
  d.ssm[1].ssm_base += 2;  // misaligned fp32 state: the mover moves bytes, so this is fine
  d.num_state_slots -= 1;  // (and stays inside its buffer)
  EXPECT_TRUE(d.Validate(l).ok()) << d.Validate(l).ToString();
  d = LayerFirstPool(l, b, 8, 3, false);
  d.ssm[0].conv_slot_stride = UINT64_MAX / 2;
  EXPECT_TRUE(d.Validate(l).IsInvalidArgument());
}

TEST(DevicePoolDescription, RejectsOverlappingTensors) {
  const ModelLayout l = TwoByTwo();
  Buffers b;
  auto d = LayerFirstPool(l, b, 8, 3, false);
  d.attention[1].k_base = d.attention[0].v_base + 4096;  // inside layer 0's V
  EXPECT_NE(d.Validate(l).message().find("overlaps"), std::string::npos);
  // Interleaved with V shifted by half a K: pieces overlap although strides are equal.
  d = LayerFirstPool(l, b, 8, 3, true);
  d.attention[0].v_base = d.attention[0].k_base + 2048;
  EXPECT_NE(d.Validate(l).message().find("device_pool.attention[0].k overlaps"), std::string::npos);
  // A state tensor over a KV tensor is an overlap unless the owner says kinds share memory.
  d = LayerFirstPool(l, b, 8, 3, false);
  d.ssm[0].conv_base = d.attention[0].k_base;
  EXPECT_TRUE(d.Validate(l).IsInvalidArgument());
  d.kinds_share_memory = true;
  EXPECT_TRUE(d.Validate(l).ok()) << d.Validate(l).ToString();
}

TEST(DevicePoolDescription, AShortConvLayerNeedsNoSsmTensor) {
  ModelLayout l = TwoByTwo();
  l.ssm_layers[1].block = "shortconv";
  l.ssm_layers[1].ssm_shape.clear();
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  Buffers b;
  auto d = LayerFirstPool(l, b, 8, 3, false);
  d.ssm[1].ssm_base = nullptr;  // nothing to point at
  d.ssm[1].ssm_slot_stride = 0;
  EXPECT_TRUE(d.Validate(l).ok()) << d.Validate(l).ToString();
  d.ssm[0].ssm_base = nullptr;  // a layer with a state still needs its tensor
  EXPECT_NE(d.Validate(l).message().find("device_pool.ssm[0].ssm_base: null"), std::string::npos);
  std::byte* kv = b.New(l.KvPageBytes() * 8);
  std::byte* st = b.New(l.MambaSlotBytes() * 3);
  auto block = DevicePoolDescription::BlockContiguous(l, -1, kv, 8, 0, st, 3, 0);
  EXPECT_TRUE(block.Validate(l).ok()) << block.Validate(l).ToString();
  EXPECT_EQ(block.Conv(1, 2) + l.ConvStateBytes(1), st + 3 * l.MambaSlotBytes());
}

TEST(DevicePoolDescription, GpuPoolWithoutGpuIsRejected) {
  if (cuda::GpuAvailable()) GTEST_SKIP() << "a GPU is present; this checks the no-GPU path";
  const ModelLayout l = TwoByTwo();
  Buffers b;
  auto d = LayerFirstPool(l, b, 8, 3, false);
  d.device = 0;
  EXPECT_NE(d.Validate(l).message().find("no GPU"), std::string::npos);
}

}  // namespace
}  // namespace cachepawl
