// DiskTier bookkeeping: options, open/mismatch/wipe, the write and read protocols, pins,
// Remove (batches, and the catalog written without the tier's lock), and recovery from the catalog
// (no data I/O here: see tests/transfer/disk_mover*_test.cc for the data path).
#include "tiers/disk_tier.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"

namespace cachepawl {
namespace {

using testing::SmallHybridLayout;
using testing::TempDir;
using testing::TestKey;
using testing::TestParent;

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = SmallHybridLayout();
    kv_bytes_ = RecordSlotBytes(layout_, Kind::kKV);        // 12 KiB
    mamba_bytes_ = RecordSlotBytes(layout_, Kind::kMamba);  // 16 KiB
    options_.dir = (dir_.path() / "disk").string();
    options_.capacity_bytes = 10 * kv_bytes_;
  }

  std::unique_ptr<DiskTier> Open() {
    auto t = DiskTier::Open(options_, layout_);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  // Writes (without data) and commits `key`; returns its extent.
  DiskExtent Put(DiskTier& t, const DiskKey& key) {
    auto plan = t.BeginWrite(key, TestParent(key.kind, 0));
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    if (!plan.ok()) return {};
    EXPECT_FALSE(plan->existing);
    const uint64_t sum = 77;
    EXPECT_TRUE(t.CommitWrites(std::span(&plan->ticket, 1), std::span(&sum, 1)).ok());
    return plan->extent;
  }

  TempDir dir_;
  ModelLayout layout_;
  uint64_t kv_bytes_ = 0, mamba_bytes_ = 0;
  DiskTierOptions options_;
};

TEST_F(DiskTierTest, OptionsNameTheFieldAtFault) {
  auto expect_bad = [&](DiskTierOptions o, const std::string& field) {
    const Status s = o.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.ToString();
    auto t = DiskTier::Open(o, layout_);
    EXPECT_FALSE(t.ok());
  };
  DiskTierOptions o = options_;
  o.dir.clear();
  expect_bad(o, "disk.dir");
  o = options_;
  o.capacity_bytes = 0;
  expect_bad(o, "disk.capacity_bytes");
  o = options_;
  o.data_paths = {(dir_.path() / "a").string(), (dir_.path() / "b" / ".." / "a").string()};
  expect_bad(o, "disk.data_paths[1]");
  o = options_;
  o.data_paths = {""};
  expect_bad(o, "disk.data_paths[0]");
  // A capacity below one Mamba record per file is caught at Open (it needs the layout).
  o = options_;
  o.data_paths = {(dir_.path() / "a").string(), (dir_.path() / "b").string()};
  o.capacity_bytes = mamba_bytes_;
  auto t = DiskTier::Open(o, layout_);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(t.status().IsInvalidArgument());
  EXPECT_NE(t.status().message().find("disk.capacity_bytes"), std::string::npos);
  // A bad layout too.
  ModelLayout bad = layout_;
  bad.page_size_tokens = 0;
  auto t2 = DiskTier::Open(options_, bad);
  ASSERT_FALSE(t2.ok());
  EXPECT_NE(t2.status().message().find("page_size"), std::string::npos) << t2.status().ToString();
}

TEST_F(DiskTierTest, CreatesPrivateFoldersAndPreallocatedFiles) {
  options_.data_paths = {(dir_.path() / "x" / "y" / "data0").string(),
                         (dir_.path() / "z" / "data1").string()};
  options_.capacity_bytes = 2 * 64 * 4096 + 100;  // per file: 64 pages (rounded down)
  auto t = Open();
  ASSERT_NE(t, nullptr);
  for (const auto& p : options_.data_paths) {
    struct stat st;
    ASSERT_EQ(::stat(p.c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << p;
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), 64u * 4096);
    EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 64u * 4096) << "not preallocated";
    ASSERT_EQ(::stat(std::filesystem::path(p).parent_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
  }
  struct stat st;
  ASSERT_EQ(::stat((dir_.path() / "x").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(t->stats().capacity_bytes, 2u * 64 * 4096);
}

TEST_F(DiskTierTest, AnotherLayoutIsIncompatibleNamingBothFingerprintsOrWipes) {
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    Put(*t, TestKey(Kind::kKV, 1));
  }
  const ModelLayout other = SmallHybridLayout("test/another-model");
  auto t = DiskTier::Open(options_, other);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(t.status().IsIncompatible()) << t.status().ToString();
  EXPECT_NE(t.status().message().find(layout_.FingerprintHex()), std::string::npos);
  EXPECT_NE(t.status().message().find(other.FingerprintHex()), std::string::npos);
  EXPECT_NE(t.status().message().find("wipe_on_layout_mismatch"), std::string::npos);
  // The refused open changed nothing: the original layout still sees its record.
  {
    auto again = Open();
    ASSERT_NE(again, nullptr);
    EXPECT_TRUE(again->Contains(TestKey(Kind::kKV, 1)));
  }
  options_.wipe_on_mismatch = true;
  auto wiped = DiskTier::Open(options_, other);
  ASSERT_TRUE(wiped.ok()) << wiped.status().ToString();
  EXPECT_EQ((*wiped)->stats().records_kv, 0u);
}

TEST_F(DiskTierTest, OtherDataFilesAreIncompatible) {
  { ASSERT_NE(Open(), nullptr); }
  options_.data_paths = {(dir_.path() / "elsewhere").string()};
  auto t = DiskTier::Open(options_, layout_);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(t.status().IsIncompatible());
  EXPECT_NE(t.status().message().find("elsewhere"), std::string::npos) << t.status().ToString();
}

TEST_F(DiskTierTest, UnreadableCatalogFailsClearlyOrWipes) {
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    Put(*t, TestKey(Kind::kKV, 1));
  }
  const std::string cat = options_.CatalogDir();
  std::ofstream(cat + "/CURRENT", std::ios::trunc) << "garbage\n";
  auto t = DiskTier::Open(options_, layout_);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(cat), std::string::npos) << t.status().ToString();
  EXPECT_NE(t.status().message().find("wipe_unreadable_catalog"), std::string::npos);
  options_.wipe_unreadable_catalog = true;
  auto wiped = Open();
  ASSERT_NE(wiped, nullptr);
  EXPECT_FALSE(wiped->Contains(TestKey(Kind::kKV, 1)));
  Put(*wiped, TestKey(Kind::kKV, 2));
  EXPECT_TRUE(wiped->Contains(TestKey(Kind::kKV, 2)));
}

// Removing the catalog folder (or losing its WAL) used to open an empty store in silence; the
// records the data file held are dropped, and the log says so, naming the file and the catalog.
TEST_F(DiskTierTest, ARemovedCatalogBesideADataFileIsSaidInTheLog) {
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    Put(*t, TestKey(Kind::kKV, 1));
  }
  const std::string cat = options_.CatalogDir();
  std::filesystem::remove_all(cat);
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto old_logger = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  auto reopened = DiskTier::Open(options_, layout_);
  spdlog::set_default_logger(old_logger);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_FALSE((*reopened)->Contains(TestKey(Kind::kKV, 1)));
  bool warned = false;
  for (const std::string& line : sink->last_formatted()) {
    warned = warned || (line.find("warning") != std::string::npos &&
                        line.find("the catalog " + cat + " is new") != std::string::npos &&
                        line.find("records it held are dropped") != std::string::npos);
  }
  EXPECT_TRUE(warned) << "no warning naming the catalog and the dropped records";
  // A first open (no data file yet) says nothing of the kind.
  reopened->reset();
  options_.dir = (dir_.path() / "fresh").string();
  auto fresh_sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", fresh_sink));
  auto fresh = DiskTier::Open(options_, layout_);
  spdlog::set_default_logger(old_logger);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  for (const std::string& line : fresh_sink->last_formatted()) {
    EXPECT_EQ(line.find("dropped"), std::string::npos) << line;
  }
}

TEST_F(DiskTierTest, AFolderInUseIsRefusedEvenWhenWipingIsAllowed) {
  auto first = Open();
  ASSERT_NE(first, nullptr);
  Put(*first, TestKey(Kind::kKV, 1));
  // A second open of the same folder (here in the same process; flock locks belong to an open
  // file) is refused with who holds it, before anything is read, and never wipes it.
  options_.wipe_unreadable_catalog = true;
  auto second = DiskTier::Open(options_, layout_);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsBusy()) << second.status().ToString();
  const std::string msg(second.status().message());
  EXPECT_NE(msg.find("in use by another store"), std::string::npos) << msg;
  EXPECT_NE(msg.find("process " + std::to_string(::getpid())), std::string::npos) << msg;
  EXPECT_NE(msg.find(options_.dir), std::string::npos) << msg;
  EXPECT_TRUE(first->Contains(TestKey(Kind::kKV, 1)));
  // Another process is refused too; once closed, the folder opens again with its records.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto t = DiskTier::Open(options_, layout_);
    ::_exit(!t.ok() && t.status().IsBusy() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child was not refused";
  ASSERT_TRUE(first->Close().ok());
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->Contains(TestKey(Kind::kKV, 1)));
  struct stat st;
  ASSERT_EQ(::stat((std::filesystem::path(options_.dir) / kOwnerFileName).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(DiskTierTest, WriteProtocolPublishesOnlyOnCommit) {
  auto t = Open();
  ASSERT_NE(t, nullptr);
  const DiskKey k = TestKey(Kind::kKV, 4);
  auto plan = t->BeginWrite(k, TestParent(Kind::kKV, 4));
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(t->Contains(k));                         // pending: not published
  EXPECT_TRUE(t->BeginRead(k).status().IsNotFound());   // not readable
  EXPECT_TRUE(t->BeginWrite(k, {}).status().IsBusy());  // a second writer waits
  EXPECT_TRUE(t->Remove(k).IsBusy());
  t->AbortWrite(plan->ticket);
  EXPECT_FALSE(t->Contains(k));
  EXPECT_EQ(t->stats().bytes_used, 0u);
  const DiskExtent e = Put(*t, k);
  auto info = t->Lookup(k);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->extent, e);
  EXPECT_EQ(info->parent, TestParent(Kind::kKV, 0));
  EXPECT_EQ(info->checksum, 77u);
  auto again = t->BeginWrite(k, {});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->existing);
  EXPECT_EQ(again->extent, e);
  // A KV key is found whatever depth is asked, except a conflicting non-zero one.
  DiskKey other_depth = k;
  other_depth.depth = 0;
  auto any_depth = t->BeginRead(other_depth);
  ASSERT_TRUE(any_depth.ok());
  EXPECT_EQ(any_depth->second.key.depth, k.depth);
  t->EndRead(any_depth->first, true);
  other_depth.depth = k.depth + 16;
  EXPECT_TRUE(t->BeginRead(other_depth).status().IsNotFound());
}

// The store removes disk victims outside its mutex, so a read that began before the removal may
// still be in flight: the record is unlisted at once (no new read, no write that finds it and
// "exists"), the read finishes on the old bytes, and the extent is reused only after it.
TEST_F(DiskTierTest, RemovingARecordBeingReadUnlistsItAndFreesItsExtentAfterTheRead) {
  options_.capacity_bytes = 3 * kv_bytes_;
  auto t = Open();
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 3; ++i) Put(*t, TestKey(Kind::kKV, i));
  auto pin = t->BeginRead(TestKey(Kind::kKV, 0));
  ASSERT_TRUE(pin.ok());
  const DiskExtent pinned_extent = pin->second.extent;
  ASSERT_TRUE(t->Remove(TestKey(Kind::kKV, 0)).ok());
  EXPECT_FALSE(t->Contains(TestKey(Kind::kKV, 0)));
  EXPECT_TRUE(t->BeginRead(TestKey(Kind::kKV, 0)).status().IsNotFound());
  EXPECT_TRUE(t->Remove(TestKey(Kind::kKV, 0)).IsNotFound());
  // The extent is still the read's: a write finds no room.
  auto full = t->BeginWrite(TestKey(Kind::kKV, 3), {});
  EXPECT_TRUE(full.status().IsNoSpace()) << full.status().ToString();
  // A write of the removed key is a new record, not the old one "existing".
  t->EndRead(pin->first, /*ok=*/true);
  auto again = t->BeginWrite(TestKey(Kind::kKV, 0), {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->existing);
  EXPECT_EQ(again->extent, pinned_extent);  // the only free extent: freed by the EndRead
  t->AbortWrite(again->ticket);
  EXPECT_EQ(t->stats().removes, 1u);
}

TEST_F(DiskTierTest, AFullTierRefusesAWriteAndNeverEvicts) {
  options_.capacity_bytes = 2 * mamba_bytes_ + 2 * kv_bytes_;  // 56 KiB
  auto t = Open();
  ASSERT_NE(t, nullptr);
  Put(*t, TestKey(Kind::kKV, 0));
  Put(*t, TestKey(Kind::kKV, 1));
  Put(*t, TestKey(Kind::kMamba, 0));
  Put(*t, TestKey(Kind::kMamba, 1));
  auto full = t->BeginWrite(TestKey(Kind::kMamba, 5), {});
  ASSERT_FALSE(full.ok());
  EXPECT_TRUE(full.status().IsNoSpace()) << full.status().ToString();
  EXPECT_NE(full.status().message().find("bytes used"), std::string::npos)
      << full.status().ToString();
  EXPECT_EQ(t->stats().no_space, 1u);
  for (uint64_t i = 0; i < 2; ++i) {  // the caller picks victims: nothing went
    EXPECT_TRUE(t->Contains(TestKey(Kind::kKV, i)));
    EXPECT_TRUE(t->Contains(TestKey(Kind::kMamba, i)));
  }
}

TEST_F(DiskTierTest, EverythingPinnedMeansNoSpaceAndNothingLost) {
  options_.capacity_bytes = 2 * kv_bytes_;
  auto t = Open();
  ASSERT_NE(t, nullptr);
  Put(*t, TestKey(Kind::kKV, 0));
  Put(*t, TestKey(Kind::kKV, 1));
  auto p0 = t->BeginRead(TestKey(Kind::kKV, 0));
  auto p1 = t->BeginRead(TestKey(Kind::kKV, 1));
  ASSERT_TRUE(p0.ok() && p1.ok());
  auto w = t->BeginWrite(TestKey(Kind::kKV, 2), {});
  EXPECT_TRUE(w.status().IsNoSpace());
  EXPECT_TRUE(t->Contains(TestKey(Kind::kKV, 0)));
  EXPECT_TRUE(t->Contains(TestKey(Kind::kKV, 1)));
  t->EndRead(p0->first, true);
  t->EndRead(p1->first, true);
  // The tier never evicts: still full until the caller removes a record.
  EXPECT_TRUE(t->BeginWrite(TestKey(Kind::kKV, 2), {}).status().IsNoSpace());
  ASSERT_TRUE(t->Remove(TestKey(Kind::kKV, 0)).ok());
  EXPECT_TRUE(t->BeginWrite(TestKey(Kind::kKV, 2), {}).ok());
}

TEST_F(DiskTierTest, FailedReadDropsTheRecordOnceTheLastReaderIsDone) {
  auto t = Open();
  ASSERT_NE(t, nullptr);
  const DiskKey k = TestKey(Kind::kMamba, 3);
  Put(*t, k);
  auto a = t->BeginRead(k);
  auto b = t->BeginRead(k);
  ASSERT_TRUE(a.ok() && b.ok());
  const uint64_t used = t->stats().bytes_used;
  t->EndRead(a->first, /*ok=*/false);
  EXPECT_FALSE(t->Contains(k));            // gone from the catalog at once
  EXPECT_EQ(t->stats().bytes_used, used);  // but its extent is still pinned by b
  t->EndRead(b->first, /*ok=*/true);
  EXPECT_EQ(t->stats().bytes_used, 0u);
  EXPECT_EQ(t->stats().dropped_on_read, 1u);
  t.reset();
  t = Open();
  EXPECT_FALSE(t->Contains(k));  // the drop reached the catalog
}

TEST_F(DiskTierTest, RecoveryRebuildsExtentsStampsAndDropsWhatNoLongerFits) {
  options_.data_paths = {(dir_.path() / "f0").string(), (dir_.path() / "f1").string()};
  options_.capacity_bytes = 2 * 8 * kv_bytes_;
  std::map<std::string, DiskExtent> extents;
  std::map<std::string, uint64_t> depths;
  for (uint64_t i = 0; i < 8; ++i)
    depths[DiskKeyIdentity(TestKey(Kind::kKV, i))] = TestKey(Kind::kKV, i).depth;
  for (uint64_t i = 0; i < 3; ++i)
    depths[DiskKeyIdentity(TestKey(Kind::kMamba, i))] = TestKey(Kind::kMamba, i).depth;
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < 8; ++i) {
      extents[DiskKeyIdentity(TestKey(Kind::kKV, i))] = Put(*t, TestKey(Kind::kKV, i));
    }
    for (uint64_t i = 0; i < 3; ++i) {
      extents[DiskKeyIdentity(TestKey(Kind::kMamba, i))] = Put(*t, TestKey(Kind::kMamba, i));
    }
    // Touch KV 0 so it is the most recently used after the restart.
    auto p = t->BeginRead(TestKey(Kind::kKV, 0));
    ASSERT_TRUE(p.ok());
    t->EndRead(p->first, true);
  }
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    size_t n = 0;
    t->ForEachRecord([&](const DiskRecordInfo& r) {
      ++n;
      EXPECT_EQ(r.extent, extents[DiskKeyIdentity(r.key)]);
      EXPECT_EQ(r.key.depth, depths[DiskKeyIdentity(r.key)]);
    });
    EXPECT_EQ(n, 11u);
    // The access stamps came back: KV 0, read last, is the newest; KV 1 the oldest.
    uint64_t newest = 0, oldest = UINT64_MAX;
    for (uint64_t i = 1; i < 8; ++i) {
      newest = std::max(newest, t->Lookup(TestKey(Kind::kKV, i))->stamp);
      oldest = std::min(oldest, t->Lookup(TestKey(Kind::kKV, i))->stamp);
    }
    EXPECT_GT(t->Lookup(TestKey(Kind::kKV, 0))->stamp, newest);
    EXPECT_EQ(t->Lookup(TestKey(Kind::kKV, 1))->stamp, oldest);
    // New writes never land on a recovered extent.
    auto w = t->BeginWrite(TestKey(Kind::kKV, 50), {});
    ASSERT_TRUE(w.ok());
    for (const auto& [id, e] : extents) {
      EXPECT_TRUE(w->extent.file != e.file || w->extent.end() <= e.offset ||
                  e.end() <= w->extent.offset);
    }
    t->AbortWrite(w->ticket);
  }
  // Truncate file 1 to nothing and delete file 0: every record is dropped at open, counted.
  ASSERT_EQ(::truncate(options_.data_paths[1].c_str(), 0), 0);
  std::filesystem::remove(options_.data_paths[0]);
  auto t = Open();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().records_kv + t->stats().records_mamba, 0u);
  EXPECT_EQ(t->stats().dropped_at_open, 11u);
  EXPECT_EQ(t->stats().bytes_used, 0u);
}

TEST_F(DiskTierTest, CapacityShrinkDropsRecordsPastTheNewEnd) {
  options_.capacity_bytes = 8 * kv_bytes_;
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < 8; ++i) Put(*t, TestKey(Kind::kKV, i));
  }
  options_.capacity_bytes = 4 * kv_bytes_;
  auto t = Open();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().records_kv, 4u);
  EXPECT_EQ(t->stats().dropped_at_open, 4u);
  t->ForEachRecord([&](const DiskRecordInfo& r) { EXPECT_LE(r.extent.end(), 4 * kv_bytes_); });
}

}  // namespace
}  // namespace cachepawl
