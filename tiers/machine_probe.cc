#include "tiers/machine_probe.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

namespace cachepawl {
namespace {

std::optional<std::string> ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// "MemTotal:  131072 kB" -> bytes; "HugePages_Total: 4" -> 4 (no unit).
std::optional<uint64_t> MeminfoField(const std::string& name) {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, name.size() + 1, name + ":") != 0) continue;
    std::istringstream fields(line.substr(name.size() + 1));
    uint64_t value = 0;
    std::string unit;
    if (!(fields >> value)) return std::nullopt;
    fields >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

std::optional<uint64_t> Limit(rlim_t v) {
  if (v == RLIM_INFINITY) return std::nullopt;
  return static_cast<uint64_t>(v);
}

// cgroup v2: "0::/some/path" in /proc/self/cgroup; v1: the memory controller's line.
void ProbeCgroupMemory(PinnedMemoryLimits* out) {
  std::ifstream in("/proc/self/cgroup");
  std::string v2_path;
  std::string v1_path;
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':');
    const size_t b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
    if (controllers.find("memory") != std::string::npos) v1_path = path;
  }
  const std::pair<std::string, bool> candidates[] = {
      {"/sys/fs/cgroup" + v2_path + "/memory.max", true},
      {"/sys/fs/cgroup/memory.max", true},
      {"/sys/fs/cgroup/memory" + v1_path + "/memory.limit_in_bytes", false},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", false}};
  for (const auto& [file, v2] : candidates) {
    auto line = ReadFirstLine(file);
    if (!line) continue;
    out->cgroup_file = file;
    if (*line == "max") return;  // v2: unlimited
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(line->c_str(), &end, 10);
    if (errno != 0 || end == line->c_str()) continue;
    // v1 reports "unlimited" as a page-rounded LONG_MAX.
    if (!v2 && v >= (1ull << 62)) return;
    out->cgroup_memory_max_bytes = v;
    // What the cgroup already uses, less the page cache it would drop first (inactive_file, as
    // `docker stats` counts): usage counts the cache, which a new allocation reclaims.
    const std::string folder = file.substr(0, file.rfind('/') + 1);
    const auto used = ReadFirstLine(folder + (v2 ? "memory.current" : "memory.usage_in_bytes"));
    if (!used) return;
    errno = 0;
    unsigned long long u = std::strtoull(used->c_str(), &end, 10);
    if (errno != 0 || end == used->c_str()) return;
    std::ifstream stat(folder + "memory.stat");
    const std::string inactive = v2 ? "inactive_file" : "total_inactive_file";
    for (std::string name; stat >> name;) {
      unsigned long long bytes = 0;
      if (!(stat >> bytes)) break;
      if (name == inactive) u -= std::min<unsigned long long>(u, bytes);
    }
    out->cgroup_memory_current_bytes = u;
    return;
  }
}

std::string FileSystemName(long magic) {
  switch (static_cast<unsigned long>(magic)) {
    case 0xEF53:
      return "ext2/3/4";
    case 0x58465342:
      return "xfs";
    case 0x01021994:
      return "tmpfs";
    case 0x858458F6:
      return "ramfs";
    case 0x794C7630:
      return "overlay";
    case 0x9123683E:
      return "btrfs";
    case 0x6969:
      return "nfs";
    case 0x2FC12FC1:
      return "zfs";
    case 0xF2F52010:
      return "f2fs";
    case 0x65735546:
      return "fuse";
    default: {
      std::ostringstream o;
      o << "0x" << std::hex << static_cast<unsigned long>(magic);
      return o.str();
    }
  }
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// Writes 4 KiB with O_DIRECT into a new temporary file of `dir`, reads it back, compares, and
// removes the file. Empty on success, else why it failed.
std::string TryDirectIo(const std::string& dir) {
  std::string path = dir + "/.cachepawl-info-XXXXXX";
  const int tmp = mkstemp(path.data());
  if (tmp < 0) return std::string("cannot create a file here: ") + std::strerror(errno);
  close(tmp);
  const int fd = open(path.c_str(), O_RDWR | O_DIRECT);
  if (fd < 0) {
    const int err = errno;
    unlink(path.c_str());
    return std::string("open(O_DIRECT): ") + std::strerror(err);
  }
  constexpr size_t kBytes = 4096;
  void* raw_in = nullptr;
  void* raw_out = nullptr;
  if (posix_memalign(&raw_in, kBytes, kBytes) != 0 || posix_memalign(&raw_out, kBytes, kBytes)) {
    std::free(raw_in);
    close(fd);
    unlink(path.c_str());
    return "posix_memalign failed";
  }
  std::unique_ptr<void, AlignedFree> in(raw_in), out(raw_out);
  auto* bytes = static_cast<unsigned char*>(in.get());
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  std::memset(out.get(), 0, kBytes);
  std::string error;
  if (pwrite(fd, in.get(), kBytes, 0) != static_cast<ssize_t>(kBytes)) {
    error = std::string("pwrite(O_DIRECT): ") + std::strerror(errno);
  } else if (pread(fd, out.get(), kBytes, 0) != static_cast<ssize_t>(kBytes)) {
    error = std::string("pread(O_DIRECT): ") + std::strerror(errno);
  } else if (std::memcmp(in.get(), out.get(), kBytes) != 0) {
    error = "O_DIRECT read back other bytes than written";
  }
  close(fd);
  unlink(path.c_str());
  return error;
}

}  // namespace

PinnedMemoryLimits ProbePinnedMemory() {
  PinnedMemoryLimits out;
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0) {
    out.memlock_soft_bytes = Limit(lim.rlim_cur);
    out.memlock_hard_bytes = Limit(lim.rlim_max);
  }
  ProbeCgroupMemory(&out);
  out.mem_total_bytes = MeminfoField("MemTotal").value_or(0);
  out.mem_available_bytes = MeminfoField("MemAvailable").value_or(0);
  return out;
}

namespace {

uint64_t Headroom(uint64_t mem_total) {
  return std::min<uint64_t>(uint64_t{1} << 30, mem_total / 16);
}

std::string Gib(uint64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

}  // namespace

std::optional<uint64_t> TakeableMemoryBytes(const PinnedMemoryLimits& limits) {
  if (limits.mem_total_bytes == 0 || limits.mem_available_bytes == 0) return std::nullopt;
  uint64_t available = limits.mem_available_bytes;
  if (limits.cgroup_memory_max_bytes) {
    const uint64_t max = *limits.cgroup_memory_max_bytes;
    const uint64_t used = std::min(max, limits.cgroup_memory_current_bytes.value_or(0));
    available = std::min(available, max - used);
  }
  const uint64_t headroom = Headroom(limits.mem_total_bytes);
  return available > headroom ? available - headroom : 0;
}

Status CheckTakeableMemory(std::string_view what, uint64_t bytes, const PinnedMemoryLimits& limits,
                           std::string_view advice) {
  const std::optional<uint64_t> takeable = TakeableMemoryBytes(limits);
  if (!takeable || bytes <= *takeable) return Status::OK();
  std::string message(what);
  message.append(": ").append(Gib(bytes)).append(" (").append(std::to_string(bytes));
  message.append(" bytes) is more memory than this machine offers: MemAvailable ");
  message.append(Gib(limits.mem_available_bytes)).append(" of MemTotal ");
  message.append(Gib(limits.mem_total_bytes));
  if (limits.cgroup_memory_max_bytes) {
    message.append(", cgroup memory.max ").append(Gib(*limits.cgroup_memory_max_bytes));
    if (limits.cgroup_memory_current_bytes) {
      message.append(" (").append(Gib(*limits.cgroup_memory_current_bytes)).append(" used)");
    }
  }
  message.append(", less ").append(Gib(Headroom(limits.mem_total_bytes)));
  message.append(" of headroom, leaves ").append(Gib(*takeable)).append("; ");
  message.append(advice);
  return Status::InvalidArgument(message);
}

HugePages ProbeHugePages() {
  HugePages out;
  out.page_bytes = MeminfoField("Hugepagesize").value_or(0);
  out.total = MeminfoField("HugePages_Total").value_or(0);
  out.free = MeminfoField("HugePages_Free").value_or(0);
  out.transparent = ReadFirstLine("/sys/kernel/mm/transparent_hugepage/enabled").value_or("");
  return out;
}

DirectoryProbe ProbeDirectory(const std::string& path) {
  DirectoryProbe out;
  out.path = path;
  struct statfs fs {};
  struct statvfs vfs {};
  if (statfs(path.c_str(), &fs) != 0 || statvfs(path.c_str(), &vfs) != 0) {
    out.error = "--dir " + path + ": " + std::strerror(errno);
    return out;
  }
  out.file_system = FileSystemName(static_cast<long>(fs.f_type));
  out.total_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  out.free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  out.error = TryDirectIo(path);
  out.o_direct = out.error.empty();
  return out;
}

IoUringProbe ProbeIoUring() {
  IoUringProbe out;
  utsname u{};
  if (uname(&u) == 0) out.kernel = u.release;
  io_uring ring{};
  const int ret = io_uring_queue_init(4, &ring, 0);
  if (ret < 0) {
    out.error = std::string("io_uring_queue_init: ") + std::strerror(-ret);
    return out;
  }
  io_uring_queue_exit(&ring);
  out.available = true;
  return out;
}

int PcieGenerationFromSpeed(const std::string& speed) {
  const std::pair<const char*, int> table[] = {{"2.5 GT/s", 1},  {"5.0 GT/s", 2},  {"5 GT/s", 2},
                                               {"8.0 GT/s", 3},  {"8 GT/s", 3},    {"16.0 GT/s", 4},
                                               {"16 GT/s", 4},   {"32.0 GT/s", 5}, {"32 GT/s", 5},
                                               {"64.0 GT/s", 6}, {"64 GT/s", 6}};
  for (const auto& [prefix, gen] : table) {
    if (speed.compare(0, std::strlen(prefix), prefix) == 0) return gen;
  }
  return 0;
}

std::optional<PcieLink> ProbePcieLink(const std::string& pci_bus_id) {
  if (pci_bus_id.empty() || pci_bus_id.find('/') != std::string::npos) return std::nullopt;
  const std::string dir = "/sys/bus/pci/devices/" + pci_bus_id + "/";
  auto speed = ReadFirstLine(dir + "current_link_speed");
  auto width = ReadFirstLine(dir + "current_link_width");
  if (!speed || !width) return std::nullopt;
  PcieLink link;
  link.speed = *speed;
  link.generation = PcieGenerationFromSpeed(*speed);
  link.width = std::atoi(width->c_str());
  if (auto s = ReadFirstLine(dir + "max_link_speed"))
    link.max_generation = PcieGenerationFromSpeed(*s);
  if (auto w = ReadFirstLine(dir + "max_link_width")) link.max_width = std::atoi(w->c_str());
  return link;
}

}  // namespace cachepawl
