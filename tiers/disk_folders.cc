#include "tiers/disk_folders.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace cachepawl {

Status CreateFolder(const std::string& dir, bool* created) {
  if (created != nullptr) *created = false;
  if (dir.empty()) return Status::InvalidArgument("folder path is empty");
  std::filesystem::path p(dir);
  std::filesystem::path partial;
  for (const auto& part : p) {
    partial /= part;
    if (partial.empty() || partial == partial.root_path()) continue;
    if (::mkdir(partial.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;
      return Status::FromErrno("creating folder '" + partial.string() + "'", errno);
    }
    // The umask can only remove bits (and must not remove the owner's): make it exact.
    if (::chmod(partial.c_str(), 0700) != 0) {
      return Status::FromErrno("chmod 0700 of folder '" + partial.string() + "'", errno);
    }
    if (created != nullptr) *created = true;  // the last part made is `dir` itself
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno("stat '" + dir + "'", errno);
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("'" + dir + "' exists and is not a folder");
  }
  return Status::OK();
}

Status PrepareFolder(const std::string& dir, FolderOwner owner, const std::string& field) {
  bool created = false;
  CACHEPAWL_RETURN_IF_ERROR(CreateFolder(dir, &created).WithContext(field));
  if (created) return Status::OK();
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(field + " '" + dir + "'", errno);
  const mode_t others = st.st_mode & 077;
  if (owner == FolderOwner::kUser) {
    if (others != 0) {
      spdlog::warn(
          "{} '{}' has mode {:o}: other users may list it (the store's files in it are 0600, "
          "but their names and sizes show); chmod 0700 it to keep the cache private",
          field, dir, st.st_mode & 07777);
    }
    return Status::OK();
  }
  if (others != 0 && ::chmod(dir.c_str(), st.st_mode & 0700) != 0) {
    return Status::FromErrno(field + " '" + dir + "': chmod 0700", errno);
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    struct stat fst;
    const std::string path = entry.path().string();
    if (::lstat(path.c_str(), &fst) != 0 || !S_ISREG(fst.st_mode) || (fst.st_mode & 077) == 0) {
      continue;
    }
    if (::chmod(path.c_str(), fst.st_mode & 0600) != 0) {
      return Status::FromErrno(field + " '" + dir + "': chmod 0600 of '" + path + "'", errno);
    }
  }
  if (ec) return Status::FromErrno(field + " '" + dir + "': listing", ec.value());
  return Status::OK();
}

StatusOr<std::unique_ptr<FolderOwnerLock>> FolderOwnerLock::Acquire(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kOwnerFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("owner file '" + path + "': open", errno);
  if (::fchmod(fd, 0600) != 0) {  // exact under any umask; tightens an older one
    const int err = errno;
    ::close(fd);
    return Status::FromErrno("owner file '" + path + "': chmod 0600", err);
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return Status::FromErrno("owner file '" + path + "': flock", err);
    std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string("?");
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return Status::Busy("disk.dir '" + dir + "': in use by another store (process " + holder +
                        " holds " + path +
                        "); a folder is opened by one Store of one process at a time");
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) < 0) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno("owner file '" + path + "': write", err);
  }
  return std::unique_ptr<FolderOwnerLock>(new FolderOwnerLock(fd));
}

FolderOwnerLock::~FolderOwnerLock() { ::close(fd_); }  // releases the flock

}  // namespace cachepawl
