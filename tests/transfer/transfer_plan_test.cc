// The transfer planner: record maps (tiles, layers, direct detection), copy-run merging, and
// chunking of operations into staging chunks.
#include "transfer/transfer_plan.h"

#include <gtest/gtest.h>

#include "tests/transfer/transfer_test_util.h"

namespace cachepawl::internal {
namespace {

using testing::MakeHybridLayout;
using testing::PoolForm;
using testing::TestPool;

TEST(AppendCopy, MergesContiguousAndConstantPitchRuns) {
  std::vector<CopyRun> runs;
  std::byte* h = reinterpret_cast<std::byte*>(0x100000);
  AppendCopy(runs, h, 0, 0, 100);
  AppendCopy(runs, h + 100, 0, 100, 50);  // contiguous on both sides
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].width, 150u);
  AppendCopy(runs, h + 1000, 0, 1000, 150);  // same width, pitches 1000/1000: a 2-D run
  AppendCopy(runs, h + 2000, 0, 2000, 150);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].height, 3u);
  EXPECT_EQ(runs[0].host_pitch, 1000u);
  AppendCopy(runs, h + 3000, 0, 3100, 150);  // breaks the pitch
  AppendCopy(runs, h + 2500, 0, 5000, 150);  // goes backwards on the host: no 2-D run
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[2].height, 1u);
  uint64_t total = 0;
  for (const auto& r : runs) total += r.bytes();
  EXPECT_EQ(total, 150u * 5);
}

TEST(AppendCopy, NeverMergesAcrossHostRegions) {
  // Two registrations adjacent in virtual memory: a copy-engine call must not span both.
  std::vector<CopyRun> runs;
  std::byte* h = reinterpret_cast<std::byte*>(0x100000);
  AppendCopy(runs, h, 0, 0, 100);
  AppendCopy(runs, h + 100, 1, 100, 100);  // contiguous, but the next region
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].host_region, 1);
  AppendCopy(runs, h + 1000, 1, 1000, 100);  // a 2-D run inside region 1
  AppendCopy(runs, h + 1900, 1, 1900, 100);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].height, 3u);
  AppendCopy(runs, h + 2800, 2, 2800, 100);  // the next row's pitch, in region 2: a new run
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[2].height, 1u);
}

TEST(PlanOperation, RunsStayInsideTheirHostRegion) {
  // Units whose host slots are adjacent (and at a constant pitch) across region boundaries.
  const ModelLayout l = MakeHybridLayout(16, 2, 2, 64, DType::kBf16, 0, 0, 0);
  for (PoolForm form : {PoolForm::kLayerFirst, PoolForm::kBlockContiguous}) {
    TestPool pool(l, -1, form, 32, 0);
    RecordMap kv = RecordMap::Build(l, pool.desc(), Kind::kKV, 4096);
    const RecordMap* maps[2] = {&kv, nullptr};
    Operation op;
    op.direction = Direction::kLoad;
    std::vector<std::byte> host(64 << 10);
    std::vector<HostPlacement> placements;
    const uint64_t rec = l.RecordBytes(Kind::kKV);
    for (uint64_t i = 0; i < 12; ++i) {
      op.units.push_back({Kind::kKV, {Tier::kHost, i}, {Tier::kDevice, i}});
      placements.push_back({host.data() + i * rec, static_cast<int>(i / 5)});  // 5 per region
    }
    PlannedOperation plan;
    PlanOperation(op, placements, maps, 1 << 20, &plan);
    std::vector<CopyRun> all = plan.direct;
    for (const auto& c : plan.chunks) all.insert(all.end(), c.copies.begin(), c.copies.end());
    EXPECT_GE(all.size(), 3u) << PoolFormName(form);
    uint64_t bytes = 0;
    for (const CopyRun& r : all) {
      bytes += r.bytes();
      const std::byte* first = r.host;
      const std::byte* last = r.host + (r.height - 1) * r.host_pitch + r.width - 1;
      EXPECT_EQ((first - host.data()) / static_cast<int64_t>(5 * rec), r.host_region);
      EXPECT_EQ((last - host.data()) / static_cast<int64_t>(5 * rec), r.host_region)
          << PoolFormName(form) << ": a run spans two host regions";
    }
    EXPECT_EQ(bytes, 12 * rec);
  }
}

TEST(RecordMap, TilesLayersAndDirectDetection) {
  const ModelLayout l = MakeHybridLayout(16, 3, 2, 64, DType::kBf16, 2, 256, 64);
  TestPool lf(l, -1, PoolForm::kLayerFirst, 4, 2);
  RecordMap kv = RecordMap::Build(l, lf.desc(), Kind::kKV, 4096);
  EXPECT_FALSE(kv.direct);
  EXPECT_EQ(kv.record_bytes, l.KvPageBytes());
  ASSERT_EQ(kv.layer_tiles.size(), 4u);
  EXPECT_EQ(kv.tiles.size(), 6u);  // 3 layers x (K, V) x one 4 KiB tile
  EXPECT_EQ(kv.tile_offset.back(), l.KvPageBytes());
  EXPECT_EQ(kv.DeviceAddress(3, 2), reinterpret_cast<uintptr_t>(lf.desc().V(1, 2)));
  RecordMap m = RecordMap::Build(l, lf.desc(), Kind::kMamba, 1024);
  EXPECT_EQ(m.tiles.size(), 2u * (2 + 4));  // conv 1536 B -> 2 tiles, ssm 4096 B -> 4 tiles
  TestPool bc(l, -1, PoolForm::kBlockContiguous, 4, 2);
  EXPECT_TRUE(RecordMap::Build(l, bc.desc(), Kind::kKV, 4096).direct);
  EXPECT_TRUE(RecordMap::Build(l, bc.desc(), Kind::kMamba, 4096).direct);
  RecordMap none = RecordMap::Build(MakeHybridLayout(16, 2, 2, 64, DType::kBf16, 0, 0, 0),
                                    lf.desc(), Kind::kMamba, 4096);
  EXPECT_EQ(none.num_slots, 0u);
}

TEST(RecordMap, AShortConvLayerAddsNoSegmentTileOrCopyForItsEmptySsmState) {
  const ModelLayout l =
      testing::WithShortConvLayer(MakeHybridLayout(16, 1, 2, 64, DType::kBf16, 2, 96, 40), 0);
  for (PoolForm form : {PoolForm::kLayerFirst, PoolForm::kBlockContiguous}) {
    SCOPED_TRACE(PoolFormName(form));
    TestPool pool(l, -1, form, 4, 3);
    ASSERT_TRUE(pool.desc().Validate(l).ok()) << pool.desc().Validate(l).ToString();
    RecordMap m = RecordMap::Build(l, pool.desc(), Kind::kMamba, 256);
    // conv 0 (576 B), conv 1 (576 B) and ssm 1 (40 * 16 * 4 = 2560 B): three segments.
    ASSERT_EQ(m.segments.size(), 3u);
    for (const auto& s : m.segments) EXPECT_GT(s.bytes, 0u);
    for (const auto& t : m.tiles) EXPECT_GT(t.bytes, 0u);
    EXPECT_EQ(m.tile_offset.back(), l.MambaSlotBytes());
    EXPECT_EQ(m.direct, form == PoolForm::kBlockContiguous);
    RecordMap kv = RecordMap::Build(l, pool.desc(), Kind::kKV, 256);
    const RecordMap* maps[2] = {&kv, &m};
    Operation op;
    op.direction = Direction::kLoad;
    std::vector<std::byte> host(3 * l.MambaSlotBytes());
    std::vector<HostPlacement> payloads;
    for (uint64_t i = 0; i < 3; ++i) {
      op.units.push_back({Kind::kMamba, {Tier::kHost, i}, {Tier::kDevice, i}});
      payloads.push_back({host.data() + i * l.MambaSlotBytes(), 0});
    }
    PlannedOperation plan;
    PlanOperation(op, payloads, maps, 1024, &plan);
    uint64_t copied = 0;
    for (const auto& r : plan.direct) {
      EXPECT_GT(r.width, 0u);
      copied += r.bytes();
    }
    for (const auto& c : plan.chunks) {
      for (const auto& r : c.copies) {
        EXPECT_GT(r.width, 0u);
        copied += r.bytes();
      }
      for (const auto& j : c.jobs[1]) EXPECT_GT(j.tile_count, 0u);
    }
    EXPECT_EQ(copied, 3 * l.MambaSlotBytes());
  }
}

TEST(PlanOperation, ChunksNeverExceedAHalfAndCoverEveryByte) {
  const ModelLayout l = MakeHybridLayout(16, 3, 2, 64, DType::kBf16, 2, 256, 300);
  TestPool pool(l, -1, PoolForm::kLayerFirst, 16, 4);
  RecordMap kv = RecordMap::Build(l, pool.desc(), Kind::kKV, 4096);
  RecordMap mamba = RecordMap::Build(l, pool.desc(), Kind::kMamba, 4096);
  const RecordMap* maps[2] = {&kv, &mamba};
  Operation op;
  op.direction = Direction::kSave;
  std::vector<std::byte> host(1 << 20);
  std::vector<HostPlacement> payloads;
  for (uint64_t i = 0; i < 10; ++i) {
    const Kind k = i % 4 == 3 ? Kind::kMamba : Kind::kKV;
    op.units.push_back({k, {Tier::kDevice, i % 4}, {Tier::kHost, i}});
    payloads.push_back({host.data() + i * 65536, 0});
  }
  const uint64_t half = 16 << 10;
  PlannedOperation plan;
  PlanOperation(op, payloads, maps, half, &plan);
  EXPECT_EQ(plan.units, 10u);
  uint64_t copied = 0, tiles = 0;
  for (const auto& c : plan.chunks) {
    EXPECT_LE(c.staging_bytes, half);
    for (const auto& r : c.copies) {
      copied += r.bytes();
      EXPECT_LE(r.other + (r.height - 1) * r.other_pitch + r.width, half);
    }
    for (int k = 0; k < 2; ++k) {
      for (const auto& j : c.jobs[k]) {
        tiles += j.tile_count;
        const RecordMap& m = *maps[k];
        EXPECT_GE(j.staging_record_base + static_cast<int64_t>(m.tile_offset[j.tile_begin]), 0);
        EXPECT_LE(j.staging_record_base + m.tile_offset[j.tile_begin + j.tile_count], half);
      }
    }
  }
  EXPECT_EQ(copied, plan.bytes);
  EXPECT_EQ(tiles, 8 * kv.tiles.size() + 2 * mamba.tiles.size());
  EXPECT_GT(plan.chunks.size(), 3u);  // the 40 KiB Mamba records must have been split
  auto restricted = RestrictJobs(plan.chunks[0].jobs[0], kv.layer_tiles[1], kv.layer_tiles[2]);
  for (const auto& j : restricted) {
    EXPECT_GE(j.tile_begin, kv.layer_tiles[1]);
    EXPECT_LE(j.tile_begin + j.tile_count, kv.layer_tiles[2]);
  }
}

}  // namespace
}  // namespace cachepawl::internal
