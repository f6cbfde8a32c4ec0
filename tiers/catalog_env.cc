#include "tiers/catalog_env.h"

#include <fcntl.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace cachepawl {
namespace {

constexpr mode_t kFileMode = 0600;
constexpr mode_t kFolderMode = 0700;

rocksdb::IOStatus FromErrno(const std::string& what, const std::string& path, int err) {
  std::string msg = what;
  msg += " '";
  msg += path;
  msg += "': ";
  msg += std::strerror(err);
  return err == ENOSPC ? rocksdb::IOStatus::NoSpace(msg) : rocksdb::IOStatus::IOError(msg);
}

// RocksDB 7.8's POSIX file system opens the files it creates with mode 0644 (its
// allow_non_owner_access_ is always true: Env::SetAllowNonOwnerAccess sets a flag of the Env
// that the file system never reads) and creates folders 0755. Chmod after RocksDB created a file
// would leave a moment where another user can open it; instead the file is created here first,
// with mode 0600, and RocksDB then opens the existing file (O_CREAT and O_TRUNC keep its mode):
// there is no moment where it is readable by others. fchmod makes the mode exact under any umask
// and tightens a file an older version left 0644. Costs one open and close per file created
// (RocksDB creates few: one per WAL, SST, MANIFEST...).
rocksdb::IOStatus CreatePrivateFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, kFileMode);
  if (fd < 0) return FromErrno("creating catalog file", path, errno);
  const int err = ::fchmod(fd, kFileMode) == 0 ? 0 : errno;
  ::close(fd);
  if (err != 0) return FromErrno("chmod 0600 of catalog file", path, err);
  return rocksdb::IOStatus::OK();
}

// mkdir with mode 0700, then chmod: the umask can only remove bits, and must not remove the
// owner's. Nothing is inside the folder before the chmod.
rocksdb::IOStatus CreatePrivateFolder(const std::string& path, bool exists_ok) {
  if (::mkdir(path.c_str(), kFolderMode) != 0) {
    const int err = errno;
    struct stat st;
    if (err == EEXIST && exists_ok && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      return rocksdb::IOStatus::OK();
    }
    return FromErrno("creating catalog folder", path, err);
  }
  if (::chmod(path.c_str(), kFolderMode) != 0) {
    return FromErrno("chmod 0700 of catalog folder", path, errno);
  }
  return rocksdb::IOStatus::OK();
}

class PrivateFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  PrivateFileSystem() : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "CachepawlPrivateFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = CreatePrivateFile(f);
    return s.ok() ? target()->NewWritableFile(f, o, r, dbg) : s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = CreatePrivateFile(f);
    return s.ok() ? target()->ReopenWritableFile(f, o, r, dbg) : s;
  }
  // Renames an old file of ours (created 0600) to `f`; the chmod tightens one an older version
  // left 0644 (inside the 0700 folder, so no one else could reach it meanwhile).
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->ReuseWritableFile(f, old, o, r, dbg);
    if (s.ok() && ::chmod(f.c_str(), kFileMode) != 0) {
      return FromErrno("chmod 0600 of catalog file", f, errno);
    }
    return s;
  }
  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o,
                             rocksdb::FileLock** l, rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = CreatePrivateFile(f);
    return s.ok() ? target()->LockFile(f, o, l, dbg) : s;
  }
  rocksdb::IOStatus CreateDir(const std::string& d, const rocksdb::IOOptions&,
                              rocksdb::IODebugContext*) override {
    return CreatePrivateFolder(d, /*exists_ok=*/false);
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& d, const rocksdb::IOOptions&,
                                       rocksdb::IODebugContext*) override {
    return CreatePrivateFolder(d, /*exists_ok=*/true);
  }
  // The POSIX file system's NewLogger is FileSystem's: it would create the file through the
  // POSIX NewWritableFile, not ours. FileSystem's implementation called on this object creates
  // it through NewWritableFile above. (The catalog sets its own logger, CatalogLogger(); this
  // covers a RocksDB that opens a file logger anyway.)
  rocksdb::IOStatus NewLogger(const std::string& f, const rocksdb::IOOptions& o,
                              std::shared_ptr<rocksdb::Logger>* r,
                              rocksdb::IODebugContext* dbg) override {
    return rocksdb::FileSystem::NewLogger(f, o, r, dbg);
  }
};

class SpdlogLogger final : public rocksdb::Logger {
 public:
  explicit SpdlogLogger(std::string dir)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), dir_(std::move(dir)) {}

  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::WARN_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
    char line[1024];
    va_list copy;
    va_copy(copy, ap);
    std::vsnprintf(line, sizeof(line), format, copy);
    va_end(copy);
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) {
      spdlog::error("catalog '{}': rocksdb: {}", dir_, line);
    } else {
      spdlog::warn("catalog '{}': rocksdb: {}", dir_, line);
    }
  }

 private:
  const std::string dir_;
};

}  // namespace

rocksdb::Env* CatalogEnv() {
  static rocksdb::Env* const env =
      rocksdb::NewCompositeEnv(std::make_shared<PrivateFileSystem>()).release();
  return env;
}

std::shared_ptr<rocksdb::Logger> CatalogLogger(const std::string& dir) {
  return std::make_shared<SpdlogLogger>(dir);
}

}  // namespace cachepawl
