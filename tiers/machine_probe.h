// Machine probes: what this machine offers the host and disk tiers, read from the kernel, for
// `cachepawl info` and for engineers sizing a deployment. Nothing here changes the machine
// except ProbeDirectory, which writes and removes one 4 KiB file in the folder it is given.
//
// Every probe answers; what it could not learn is left empty / nullopt with the reason in an
// `error` field (a probe never fails the caller: a container without cgroup files or a kernel
// without io_uring is information, not an error).
//
// Thread safety: the functions are independent and may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "vocab/status.h"

namespace cachepawl {

// How much memory may be pinned (registered with the GPU driver): RLIMIT_MEMLOCK and the
// memory limit of this process's cgroup. nullopt means unlimited.
struct PinnedMemoryLimits {
  std::optional<uint64_t> memlock_soft_bytes;
  std::optional<uint64_t> memlock_hard_bytes;
  std::optional<uint64_t> cgroup_memory_max_bytes;
  // With a limit: what the cgroup uses (memory.current / usage_in_bytes) less its inactive page
  // cache (memory.stat inactive_file), which an allocation would reclaim first.
  std::optional<uint64_t> cgroup_memory_current_bytes;
  std::string cgroup_file;           // the file the cgroup limit came from ("" when none was found)
  uint64_t mem_total_bytes = 0;      // /proc/meminfo MemTotal
  uint64_t mem_available_bytes = 0;  // /proc/meminfo MemAvailable
};
PinnedMemoryLimits ProbePinnedMemory();

// What a process may take for memory it faults in and keeps (a pinned host tier, a CPU-mode
// device pool): MemAvailable, or what the cgroup's limit leaves (memory.max less memory.current)
// when lower, less headroom for the rest of the machine (1 GiB, or 1/16 of MemTotal on machines
// under 16 GiB). nullopt when /proc/meminfo could not be read (then nothing is known and nothing
// is refused).
std::optional<uint64_t> TakeableMemoryBytes(const PinnedMemoryLimits& limits);

// OK when `bytes` fit TakeableMemoryBytes(limits) (or it is unknown); else InvalidArgument
// "<what>: 64.0 GiB (68719476736 bytes) is more memory than this machine offers: MemAvailable
// 23.0 GiB of MemTotal 24.0 GiB[, cgroup memory.max M (N used)], less 1.0 GiB of headroom,
// leaves 22.0 GiB; <advice>". `what` names the option(s) that ask for it, e.g.
// "StoreOptions.host_bytes". Pure: the probe is the caller's.
[[nodiscard]] Status CheckTakeableMemory(std::string_view what, uint64_t bytes,
                                         const PinnedMemoryLimits& limits, std::string_view advice);

// Huge pages (/proc/meminfo and transparent huge pages' mode).
struct HugePages {
  uint64_t page_bytes = 0;  // Hugepagesize
  uint64_t total = 0;       // HugePages_Total
  uint64_t free = 0;        // HugePages_Free
  std::string transparent;  // /sys/kernel/mm/transparent_hugepage/enabled, e.g. "[madvise]"
};
HugePages ProbeHugePages();

// The folder a disk tier would use.
struct DirectoryProbe {
  std::string path;
  std::string file_system;  // "ext4", "xfs", "tmpfs", "overlay", ... or "0x<magic>"
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;  // available to this user
  bool o_direct = false;    // a 4 KiB O_DIRECT write and read back of a temporary file worked
  std::string error;        // why o_direct is false, or why the folder could not be probed
};
DirectoryProbe ProbeDirectory(const std::string& path);

// io_uring: whether a ring can be set up here (kernels, seccomp profiles and containers may
// forbid it), and the kernel release.
struct IoUringProbe {
  bool available = false;
  std::string error;
  std::string kernel;  // uname -r
};
IoUringProbe ProbeIoUring();

// The PCIe link of a PCI device (sysfs current_/max_link_speed and _width).
struct PcieLink {
  int generation = 0;      // from the speed: 2.5 GT/s = 1 ... 32 GT/s = 5, 64 GT/s = 6
  int width = 0;           // lanes
  int max_generation = 0;  // what the device and slot could do
  int max_width = 0;
  std::string speed;  // as sysfs says it, e.g. "32.0 GT/s PCIe"
};
// nullopt when sysfs has no such device (e.g. in some containers) or no link files.
std::optional<PcieLink> ProbePcieLink(const std::string& pci_bus_id);

// "32.0 GT/s PCIe" -> 5; 0 when not recognised.
int PcieGenerationFromSpeed(const std::string& speed);

}  // namespace cachepawl
