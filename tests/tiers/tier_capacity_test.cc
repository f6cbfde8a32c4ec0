// TierCapacity against the tiers themselves: a CPU-mode HostArena and DevicePoolArena filled
// until NoSpace hold at most what the capacity says, and (arena chunking aside) that many; the
// mixed column is the arithmetic of its group; layouts without KV or without states.
#include "tiers/tier_capacity.h"

#include <gtest/gtest.h>

#include "tiers/device_pool_arena.h"
#include "tiers/host_arena.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

// KV record 16 KiB (host slot 20 KiB), state record 2 * (1536 + 16384) B (host slot 40 KiB).
ModelLayout Hybrid() {
  ModelLayout l;
  l.model = "capacity-hybrid";
  l.num_layers = 4;
  l.attention_layers = {{0, 2, 64, DType::kBf16, 0}, {2, 2, 64, DType::kBf16, 0}};
  l.ssm_layers = {{1, "mamba2", {256, 3}, DType::kBf16, {256, 16}, DType::kFp32},
                  {3, "mamba2", {256, 3}, DType::kBf16, {256, 16}, DType::kFp32}};
  return l;
}

template <typename Arena>
uint64_t FillUntilFull(Arena& arena, Kind kind) {
  uint64_t n = 0;
  while (arena.Allocate(kind).ok()) ++n;
  return n;
}

TEST(TierCapacity, RecordTiersUseTheRecordSlotSize) {
  const ModelLayout l = Hybrid();
  const TierCapacity c = RecordTierCapacity(l, 1 << 20, 4);
  EXPECT_EQ(c.page_slot_bytes, 20u << 10);
  EXPECT_EQ(c.state_slot_bytes, 40u << 10);
  EXPECT_EQ(c.page_slot_bytes, RecordSlotBytes(l, Kind::kKV));
  EXPECT_EQ(c.pages_only, (1u << 20) / (20u << 10));   // 51
  EXPECT_EQ(c.states_only, (1u << 20) / (40u << 10));  // 25
  // One group = 4 pages (80 KiB) + 1 state (40 KiB) = 120 KiB; 8 groups fit in 1 MiB.
  EXPECT_EQ(c.mixed_states, 8u);
  EXPECT_EQ(c.mixed_pages, 32u);
}

TEST(TierCapacity, HostArenaHoldsAtMostTheCapacityAndLosesAtMostASlotPerChunk) {
  const ModelLayout l = Hybrid();
  for (Kind kind : {Kind::kKV, Kind::kMamba}) {
    HostArenaOptions o;
    o.bytes = 4 << 20;
    o.chunk_bytes = 1 << 20;
    o.pin = HostArenaOptions::Pin::kOff;
    auto arena = HostArena::Open(l, o).value();
    const uint64_t got = FillUntilFull(*arena, kind);
    const TierCapacity c = RecordTierCapacity(l, o.bytes, 1);
    const uint64_t want = kind == Kind::kKV ? c.pages_only : c.states_only;
    EXPECT_LE(got, want) << static_cast<int>(kind);
    EXPECT_GE(got + o.bytes / o.chunk_bytes, want) << static_cast<int>(kind);
  }
}

TEST(TierCapacity, DevicePoolMatchesTheArenaExactly) {
  const ModelLayout l = Hybrid();
  const uint64_t budget = 1 << 20;
  DevicePoolArenaOptions o;
  o.budget_bytes = budget;
  o.use_gpu = DevicePoolArenaOptions::UseGpu::kOff;
  const TierCapacity c = DevicePoolCapacity(l, budget, 2);
  {
    auto arena = DevicePoolArena::Create(l, o).value();
    EXPECT_EQ(FillUntilFull(*arena, Kind::kKV), c.pages_only);
  }
  {
    auto arena = DevicePoolArena::Create(l, o).value();
    EXPECT_EQ(FillUntilFull(*arena, Kind::kMamba), c.states_only);
  }
  // The mix: the arena holds that many states and then at least that many pages.
  auto arena = DevicePoolArena::Create(l, o).value();
  for (uint64_t i = 0; i < c.mixed_states; ++i) ASSERT_TRUE(arena->Allocate(Kind::kMamba).ok());
  EXPECT_GE(FillUntilFull(*arena, Kind::kKV), c.mixed_pages);
  EXPECT_GT(c.mixed_states, 0u);
  EXPECT_EQ(c.mixed_pages, 2 * c.mixed_states);
}

TEST(TierCapacity, LayoutsWithoutKvOrWithoutStatesCountOnlyWhatTheyHave) {
  ModelLayout kv_only = Hybrid();
  kv_only.ssm_layers.clear();
  TierCapacity c = RecordTierCapacity(kv_only, 1 << 20, 3);
  EXPECT_EQ(c.state_slot_bytes, 0u);
  EXPECT_EQ(c.states_only, 0u);
  EXPECT_EQ(c.mixed_states, 0u);
  EXPECT_EQ(c.mixed_pages, c.pages_only - c.pages_only % 3);

  ModelLayout states_only = Hybrid();
  states_only.attention_layers.clear();
  c = RecordTierCapacity(states_only, 1 << 20, 3);
  EXPECT_EQ(c.page_slot_bytes, 0u);
  EXPECT_EQ(c.pages_only, 0u);
  EXPECT_EQ(c.mixed_pages, 0u);
  EXPECT_EQ(c.mixed_states, c.states_only);
  c = DevicePoolCapacity(states_only, 1 << 20, 3);
  EXPECT_EQ(c.pages_only, 0u);
  EXPECT_EQ(c.states_only, (1u << 20) / RoundUpToAlignment(states_only.MambaSlotBytes(), 256));
}

// Hybrid() with attention layer 2 windowed (64 tokens: 4 pages of 16): full-attention and
// window records of 8 KiB each (host slots 12 KiB), the state as before (40 KiB).
ModelLayout Windowed() {
  ModelLayout l = Hybrid();
  l.model = "capacity-windowed";
  l.attention_layers[1].sliding_window = 64;
  return l;
}

TEST(TierCapacity, WindowRecordsAreCountedApart) {
  const ModelLayout l = Windowed();
  const TierCapacity c = RecordTierCapacity(l, 1 << 20, 8);
  EXPECT_EQ(c.page_slot_bytes, 12u << 10);
  EXPECT_EQ(c.window_slot_bytes, 12u << 10);
  EXPECT_EQ(c.window_slot_bytes, RecordSlotBytes(l, Kind::kWindowKV));
  EXPECT_EQ(c.state_slot_bytes, 40u << 10);
  EXPECT_EQ(c.window_pages, 4u);
  EXPECT_EQ(c.pages_only, (1u << 20) / (12u << 10));  // 85
  EXPECT_EQ(c.window_only, (1u << 20) / (12u << 10));
  // One group = 8 pages (96 KiB) + the 4 window records before its state (48 KiB) + 1 state
  // (40 KiB) = 184 KiB; 5 groups fit in 1 MiB.
  EXPECT_EQ(c.mixed_states, 5u);
  EXPECT_EQ(c.mixed_pages, 40u);
  EXPECT_EQ(c.mixed_window, 20u);
  // States every 2 pages: only 2 window records a group (the windows overlap).
  EXPECT_EQ(RecordTierCapacity(l, 1 << 20, 2).mixed_window,
            2 * RecordTierCapacity(l, 1 << 20, 2).mixed_states);

  // The host arena holds at most that many window records (a slot per chunk lost at most).
  HostArenaOptions o;
  o.bytes = 4 << 20;
  o.chunk_bytes = 1 << 20;
  o.pin = HostArenaOptions::Pin::kOff;
  auto arena = HostArena::Open(l, o).value();
  const uint64_t got = FillUntilFull(*arena, Kind::kWindowKV);
  const uint64_t want = RecordTierCapacity(l, o.bytes, 1).window_only;
  EXPECT_LE(got, want);
  EXPECT_GE(got + o.bytes / o.chunk_bytes, want);

  // The device pool's pages hold every attention layer: no window records there.
  const TierCapacity d = DevicePoolCapacity(l, 1 << 20, 8);
  EXPECT_EQ(d.window_slot_bytes, 0u);
  EXPECT_EQ(d.window_only + d.mixed_window, 0u);
  EXPECT_EQ(d.window_pages, 4u);
  EXPECT_EQ(d.pages_only, DevicePoolCapacity(Hybrid(), 1 << 20, 8).pages_only);
}

TEST(TierCapacity, AllWindowedOrStatelessWindowLayouts) {
  // Every attention layer windowed (as Samba): no full-attention records at all.
  ModelLayout all = Windowed();
  all.attention_layers[0].sliding_window = 64;
  TierCapacity c = RecordTierCapacity(all, 1 << 20, 8);
  EXPECT_EQ(c.page_slot_bytes, 0u);
  EXPECT_EQ(c.pages_only + c.mixed_pages, 0u);
  EXPECT_EQ(c.window_slot_bytes, RecordSlotBytes(all, Kind::kWindowKV));  // 4 + 16 KiB
  // One group = 4 window records (80 KiB) + 1 state (40 KiB); 8 groups in 1 MiB.
  EXPECT_EQ(c.mixed_states, 8u);
  EXPECT_EQ(c.mixed_window, 32u);

  // No SSM layers: every page is a depth, so every page keeps its window record.
  ModelLayout no_ssm = Windowed();
  no_ssm.ssm_layers.clear();
  c = RecordTierCapacity(no_ssm, 1 << 20, 8);
  EXPECT_EQ(c.mixed_states, 0u);
  EXPECT_EQ(c.mixed_pages, c.mixed_window);
  EXPECT_EQ(c.mixed_pages, (1u << 20) / (24u << 10) / 8 * 8);  // 40
}

TEST(TierCapacity, ZeroBytesHoldNothing) {
  const TierCapacity c = RecordTierCapacity(Hybrid(), 0, 1);
  EXPECT_EQ(c.pages_only + c.states_only + c.mixed_pages + c.mixed_states, 0u);
  const TierCapacity d = DevicePoolCapacity(Hybrid(), 0, 1);
  EXPECT_EQ(d.pages_only + d.states_only + d.mixed_pages + d.mixed_states, 0u);
}

}  // namespace
}  // namespace cachepawl
