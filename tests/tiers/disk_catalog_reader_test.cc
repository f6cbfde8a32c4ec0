#include "tiers/disk_catalog_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "tests/common/test_util.h"
#include "tests/tiers/disk_test_util.h"
#include "tiers/disk_catalog_rocks.h"

namespace cachepawl {
namespace {

using testing::TempDir;
using testing::TestCatalogRecord;
using testing::TestKey;

std::set<std::string> FileNames(const std::filesystem::path& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

// TMPDIR set for one test: the reader's secondary folder goes there.
class ScopedTmpDir {
 public:
  explicit ScopedTmpDir(const std::string& dir) {
    if (const char* old = std::getenv("TMPDIR")) old_ = old;
    ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~ScopedTmpDir() {
    if (old_.has_value()) {
      ::setenv("TMPDIR", old_->c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
  }

 private:
  std::optional<std::string> old_;
};

TEST(DiskCatalogReaderTest, NoCatalogIsNotFoundNamingTheFolder) {
  TempDir dir;
  const std::string path = (dir.path() / "catalog").string();
  auto reader = DiskCatalogReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_TRUE(reader.status().IsNotFound()) << reader.status().ToString();
  EXPECT_NE(reader.status().message().find("catalog '" + path + "'"), std::string::npos)
      << reader.status().ToString();
}

TEST(DiskCatalogReaderTest, ReadsWhatTheOpenCatalogHoldsAndCatchesUp) {
  TempDir dir, tmp;
  ScopedTmpDir scoped(tmp.str());
  const std::string path = (dir.path() / "catalog").string();
  auto cat = DiskCatalog::Open(path, /*sync=*/false, /*chains=*/true);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  CatalogMeta meta;
  meta.fingerprint.fill(3);
  meta.paths = {"/d/cachepawl.data"};
  ASSERT_TRUE((*cat)->WriteMeta(meta).ok());
  CatalogRecord kv = TestCatalogRecord(Kind::kKV, 1);
  CatalogRecord state = TestCatalogRecord(Kind::kMamba, 2);
  state.chain = {TestKey(Kind::kKV, 7).hash, TestKey(Kind::kKV, 8).hash};
  ASSERT_TRUE((*cat)->Apply(std::vector<CatalogRecord>{kv, state}, {}).ok());
  const std::set<std::string> files_before = FileNames(path);

  // The catalog stays open (locked) by its primary while the reader reads.
  auto reader = DiskCatalogReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->dir(), path);
  auto read_meta = (*reader)->ReadMeta();
  ASSERT_TRUE(read_meta.ok()) << read_meta.status().ToString();
  ASSERT_TRUE(read_meta->has_value());
  EXPECT_EQ((*read_meta)->fingerprint, meta.fingerprint);
  EXPECT_EQ((*read_meta)->paths, meta.paths);

  auto scan = (*reader)->ReadAll();
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  ASSERT_EQ(scan->records.size(), 2u);
  EXPECT_TRUE(scan->bad_keys.empty());
  EXPECT_TRUE(scan->unknown_keys.empty());
  EXPECT_TRUE(scan->orphan_chains.empty());
  EXPECT_EQ(FileNames(path), files_before);  // the reader wrote nothing into the catalog
  for (const CatalogRecord& r : scan->records) {
    const CatalogRecord& want = r.key.kind == Kind::kKV ? kv : state;
    EXPECT_EQ(r.key.hash, want.key.hash);
    EXPECT_EQ(r.extent, want.extent);
    EXPECT_EQ(r.checksum, want.checksum);
    EXPECT_EQ(r.chain, want.chain);
  }

  // A write of the primary: seen after CatchUp.
  CatalogRecord later = TestCatalogRecord(Kind::kKV, 3);
  ASSERT_TRUE((*cat)->Apply(std::span<const CatalogRecord>(&later, 1), {}).ok());
  ASSERT_TRUE((*reader)->CatchUp().ok());
  auto got = (*reader)->Get(later.key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->extent, later.extent);
  EXPECT_EQ((*got)->stamp, later.stamp);
  auto missing = (*reader)->Get(TestCatalogRecord(Kind::kKV, 99).key);
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_FALSE(missing->has_value());

  // A state's record deleted without its chain entry (a catalog opened without chains): the
  // chain is an orphan.
  cat->reset();
  auto plain = DiskCatalog::Open(path, /*sync=*/false, /*chains=*/false);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_TRUE((*plain)->Apply({}, std::vector<DiskKey>{state.key}).ok());
  ASSERT_TRUE((*reader)->CatchUp().ok());
  scan = (*reader)->ReadAll();
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->records.size(), 2u);  // kv and later
  ASSERT_EQ(scan->orphan_chains.size(), 1u);
  EXPECT_EQ(scan->orphan_chains[0], CatalogChainKey(state.key));

  // The secondary's own folder (under TMPDIR) goes with the reader.
  EXPECT_EQ(FileNames(tmp.path()).size(), 1u);
  reader->reset();
  EXPECT_TRUE(FileNames(tmp.path()).empty());
}

// The one translation of RocksDB's statuses (tiers/disk_catalog_rocks.h): a missing file is
// IOError for the catalog, NotFound for the reader; the context and RocksDB's reason are kept.
TEST(DiskCatalogReaderTest, FromRocksKeepsTheContextAndMapsAMissingFilePerCaller) {
  const rocksdb::Status missing = rocksdb::Status::PathNotFound("/c/000012.sst");
  const Status for_catalog = FromRocks(missing, "catalog '/c': scan");
  EXPECT_TRUE(for_catalog.IsIOError()) << for_catalog.ToString();
  EXPECT_NE(for_catalog.message().find("catalog '/c': scan: "), std::string::npos);
  EXPECT_NE(for_catalog.message().find("/c/000012.sst"), std::string::npos);
  const Status for_reader = FromRocks(missing, "catalog '/c': scan", MissingCatalogFile::kNotFound);
  EXPECT_TRUE(for_reader.IsNotFound()) << for_reader.ToString();
  EXPECT_TRUE(FromRocks(rocksdb::Status::NotFound("k"), "x").IsNotFound());
  EXPECT_TRUE(FromRocks(rocksdb::Status::Corruption("bad block"), "x").IsCorruption());
  EXPECT_TRUE(FromRocks(rocksdb::Status::NoSpace("full"), "x").IsIOError());
  EXPECT_TRUE(
      FromRocks(rocksdb::Status::IOError("eio"), "x", MissingCatalogFile::kNotFound).IsIOError());
  EXPECT_TRUE(FromRocks(rocksdb::Status::OK(), "x").ok());
}

TEST(DiskCatalogReaderTest, ACatalogWithoutMetaReadsAsNone) {
  TempDir dir, tmp;
  ScopedTmpDir scoped(tmp.str());
  const std::string path = (dir.path() / "catalog").string();
  { ASSERT_TRUE(DiskCatalog::Open(path, false).ok()); }
  auto reader = DiskCatalogReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto meta = (*reader)->ReadMeta();
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_FALSE(meta->has_value());
}

// A catalog folder's path in a fresh folder; the reader's secondary under a TMPDIR of its own.
class CatalogFolderTest : public ::testing::Test {
 protected:
  // An empty catalog (no meta entry) at path_, closed again: its LOCK file stays, unlocked.
  void MakeClosedCatalog() { ASSERT_TRUE(DiskCatalog::Open(path_, false).ok()); }

  TempDir dir_, tmp_;
  ScopedTmpDir scoped_{tmp_.str()};
  const std::string path_ = (dir_.path() / "catalog").string();
};

// The rule the reader's Open applies first, for callers that tell "no database" apart.
TEST_F(CatalogFolderTest, MissingDatabaseIsToldWithoutOpening) {
  const std::string& path = path_;
  EXPECT_EQ(MissingCatalogDatabase(path), "its CURRENT file is missing");  // no folder
  std::filesystem::create_directories(path);
  EXPECT_EQ(MissingCatalogDatabase(path), "its CURRENT file is missing");  // an empty folder
  auto reader = DiskCatalogReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_TRUE(reader.status().IsNotFound()) << reader.status().ToString();
  EXPECT_NE(reader.status().message().find("its CURRENT file is missing"), std::string::npos)
      << reader.status().ToString();
  MakeClosedCatalog();
  EXPECT_EQ(MissingCatalogDatabase(path), std::nullopt);
}

// Another process holding the catalog's lock (as a running store's RocksDB does: a POSIX write
// lock on LOCK) is named by its pid while it holds it, and no longer once it lets go. The child
// takes the lock with fcntl alone: a forked child must not start RocksDB's thread pools.
TEST_F(CatalogFolderTest, HolderPidNamesTheProcessHoldingTheCatalog) {
  MakeClosedCatalog();
  auto reader = DiskCatalogReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->HolderPid(), std::nullopt);

  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const std::string lock_file = path_ + "/LOCK";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    ::close(release[1]);
    const int fd = ::open(lock_file.c_str(), O_RDWR);
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    const bool locked = fd >= 0 && ::fcntl(fd, F_SETLK, &lock) == 0;
    const char byte = locked ? 'y' : 'n';
    if (::write(ready[1], &byte, 1) != 1) ::_exit(2);
    char ignored;
    (void)!::read(release[0], &ignored, 1);  // until the parent closes its end
    ::_exit(locked ? 0 : 1);
  }
  ::close(ready[1]);
  ::close(release[0]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  EXPECT_EQ(byte, 'y') << "the child could not lock " << lock_file;
  EXPECT_EQ((*reader)->HolderPid(), std::optional<int>(child));
  ::close(release[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(ready[0]);
  EXPECT_EQ((*reader)->HolderPid(), std::nullopt);
}

}  // namespace
}  // namespace cachepawl
