// HostArena in CPU mode (pin kOff): slot sizes and alignment, one budget for both kinds,
// NoSpace, bad frees, fragmentation, regions, and concurrent allocation with byte checks.
#include "tiers/host_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "cuda/gpu_runtime.h"
#include "tests/common/test_util.h"

namespace cachepawl {
namespace {

// 2 attention layers (K = 16 tokens * 2 heads * 64 dim * 2 B = 4 KiB) and 2 SSM layers:
// KV record 16 KiB (slot 20 KiB), Mamba record 2 * (1536 + 16384) B (slot 40 KiB).
ModelLayout TinyHybrid() {
  ModelLayout l;
  l.model = "tiny-hybrid";
  l.num_layers = 4;
  l.page_size_tokens = 16;
  l.attention_layers = {{0, 2, 64, DType::kBf16, 0}, {2, 2, 64, DType::kBf16, 0}};
  l.ssm_layers = {{1, "mamba2", {256, 3}, DType::kBf16, {256, 16}, DType::kFp32},
                  {3, "mamba2", {256, 3}, DType::kBf16, {256, 16}, DType::kFp32}};
  return l;
}

HostArenaOptions CpuOptions(uint64_t bytes, uint64_t chunk = 0) {
  HostArenaOptions o;
  o.bytes = bytes;
  o.chunk_bytes = chunk;
  o.pin = HostArenaOptions::Pin::kOff;
  return o;
}

TEST(HostArenaOptions, RejectsBadValuesNamingTheField) {
  HostArenaOptions o = CpuOptions(0);
  EXPECT_NE(o.Validate().message().find("host_arena.bytes: 0"), std::string::npos);
  o = CpuOptions(1 << 20, 1000);
  EXPECT_NE(o.Validate().message().find("host_arena.chunk_bytes: 1000"), std::string::npos);
  o = CpuOptions(4ull << 30, 2ull << 30);
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o = CpuOptions(1 << 20);
  o.device = -2;
  EXPECT_NE(o.Validate().message().find("host_arena.device: -2"), std::string::npos);
  o = CpuOptions(1 << 20);
  o.pin = static_cast<HostArenaOptions::Pin>(9);
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
}

TEST(HostArena, RejectsArenasOrChunksSmallerThanASlot) {
  auto r = HostArena::Open(TinyHybrid(), CpuOptions(16 << 10));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  r = HostArena::Open(TinyHybrid(), CpuOptions(1 << 20, 36 << 10));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("chunk_bytes"), std::string::npos);
  ModelLayout bad = TinyHybrid();
  bad.page_size_tokens = 0;
  EXPECT_TRUE(HostArena::Open(bad, CpuOptions(1 << 20)).status().IsInvalidArgument());
}

TEST(HostArena, PinOnWithoutGpuIsUnavailable) {
  if (cuda::GpuAvailable()) GTEST_SKIP() << "a GPU is present; this checks the no-GPU path";
  HostArenaOptions o = CpuOptions(1 << 20);
  o.pin = HostArenaOptions::Pin::kOn;
  EXPECT_TRUE(HostArena::Open(TinyHybrid(), o).status().IsUnavailable());
}

TEST(HostArena, SlotsAreAlignedSizedDisjointAndInsideOneRegion) {
  const ModelLayout l = TinyHybrid();
  auto arena = HostArena::Open(l, CpuOptions(1 << 20, 256 << 10)).value();
  EXPECT_FALSE(arena->pinning());
  EXPECT_TRUE(arena->WaitUntilPinned().ok());
  EXPECT_EQ(arena->slot_bytes(Kind::kKV), RecordSlotBytes(l, Kind::kKV));
  EXPECT_EQ(arena->slot_bytes(Kind::kKV), 20u << 10);
  EXPECT_EQ(arena->slot_bytes(Kind::kMamba), 40u << 10);
  const auto regions = arena->Regions();
  ASSERT_EQ(regions.size(), 4u);
  for (const auto& r : regions) {
    EXPECT_EQ(r.size(), 256u << 10);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data()) % 4096, 0u);
  }
  // Fill the arena with alternating kinds until it is full.
  std::map<uintptr_t, std::pair<HostSlotId, uint64_t>> by_address;
  int i = 0;
  for (;; ++i) {
    const Kind kind = i % 3 == 0 ? Kind::kMamba : Kind::kKV;
    auto s = arena->Allocate(kind);
    if (!s.ok()) {
      if (s.status().IsNoSpace() && kind == Kind::kMamba) {
        // Mamba no longer fits; fill the rest with KV.
        while (true) {
          auto k = arena->Allocate(Kind::kKV);
          if (!k.ok()) {
            EXPECT_TRUE(k.status().IsNoSpace()) << k.status().ToString();
            break;
          }
          by_address[reinterpret_cast<uintptr_t>(arena->SlotData(*k))] = {*k, 20u << 10};
        }
        break;
      }
      ASSERT_TRUE(s.status().IsNoSpace()) << s.status().ToString();
      continue;
    }
    ASSERT_TRUE(arena->CheckSlot(*s, kind).ok());
    EXPECT_TRUE(
        arena->CheckSlot(*s, kind == Kind::kKV ? Kind::kMamba : Kind::kKV).IsInvalidArgument());
    EXPECT_EQ(arena->SlotBytes(*s), arena->slot_bytes(kind));
    by_address[reinterpret_cast<uintptr_t>(arena->SlotData(*s))] = {*s, arena->SlotBytes(*s)};
  }
  uintptr_t prev_end = 0;
  for (const auto& [addr, slot] : by_address) {
    EXPECT_EQ(addr % 4096, 0u);
    EXPECT_GE(addr, prev_end) << "slots overlap";
    prev_end = addr + slot.second;
    const auto& region = regions[arena->RegionOf(slot.first)];
    const auto rb = reinterpret_cast<uintptr_t>(region.data());
    EXPECT_GE(addr, rb);
    EXPECT_LE(addr + slot.second, rb + region.size()) << "slot straddles a region";
  }
  const HostArenaStats st = arena->stats();
  EXPECT_EQ(st.allocated_bytes + st.free_bytes, st.capacity_bytes);
  EXPECT_LT(st.largest_free_extent, 20u << 10);  // not even one KV slot left anywhere
  EXPECT_GE(st.allocate_no_space, 1u);
}

TEST(HostArena, AllocateRunHandsOutAdjacentSlotsAndPartialRunsWhenFull) {
  // 400 KiB in chunks of 200 KiB: 10 KV slots (20 KiB) per chunk.
  auto arena = HostArena::Open(TinyHybrid(), CpuOptions(400 << 10, 200 << 10)).value();
  const uint64_t unit = 20 << 10;
  std::vector<HostSlotId> run;
  ASSERT_TRUE(arena->AllocateRun(Kind::kKV, 4, &run).ok());
  ASSERT_EQ(run.size(), 4u);
  for (size_t i = 1; i < run.size(); ++i) {
    EXPECT_EQ(arena->SlotData(run[i]), arena->SlotData(run[i - 1]) + unit) << i;
  }
  // Punch holes: free slots 1 and 2 of the run (a 40 KiB hole in chunk 0).
  ASSERT_TRUE(arena->Free(run[1]).ok());
  ASSERT_TRUE(arena->Free(run[2]).ok());
  // Two slots: the smallest extent that holds both is the hole (best fit).
  std::vector<HostSlotId> two;
  ASSERT_TRUE(arena->AllocateRun(Kind::kKV, 2, &two).ok());
  EXPECT_EQ(two[0], run[1]);
  EXPECT_EQ(two[1], run[2]);
  // 12 slots: no extent holds 12 (chunks hold 10), so the largest extents are taken first; no
  // run crosses a chunk.
  std::vector<HostSlotId> twelve;
  ASSERT_TRUE(arena->AllocateRun(Kind::kKV, 12, &twelve).ok());
  ASSERT_EQ(twelve.size(), 12u);
  for (HostSlotId slot : twelve) EXPECT_TRUE(arena->CheckSlot(slot, Kind::kKV).ok());
  // 4 + 12 = 16 of 20 slots are taken: a run of 6 gets the 4 left, then NoSpace.
  std::vector<HostSlotId> partial;
  Status st = arena->AllocateRun(Kind::kKV, 6, &partial);
  EXPECT_TRUE(st.IsNoSpace()) << st.ToString();
  EXPECT_EQ(partial.size(), 4u);
  // Every slot of every run frees on its own.
  for (const auto* v : {&run, &two, &twelve, &partial}) {
    for (HostSlotId slot : *v) {
      if (v == &run && (slot == run[1] || slot == run[2])) continue;  // now owned by `two`
      EXPECT_TRUE(arena->Free(slot).ok()) << slot;
    }
  }
  EXPECT_EQ(arena->stats().allocated_bytes, 0u);
  EXPECT_TRUE(arena->AllocateRun(static_cast<Kind>(7), 1, &partial).IsInvalidArgument());
}

TEST(HostArena, FreeReturnsSpaceAndBadFreesAreErrors) {
  auto arena = HostArena::Open(TinyHybrid(), CpuOptions(200 << 10)).value();
  std::vector<HostSlotId> slots;
  while (true) {
    auto s = arena->Allocate(Kind::kKV);
    if (!s.ok()) break;
    slots.push_back(*s);
  }
  ASSERT_EQ(slots.size(), 10u);  // 200 KiB / 20 KiB
  EXPECT_TRUE(arena->Allocate(Kind::kMamba).status().IsNoSpace());
  ASSERT_TRUE(arena->Free(slots[3]).ok());
  EXPECT_TRUE(arena->Free(slots[3]).IsInvalidArgument());      // double free
  EXPECT_TRUE(arena->Free(slots[4] + 1).IsInvalidArgument());  // not a slot start
  EXPECT_TRUE(arena->Free(1ull << 40).IsInvalidArgument());    // out of range
  EXPECT_TRUE(arena->CheckSlot(slots[3], Kind::kKV).IsInvalidArgument());
  // One 20 KiB hole: no Mamba slot, and it is all fragmentation.
  EXPECT_TRUE(arena->Allocate(Kind::kMamba).status().IsNoSpace());
  EXPECT_EQ(arena->stats().fragmented_bytes, 20u << 10);
  ASSERT_TRUE(arena->Free(slots[4]).ok());  // adjacent: merges into a 40 KiB extent
  EXPECT_EQ(arena->stats().fragmented_bytes, 0u);
  auto m = arena->Allocate(Kind::kMamba);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, slots[3]);
  EXPECT_EQ(arena->stats().bad_frees, 3u);
  EXPECT_EQ(arena->stats().slots[0], 8u);
  EXPECT_EQ(arena->stats().slots[1], 1u);
}

TEST(HostArena, BestFitKeepsLargeExtentsForMamba) {
  auto arena = HostArena::Open(TinyHybrid(), CpuOptions(400 << 10)).value();
  std::vector<HostSlotId> kv;
  for (int i = 0; i < 10; ++i) kv.push_back(arena->Allocate(Kind::kKV).value());
  // Holes of 20 KiB at 1, 3, 5; then a KV allocation must take a hole, not the 200 KiB tail.
  for (int i : {1, 3, 5}) ASSERT_TRUE(arena->Free(kv[i]).ok());
  const uint64_t largest = arena->stats().largest_free_extent;
  auto s = arena->Allocate(Kind::kKV).value();
  EXPECT_EQ(s, kv[1]);
  EXPECT_EQ(arena->stats().largest_free_extent, largest);
}

TEST(HostArena, KvOnlyAndMambaOnlyLayouts) {
  ModelLayout kv = TinyHybrid();
  kv.ssm_layers.clear();
  auto a = HostArena::Open(kv, CpuOptions(1 << 20)).value();
  EXPECT_TRUE(a->Allocate(Kind::kMamba).status().IsInvalidArgument());
  EXPECT_TRUE(a->Allocate(Kind::kKV).ok());
  EXPECT_EQ(a->stats().fragmented_bytes, 0u);
  ModelLayout mamba = TinyHybrid();
  mamba.attention_layers.clear();
  auto b = HostArena::Open(mamba, CpuOptions(1 << 20)).value();
  EXPECT_TRUE(b->Allocate(Kind::kKV).status().IsInvalidArgument());
  EXPECT_TRUE(b->Allocate(Kind::kMamba).ok());
}

TEST(HostArena, ConcurrentAllocateFreeKeepsSlotsDisjoint) {
  auto arena = HostArena::Open(TinyHybrid(), CpuOptions(4 << 20, 1 << 20)).value();
  const uint64_t seed = testing::SeedFromEnv(7);
  std::vector<std::thread> threads;
  std::atomic<int> corrupt{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      std::vector<std::pair<HostSlotId, uint8_t>> mine;
      for (int i = 0; i < 3000; ++i) {
        if (mine.empty() || rng() % 3 != 0) {
          const Kind kind = rng() % 4 == 0 ? Kind::kMamba : Kind::kKV;
          auto s = arena->Allocate(kind);
          if (!s.ok()) continue;
          const uint8_t tag = static_cast<uint8_t>(rng());
          std::memset(arena->SlotData(*s), tag, arena->SlotBytes(*s));
          mine.push_back({*s, tag});
        } else {
          const size_t k = rng() % mine.size();
          const auto [slot, tag] = mine[k];
          const std::byte* p = arena->SlotData(slot);
          const uint64_t n = arena->SlotBytes(slot);
          for (uint64_t b = 0; b < n; b += 512) {
            if (p[b] != static_cast<std::byte>(tag)) ++corrupt;
          }
          EXPECT_TRUE(arena->Free(slot).ok());
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
      for (auto [slot, tag] : mine) EXPECT_TRUE(arena->Free(slot).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(corrupt.load(), 0);
  const HostArenaStats st = arena->stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.free_bytes, st.capacity_bytes);
  EXPECT_EQ(st.largest_free_extent, 1u << 20);  // everything merged back, per chunk
}

}  // namespace
}  // namespace cachepawl
