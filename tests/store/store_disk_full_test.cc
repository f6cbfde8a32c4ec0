// A store on a drive that fills up: a small tmpfs in a child process's own user and mount
// namespaces (tests/common/isolated_child.h; no root needed). The promises (docs/RELIABILITY.md):
//   - a data file larger than the drive's free space is refused at Open with NoSpace naming the
//     file, the bytes asked and the bytes free, and leaves nothing behind;
//   - when the catalog (RocksDB) runs out of room while the store saves, the store keeps
//     serving: loads return the right bytes or miss, never wrong bytes; nothing aborts (RocksDB
//     7.8's file logger aborted the process here); failed disk writes are counted (io_errors);
//   - once the drive has room again, disk writes resume in the running store, and a store
//     closed while the catalog was failing reopens with what verifies.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "store/store.h"
#include "tests/common/isolated_child.h"
#include "tests/store/store_test_checks.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

constexpr uint64_t kMiB = 1 << 20;
// 2048 records of 8 KiB: more than the scenarios save, so the tier never evicts (a write-through
// write that needs an eviction is dropped when the store closes first).
constexpr uint64_t kDiskBytes = 16 * kMiB;
// Room left for the catalog once the data file is preallocated: too little for RocksDB to
// preallocate its log (it then grows page by page), about a hundred saves' worth of records.
constexpr uint64_t kCatalogRoom = 128 << 10;
// RocksDB preallocates its MANIFEST (Options::manifest_preallocation_size, 4 MiB) at open.
constexpr uint64_t kManifestPreallocation = 4 * kMiB;

StoreOptions DiskFullOptions(const std::string& mnt) {
  // Host: 16 slots, so most prompts live on disk only and their loads read the disk.
  return CpuStoreOptions(TinyHybrid(), 16 * 8192, 4 << 20, kDiskBytes, mnt + "/store");
}

uint64_t FreeBytes(const std::string& path) {
  struct statvfs v;
  if (::statvfs(path.c_str(), &v) != 0) return 0;
  return uint64_t{v.f_bavail} * v.f_frsize;
}

// Writes `path` until the drive holding it has `leave` bytes free.
void FillDriveLeaving(const std::string& path, uint64_t leave) {
  const std::string folder = path.substr(0, path.rfind('/'));
  const uint64_t free = FreeBytes(folder);
  ASSERT_GT(free, leave);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  const std::vector<char> chunk(kMiB, 'x');
  for (uint64_t left = free - leave; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
    ASSERT_EQ(::write(fd, chunk.data(), n), static_cast<ssize_t>(n));
    left -= n;
  }
  ::close(fd);
}

// Fills the drive of `mnt` so that, once a store is open there, its catalog has kCatalogRoom.
// Returns the filler file (to remove to give the room back).
std::string FillDriveForCatalog(const std::string& mnt) {
  const std::string filler = mnt + "/filler";
  FillDriveLeaving(filler, kDiskBytes + kManifestPreallocation + kCatalogRoom);
  return filler;
}

std::vector<uint32_t> Prompt(int i) { return Tokens(100000 + 1000 * i, 4 * 4); }

// Saves prompts from `*next` on until the store has counted a failed disk write, and `extra`
// more; false (with a failure) when no write failed in `limit` prompts.
bool SaveUntilDiskWritesFail(Store* store, int* next, int extra, int limit) {
  int failed_at = -1;
  for (int n = 0; n < limit; ++n, ++*next) {
    SaveAll(store, "", Prompt(*next), true);
    if (::testing::Test::HasFatalFailure()) return false;
    if (failed_at < 0 && store->Stats().io_errors > 0) failed_at = n;
    if (failed_at >= 0 && n >= failed_at + extra) {
      ++*next;
      return true;
    }
  }
  ADD_FAILURE() << "no disk write failed in " << limit
                << " saves: the catalog never ran out of room (the scenario did not happen)";
  return false;
}

// Loads prompts [first, last): each is served byte for byte (LoadAndVerify compares every
// byte) or misses. Returns how many were served in full.
int LoadAllVerifyingBytes(Store* store, int first, int last) {
  int full = 0;
  for (int i = first; i < last; ++i) {
    auto m = store->Lookup("", Prompt(i));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok() || m->reusable_pages == 0) continue;
    const Status s = LoadAndVerify(store, *m);
    full += s.ok() && m->reusable_pages == 4;
  }
  return full;
}

void DataFileLargerThanTheDrive(const std::string& mnt) {
  StoreOptions o = DiskFullOptions(mnt);
  o.disk_bytes = 64 * kMiB;  // the drive has 32 MiB
  auto refused = Store::Open(o);
  ASSERT_FALSE(refused.ok());
  const std::string msg = refused.status().ToString();
  EXPECT_TRUE(refused.status().IsNoSpace()) << msg;
  EXPECT_NE(msg.find("'" + mnt + "/store/cachepawl.data'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot preallocate 67108864 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bytes free on its file system"), std::string::npos) << msg;
  EXPECT_NE(::access((mnt + "/store/cachepawl.data").c_str(), F_OK), 0)
      << "the refused open left its data file behind";
  EXPECT_GT(FreeBytes(mnt), 31 * kMiB) << "the refused open kept space";
  // A budget that fits opens in the same folder and works.
  o.disk_bytes = 16 * kMiB;
  auto store = Store::Open(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  SaveAll(store->get(), "", Prompt(0), true);
  EXPECT_EQ(LoadAllVerifyingBytes(store->get(), 0, 1), 1);
  EXPECT_TRUE((*store)->Close().ok());
}

TEST(StoreDiskFullTest, DataFileLargerThanTheDriveIsRefusedNamingFileAndSizes) {
  testing::RunInIsolatedChild(testing::ChildWorld::kTmpfs, DataFileLargerThanTheDrive, 32 * kMiB);
}

void CatalogFullThenRoomAgain(const std::string& mnt) {
  const std::string filler = FillDriveForCatalog(mnt);
  if (::testing::Test::HasFatalFailure()) return;
  auto opened = Store::Open(DiskFullOptions(mnt));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store* store = opened->get();
  int next = 0;
  ASSERT_TRUE(SaveUntilDiskWritesFail(store, &next, 40, 4000));
  const int saved_while_full = next;
  EXPECT_LT(FreeBytes(mnt), 64u << 10) << "the drive is not full: what failed?";
  // Still serving: every load is right or a miss, and the disk still serves what it holds.
  const uint64_t disk_read_before = store->Stats().bytes_disk_to_host;
  const int served = LoadAllVerifyingBytes(store, 0, saved_while_full);
  EXPECT_GT(served, 0);
  EXPECT_GT(store->Stats().bytes_disk_to_host, disk_read_before) << "no load read the disk";
  EXPECT_GT(store->Stats().io_errors, 0u);

  // Room again: the catalog resumes in the running store; what is saved now is on disk.
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  const int first_after = next;
  for (int i = 0; i < 30; ++i) SaveAll(store, "", Prompt(next++), true);
  EXPECT_TRUE(store->Close().ok());
  opened = Store::Open(DiskFullOptions(mnt));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store = opened->get();
  EXPECT_EQ(LoadAllVerifyingBytes(store, first_after, next), next - first_after)
      << "saves after the drive had room again did not all reach the disk";
  LoadAllVerifyingBytes(store, 0, first_after);  // right bytes or misses
  EXPECT_TRUE(store->Close().ok());
}

TEST(StoreDiskFullTest, CatalogOutOfRoomKeepsServingAndResumesWhenRoomReturns) {
  testing::RunInIsolatedChild(testing::ChildWorld::kTmpfs, CatalogFullThenRoomAgain, 32 * kMiB);
}

// The store is closed while its catalog cannot write (as `cachepawl bench store` ended on a
// full drive), then reopened once there is room: no abort, and what it serves verifies.
void ClosedWhileCatalogFull(const std::string& mnt) {
  const std::string filler = FillDriveForCatalog(mnt);
  if (::testing::Test::HasFatalFailure()) return;
  int next = 0;
  {
    auto store = Store::Open(DiskFullOptions(mnt));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(SaveUntilDiskWritesFail(store->get(), &next, 10, 4000));
    const Status closed = (*store)->Close();  // its last catalog write may fail: no abort
    if (!closed.ok()) {
      EXPECT_TRUE(closed.IsIOError()) << closed.ToString();
      EXPECT_NE(closed.ToString().find("catalog '" + mnt + "/store/catalog'"), std::string::npos)
          << closed.ToString();
    }
  }
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  auto store = Store::Open(DiskFullOptions(mnt));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_GT(LoadAllVerifyingBytes(store->get(), 0, next), 0) << "nothing recovered";
  const int first_new = next;
  for (int i = 0; i < 10; ++i) SaveAll(store->get(), "", Prompt(next++), true);
  EXPECT_EQ(LoadAllVerifyingBytes(store->get(), first_new, next), next - first_new);
  EXPECT_TRUE((*store)->Close().ok());
}

TEST(StoreDiskFullTest, ClosedWhileCatalogFullReopensWithWhatVerifies) {
  testing::RunInIsolatedChild(testing::ChildWorld::kTmpfs, ClosedWhileCatalogFull, 32 * kMiB);
}

}  // namespace
}  // namespace cachepawl
