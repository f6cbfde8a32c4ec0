#include "tiers/pread_all.h"

#include <unistd.h>

#include <cerrno>
#include <string>

namespace cachepawl {

Status PreadAll(int fd, std::span<std::byte> out, uint64_t offset, std::string_view context) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(std::string(context) + ": pread", errno);
    if (n == 0) {
      return Status::IOError(std::string(context) + ": the file ends after " +
                             std::to_string(done) + " of " + std::to_string(out.size()) + " bytes");
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace cachepawl
