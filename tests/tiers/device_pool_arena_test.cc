// DevicePoolArena in CPU mode: one budget for both kinds, group placement, NoSpace, bad frees,
// fragmentation, and a description that matches the slots it hands out.
#include "tiers/device_pool_arena.h"

#include <gtest/gtest.h>

#include <set>

namespace cachepawl {
namespace {

ModelLayout Hybrid() {
  ModelLayout l;
  l.model = "arena-hybrid";
  l.num_layers = 4;
  l.page_size_tokens = 16;
  l.attention_layers = {{0, 2, 64, DType::kBf16, 0}, {2, 2, 64, DType::kBf16, 0}};  // 16 KiB
  l.ssm_layers = {{1, "mamba2", {256, 3}, DType::kBf16, {256, 16}, DType::kFp32},
                  {3, "mamba2", {256, 3}, DType::kBf16, {256, 16}, DType::kFp32}};  // 35 KiB
  return l;
}

DevicePoolArenaOptions Cpu(uint64_t budget) {
  DevicePoolArenaOptions o;
  o.budget_bytes = budget;
  o.use_gpu = DevicePoolArenaOptions::UseGpu::kOff;
  return o;
}

TEST(DevicePoolArena, OptionsAndTinyBudgetsAreRejected) {
  EXPECT_NE(Cpu(0).Validate().message().find("budget_bytes: 0"), std::string::npos);
  auto o = Cpu(1 << 20);
  o.device = -1;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  EXPECT_TRUE(DevicePoolArena::Create(Hybrid(), Cpu(40 << 10)).status().IsInvalidArgument());
}

TEST(DevicePoolArena, OneBudgetForBothKinds) {
  const ModelLayout l = Hybrid();
  // 16 KiB units, groups of 3 units (48 KiB >= 35 KiB): 10 units = 3 groups + 1 tail unit.
  auto a = DevicePoolArena::Create(l, Cpu(160 << 10)).value();
  EXPECT_FALSE(a->on_gpu());
  const auto& d = a->description();
  EXPECT_EQ(d.device, -1);
  EXPECT_EQ(d.num_pages, 10u);
  EXPECT_EQ(d.num_state_slots, 3u);
  EXPECT_TRUE(d.Validate(l).ok());
  // KV goes to the tail first, Mamba to the highest group.
  EXPECT_EQ(a->Allocate(Kind::kKV).value(), 9u);
  EXPECT_EQ(a->Allocate(Kind::kMamba).value(), 2u);
  EXPECT_EQ(a->Allocate(Kind::kKV).value(), 0u);
  EXPECT_EQ(a->stats().fragmented_bytes, 2u * (16 << 10));  // group 0 partly used
  EXPECT_EQ(a->Allocate(Kind::kMamba).value(), 1u);
  EXPECT_TRUE(a->Allocate(Kind::kMamba).status().IsNoSpace());
  EXPECT_EQ(a->Allocate(Kind::kKV).value(), 1u);
  EXPECT_EQ(a->Allocate(Kind::kKV).value(), 2u);
  EXPECT_TRUE(a->Allocate(Kind::kKV).status().IsNoSpace());
  // Records: a KV page's K of layer 1 and a Mamba state's SSM of layer 0 are where the
  // description says, and the state does not overlap any live page.
  EXPECT_EQ(d.K(1, 2), a->SlotRecord(Kind::kKV, 2) + l.KSegment(1).offset);
  EXPECT_EQ(d.Ssm(0, 1), a->SlotRecord(Kind::kMamba, 1) + l.SsmSegment(0).offset);
  const std::byte* s1 = a->SlotRecord(Kind::kMamba, 1);
  for (uint64_t p : {0u, 1u, 2u, 9u}) {
    const std::byte* r = a->SlotRecord(Kind::kKV, p);
    EXPECT_TRUE(r + l.KvPageBytes() <= s1 || r >= s1 + l.MambaSlotBytes());
  }
  EXPECT_TRUE(a->Free(Kind::kMamba, 0).IsInvalidArgument());
  EXPECT_TRUE(a->Free(Kind::kKV, 5).IsInvalidArgument());
  EXPECT_TRUE(a->Free(Kind::kKV, 99).IsInvalidArgument());
  ASSERT_TRUE(a->Free(Kind::kMamba, 1).ok());
  ASSERT_TRUE(a->CheckSlot(Kind::kKV, 1).ok());
  EXPECT_TRUE(a->CheckSlot(Kind::kMamba, 1).IsInvalidArgument());
  const auto st = a->stats();
  EXPECT_EQ(st.slots[0], 4u);
  EXPECT_EQ(st.slots[1], 1u);
  EXPECT_EQ(st.bad_frees, 3u);
  EXPECT_GE(st.allocate_no_space, 2u);
  // Freeing the pages of group 0 makes it whole again.
  for (uint64_t p : {0u, 1u, 2u}) ASSERT_TRUE(a->Free(Kind::kKV, p).ok());
  EXPECT_EQ(a->Allocate(Kind::kMamba).value(), 1u);
  EXPECT_EQ(a->Allocate(Kind::kMamba).value(), 0u);
}

void ExpectGeometry(const DevicePoolGeometry& got, const DevicePoolGeometry& want) {
  EXPECT_EQ(got.kv_bytes, want.kv_bytes);
  EXPECT_EQ(got.state_bytes, want.state_bytes);
  EXPECT_EQ(got.unit_bytes, want.unit_bytes);
  EXPECT_EQ(got.group_units, want.group_units);
  EXPECT_EQ(got.num_units, want.num_units);
  EXPECT_EQ(got.num_groups, want.num_groups);
}

TEST(DevicePoolArena, GeometryKeepsTheRoundedRecordSizes) {
  // Hybrid: a 16384-byte KV page and a 35840-byte Mamba state, both multiples of 256; a state
  // takes 3 units, and 160 KiB hold 10 units = 3 groups and a tail unit.
  ExpectGeometry(DevicePoolGeometryFor(Hybrid(), 160 << 10), {.kv_bytes = 16384,
                                                              .state_bytes = 35840,
                                                              .unit_bytes = 16384,
                                                              .group_units = 3,
                                                              .num_units = 10,
                                                              .num_groups = 3});
  // One attention layer of 1 head x 34: 2 x 16 x 34 x 2 B = 2176 bytes, rounded up to 2304.
  ModelLayout odd = Hybrid();
  odd.attention_layers = {{0, 1, 34, DType::kBf16, 0}};
  odd.ssm_layers.clear();
  ASSERT_EQ(odd.KvPageBytes(), 2176u);
  ExpectGeometry(DevicePoolGeometryFor(odd, 10000), {.kv_bytes = 2304,
                                                     .state_bytes = 0,
                                                     .unit_bytes = 2304,
                                                     .group_units = 1,
                                                     .num_units = 4,
                                                     .num_groups = 4});
  // No attention: the unit is a state.
  ModelLayout mamba = Hybrid();
  mamba.attention_layers.clear();
  ExpectGeometry(DevicePoolGeometryFor(mamba, 200 << 10), {.kv_bytes = 0,
                                                           .state_bytes = 35840,
                                                           .unit_bytes = 35840,
                                                           .group_units = 1,
                                                           .num_units = 5,
                                                           .num_groups = 5});
}

TEST(DevicePoolArena, SingleKindLayouts) {
  ModelLayout kv = Hybrid();
  kv.ssm_layers.clear();
  auto a = DevicePoolArena::Create(kv, Cpu(64 << 10)).value();
  EXPECT_EQ(a->description().num_pages, 4u);
  std::set<uint64_t> pages;
  for (int i = 0; i < 4; ++i) pages.insert(a->Allocate(Kind::kKV).value());
  EXPECT_EQ(pages.size(), 4u);
  EXPECT_TRUE(a->Allocate(Kind::kKV).status().IsNoSpace());
  EXPECT_TRUE(a->Allocate(Kind::kMamba).status().IsInvalidArgument());
  ModelLayout mamba = Hybrid();
  mamba.attention_layers.clear();
  auto b = DevicePoolArena::Create(mamba, Cpu(200 << 10)).value();
  EXPECT_EQ(b->description().num_state_slots, 5u);  // 35840 -> 35840 bytes, 200 KiB / 35 KiB
  EXPECT_TRUE(b->Allocate(Kind::kMamba).ok());
}

}  // namespace
}  // namespace cachepawl
