// DiskEngine end to end: real io_uring, real RocksDB, real O_DIRECT files.
#include "transfer/io_uring_disk.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"

namespace cachepawl {
namespace {

using testing::FillPayloadForKey;
using testing::PayloadMatchesKey;
using testing::SmallHybridLayout;
using testing::TempDir;
using testing::TestHostMemory;
using testing::TestKey;
using testing::TestParent;

class DiskEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = SmallHybridLayout();
    host_ = TestHostMemory::ForLayout(layout_, 64, 16);
    options_.tier.dir = (dir_.path() / "disk").string();
    options_.tier.data_paths = {(dir_.path() / "d0" / "data").string(),
                                (dir_.path() / "d1" / "data").string()};
    options_.tier.capacity_bytes = 4 << 20;
    options_.queue_depth = 8;
  }

  std::unique_ptr<DiskEngine> OpenEngine() {
    auto e = DiskEngine::Open(options_, layout_, host_.get());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  HostSlotId KvSlot(size_t i) const { return i; }
  HostSlotId MambaSlot(size_t i) const { return 64 + i; }
  uint64_t PayloadBytes(Kind k) const { return layout_.RecordBytes(k); }

  std::span<std::byte> Payload(HostSlotId slot, Kind k) {
    return {host_->SlotPayload(slot), PayloadBytes(k)};
  }

  void Fill(HostSlotId slot, const DiskKey& key) {
    FillPayloadForKey(key, Payload(slot, key.kind));
  }
  void Poison(HostSlotId slot) { std::memset(host_->SlotData(slot), 0xEE, host_->SlotBytes(slot)); }

  // Writes KV records first..first+n-1 through slots 0..n-1; asserts every one OK.
  void WriteKv(DiskEngine& e, uint64_t first, size_t n) {
    std::vector<DiskWrite> w;
    for (size_t i = 0; i < n; ++i) {
      const DiskKey k = TestKey(Kind::kKV, first + i);
      Fill(KvSlot(i), k);
      w.push_back({k, TestParent(Kind::kKV, first + i), KvSlot(i)});
    }
    DiskOp op = e.WriteBack(w);
    ASSERT_TRUE(op.fence.Wait().ok()) << op.fence.status().ToString();
    for (const auto& r : op.result->records) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  }

  TempDir dir_;
  ModelLayout layout_;
  std::unique_ptr<TestHostMemory> host_;
  DiskEngineOptions options_;
};

TEST_F(DiskEngineTest, WriteThenReadBothKindsEveryByte) {
  auto e = OpenEngine();
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
  DiskOp w = e->WriteBack(writes);
  ASSERT_TRUE(w.fence.Wait().ok()) << w.fence.status().ToString();
  ASSERT_EQ(w.result->records.size(), writes.size());
  ASSERT_EQ(w.result->units.size(), writes.size());
  std::set<uint64_t> extents;
  for (size_t i = 0; i < writes.size(); ++i) {
    ASSERT_TRUE(w.result->records[i].status.ok());
    extents.insert(w.result->records[i].extent_id);
    EXPECT_EQ(w.result->units[i].src, (TierSlot{Tier::kHost, writes[i].slot}));
    EXPECT_EQ(w.result->units[i].dst.tier, Tier::kDisk);
    EXPECT_TRUE(e->tier().Contains(writes[i].key));
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
  DiskOp r = e->LoadBack(reads);
  ASSERT_TRUE(r.fence.Wait().ok()) << r.fence.status().ToString();
  for (size_t i = 0; i < reads.size(); ++i) {
    ASSERT_TRUE(r.result->records[i].status.ok()) << r.result->records[i].status.ToString();
    EXPECT_TRUE(PayloadMatchesKey(reads[i].key, Payload(reads[i].slot, reads[i].key.kind)))
        << "record " << i;
  }
  const DiskTierStats s = e->stats();
  EXPECT_EQ(s.writes, 14u);
  EXPECT_EQ(s.reads, 14u);
  EXPECT_EQ(s.records_kv, 10u);
  EXPECT_EQ(s.records_mamba, 4u);
  EXPECT_EQ(s.checksum_failures + s.header_mismatches + s.read_io_errors, 0u);
}

TEST_F(DiskEngineTest, RecordsSurviveReopenWithParentsAndDepths) {
  {
    auto e = OpenEngine();
    ASSERT_NE(e, nullptr);
    WriteKv(*e, 0, 12);
  }
  auto e = OpenEngine();
  ASSERT_NE(e, nullptr);
  std::map<std::string, DiskRecordInfo> seen;
  e->tier().ForEachRecord([&](const DiskRecordInfo& r) { seen[DiskKeyIdentity(r.key)] = r; });
  ASSERT_EQ(seen.size(), 12u);
  for (uint64_t i = 0; i < 12; ++i) {
    const DiskKey k = TestKey(Kind::kKV, i);
    ASSERT_TRUE(seen.count(DiskKeyIdentity(k)));
    const DiskRecordInfo& info = seen[DiskKeyIdentity(k)];
    EXPECT_EQ(info.parent, TestParent(Kind::kKV, i));
    EXPECT_EQ(info.key.depth, k.depth);
    Poison(KvSlot(40));
    DiskRead rd{k, KvSlot(40)};
    DiskOp op = e->LoadBack(std::span<const DiskRead>(&rd, 1));
    ASSERT_TRUE(op.fence.Wait().ok()) << op.fence.status().ToString();
    EXPECT_TRUE(PayloadMatchesKey(k, Payload(KvSlot(40), Kind::kKV)));
  }
}

}  // namespace
}  // namespace cachepawl
