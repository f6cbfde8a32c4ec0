#include "tiers/disk_data_files.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "tiers/disk_folders.h"

namespace cachepawl {

DiskDataFiles::~DiskDataFiles() {
  for (int fd : fds_) ::close(fd);
}

StatusOr<std::unique_ptr<DiskDataFiles>> DiskDataFiles::Open(const std::vector<std::string>& paths,
                                                             uint64_t bytes_per_file,
                                                             std::vector<FileReport>* reports) {
  std::unique_ptr<DiskDataFiles> files(new DiskDataFiles());
  files->bytes_per_file_ = bytes_per_file;
  reports->clear();
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& path = paths[i];
    const std::string where = "data file '" + path + "'";
    const std::string folder = std::filesystem::path(path).parent_path().string();
    if (!folder.empty()) CACHEPAWL_RETURN_IF_ERROR(CreateFolder(folder).WithContext(where));
    FileReport report;
    struct stat st;
    report.created = ::stat(path.c_str(), &st) != 0;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int err = errno;
      if (err == EINVAL) {
        return Status::Unavailable(where +
                                   ": the file system does not support O_DIRECT (tmpfs? use a "
                                   "folder on a local disk)");
      }
      return Status::FromErrno(where + ": open", err);
    }
    files->fds_.push_back(fd);
    files->paths_.push_back(path);
    if (::fstat(fd, &st) != 0) return Status::FromErrno(where + ": fstat", errno);
    if (!S_ISREG(st.st_mode)) {
      return Status::InvalidArgument(where + ": not a regular file");
    }
    // The store's file: private even when an older version or a user made it readable.
    if ((st.st_mode & 077) != 0 && ::fchmod(fd, 0600) != 0) {
      return Status::FromErrno(where + ": chmod 0600", errno);
    }
    report.size_found = static_cast<uint64_t>(st.st_size);
    if (report.size_found > bytes_per_file &&
        ::ftruncate(fd, static_cast<off_t>(bytes_per_file)) != 0) {
      return Status::FromErrno(where + ": truncate", errno);
    }
    if (bytes_per_file > 0) {
      const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_per_file));
      if (err != 0) {
        // Give back what a partial preallocation took (some file systems keep it), and the
        // file when this call made it: a refused open leaves the drive as it found it.
        if (report.created) {
          ::unlink(path.c_str());
        } else if (const uint64_t had = std::min(report.size_found, bytes_per_file);
                   ::ftruncate(fd, static_cast<off_t>(had)) != 0) {
          spdlog::warn("{}: cannot truncate back to {} bytes after a failed preallocation", where,
                       had);
        }
      }
      if (err == ENOSPC || err == EFBIG) {
        struct statvfs vfs;
        std::string free_text;
        if (::fstatvfs(fd, &vfs) == 0) {
          free_text = ", " + std::to_string(uint64_t{vfs.f_bavail} * vfs.f_frsize) +
                      " bytes free on its file system";
        }
        return Status::NoSpace(where + ": cannot preallocate " + std::to_string(bytes_per_file) +
                               " bytes (" + (err == ENOSPC ? "ENOSPC" : "EFBIG") + free_text +
                               "): lower capacity_bytes (disk_bytes) or free the drive");
      }
      if (err != 0) return Status::FromErrno(where + ": preallocate", err);
    }
    // Probe that O_DIRECT I/O really works here (some file systems accept the flag at open and
    // fail every read).
    void* probe = nullptr;
    if (::posix_memalign(&probe, 4096, 4096) != 0) return Status::Internal("posix_memalign");
    const ssize_t got = bytes_per_file >= 4096 ? ::pread(fd, probe, 4096, 0) : 4096;
    const int probe_err = errno;
    std::free(probe);
    if (got < 0) {
      if (probe_err == EINVAL) {
        return Status::Unavailable(where + ": the file system rejects O_DIRECT reads");
      }
      return Status::FromErrno(where + ": probe read", probe_err);
    }
    reports->push_back(report);
  }
  return files;
}

}  // namespace cachepawl
