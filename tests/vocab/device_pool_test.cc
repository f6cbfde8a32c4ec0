// DevicePoolDescription::Tensors: the tensor (base, stride) that holds each segment of a record
// or of a KV page, for layer-first, interleaved and block-contiguous pools, windowed layers and
// shortconv layers. (Validate is tested in tests/tiers/device_pool_test.cc.)
#include "vocab/device_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace cachepawl {
namespace {

// Attention: layer 0 full (K: 16 tokens x 2 heads x 64 x 2 B = 4096 B per page), layer 1
// windowed (K: 16 x 1 x 32 x 2 B = 1024 B). SSM: layer 0 mamba2 (conv 96 x 3 x 2 B = 576 B,
// SSM 2 x 16 x 8 x 4 B = 1024 B), layer 1 shortconv (conv 64 x 3 x 2 B = 384 B, no SSM state).
ModelLayout Mixed() {
  ModelLayout l;
  l.model = "device-pool-tensors";
  l.num_layers = 4;
  l.page_size_tokens = 16;
  l.attention_layers = {{0, 2, 64, DType::kBf16, 0}, {2, 1, 32, DType::kBf16, 64}};
  l.ssm_layers = {{1, "mamba2", {96, 3}, DType::kBf16, {2, 16, 8}, DType::kFp32},
                  {3, "shortconv", {64, 3}, DType::kBf16, {}, DType::kFp32}};
  return l;
}

std::byte* At(uintptr_t address) { return reinterpret_cast<std::byte*>(address); }

struct Expected {
  size_t layer;
  bool second;
  uint64_t offset;
  uint64_t bytes;
  std::byte* base;
  uint64_t stride;
};

void ExpectTensors(const std::vector<PoolTensor>& got, const std::vector<Expected>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].segment.layer, want[i].layer);
    EXPECT_EQ(got[i].segment.second, want[i].second);
    EXPECT_EQ(got[i].segment.segment.offset, want[i].offset);
    EXPECT_EQ(got[i].segment.segment.bytes, want[i].bytes);
    EXPECT_EQ(got[i].base, want[i].base);
    EXPECT_EQ(got[i].stride, want[i].stride);
  }
}

TEST(DevicePoolTensors, LayerFirstPoolMapsEachSegmentToItsLayersTensor) {
  const ModelLayout l = Mixed();
  ASSERT_TRUE(l.Validate().ok()) << l.Validate().ToString();
  // Tensors reads no memory: made-up addresses are enough.
  const DevicePoolDescription d = DevicePoolDescription::LayerFirst(
      l, -1, 8, {At(0x10000), At(0x20000)}, {At(0x30000), At(0x40000)}, false, 4,
      {At(0x50000), At(0x60000)}, {At(0x70000), nullptr});
  // A whole KV page: K then V of both layers, at their page offsets.
  ExpectTensors(d.Tensors(Kind::kKV, l.KvPageSegments()),
                {{0, false, 0, 4096, At(0x10000), 4096},
                 {0, true, 4096, 4096, At(0x30000), 4096},
                 {1, false, 8192, 1024, At(0x20000), 1024},
                 {1, true, 9216, 1024, At(0x40000), 1024}});
  // The records: full-attention layer 0 in kKV, windowed layer 1 in kWindowKV (record offsets).
  ExpectTensors(d.Tensors(Kind::kKV, l.RecordSegments(Kind::kKV)),
                {{0, false, 0, 4096, At(0x10000), 4096}, {0, true, 4096, 4096, At(0x30000), 4096}});
  ExpectTensors(d.Tensors(Kind::kWindowKV, l.RecordSegments(Kind::kWindowKV)),
                {{1, false, 0, 1024, At(0x20000), 1024}, {1, true, 1024, 1024, At(0x40000), 1024}});
  // Mamba: conv and SSM state of layer 0, the conv state of the shortconv layer; its empty SSM
  // state (listed by RecordSegments, null in the pool) has no tensor.
  ASSERT_EQ(l.RecordSegments(Kind::kMamba).size(), 4u);
  ExpectTensors(d.Tensors(Kind::kMamba, l.RecordSegments(Kind::kMamba)),
                {{0, false, 0, 576, At(0x50000), 576},
                 {0, true, 576, 1024, At(0x70000), 1024},
                 {1, false, 1600, 384, At(0x60000), 384}});
  EXPECT_TRUE(d.Tensors(Kind::kMamba, {}).empty());
}

TEST(DevicePoolTensors, InterleavedAndBlockContiguousPools) {
  const ModelLayout l = Mixed();
  const DevicePoolDescription interleaved =
      DevicePoolDescription::LayerFirst(l, -1, 8, {At(0x10000), At(0x20000)}, {}, true, 0, {}, {});
  ExpectTensors(interleaved.Tensors(Kind::kKV, l.KvPageSegments()),
                {{0, false, 0, 4096, At(0x10000), 8192},
                 {0, true, 4096, 4096, At(0x10000 + 4096), 8192},
                 {1, false, 8192, 1024, At(0x20000), 2048},
                 {1, true, 9216, 1024, At(0x20000 + 1024), 2048}});
  // Block-contiguous: every tensor is its segment's offset into slot 0's record, at the record
  // stride (10240-byte KV pages here, 1984-byte Mamba states).
  ASSERT_EQ(l.KvPageBytes(), 10240u);
  ASSERT_EQ(l.MambaSlotBytes(), 1984u);
  const DevicePoolDescription block =
      DevicePoolDescription::BlockContiguous(l, -1, At(0x100000), 8, 0, At(0x200000), 4, 2048);
  ExpectTensors(block.Tensors(Kind::kKV, l.KvPageSegments()),
                {{0, false, 0, 4096, At(0x100000), 10240},
                 {0, true, 4096, 4096, At(0x100000 + 4096), 10240},
                 {1, false, 8192, 1024, At(0x100000 + 8192), 10240},
                 {1, true, 9216, 1024, At(0x100000 + 9216), 10240}});
  ExpectTensors(block.Tensors(Kind::kMamba, l.RecordSegments(Kind::kMamba)),
                {{0, false, 0, 576, At(0x200000), 2048},
                 {0, true, 576, 1024, At(0x200000 + 576), 2048},
                 {1, false, 1600, 384, At(0x200000 + 1600), 2048}});
}

}  // namespace
}  // namespace cachepawl
