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

#include "vocab/status.h"

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

}  // namespace cachepawl
