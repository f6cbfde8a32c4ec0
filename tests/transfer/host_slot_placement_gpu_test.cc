// DeviceMover on a GPU with a production-size pinned host arena (6 GiB in 1 GiB chunks, each
// chunk registered with CUDA on its own): operations whose host slots sit where a long-running
// store puts them after eviction and slot reuse. Runs of adjacent slots that cross a chunk (a
// registration) boundary, constant-pitch runs whose rows lie in different chunks, pitches over
// 2 GiB, records past the 4 GiB offset, and random placements; staged (layer-first) and direct
// (block-contiguous) pools; both directions; poisoned destinations, every byte compared.
// A host-tier copy failure at 1.5-8 GiB (cudaMemcpy2DAsync: invalid argument) escaped every
// smaller test; this suite is its reproduction. Skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "cuda/gpu_runtime.h"
#include "layouts/layout_presets.h"
#include "tests/transfer/transfer_test_util.h"
#include "transfer/device_mover.h"

namespace cachepawl {
namespace {

using testing::PoolForm;
using testing::TestPool;

#define REQUIRE_GPU()        \
  if (!cuda::GpuAvailable()) \
  GTEST_SKIP() << "no usable GPU (" << cuda::DescribeDevice(0) << "): GPU transfer tests skipped"

// Llama-3.1-8B at 16 tokens: KV records of 2 MiB, host slots of 2 MiB + 4 KiB. The chunk holds a
// whole number of slots, so consecutive slots are adjacent in memory across chunk boundaries.
constexpr uint64_t kArenaBytes = uint64_t{6} << 30;
constexpr uint64_t kPoolPages = 96;

class HostSlotPlacement : public ::testing::TestWithParam<PoolForm> {
 protected:
  static void SetUpTestSuite() {
    if (!cuda::GpuAvailable()) return;
    layout_ = new ModelLayout(LayoutPreset("llama-3.1-8b", 16).value());
    const uint64_t slot = RecordSlotBytes(*layout_, Kind::kKV);
    HostArenaOptions o;
    o.bytes = kArenaBytes;
    o.chunk_bytes = (uint64_t{1} << 30) / slot * slot;
    o.pin = HostArenaOptions::Pin::kOn;
    auto a = HostArena::Open(*layout_, o);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    arena_ = std::move(a).value().release();
    ASSERT_TRUE(arena_->WaitUntilPinned().ok());
    // Every slot, in address order (best fit fills chunk 0 first, then chunk 1, ...).
    slots_ = new std::vector<HostSlotId>();
    for (;;) {
      auto s = arena_->Allocate(Kind::kKV);
      if (!s.ok()) break;
      slots_->push_back(*s);
    }
    std::sort(slots_->begin(), slots_->end());
    slots_per_chunk_ = o.chunk_bytes / slot;
  }
  static void TearDownTestSuite() {
    delete slots_;
    delete arena_;
    delete layout_;
    slots_ = nullptr;
    arena_ = nullptr;
    layout_ = nullptr;
  }
  void SetUp() override { REQUIRE_GPU(); }

  // Index (in address order) of the first slot of chunk `c`.
  static size_t ChunkStart(size_t c) { return c * slots_per_chunk_; }

  // Save of random pool pages into the host slots `indices` (poisoned first), every byte
  // compared; then Load from them into other, poisoned pool pages, every byte compared.
  ::testing::AssertionResult RoundTrip(const std::vector<size_t>& indices, uint64_t seed) {
    const ModelLayout& l = *layout_;
    TestPool pool(l, 0, GetParam(), kPoolPages, 0);
    auto mover = DeviceMover::Create(l, pool.desc(), arena_, DeviceMoverOptions{});
    if (!mover.ok()) return ::testing::AssertionFailure() << mover.status().ToString();
    std::mt19937_64 rng(seed);
    std::vector<HostSlotId> host;
    for (size_t i : indices) {
      if (i >= slots_->size()) {
        return ::testing::AssertionFailure() << "slot index " << i << " of " << slots_->size();
      }
      host.push_back((*slots_)[i]);
    }
    // Operations of at most kPoolPages units (the pool's size), in the order given.
    for (size_t at = 0; at < host.size(); at += kPoolPages) {
      const size_t n = std::min<size_t>(kPoolPages, host.size() - at);
      pool.FillRandom(seed * 7919 + at);
      const auto src = testing::DistinctSlots(rng, kPoolPages, n);
      const auto dst = testing::DistinctSlots(rng, kPoolPages, n);
      std::vector<std::vector<std::byte>> records;
      Operation save;
      save.direction = Direction::kSave;
      for (size_t i = 0; i < n; ++i) {
        std::memset(arena_->SlotPayload(host[at + i]), 0x5A, l.RecordBytes(Kind::kKV));
        records.push_back(pool.ReadRecord(l, Kind::kKV, src[i]));
        save.units.push_back({Kind::kKV, {Tier::kDevice, src[i]}, {Tier::kHost, host[at + i]}});
      }
      Status st = (*mover)->Submit(save).Wait(std::chrono::seconds(120));
      if (!st.ok()) return ::testing::AssertionFailure() << "Save: " << st.ToString();
      for (size_t i = 0; i < n; ++i) {
        if (std::memcmp(arena_->SlotPayload(host[at + i]), records[i].data(), records[i].size()) !=
            0) {
          return ::testing::AssertionFailure() << "Save: unit " << at + i << " (host slot index "
                                               << indices[at + i] << ") differs";
        }
      }
      pool.Poison(0xC3);
      Operation load;
      load.direction = Direction::kLoad;
      for (size_t i = 0; i < n; ++i) {
        load.units.push_back({Kind::kKV, {Tier::kHost, host[at + i]}, {Tier::kDevice, dst[i]}});
      }
      st = (*mover)->Submit(load).Wait(std::chrono::seconds(120));
      if (!st.ok()) return ::testing::AssertionFailure() << "Load: " << st.ToString();
      for (size_t i = 0; i < n; ++i) {
        if (pool.ReadRecord(l, Kind::kKV, dst[i]) != records[i]) {
          return ::testing::AssertionFailure() << "Load: unit " << at + i << " (host slot index "
                                               << indices[at + i] << ") differs";
        }
      }
    }
    const auto stats = (*mover)->stats();
    if (stats.failed[0] + stats.failed[1] != 0 || stats.execution_errors != 0) {
      return ::testing::AssertionFailure() << "mover counted failures";
    }
    return ::testing::AssertionSuccess();
  }

  static ModelLayout* layout_;
  static HostArena* arena_;
  static std::vector<HostSlotId>* slots_;
  static uint64_t slots_per_chunk_;
};

ModelLayout* HostSlotPlacement::layout_ = nullptr;
HostArena* HostSlotPlacement::arena_ = nullptr;
std::vector<HostSlotId>* HostSlotPlacement::slots_ = nullptr;
uint64_t HostSlotPlacement::slots_per_chunk_ = 0;

TEST_P(HostSlotPlacement, AdjacentSlotsAcrossAChunkBoundary) {
  const size_t b = ChunkStart(1);
  EXPECT_TRUE(RoundTrip({b - 3, b - 2, b - 1, b, b + 1, b + 2}, 1));
}

TEST_P(HostSlotPlacement, ConstantPitchRowsInTwoChunks) {
  const size_t b = ChunkStart(1);
  EXPECT_TRUE(RoundTrip({b - 12, b - 7, b - 2, b + 3, b + 8, b + 13}, 2));
}

TEST_P(HostSlotPlacement, ConstantPitchRowsInThreeChunks) {
  // Pitch of 300 slots (~600 MiB): rows in chunks 0, 1 and 2.
  EXPECT_TRUE(RoundTrip({400, 700, 1000, 1300}, 3));
}

TEST_P(HostSlotPlacement, PitchOverTwoGiB) {
  // Pitch of 1,100 slots (~2.15 GiB, over cudaDevAttrMaxPitch).
  EXPECT_TRUE(RoundTrip({10, 1110, 2210}, 4));
}

TEST_P(HostSlotPlacement, RecordsPastFourGiB) {
  const size_t b = ChunkStart(5);  // chunk 5 starts past 5 GiB
  EXPECT_TRUE(RoundTrip({b - 30, b - 20, b - 10, b, b + 10, b + 11, b + 12, b + 13}, 5));
  EXPECT_TRUE(RoundTrip({ChunkStart(4) + 3, ChunkStart(4) + 4, ChunkStart(5) + 3}, 6));
}

TEST_P(HostSlotPlacement, AscendingPlacementsAfterReuse) {
  // What a store's free list hands out after eviction: ascending, irregular gaps, any chunk.
  std::mt19937_64 rng(7);
  std::vector<size_t> all(slots_->size());
  std::iota(all.begin(), all.end(), 0);
  for (int round = 0; round < 3; ++round) {
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<size_t> pick(all.begin(), all.begin() + 2 * kPoolPages);
    std::sort(pick.begin(), pick.end());
    EXPECT_TRUE(RoundTrip(pick, 100 + round)) << "round " << round;
  }
}

TEST_P(HostSlotPlacement, EveryPitchAcrossEveryBoundary) {
  // Rows at pitch p (1..8 slots) straddling each chunk boundary.
  std::vector<size_t> pick;
  for (size_t c = 1; c * slots_per_chunk_ + 16 < slots_->size(); ++c) {
    for (size_t p = 1; p <= 8; ++p) {
      for (size_t r = 0; r < 4; ++r) pick.push_back(ChunkStart(c) - 2 * p + r * p);
      EXPECT_TRUE(RoundTrip(pick, 1000 * c + p)) << "chunk " << c << " pitch " << p;
      pick.clear();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pools, HostSlotPlacement,
                         ::testing::Values(PoolForm::kLayerFirst, PoolForm::kBlockContiguous),
                         [](const auto& info) {
                           return info.param == PoolForm::kLayerFirst ? "staged" : "direct";
                         });

}  // namespace
}  // namespace cachepawl
