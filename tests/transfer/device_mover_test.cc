// DeviceMover in CPU mode: every unit kind, every pool form, mixed batches, random slots,
// records split across staging halves, per-layer fences, bad operations, injected faults,
// concurrent submitters, and shutdown with operations in flight.
#include "transfer/device_mover.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <tuple>

#include "layouts/layout_tp.h"
#include "tests/transfer/transfer_test_util.h"

namespace cachepawl {
namespace {

using testing::MakeHybridLayout;
using testing::PoolForm;
using testing::TestPool;

HostArenaOptions ArenaOptions(uint64_t bytes) {
  HostArenaOptions o;
  o.bytes = bytes;
  o.pin = HostArenaOptions::Pin::kOff;
  return o;
}

DeviceMoverOptions CpuMover(uint64_t staging = 1 << 20, uint64_t tile = 64 << 10) {
  DeviceMoverOptions o;
  o.mode = DeviceMoverOptions::Mode::kOff;
  o.staging_bytes = staging;
  o.tile_bytes = tile;
  o.staging_chunks = static_cast<uint32_t>(std::clamp<uint64_t>(staging / tile, 2, 8));
  return o;
}

struct Case {
  const char* name;
  ModelLayout layout;
};

std::vector<Case> Layouts() {
  return {
      {"hybrid_bf16", MakeHybridLayout(16, 3, 2, 64, DType::kBf16, 2, 256, 64)},
      {"odd_fp8", MakeHybridLayout(5, 2, 3, 40, DType::kFp8E4M3, 3, 77, 9)},  // 600-byte K
      {"kv_only", MakeHybridLayout(16, 4, 8, 128, DType::kFp16, 0, 0, 0)},
      {"mamba_only", MakeHybridLayout(16, 0, 0, 0, DType::kBf16, 2, 512, 300)},
      // SSM layer 1 keeps a conv state only (LFM2): a 0-byte segment inside the record.
      {"shortconv",
       testing::WithShortConvLayer(MakeHybridLayout(16, 2, 2, 64, DType::kBf16, 3, 96, 40), 1)},
  };
}

class RoundTripTest : public ::testing::TestWithParam<std::tuple<int, PoolForm, uint64_t>> {};

TEST_P(RoundTripTest, EveryByteArrivesAndNothingElseChanges) {
  const auto [layout_index, form, staging] = GetParam();
  const Case c = Layouts()[layout_index];
  const ModelLayout& l = c.layout;
  TestPool pool(l, -1, form, l.has_attention() ? 64 : 0, l.has_ssm() ? 12 : 0);
  auto arena = HostArena::Open(l, ArenaOptions(32 << 20)).value();
  auto mover = DeviceMover::Create(l, pool.desc(), arena.get(), CpuMover(staging, 4096));
  ASSERT_TRUE(mover.ok()) << mover.status().ToString();
  EXPECT_FALSE((*mover)->gpu_mode());
  const uint64_t seed = testing::SeedFromEnv(11) + layout_index * 100 + static_cast<int>(form);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(testing::RoundTrip(**mover, *arena, pool, l, seed + round,
                                   l.has_attention() ? 20 + round * 10 : 0,
                                   l.has_ssm() ? 3 + round : 0, round == 1 && l.has_attention()))
        << c.name << " " << PoolFormName(form) << " staging " << staging << " round " << round;
  }
  const DeviceMoverStats st = (*mover)->stats();
  EXPECT_EQ(st.completed_ok[0], 3u);
  EXPECT_EQ(st.completed_ok[1], 3u);
  EXPECT_EQ(st.failed[0] + st.failed[1], 0u);
  if (form == PoolForm::kBlockContiguous || form == PoolForm::kPaddedBlocks) {
    EXPECT_EQ(st.staged_chunks, 0u) << "block-contiguous pools move whole records directly";
    EXPECT_EQ(st.kernel_launches, 0u);
  } else {
    EXPECT_GT(st.staged_chunks, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllForms, RoundTripTest,
    ::testing::Combine(::testing::Values(0, 1, 2, 3, 4),
                       ::testing::Values(PoolForm::kLayerFirst, PoolForm::kInterleaved,
                                         PoolForm::kBlockContiguous, PoolForm::kPaddedBlocks),
                       // 8 KiB: records split across many 4 KiB chunks; 1 MiB: 8 chunks.
                       ::testing::Values(uint64_t{8} << 10, uint64_t{1} << 20)));

class MoverFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = MakeHybridLayout(16, 2, 2, 64, DType::kBf16, 2, 256, 64);
    pool_ = std::make_unique<TestPool>(layout_, -1, PoolForm::kLayerFirst, 32, 8);
    arena_ = HostArena::Open(layout_, ArenaOptions(8 << 20)).value();
  }
  std::unique_ptr<DeviceMover> Mover(DeviceMoverOptions o = CpuMover()) {
    auto e = DeviceMover::Create(layout_, pool_->desc(), arena_.get(), o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return std::move(e).value();
  }
  Operation Save(std::vector<std::pair<uint64_t, HostSlotId>> pages) {
    Operation op;
    op.direction = Direction::kSave;
    for (auto [d, h] : pages) op.units.push_back({Kind::kKV, {Tier::kDevice, d}, {Tier::kHost, h}});
    return op;
  }
  ModelLayout layout_;
  std::unique_ptr<TestPool> pool_;
  std::unique_ptr<HostArena> arena_;
};

TEST_F(MoverFixture, CreateRejectsBadArguments) {
  auto o = CpuMover();
  EXPECT_TRUE(DeviceMover::Create(layout_, pool_->desc(), nullptr, o).status().IsInvalidArgument());
  ModelLayout other = layout_;
  other.page_size_tokens = 32;
  auto r = DeviceMover::Create(other, pool_->desc(), arena_.get(), o);
  EXPECT_NE(r.status().message().find("host arena's layout"), std::string::npos)
      << r.status().ToString();
  DevicePoolDescription bad = pool_->desc();
  bad.attention[0].k_base = nullptr;
  EXPECT_TRUE(DeviceMover::Create(layout_, bad, arena_.get(), o).status().IsInvalidArgument());
  o.staging_bytes = 4096;
  EXPECT_NE(DeviceMover::Create(layout_, pool_->desc(), arena_.get(), o)
                .status()
                .message()
                .find("device_mover.staging_bytes: 4096"),
            std::string::npos);
  for (uint32_t chunks : {0u, 1u, 65u}) {
    o = CpuMover();
    o.staging_chunks = chunks;
    EXPECT_NE(o.Validate().message().find("device_mover.staging_chunks: " + std::to_string(chunks)),
              std::string::npos)
        << o.Validate().ToString();
  }
  o = CpuMover(1 << 20, 64 << 10);
  o.staging_chunks = 32;  // 32 KiB chunks cannot hold a 64 KiB tile
  EXPECT_NE(o.Validate().message().find("device_mover.staging_bytes: 1048576"), std::string::npos)
      << o.Validate().ToString();
  o = CpuMover();
  o.completion_spin_us = 1000001;
  EXPECT_NE(o.Validate().message().find("device_mover.completion_spin_us: 1000001"),
            std::string::npos)
      << o.Validate().ToString();
  o = CpuMover();
  o.wait_spin_us = 4000000;
  EXPECT_NE(o.Validate().message().find("device_mover.wait_spin_us: 4000000"), std::string::npos)
      << o.Validate().ToString();
  o = CpuMover();
  o.tile_bytes = 1000;
  EXPECT_NE(o.Validate().message().find("device_mover.tile_bytes: 1000"), std::string::npos);
  o = CpuMover();
  o.kernel_ctas = 1 << 20;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  if (!cuda::GpuAvailable()) {
    o = CpuMover();
    o.mode = DeviceMoverOptions::Mode::kOn;
    EXPECT_TRUE(
        DeviceMover::Create(layout_, pool_->desc(), arena_.get(), o).status().IsUnavailable());
  }
}

TEST_F(MoverFixture, ModeIsTheSharedGpuModeAndAutoFollowsThePool) {
  auto o = CpuMover();
  o.mode = static_cast<DeviceMoverOptions::Mode>(7);
  EXPECT_EQ(o.Validate().message(), "device_mover.mode: 7 (must be kAuto, kOn or kOff)");
  EXPECT_TRUE(
      DeviceMover::Create(layout_, pool_->desc(), arena_.get(), o).status().IsInvalidArgument());
  // kAuto with a host-memory pool is CPU mode, with or without a GPU (the unpinned arena would
  // refuse GPU mode).
  o = CpuMover();
  o.mode = DeviceMoverOptions::Mode::kAuto;
  auto auto_mover = DeviceMover::Create(layout_, pool_->desc(), arena_.get(), o);
  ASSERT_TRUE(auto_mover.ok()) << auto_mover.status().ToString();
  EXPECT_FALSE(auto_mover.value()->gpu_mode());
  o.mode = DeviceMoverOptions::Mode::kOff;
  EXPECT_FALSE(Mover(o)->gpu_mode());
  o.mode = DeviceMoverOptions::Mode::kOn;
  const Status on = DeviceMover::Create(layout_, pool_->desc(), arena_.get(), o).status();
  if (cuda::GpuAvailable()) {
    EXPECT_EQ(on.message(), "device_mover.mode: kOn but device_pool.device is -1 (host memory)");
  } else {
    EXPECT_TRUE(on.IsUnavailable()) << on.ToString();
    EXPECT_EQ(on.message().rfind("device_mover.mode: kOn but no GPU is usable (", 0), 0u)
        << on.ToString();
  }
}

TEST_F(MoverFixture, BadOperationsFireTheirFenceWithAnErrorNamingTheUnit) {
  auto mover = Mover();
  const HostSlotId kv = arena_->Allocate(Kind::kKV).value();
  const HostSlotId mamba = arena_->Allocate(Kind::kMamba).value();
  auto expect_error = [&](Operation op, const std::string& needle) {
    Fence f = mover->Submit(std::move(op));
    ASSERT_TRUE(f.Ready());
    EXPECT_TRUE(f.status().IsInvalidArgument()) << f.status().ToString();
    EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().ToString();
  };
  expect_error(Save({{0, kv}, {32, kv}}),
               "units[1].src.slot: 32 (the device pool has 32 KV pages)");
  expect_error(Save({{0, kv + 1}}), "units[0].dst: host slot");
  expect_error(Save({{0, mamba}}), "not kv");
  expect_error(Save({{0, kv}, {1, kv}}), "units[1].dst");
  const HostSlotId kv2 = arena_->Allocate(Kind::kKV).value();
  expect_error(Save({{0, kv}, {1, kv2}, {2, kv}}), "units[2].dst: host slot " + std::to_string(kv) +
                                                       " is the destination of an earlier");
  Operation disk = Save({{0, kv}});
  disk.units[0].src = {Tier::kHost, kv};
  disk.units[0].dst = {Tier::kDisk, 5};
  expect_error(disk, "disk units belong to the disk tier");
  Operation load;
  load.direction = Direction::kLoad;
  load.units.push_back({Kind::kMamba, {Tier::kHost, mamba}, {Tier::kDevice, 8}});
  expect_error(load, "units[0].dst.slot: 8 (the device pool has 8 state slots)");
  // A Load's device destinations: the second unit with a slot an earlier one has is named.
  Operation twice;
  twice.direction = Direction::kLoad;
  for (uint64_t d : {3, 5, 31, 5, 3})
    twice.units.push_back({Kind::kKV, {Tier::kHost, kv}, {Tier::kDevice, d}});
  expect_error(twice, "units[3].dst: device slot 5 is the destination of an earlier unit too");
  Operation wl = Save({{0, kv}});
  wl.per_layer_fences = true;
  expect_error(wl, "per_layer_fences");
  Operation bad_kind = Save({{0, kv}});
  bad_kind.units[0].kind = static_cast<Kind>(7);
  expect_error(bad_kind, "units[0].kind: 7");
  Operation past = Save({{0, kv}});
  past.units[0].dst.offset = uint64_t{1} << 30;  // the record would end past the slot's payload
  expect_error(past, "units[0].dst.offset: 1073741824 (a record of ");
  EXPECT_EQ(mover->stats().invalid_operations, 11u);
  EXPECT_EQ(mover->stats().submitted[0], 0u);
  // The empty operation is fine.
  Operation empty;
  EXPECT_TRUE(mover->Submit(empty).Wait().ok());
  // A fence of a CPU-mode operation waits on the CPU for a null stream.
  Fence f = mover->Submit(Save({{3, kv}}));
  EXPECT_TRUE(f.StreamWait(nullptr).ok());
}

TEST_F(MoverFixture, InjectedFaultsFailOneOperationAndTheNextOnesRun) {
  std::atomic<int> calls{0};
  auto o = CpuMover();
  o.fault_injection = [&](const Operation&) {
    return ++calls == 2 ? Status::Internal("simulated cudaErrorLaunchFailure") : Status::OK();
  };
  auto mover = Mover(o);
  pool_->FillRandom(5);
  std::vector<HostSlotId> hs;
  for (int i = 0; i < 3; ++i) hs.push_back(arena_->Allocate(Kind::kKV).value());
  Fence a = mover->Submit(Save({{1, hs[0]}}));
  Fence b = mover->Submit(Save({{2, hs[1]}}));
  Fence c = mover->Submit(Save({{3, hs[2]}}));
  EXPECT_TRUE(a.Wait().ok());
  Status sb = b.Wait();
  EXPECT_EQ(sb.code(), Status::Code::kInternal) << sb.ToString();
  EXPECT_NE(sb.message().find("injected fault"), std::string::npos);
  EXPECT_TRUE(c.Wait().ok());
  const auto rec = pool_->ReadRecord(layout_, Kind::kKV, 3);
  EXPECT_EQ(std::memcmp(arena_->SlotPayload(hs[2]), rec.data(), rec.size()), 0);
  const auto st = mover->stats();
  EXPECT_EQ(st.failed[0], 1u);
  EXPECT_EQ(st.completed_ok[0], 2u);
  EXPECT_EQ(st.execution_errors, 1u);
}

TEST_F(MoverFixture, PerLayerFencesFireOnErrorToo) {
  auto o = CpuMover();
  o.fault_injection = [](const Operation&) { return Status::Internal("boom"); };
  auto mover = Mover(o);
  const HostSlotId h = arena_->Allocate(Kind::kKV).value();
  Operation load;
  load.direction = Direction::kLoad;
  load.per_layer_fences = true;
  load.units.push_back({Kind::kKV, {Tier::kHost, h}, {Tier::kDevice, 4}});
  Fence f = mover->Submit(load);
  ASSERT_EQ(f.num_layers(), 2u);
  EXPECT_FALSE(f.WaitLayer(0).ok());
  EXPECT_FALSE(f.WaitLayer(1).ok());
  EXPECT_FALSE(f.Wait().ok());
}

TEST_F(MoverFixture, ManyConcurrentSubmittersGetTheirOwnBytes) {
  auto mover = Mover(CpuMover(64 << 10, 4096));
  pool_->FillRandom(99);
  constexpr int kThreads = 4;
  std::vector<std::vector<std::byte>> records(32);
  for (uint64_t p = 0; p < 32; ++p) records[p] = pool_->ReadRecord(layout_, Kind::kKV, p);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < 50; ++i) {
        // Save 3 pages of this thread's own range [8t, 8t+8) and check them.
        std::vector<std::pair<uint64_t, HostSlotId>> units;
        std::vector<HostSlotId> mine;
        auto pages = testing::DistinctSlots(rng, 8, 3);
        for (uint64_t p : pages) {
          auto h = arena_->Allocate(Kind::kKV);
          ASSERT_TRUE(h.ok()) << h.status().ToString();
          std::memset(arena_->SlotPayload(*h), 0xEE, layout_.KvPageBytes());
          units.push_back({8 * t + p, *h});
        }
        Status s = mover->Submit(Save(units)).Wait();
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (auto [d, h] : units) {
          if (std::memcmp(arena_->SlotPayload(h), records[d].data(), records[d].size()) != 0) ++bad;
          ASSERT_TRUE(arena_->Free(h).ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(mover->stats().completed_ok[0], 200u);
}

TEST_F(MoverFixture, DestructionWaitsForEveryFence) {
  std::vector<Fence> fences;
  std::vector<HostSlotId> hs;
  {
    auto mover = Mover(CpuMover(16 << 10, 4096));
    for (int i = 0; i < 40; ++i) {
      hs.push_back(arena_->Allocate(Kind::kKV).value());
      fences.push_back(mover->Submit(Save({{static_cast<uint64_t>(i % 32), hs.back()}})));
    }
  }
  for (const Fence& f : fences) {
    ASSERT_TRUE(f.Ready());
    EXPECT_TRUE(f.status().ok()) << f.status().ToString();
  }
}

// A tensor-parallel group's host arena (GroupLayout) under a rank's mover: each rank's share of
// an entry goes to its offset in one host slot, rank after rank, and comes back from there.
TEST(GroupArenaTest, EachRanksShareMovesAtItsOffsetInOneHostSlot) {
  ModelLayout rank = MakeHybridLayout(16, 2, 2, 64, DType::kBf16, 2, 256, 64);
  rank.tp_size = 3;
  const ModelLayout group = GroupLayout(rank).value();
  TestPool pool(rank, -1, PoolForm::kInterleaved, 8, 8);
  auto arena = HostArena::Open(group, ArenaOptions(8 << 20)).value();
  auto mover = DeviceMover::Create(rank, pool.desc(), arena.get(), CpuMover()).value();
  // A mover of another layout than the arena's records is refused.
  ModelLayout other = rank;
  other.tp_size = 1;
  EXPECT_TRUE(DeviceMover::Create(other, pool.desc(), arena.get(), CpuMover())
                  .status()
                  .IsInvalidArgument());
  pool.FillRandom(77);
  const HostSlotId kv = arena->Allocate(Kind::kKV).value();
  const HostSlotId state = arena->Allocate(Kind::kMamba).value();
  const uint64_t kv_bytes = rank.RecordBytes(Kind::kKV),
                 state_bytes = rank.RecordBytes(Kind::kMamba);
  for (uint64_t r = 0; r < rank.tp_size; ++r) {  // rank r's share from device slot r
    Operation save;
    save.direction = Direction::kSave;
    save.units.push_back({Kind::kKV, {Tier::kDevice, r}, {Tier::kHost, kv, r * kv_bytes}});
    save.units.push_back({Kind::kMamba, {Tier::kDevice, r}, {Tier::kHost, state, r * state_bytes}});
    ASSERT_TRUE(mover->Submit(std::move(save)).Wait(std::chrono::seconds(30)).ok());
  }
  for (uint64_t r = 0; r < rank.tp_size; ++r) {
    const auto want = pool.ReadRecord(rank, Kind::kKV, r);
    EXPECT_EQ(std::memcmp(arena->SlotPayload(kv) + r * kv_bytes, want.data(), kv_bytes), 0) << r;
  }
  for (uint64_t r = 0; r < rank.tp_size; ++r) {  // and back, into slots 4 + r, poisoned
    pool.PoisonRecord(rank, Kind::kKV, 4 + r, 0xEE);
    pool.PoisonRecord(rank, Kind::kMamba, 4 + r, 0xEE);
    Operation load;
    load.direction = Direction::kLoad;
    load.units.push_back({Kind::kKV, {Tier::kHost, kv, r * kv_bytes}, {Tier::kDevice, 4 + r}});
    load.units.push_back(
        {Kind::kMamba, {Tier::kHost, state, r * state_bytes}, {Tier::kDevice, 4 + r}});
    ASSERT_TRUE(mover->Submit(std::move(load)).Wait(std::chrono::seconds(30)).ok());
    EXPECT_EQ(pool.ReadRecord(rank, Kind::kKV, 4 + r), pool.ReadRecord(rank, Kind::kKV, r)) << r;
    EXPECT_EQ(pool.ReadRecord(rank, Kind::kMamba, 4 + r), pool.ReadRecord(rank, Kind::kMamba, r))
        << r;
  }
}

}  // namespace
}  // namespace cachepawl
