// DeviceMover on a GPU: gather/scatter kernels and copy engines on random data at several
// page sizes, dtypes and pool forms (poisoned destinations, every byte compared), per-layer
// fences, StreamWait called before the operation is enqueued, faults that must still release
// waiting streams, concurrent submitters, the pinned host arena and the store-owned device pool.
// Skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "cuda/cuda_resources.h"
#include "cuda/gpu_runtime.h"
#include "layouts/layout_presets.h"
#include "tests/transfer/transfer_test_util.h"
#include "tiers/device_pool_arena.h"
#include "transfer/device_mover.h"

#if CACHEPAWL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachepawl {
namespace {

using testing::MakeHybridLayout;
using testing::PoolForm;
using testing::TestPool;

#define REQUIRE_GPU()        \
  if (!cuda::GpuAvailable()) \
  GTEST_SKIP() << "no usable GPU (" << cuda::DescribeDevice(0) << "): GPU transfer tests skipped"

std::unique_ptr<HostArena> PinnedArena(const ModelLayout& l, uint64_t bytes) {
  HostArenaOptions o;
  o.bytes = bytes;
  o.chunk_bytes = std::min<uint64_t>(bytes, 256 << 20);
  o.pin = HostArenaOptions::Pin::kOn;
  auto a = HostArena::Open(l, o);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE((*a)->WaitUntilPinned().ok());
  return std::move(a).value();
}

DeviceMoverOptions Gpu(uint64_t staging, uint64_t tile = 64 << 10) {
  DeviceMoverOptions o;
  o.mode = DeviceMoverOptions::Mode::kOn;
  o.staging_bytes = staging;
  o.tile_bytes = tile;
  // Small staging: a ring of up to 8 chunks; large: the default ring.
  if (staging < (uint64_t{8} << 20)) {
    o.staging_chunks = static_cast<uint32_t>(std::clamp<uint64_t>(staging / tile, 2, 8));
  }
  return o;
}

struct GpuCase {
  const char* name;
  ModelLayout layout;
  uint64_t pages, states;
};

std::vector<GpuCase> Cases() {
  return {
      {"llama_3.1_8b_p16", LayoutPreset("llama-3.1-8b", 16).value(), 96, 0},
      {"jamba_p16", LayoutPreset("jamba-v0.1", 16).value(), 64, 5},
      {"hybrid_bf16_p1", MakeHybridLayout(1, 3, 2, 64, DType::kBf16, 2, 256, 64), 256, 12},
      {"odd_fp8_p5", MakeHybridLayout(5, 2, 3, 40, DType::kFp8E4M3, 3, 77, 9), 128, 12},
      {"fp32_p64", MakeHybridLayout(64, 4, 4, 128, DType::kFp32, 1, 1024, 4096), 32, 4},
  };
}

class GpuRoundTrip : public ::testing::TestWithParam<std::tuple<int, PoolForm, uint64_t>> {};

TEST_P(GpuRoundTrip, EveryByteArrivesAndNothingElseChanges) {
  REQUIRE_GPU();
  const auto [index, form, staging] = GetParam();
  const GpuCase c = Cases()[index];
  const ModelLayout& l = c.layout;
  TestPool pool(l, 0, form, c.pages, c.states);
  auto arena = PinnedArena(l, 768ull << 20);
  auto mover = DeviceMover::Create(l, pool.desc(), arena.get(), Gpu(staging));
  ASSERT_TRUE(mover.ok()) << mover.status().ToString();
  ASSERT_TRUE((*mover)->gpu_mode());
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(testing::RoundTrip(**mover, *arena, pool, l, 1000 * index + 10 * round + 7,
                                   c.pages / 2 + round, c.states ? 2 + round : 0,
                                   round == 1 && l.has_attention()))
        << c.name << " " << PoolFormName(form) << " staging " << staging << " round " << round;
  }
  const auto st = (*mover)->stats();
  EXPECT_EQ(st.failed[0] + st.failed[1], 0u);
  EXPECT_EQ(st.execution_errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, GpuRoundTrip,
    ::testing::Combine(::testing::Values(0, 1, 2, 3, 4),
                       ::testing::Values(PoolForm::kLayerFirst, PoolForm::kInterleaved,
                                         PoolForm::kBlockContiguous, PoolForm::kPaddedBlocks),
                       // 256 KiB: records split across 4 chunks of 64 KiB; 256 MiB: the
                       // default (2 chunks of 128 MiB).
                       ::testing::Values(uint64_t{256} << 10, uint64_t{256} << 20)));

#if CACHEPAWL_HAVE_CUDA

TEST(GpuDeviceMover, StreamWaitCalledBeforeTheOperationIsEnqueued) {
  REQUIRE_GPU();
  const ModelLayout l = MakeHybridLayout(16, 4, 8, 128, DType::kBf16, 2, 2048, 4096);
  TestPool pool(l, 0, PoolForm::kLayerFirst, 64, 4);
  auto arena = PinnedArena(l, 256 << 20);
  std::atomic<bool> hold{true};
  auto o = Gpu(8 << 20);
  o.fault_injection = [&](const Operation&) {
    while (hold.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Status::OK();
  };
  auto mover = DeviceMover::Create(l, pool.desc(), arena.get(), o).value();
  // Host records with known bytes, loaded into pages 0..31.
  std::vector<HostSlotId> hs;
  Operation load;
  load.direction = Direction::kLoad;
  for (uint64_t p = 0; p < 32; ++p) {
    hs.push_back(arena->Allocate(Kind::kKV).value());
    testing::FillRandom({arena->SlotPayload(hs.back()), l.KvPageBytes()}, 500 + p);
    load.units.push_back({Kind::kKV, {Tier::kHost, hs.back()}, {Tier::kDevice, p}});
  }
  pool.Poison(0x11);
  Fence f = mover->Submit(load);
  auto user_stream = cuda::Stream::Create();  // non-blocking
  ASSERT_TRUE(user_stream.ok()) << user_stream.status().ToString();
  cudaStream_t user = user_stream->get();
  // The dispatcher is held: nothing is enqueued yet. StreamWait returns once it is enqueued.
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    hold = false;
  });
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(f.StreamWait(user).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(90));
  release.join();
  // The user stream then copies page 31's last layer V out (into pinned memory, so the call
  // does not block); it must see the loaded bytes.
  std::byte* out = arena->SlotPayload(arena->Allocate(Kind::kKV).value());
  const uint64_t out_bytes = l.KBytesPerPage(3);
  std::memset(out, 0x22, out_bytes);
  ASSERT_EQ(cudaMemcpyAsync(out, pool.desc().V(3, 31), out_bytes, cudaMemcpyDeviceToHost, user),
            cudaSuccess);
  const Status finished = user_stream->WaitFinished(std::chrono::seconds(30));
  ASSERT_TRUE(finished.ok()) << finished.ToString();
  EXPECT_EQ(std::memcmp(out, arena->SlotPayload(hs[31]) + l.VSegment(3).offset, out_bytes), 0);
  EXPECT_TRUE(f.Wait().ok());
  // After the fence fired, StreamWait needs no GPU wait at all.
  EXPECT_TRUE(f.StreamWait(user).ok());
}

TEST(GpuDeviceMover, AFailedOperationStillReleasesWaitingStreams) {
  REQUIRE_GPU();
  const ModelLayout l = MakeHybridLayout(16, 2, 2, 64, DType::kBf16, 1, 256, 64);
  TestPool pool(l, 0, PoolForm::kLayerFirst, 16, 2);
  auto arena = PinnedArena(l, 64 << 20);
  std::atomic<int> n{0};
  auto o = Gpu(1 << 20);
  o.fault_injection = [&](const Operation&) {
    return ++n % 2 == 0 ? Status::Internal("simulated CUDA error") : Status::OK();
  };
  auto mover = DeviceMover::Create(l, pool.desc(), arena.get(), o).value();
  auto user_stream = cuda::Stream::Create();  // non-blocking
  ASSERT_TRUE(user_stream.ok()) << user_stream.status().ToString();
  cudaStream_t user = user_stream->get();
  std::vector<Fence> fences;
  for (uint64_t i = 0; i < 8; ++i) {
    Operation save;
    save.direction = Direction::kSave;
    save.units.push_back(
        {Kind::kKV, {Tier::kDevice, i}, {Tier::kHost, arena->Allocate(Kind::kKV).value()}});
    fences.push_back(mover->Submit(save));
    ASSERT_TRUE(fences.back().StreamWait(user).ok());
  }
  const Status finished = user_stream->WaitFinished(std::chrono::seconds(30));
  ASSERT_TRUE(finished.ok()) << "a waiting stream hung: " << finished.ToString();
  for (size_t i = 0; i < fences.size(); ++i) {
    EXPECT_EQ(fences[i].Wait().ok(), i % 2 == 0) << i << ": " << fences[i].status().ToString();
  }
  EXPECT_EQ(mover->stats().execution_errors, 4u);
}

#endif  // CACHEPAWL_HAVE_CUDA

TEST(GpuDeviceMover, ConcurrentSubmittersBothDirections) {
  REQUIRE_GPU();
  const ModelLayout l = LayoutPreset("jamba-v0.1", 16).value();
  TestPool src(l, 0, PoolForm::kLayerFirst, 64, 4);
  auto arena = PinnedArena(l, 1ull << 30);
  auto mover = DeviceMover::Create(l, src.desc(), arena.get(), Gpu(16 << 20)).value();
  src.FillRandom(77);
  std::vector<std::vector<std::byte>> records;
  for (uint64_t p = 0; p < 64; ++p) records.push_back(src.ReadRecord(l, Kind::kKV, p));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Operation save;
        save.direction = Direction::kSave;
        std::vector<HostSlotId> hs;
        for (uint64_t p = 16u * t; p < 16u * t + 16; p += 1 + (i % 3)) {
          hs.push_back(arena->Allocate(Kind::kKV).value());
          std::memset(arena->SlotPayload(hs.back()), 0xAB, l.KvPageBytes());
          save.units.push_back({Kind::kKV, {Tier::kDevice, p}, {Tier::kHost, hs.back()}});
        }
        if (!mover->Submit(save).Wait().ok()) ++bad;
        for (size_t u = 0; u < hs.size(); ++u) {
          const auto& r = records[save.units[u].src.slot];
          if (std::memcmp(arena->SlotPayload(hs[u]), r.data(), r.size()) != 0) ++bad;
          (void)arena->Free(hs[u]);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(GpuHostArena, PinsInTheBackgroundInChunks) {
  REQUIRE_GPU();
  const ModelLayout l = LayoutPreset("llama-3.1-8b", 16).value();
  HostArenaOptions o;
  o.bytes = 2ull << 30;
  o.chunk_bytes = 256 << 20;
  o.pin = HostArenaOptions::Pin::kOn;
  const auto t0 = std::chrono::steady_clock::now();
  auto arena = HostArena::Open(l, o).value();
  const double open_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(arena->pinning());
  EXPECT_LE(arena->pinned_bytes(), o.bytes);
  ASSERT_TRUE(arena->WaitUntilPinned().ok());
  EXPECT_EQ(arena->pinned_bytes(), o.bytes);
  EXPECT_EQ(arena->Regions().size(), 8u);
  std::cout << "[ info ] Open returned after " << open_s << " s; 2 GiB pinned after "
            << arena->pin_seconds() << " s\n";
#if CACHEPAWL_HAVE_CUDA
  unsigned int flags = 0;
  for (const auto& r : arena->Regions()) {
    EXPECT_EQ(cudaHostGetFlags(&flags, r.data() + 4096), cudaSuccess) << "chunk not registered";
  }
#endif
}

TEST(GpuDevicePoolArena, StoreOwnedPoolMovesWholeRecords) {
  REQUIRE_GPU();
  const ModelLayout l = LayoutPreset("jamba-v0.1", 16).value();
  DevicePoolArenaOptions po;
  po.budget_bytes = 256 << 20;
  po.use_gpu = DevicePoolArenaOptions::UseGpu::kOn;
  auto dev = DevicePoolArena::Create(l, po).value();
  ASSERT_TRUE(dev->on_gpu());
  auto arena = PinnedArena(l, 256 << 20);
  auto mover = DeviceMover::Create(l, dev->description(), arena.get(), Gpu(8 << 20)).value();
  std::vector<uint64_t> pages, states;
  for (int i = 0; i < 40; ++i) pages.push_back(dev->Allocate(Kind::kKV).value());
  for (int i = 0; i < 3; ++i) states.push_back(dev->Allocate(Kind::kMamba).value());
  Operation load;
  load.direction = Direction::kLoad;
  std::vector<std::pair<Kind, HostSlotId>> hs;
  for (uint64_t p : pages) {
    hs.push_back({Kind::kKV, arena->Allocate(Kind::kKV).value()});
    load.units.push_back({Kind::kKV, {Tier::kHost, hs.back().second}, {Tier::kDevice, p}});
  }
  for (uint64_t s : states) {
    hs.push_back({Kind::kMamba, arena->Allocate(Kind::kMamba).value()});
    load.units.push_back({Kind::kMamba, {Tier::kHost, hs.back().second}, {Tier::kDevice, s}});
  }
  for (size_t i = 0; i < hs.size(); ++i) {
    testing::FillRandom({arena->SlotPayload(hs[i].second), l.RecordBytes(hs[i].first)}, 900 + i);
  }
  ASSERT_TRUE(mover->Submit(load).Wait().ok());
  EXPECT_EQ(mover->stats().kernel_launches, 0u) << "block-contiguous records need no kernel";
  for (size_t i = 0; i < hs.size(); ++i) {
    const Kind k = hs[i].first;
    std::vector<std::byte> got(l.RecordBytes(k), std::byte{0});
    ASSERT_TRUE(
        cuda::CopySync(got.data(), dev->SlotRecord(k, load.units[i].dst.slot), got.size()).ok());
    EXPECT_EQ(std::memcmp(got.data(), arena->SlotPayload(hs[i].second), got.size()), 0) << i;
  }
}

TEST(GpuDevicePool, HostPointersAreRejectedForAGpuPool) {
  REQUIRE_GPU();
  const ModelLayout l = MakeHybridLayout(16, 2, 2, 64, DType::kBf16, 0, 0, 0);
  TestPool host_pool(l, -1, PoolForm::kLayerFirst, 8, 0);
  DevicePoolDescription d = host_pool.desc();
  d.device = 0;
  Status st = d.Validate(l);
  EXPECT_TRUE(st.IsInvalidArgument());
  EXPECT_NE(st.message().find("device_pool.attention[0].k"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace cachepawl
