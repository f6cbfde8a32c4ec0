// The store's folders: creating them with mode 0700 (CreateFolder), the rule for one that existed
// (PrepareFolder: a user's folder is left as it is, the store's own is made private), and one
// owner per folder (FolderOwnerLock, an exclusive flock on its OWNER file).
//
// Thread safety: the functions may be called from any thread; a FolderOwnerLock is owned by one
// Store and destroyed once.
#pragma once

#include <memory>
#include <string>

#include "vocab/status.h"

namespace cachepawl {

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
