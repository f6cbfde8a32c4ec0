// DiskDataFiles: the disk tier's data files (one per drive to stripe records across drives).
//
// Each file is created with mode 0600 (its missing folders 0700; an existing file is made 0600),
// opened O_DIRECT, and preallocated with fallocate to its share of the capacity. A file system that
// rejects O_DIRECT (some tmpfs, FUSE and network file systems) gets an Unavailable error naming the
// file.
//
// Thread safety: the object is immutable after Open; fds may be used from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "store/vocab/status.h"

namespace cachepawl {

inline constexpr char kDataFileName[] = "cachepawl.data";

class DiskDataFiles {
 public:
  // What Open found of one file before it (re)sized it.
  struct FileReport {
    bool created = false;     // the file did not exist
    uint64_t size_found = 0;  // bytes it had (0 when created)
  };

  // Opens or creates the files `paths`, each sized to `bytes_per_file` (a 4 KiB multiple): a
  // shorter file is extended (fallocate), a longer one truncated. Errors name the file:
  // Unavailable (no O_DIRECT), NoSpace (fallocate: ENOSPC), IOError (anything else),
  // InvalidArgument (not a regular file).
  static StatusOr<std::unique_ptr<DiskDataFiles>> Open(const std::vector<std::string>& paths,
                                                       uint64_t bytes_per_file,
                                                       std::vector<FileReport>* reports);
  ~DiskDataFiles();
  DiskDataFiles(const DiskDataFiles&) = delete;
  DiskDataFiles& operator=(const DiskDataFiles&) = delete;

  size_t size() const { return fds_.size(); }
  int fd(size_t file) const { return fds_[file]; }
  const std::string& path(size_t file) const { return paths_[file]; }
  uint64_t bytes_per_file() const { return bytes_per_file_; }

 private:
  DiskDataFiles() = default;
  std::vector<int> fds_;
  std::vector<std::string> paths_;
  uint64_t bytes_per_file_ = 0;
};

// Creates `dir` and its missing parents; the folders it creates get mode 0700 exactly (whatever
// the umask). OK when it exists already as a folder. `created`: whether `dir` itself was made.
Status CreateFolder(const std::string& dir, bool* created = nullptr);

// Who a folder the store uses belongs to.
enum class FolderOwner {
  kUser,   // named by the user (disk.dir, a data file's folder): an existing one is left as it
           // is, with a warning logged when group or other users may read or enter it
  kStore,  // only the store's (the catalog's): an existing one is made 0700 and the files in
           // it 0600 (a folder an older version left 0755)
};
// CreateFolder(dir), then the rule of `owner` for a folder that existed. `field` names the
// option in messages ("disk.dir").
Status PrepareFolder(const std::string& dir, FolderOwner owner, const std::string& field);

// One owner per store folder: an exclusive flock on `dir`/OWNER (mode 0600, holding the owner's
// pid), kept until the object is destroyed. A second holder, in another process or another
// Store of the same process (flock locks belong to an open file), is refused, so that no one
// reads, writes or wipes a folder a live store is using.
class FolderOwnerLock {
 public:
  // Busy naming the folder and the holder's pid when another holder has it; the errno
  // otherwise.
  static StatusOr<std::unique_ptr<FolderOwnerLock>> Acquire(const std::string& dir);
  ~FolderOwnerLock();
  FolderOwnerLock(const FolderOwnerLock&) = delete;
  FolderOwnerLock& operator=(const FolderOwnerLock&) = delete;

 private:
  explicit FolderOwnerLock(int fd) : fd_(fd) {}
  int fd_;
};

inline constexpr char kOwnerFileName[] = "OWNER";

}  // namespace cachepawl
