// DiskMover end to end: real io_uring, real RocksDB, real O_DIRECT files.
#include "transfer/disk_mover.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>

#include "tests/transfer/disk_mover_fixture.h"

namespace cachepawl {
namespace {

using testing::FaultInjectingBlockIo;
using testing::PayloadMatchesKey;
using testing::TestKey;
using testing::TestParent;

class DiskMoverTest : public testing::DiskMoverFixture {};

TEST_F(DiskMoverTest, WriteThenReadBothKindsEveryByte) {
  auto e = OpenMover();
  ASSERT_NE(e, nullptr);
  std::vector<DiskWrite> writes;
  for (size_t i = 0; i < 10; ++i) {
    const DiskKey k = TestKey(Kind::kKV, i);
    Fill(KvSlot(i), k);
    writes.push_back({k, TestParent(Kind::kKV, i), KvSlot(i)});
  }
  for (size_t i = 0; i < 4; ++i) {
    const DiskKey k = TestKey(Kind::kMamba, i);
    Fill(MambaSlot(i), k);
    writes.push_back({k, PageHash::Zero(), MambaSlot(i)});
  }
  DiskOp w = e->Save(writes);
  ASSERT_TRUE(w.fence.Wait().ok()) << w.fence.status().ToString();
  ASSERT_EQ(w.result->records.size(), writes.size());
  ASSERT_EQ(w.result->units.size(), writes.size());
  std::set<uint64_t> extents;
  for (size_t i = 0; i < writes.size(); ++i) {
    ASSERT_TRUE(w.result->records[i].status.ok());
    extents.insert(w.result->records[i].extent_id);
    EXPECT_EQ(w.result->units[i].kind, writes[i].key.kind);
    EXPECT_EQ(w.result->units[i].src, (TierSlot{Tier::kHost, writes[i].slot}));
    EXPECT_EQ(w.result->units[i].dst, (TierSlot{Tier::kDisk, w.result->records[i].extent_id}));
    auto info = e->tier().Lookup(writes[i].key);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->extent.Id(), w.result->records[i].extent_id);
  }
  EXPECT_EQ(extents.size(), writes.size());

  // Read everything back into different, poisoned slots.
  std::vector<DiskRead> reads;
  for (size_t i = 0; i < 10; ++i) {
    Poison(KvSlot(20 + i));
    reads.push_back({writes[i].key, KvSlot(20 + i)});
  }
  for (size_t i = 0; i < 4; ++i) {
    Poison(MambaSlot(8 + i));
    reads.push_back({writes[10 + i].key, MambaSlot(8 + i)});
  }
  DiskOp r = e->Load(reads);
  ASSERT_TRUE(r.fence.Wait().ok()) << r.fence.status().ToString();
  for (size_t i = 0; i < reads.size(); ++i) {
    ASSERT_TRUE(r.result->records[i].status.ok()) << r.result->records[i].status.ToString();
    EXPECT_TRUE(PayloadMatchesKey(reads[i].key, Payload(reads[i].slot, reads[i].key.kind)))
        << "record " << i;
    EXPECT_EQ(r.result->units[i].src.tier, Tier::kDisk);
    EXPECT_EQ(r.result->units[i].dst, (TierSlot{Tier::kHost, reads[i].slot}));
  }
  const DiskTierStats s = e->stats();
  EXPECT_EQ(s.writes, 14u);
  EXPECT_EQ(s.reads, 14u);
  EXPECT_EQ(s.records_kv, 10u);
  EXPECT_EQ(s.records_mamba, 4u);
  EXPECT_EQ(s.checksum_failures + s.header_mismatches + s.read_io_errors, 0u);
}

TEST_F(DiskMoverTest, RecordsSurviveReopenWithParentsAndDepths) {
  {
    auto e = OpenMover();
    ASSERT_NE(e, nullptr);
    WriteOk(*e, Kind::kKV, 0, 12);
    WriteOk(*e, Kind::kMamba, 0, 3);
  }
  auto e = OpenMover();
  ASSERT_NE(e, nullptr);
  std::map<std::string, DiskRecordInfo> seen;
  e->tier().ForEachRecord([&](const DiskRecordInfo& r) { seen[DiskKeyIdentity(r.key)] = r; });
  ASSERT_EQ(seen.size(), 15u);
  for (Kind kind : {Kind::kKV, Kind::kMamba}) {
    for (uint64_t i = 0; i < (kind == Kind::kKV ? 12u : 3u); ++i) {
      const DiskKey k = TestKey(kind, i);
      ASSERT_TRUE(seen.count(DiskKeyIdentity(k)));
      const DiskRecordInfo& info = seen[DiskKeyIdentity(k)];
      EXPECT_EQ(info.parent, TestParent(kind, i));
      EXPECT_EQ(info.key.depth, k.depth);
      EXPECT_TRUE(ReadOne(*e, kind, i).ok());
    }
  }
}

TEST_F(DiskMoverTest, ExistingKeysAreNotRewrittenAndDuplicatesInABatchAreBusy) {
  auto e = OpenMover();
  ASSERT_NE(e, nullptr);
  WriteOk(*e, Kind::kKV, 0, 2);
  const uint64_t writes = e->stats().writes;
  auto again = Write(*e, Kind::kKV, 0, 2);
  for (const auto& r : again->records) {
    EXPECT_TRUE(r.status.ok());
    EXPECT_TRUE(r.existing);
  }
  EXPECT_TRUE(again->units.empty());
  EXPECT_EQ(e->stats().writes, writes);
  EXPECT_EQ(e->stats().writes_existing, 2u);

  const DiskKey k = TestKey(Kind::kKV, 9);
  Fill(KvSlot(0), k);
  Fill(KvSlot(1), k);
  std::vector<DiskWrite> dup = {{k, {}, KvSlot(0)}, {k, {}, KvSlot(1)}};
  DiskOp op = e->Save(dup);
  const Status fs = op.fence.Wait();
  EXPECT_TRUE(fs.IsBusy()) << fs.ToString();
  EXPECT_NE(fs.message().find("1 of 2 records failed"), std::string::npos) << fs.ToString();
  EXPECT_TRUE(op.result->records[0].status.ok());
  EXPECT_TRUE(op.result->records[1].status.IsBusy());
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 9).ok());
}

TEST_F(DiskMoverTest, BadArgumentsGetClearErrorsAndTheRestOfTheBatchRuns) {
  auto e = OpenMover();
  ASSERT_NE(e, nullptr);
  const DiskKey kv = TestKey(Kind::kKV, 0);
  Fill(KvSlot(0), kv);
  // A Mamba key in a KV-sized slot, then a good write.
  std::vector<DiskWrite> w = {{TestKey(Kind::kMamba, 0), {}, KvSlot(1)}, {kv, {}, KvSlot(0)}};
  DiskOp op = e->Save(w);
  EXPECT_TRUE(op.fence.Wait().IsInvalidArgument());
  EXPECT_NE(op.result->records[0].status.message().find("writes[0].slot 1"), std::string::npos)
      << op.result->records[0].status.ToString();
  EXPECT_TRUE(op.result->records[1].status.ok());
  std::vector<DiskRead> r = {{kv, MambaSlot(0)}};
  DiskOp rop = e->Load(r);
  EXPECT_TRUE(rop.fence.Wait().IsInvalidArgument());
  EXPECT_NE(rop.result->records[0].status.message().find("reads[0].slot"), std::string::npos);
  // A miss is NotFound and counted.
  EXPECT_TRUE(ReadOne(*e, Kind::kKV, 77).IsNotFound());
  EXPECT_EQ(e->stats().read_misses, 1u);
  // Empty batches complete at once.
  EXPECT_TRUE(e->Save({}).fence.Ready());
  EXPECT_TRUE(e->Load({}).fence.Wait().ok());

  // Open-time argument errors.
  DiskMoverOptions o = options_;
  o.queue_depth = 0;
  auto bad = DiskMover::Open(o, layout_, host_.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("queue_depth"), std::string::npos);
  o = options_;
  o.max_io_bytes = 1000;
  bad = DiskMover::Open(o, layout_, host_.get());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_io_bytes"), std::string::npos);
  bad = DiskMover::Open(options_, layout_, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("host"), std::string::npos);
}

TEST_F(DiskMoverTest, LayoutWithoutSsmRefusesMambaRecords) {
  ModelLayout kv_only = layout_;
  kv_only.ssm_layers.clear();
  kv_only.num_layers = 1;
  layout_ = kv_only;
  auto e = OpenMover();
  ASSERT_NE(e, nullptr);
  const DiskWrite w{TestKey(Kind::kMamba, 0), {}, MambaSlot(0)};
  DiskOp op = e->Save(std::span<const DiskWrite>(&w, 1));
  EXPECT_TRUE(op.fence.Wait().IsInvalidArgument());
}

TEST_F(DiskMoverTest, RecordsLargerThanOneRequestMoveInPieces) {
  options_.max_io_bytes = 4096;  // a 12 KiB KV record takes 3 requests, a Mamba one 4
  auto e = OpenMover();
  ASSERT_NE(e, nullptr);
  WriteOk(*e, Kind::kKV, 0, 8);
  WriteOk(*e, Kind::kMamba, 0, 4);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(ReadOne(*e, Kind::kKV, i).ok());
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(ReadOne(*e, Kind::kMamba, i).ok());
}

// The disk mover never evicts: a full disk fails the write NoSpace, the caller (the Store)
// removes the victims it picks in one batch, and the write then fits.
TEST_F(DiskMoverTest, AFullDiskFailsNoSpaceAndTheCallerRemovesVictimsInOneBatch) {
  options_.tier.data_paths.clear();
  options_.tier.capacity_bytes = 8 * RecordSlotBytes(layout_, Kind::kKV);
  auto e = OpenMover();
  ASSERT_NE(e, nullptr);
  WriteOk(*e, Kind::kKV, 0, 8);
  auto r = Write(*e, Kind::kKV, 100, 2);
  for (const auto& rec : r->records) EXPECT_TRUE(rec.status.IsNoSpace()) << rec.status.ToString();
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(e->tier().Contains(TestKey(Kind::kKV, i))) << i;
  const std::vector<DiskKey> victims = {TestKey(Kind::kKV, 1), TestKey(Kind::kKV, 2),
                                        TestKey(Kind::kKV, 77)};
  const std::vector<Status> removed = e->tier().Remove(victims);
  ASSERT_EQ(removed.size(), 3u);
  EXPECT_TRUE(removed[0].ok() && removed[1].ok()) << removed[0].ToString();
  EXPECT_TRUE(removed[2].IsNotFound()) << removed[2].ToString();
  r = Write(*e, Kind::kKV, 100, 2);
  for (const auto& rec : r->records) ASSERT_TRUE(rec.status.ok()) << rec.status.ToString();
  // A read of a removed record: NotFound, and the result says the record is gone.
  Poison(KvSlot(60));
  const DiskRead rd{TestKey(Kind::kKV, 1), KvSlot(60)};
  DiskOp miss = e->Load(std::span<const DiskRead>(&rd, 1));
  (void)miss.fence.Wait();
  EXPECT_TRUE(miss.result->records[0].status.IsNotFound());
  EXPECT_TRUE(miss.result->records[0].gone);
  for (uint64_t i : {0, 3, 4, 5, 6, 7, 100, 101}) ASSERT_TRUE(ReadOne(*e, Kind::kKV, i).ok()) << i;
  EXPECT_EQ(e->stats().removes, 2u);
  EXPECT_EQ(e->stats().no_space, 2u);
}

TEST_F(DiskMoverTest, InFlightReadsPinTheirRecords) {
  options_.tier.data_paths.clear();
  options_.tier.capacity_bytes = 4 * RecordSlotBytes(layout_, Kind::kKV) + 4096;
  auto e = OpenMover(/*faults=*/true);
  ASSERT_NE(e, nullptr);
  WriteOk(*e, Kind::kKV, 0, 4);
  faults_->AddRule({BlockIoOp::kRead, FaultInjectingBlockIo::Action::kHold, 0, 0, 0, 1});
  Poison(KvSlot(50));
  const DiskRead rd{TestKey(Kind::kKV, 0), KvSlot(50)};
  DiskOp held = e->Load(std::span<const DiskRead>(&rd, 1));
  ASSERT_EQ(faults_->held(), 1u);
  EXPECT_FALSE(held.fence.Ready());
  // Removing the record being read unlists it at once, but its extent stays held: of two
  // writes after two removals, only the one that takes the other record's extent fits.
  const std::vector<DiskKey> victims = {rd.key, TestKey(Kind::kKV, 1)};
  for (const Status& s : e->tier().Remove(victims)) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(e->tier().Contains(rd.key));
  auto w = Write(*e, Kind::kKV, 10, 2);
  EXPECT_EQ(w->records[0].status.ok() + w->records[1].status.ok(), 1)
      << w->records[0].status.ToString() << " / " << w->records[1].status.ToString();
  faults_->Release();
  ASSERT_TRUE(held.fence.Wait().ok());
  EXPECT_FALSE(held.result->records[0].gone);
  EXPECT_TRUE(PayloadMatchesKey(rd.key, Payload(KvSlot(50), Kind::kKV)));
  EXPECT_TRUE(e->tier().Remove(rd.key).IsNotFound());
  // The read ended: the removed record's extent is free again.
  auto w3 = Write(*e, Kind::kKV, 12, 1);
  ASSERT_TRUE(w3->records[0].status.ok()) << w3->records[0].status.ToString();
  for (uint64_t i : {2, 3, 12}) EXPECT_TRUE(ReadOne(*e, Kind::kKV, i).ok()) << i;
}

TEST_F(DiskMoverTest, CloseWithIoInFlightFiresEveryFence) {
  auto e = OpenMover(/*faults=*/true);
  ASSERT_NE(e, nullptr);
  WriteOk(*e, Kind::kKV, 0, 4);
  faults_->AddRule({BlockIoOp::kRead, FaultInjectingBlockIo::Action::kHold, 0, 0, 0, 100});
  faults_->AddRule({BlockIoOp::kWrite, FaultInjectingBlockIo::Action::kHold, 0, 0, 0, 100});
  std::vector<DiskRead> reads;
  for (uint64_t i = 0; i < 4; ++i) reads.push_back({TestKey(Kind::kKV, i), KvSlot(40 + i)});
  DiskOp r = e->Load(reads);
  std::vector<DiskWrite> writes;
  for (uint64_t i = 0; i < 4; ++i) {
    Fill(MambaSlot(i), TestKey(Kind::kMamba, i));
    writes.push_back({TestKey(Kind::kMamba, i), {}, MambaSlot(i)});
  }
  DiskOp w = e->Save(writes);
  EXPECT_FALSE(r.fence.Ready());
  EXPECT_FALSE(w.fence.Ready());
  ASSERT_TRUE(e->Close().ok());
  ASSERT_TRUE(r.fence.Ready());
  ASSERT_TRUE(w.fence.Ready());
  EXPECT_TRUE(r.fence.status().ok()) << r.fence.status().ToString();
  for (size_t i = 0; i < reads.size(); ++i) {
    EXPECT_TRUE(PayloadMatchesKey(reads[i].key, Payload(reads[i].slot, Kind::kKV)));
  }
  // The writes landed before the catalog closed, or failed cleanly: never half-published.
  for (const auto& rec : w.result->records) {
    EXPECT_TRUE(rec.status.ok() || rec.status.code() == Status::Code::kFailedPrecondition)
        << rec.status.ToString();
  }
  // After Close: batches fail at once.
  DiskOp late = e->Load(reads);
  ASSERT_TRUE(late.fence.Ready());
  EXPECT_EQ(late.fence.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_TRUE(e->Close().ok());
  e.reset();
  // Whatever the writes' fate, a reopened tier serves only correct records.
  auto again = OpenMover();
  ASSERT_NE(again, nullptr);
  for (uint64_t i = 0; i < 4; ++i) {
    const Status s = ReadOne(*again, Kind::kMamba, i);
    EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
  }
}

TEST_F(DiskMoverTest, ConcurrentWritersAndReadersSeeOnlyTheirBytes) {
  options_.queue_depth = 16;
  auto e = OpenMover();
  ASSERT_NE(e, nullptr);
  constexpr int kThreads = 4;
  constexpr int kRounds = 30;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0}, failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(testing::SeedFromEnv(100) + t);
      // Each thread owns 8 KV slots and 2 Mamba slots, and keys t*1000 + ...
      const size_t kv0 = t * 8, m0 = t * 2;
      for (int round = 0; round < kRounds; ++round) {
        std::vector<DiskWrite> w;
        for (size_t i = 0; i < 4; ++i) {
          const DiskKey k = TestKey(Kind::kKV, t * 1000 + round * 4 + i);
          Fill(KvSlot(kv0 + i), k);
          w.push_back({k, {}, KvSlot(kv0 + i)});
        }
        const DiskKey mk = TestKey(Kind::kMamba, t * 1000 + round);
        Fill(MambaSlot(m0), mk);
        w.push_back({mk, {}, MambaSlot(m0)});
        DiskOp op = e->Save(w);
        if (!op.fence.Wait().ok()) ++failures;
        // Remove the round before the last three (one batch), as the Store removes victims,
        // while the other threads read and write.
        if (round >= 3) {
          const int old = round - 3;
          std::vector<DiskKey> gone;
          for (size_t i = 0; i < 4; ++i) gone.push_back(TestKey(Kind::kKV, t * 1000 + old * 4 + i));
          gone.push_back(TestKey(Kind::kMamba, t * 1000 + old));
          for (const Status& s : e->tier().Remove(gone)) failures += !s.ok();
        }
        // Read back one of the rounds still on disk into the other slots.
        const int kept = std::min(round + 1, 3);
        const int back = round + 1 - kept + static_cast<int>(rng() % kept);
        std::vector<DiskRead> r;
        for (size_t i = 0; i < 4; ++i) {
          r.push_back({TestKey(Kind::kKV, t * 1000 + back * 4 + i), KvSlot(kv0 + 4 + i)});
        }
        r.push_back({TestKey(Kind::kMamba, t * 1000 + back), MambaSlot(m0 + 1)});
        DiskOp rop = e->Load(r);
        rop.fence.Wait().ok();
        for (size_t i = 0; i < r.size(); ++i) {
          const Status& s = rop.result->records[i].status;
          if (s.ok()) {
            if (!PayloadMatchesKey(r[i].key, Payload(r[i].slot, r[i].key.kind))) ++wrong;
          } else {
            ++failures;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  const DiskTierStats s = e->stats();
  EXPECT_EQ(s.checksum_failures + s.header_mismatches + s.read_io_errors + s.write_io_errors, 0u);
}

}  // namespace
}  // namespace cachepawl
