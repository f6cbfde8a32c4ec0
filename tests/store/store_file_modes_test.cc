// Files are private: every file the store creates (data files, OWNER, and every RocksDB file of
// the catalog) is mode 0600 and every folder it creates 0700, whatever the umask; an existing
// folder the user gave is left as it is, with a warning when others may enter it; the catalog
// folder (the store's own) is tightened.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "store/store.h"
#include "tests/store/store_test_checks.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

namespace fs = std::filesystem;

// Sets the process umask for the scope of the test.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

// Every path under `root` whose mode is not 0600 (files) or 0700 (folders), with its mode.
std::string Offenders(const fs::path& root, std::map<std::string, int>* names) {
  std::string out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    struct stat st;
    if (::lstat(e.path().c_str(), &st) != 0) {
      out += "  " + e.path().string() + ": lstat failed\n";
      continue;
    }
    const mode_t perm = st.st_mode & 07777;
    const bool dir = S_ISDIR(st.st_mode);
    if (perm != (dir ? 0700 : 0600) || !(dir || S_ISREG(st.st_mode))) {
      char mode[16];
      std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(perm));
      out += "  " + e.path().string() + (dir ? " (folder)" : "") + ": mode " + mode + "\n";
    }
    if (!dir) {
      // RocksDB's file kinds: 000012.sst -> ".sst", MANIFEST-000005 -> "MANIFEST".
      const std::string name = e.path().filename().string();
      const std::string ext = e.path().extension().string();
      const size_t dash = name.find('-');
      ++(*names)[!ext.empty() ? ext : dash != std::string::npos ? name.substr(0, dash) : name];
    }
  }
  return out;
}

class StoreFileModesTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(StoreFileModesTest, EveryFileIs0600AndEveryFolder0700UnderUmaskZero) {
  ScopedUmask umask0(0);
  const fs::path root = dir_.path() / "root";  // made by the store, with its parents
  StoreOptions o =
      CpuStoreOptions(TinyHybrid(), 16 * 8192, 4 << 20, 8 << 20, (root / "a" / "disk").string());
  o.disk_data_paths = {(root / "d0" / "data").string(), (root / "d1" / "x" / "data").string()};
  // Two sessions: the second open replays the first's log into an SST file and starts a new
  // log, MANIFEST and OPTIONS file.
  for (int session = 0; session < 2; ++session) {
    auto store = Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int p = 0; p < 12; ++p) {
      SaveAll(store->get(), "", Tokens(1000 * (session * 100 + p + 1), 4 * 4), true);
    }
    ASSERT_TRUE((*store)->Close().ok());
  }
  std::map<std::string, int> names;
  const std::string offenders = Offenders(root, &names);
  EXPECT_TRUE(offenders.empty()) << "files not 0600 / folders not 0700 under umask 0:\n"
                                 << offenders;
  // The walk saw every kind of file the store makes (else it checked less than it claims).
  for (const char* kind :
       {".sst", ".log", "MANIFEST", "CURRENT", "IDENTITY", "LOCK", "OPTIONS", "OWNER", "data"}) {
    EXPECT_GT(names[kind], 0) << "no " << kind << " file under " << root;
  }
  EXPECT_EQ(names.count("LOG"), 0u) << "the catalog writes no LOG file (catalog_env.h)";
}

TEST_F(StoreFileModesTest, DefaultDataFileAndOwnerAre0600) {
  ScopedUmask umask0(0);
  const fs::path disk = dir_.path() / "disk";
  auto store =
      Store::Open(CpuStoreOptions(TinyHybrid(), 16 * 8192, 4 << 20, 8 << 20, disk.string()));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  SaveAll(store->get(), "", Tokens(1, 4 * 2), true);
  ASSERT_TRUE((*store)->Close().ok());
  std::map<std::string, int> names;
  const std::string offenders = Offenders(disk, &names);
  EXPECT_TRUE(offenders.empty()) << offenders;
  EXPECT_EQ(names[".data"], 1);
  EXPECT_EQ(names["OWNER"], 1);
}

// A disk.dir the user made (0755) is theirs: left as it is, with a warning naming it. The
// catalog folder is the store's: one an older version left 0755 with 0644 files is tightened.
TEST_F(StoreFileModesTest, GivenFolderKeptWithAWarningCatalogFolderTightened) {
  ScopedUmask umask0(0);
  const fs::path disk = dir_.path() / "given";
  ASSERT_EQ(::mkdir(disk.c_str(), 0755), 0);
  const StoreOptions o = CpuStoreOptions(TinyHybrid(), 16 * 8192, 4 << 20, 8 << 20, disk.string());
  {
    auto store = Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    SaveAll(store->get(), "", Tokens(1, 4 * 2), true);
    ASSERT_TRUE((*store)->Close().ok());
  }
  // As an older version left it.
  ASSERT_EQ(::chmod((disk / "catalog").c_str(), 0755), 0);
  for (const auto& e : fs::directory_iterator(disk / "catalog")) {
    ASSERT_EQ(::chmod(e.path().c_str(), 0644), 0);
  }
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto old_logger = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  auto store = Store::Open(o);
  spdlog::set_default_logger(old_logger);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto m = (*store)->Lookup("", Tokens(1, 4 * 2));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->reusable_pages, 2u);
  EXPECT_TRUE(LoadAndVerify(store->get(), *m).ok());
  ASSERT_TRUE((*store)->Close().ok());

  struct stat st;
  ASSERT_EQ(::stat(disk.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "the user's folder was changed";
  bool warned = false;
  for (const std::string& line : sink->last_formatted()) {
    warned = warned ||
             (line.find("disk.dir '" + disk.string() + "' has mode 755") != std::string::npos &&
              line.find("warning") != std::string::npos);
  }
  EXPECT_TRUE(warned) << "no warning naming disk.dir and its mode";
  std::map<std::string, int> names;
  const std::string offenders = Offenders(disk / "catalog", &names);
  EXPECT_TRUE(offenders.empty()) << offenders;
  ASSERT_EQ(::stat((disk / "catalog").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

}  // namespace
}  // namespace cachepawl
