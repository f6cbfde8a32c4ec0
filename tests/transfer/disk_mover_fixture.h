// The fixture shared by the DiskMover suites: a small hybrid layout, a test HostMemory, a
// disk tier in a temporary folder (two striped data files), an optional fault injector.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"
#include "tests/transfer/io_uring_fault_block_io.h"
#include "transfer/disk_mover.h"

namespace cachepawl::testing {

class DiskMoverFixture : public ::testing::Test {
 protected:
  static constexpr size_t kKvSlots = 64;
  static constexpr size_t kMambaSlots = 16;

  void SetUp() override {
    layout_ = SmallHybridLayout();
    host_ = TestHostMemory::ForLayout(layout_, kKvSlots, kMambaSlots);
    options_.tier.dir = (dir_.path() / "disk").string();
    options_.tier.data_paths = {(dir_.path() / "d0" / "data").string(),
                                (dir_.path() / "d1" / "data").string()};
    options_.tier.capacity_bytes = 4 << 20;
    options_.queue_depth = 8;
  }

  // Opens the mover; with `faults`, requests go through a FaultInjectingBlockIo (faults_).
  std::unique_ptr<DiskMover> OpenMover(bool faults = false) {
    DiskMoverOptions o = options_;
    faults_ = nullptr;
    if (faults) {
      o.wrap_block_io = [this](std::unique_ptr<BlockIo> inner) {
        auto f = std::make_unique<FaultInjectingBlockIo>(std::move(inner));
        faults_ = f.get();
        return std::unique_ptr<BlockIo>(std::move(f));
      };
    }
    auto e = DiskMover::Open(o, layout_, host_.get());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  static HostSlotId KvSlot(size_t i) { return i; }
  static HostSlotId MambaSlot(size_t i) { return kKvSlots + i; }
  static HostSlotId SlotFor(Kind k, size_t i) { return k == Kind::kKV ? KvSlot(i) : MambaSlot(i); }

  std::span<std::byte> Payload(HostSlotId slot, Kind k) {
    return {host_->SlotPayload(slot), layout_.RecordBytes(k)};
  }
  void Fill(HostSlotId slot, const DiskKey& key) {
    FillPayloadForKey(key, Payload(slot, key.kind));
  }
  void Poison(HostSlotId slot) { std::memset(host_->SlotData(slot), 0xEE, host_->SlotBytes(slot)); }

  // Writes records n in [first, first+count) of `kind` through slots 0..count-1 and returns
  // the batch result (after its fence fired).
  std::shared_ptr<const DiskBatchResult> Write(DiskMover& e, Kind kind, uint64_t first,
                                               size_t count) {
    std::vector<DiskWrite> w;
    for (size_t i = 0; i < count; ++i) {
      const DiskKey k = TestKey(kind, first + i);
      Fill(SlotFor(kind, i), k);
      w.push_back({k, TestParent(kind, first + i), SlotFor(kind, i)});
    }
    DiskOp op = e.Save(w);
    EXPECT_TRUE(op.fence.Wait(std::chrono::seconds(60)).code() != Status::Code::kTimedOut);
    EXPECT_TRUE(op.fence.Ready());
    return op.result;
  }
  void WriteOk(DiskMover& e, Kind kind, uint64_t first, size_t count) {
    auto r = Write(e, kind, first, count);
    for (const auto& rec : r->records) ASSERT_TRUE(rec.status.ok()) << rec.status.ToString();
  }

  // Reads record n of `kind` into a poisoned slot; returns its status. When OK, asserts that
  // every payload byte is what was written for the key.
  Status ReadOne(DiskMover& e, Kind kind, uint64_t n, size_t slot_index = 0) {
    const HostSlotId slot =
        SlotFor(kind, (kind == Kind::kKV ? kKvSlots : kMambaSlots) - 1 - slot_index);
    Poison(slot);
    const DiskRead rd{TestKey(kind, n), slot};
    DiskOp op = e.Load(std::span<const DiskRead>(&rd, 1));
    EXPECT_TRUE(op.fence.Wait(std::chrono::seconds(60)).code() != Status::Code::kTimedOut);
    const Status s = op.result->records[0].status;
    // `gone` (the store forgets the index's Disk location by it) is set exactly when a read
    // failed for the record's sake, and then the tier no longer holds the record.
    const bool gone = op.result->records[0].gone;
    EXPECT_EQ(gone, !s.ok() && !s.IsAborted() && !s.IsInvalidArgument()) << s.ToString();
    if (gone) {
      EXPECT_FALSE(e.tier().Contains(rd.key)) << "gone, but the tier still holds it";
    }
    if (s.ok()) {
      EXPECT_TRUE(PayloadMatchesKey(rd.key, Payload(slot, kind))) << "WRONG BYTES for " << n;
    } else {
      // A failed read never leaves something that looks like a record in the slot.
      EXPECT_NE(std::memcmp(host_->SlotData(slot), "CPAWLREC", 8), 0);
    }
    return s;
  }

  TempDir dir_;
  ModelLayout layout_;
  std::unique_ptr<TestHostMemory> host_;
  DiskMoverOptions options_;
  FaultInjectingBlockIo* faults_ = nullptr;  // owned by the mover
};

}  // namespace cachepawl::testing
