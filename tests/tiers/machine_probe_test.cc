// Machine probes on this machine: they answer without failing, the directory probe really
// writes and reads back with O_DIRECT (or says why not) and leaves nothing behind, and the PCIe
// speed table.
#include "tiers/machine_probe.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/common/test_util.h"

namespace cachepawl {
namespace {

TEST(MachineProbe, PcieGenerationFromSysfsSpeeds) {
  EXPECT_EQ(PcieGenerationFromSpeed("2.5 GT/s PCIe"), 1);
  EXPECT_EQ(PcieGenerationFromSpeed("5.0 GT/s PCIe"), 2);
  EXPECT_EQ(PcieGenerationFromSpeed("8.0 GT/s PCIe"), 3);
  EXPECT_EQ(PcieGenerationFromSpeed("16.0 GT/s PCIe"), 4);
  EXPECT_EQ(PcieGenerationFromSpeed("32.0 GT/s PCIe"), 5);
  EXPECT_EQ(PcieGenerationFromSpeed("64.0 GT/s PCIe"), 6);
  EXPECT_EQ(PcieGenerationFromSpeed("Unknown"), 0);
  EXPECT_EQ(PcieGenerationFromSpeed(""), 0);
}

TEST(MachineProbe, PcieLinkOfNoDeviceIsNullopt) {
  EXPECT_FALSE(ProbePcieLink("").has_value());
  EXPECT_FALSE(ProbePcieLink("../../etc").has_value());
  EXPECT_FALSE(ProbePcieLink("ffff:ff:1f.7").has_value());
}

TEST(MachineProbe, DirectoryProbeWritesReadsAndCleansUp) {
  testing::TempDir dir;
  const DirectoryProbe d = ProbeDirectory(dir.str());
  EXPECT_EQ(d.path, dir.str());
  EXPECT_FALSE(d.file_system.empty());
  EXPECT_GT(d.total_bytes, 0u);
  EXPECT_LE(d.free_bytes, d.total_bytes);
  // Either O_DIRECT worked or the probe says why (tmpfs refuses it, for example).
  EXPECT_EQ(d.o_direct, d.error.empty()) << d.error;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the probe left its file behind";
}

TEST(MachineProbe, DirectoryProbeOfAMissingFolderNamesIt) {
  testing::TempDir dir;
  const std::string missing = dir.str() + "/no-such-folder";
  const DirectoryProbe d = ProbeDirectory(missing);
  EXPECT_FALSE(d.o_direct);
  EXPECT_TRUE(d.file_system.empty());
  EXPECT_NE(d.error.find(missing), std::string::npos) << d.error;
}

TEST(MachineProbe, MemoryHugePagesAndIoUringAnswer) {
  const PinnedMemoryLimits pin = ProbePinnedMemory();
  EXPECT_GT(pin.mem_total_bytes, 0u);
  EXPECT_LE(pin.mem_available_bytes, pin.mem_total_bytes);
  if (pin.memlock_soft_bytes && pin.memlock_hard_bytes) {
    EXPECT_LE(*pin.memlock_soft_bytes, *pin.memlock_hard_bytes);
  }
  const HugePages huge = ProbeHugePages();
  EXPECT_LE(huge.free, huge.total);
  const IoUringProbe ring = ProbeIoUring();
  EXPECT_FALSE(ring.kernel.empty());
  EXPECT_EQ(ring.available, ring.error.empty()) << ring.error;
}

// What a store or bench may take: MemAvailable (or a lower cgroup limit) less the headroom, and
// the error naming what was asked, what the machine has and the advice.
TEST(MachineProbe, TakeableMemoryLeavesHeadroomAndNamesTheFigures) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  PinnedMemoryLimits m;
  EXPECT_EQ(TakeableMemoryBytes(m), std::nullopt);  // nothing known: nothing refused
  EXPECT_TRUE(CheckTakeableMemory("x", uint64_t{1} << 60, m, "").ok());
  m.mem_total_bytes = 24 * kGiB;
  m.mem_available_bytes = 23 * kGiB;
  EXPECT_EQ(TakeableMemoryBytes(m), 22 * kGiB);
  m.cgroup_memory_max_bytes = 10 * kGiB;
  m.cgroup_memory_current_bytes = 2 * kGiB;  // the cgroup's own use counts against its limit
  EXPECT_EQ(TakeableMemoryBytes(m), 7 * kGiB);
  EXPECT_TRUE(CheckTakeableMemory("StoreOptions.host_bytes", 7 * kGiB, m, "advice").ok());
  const Status s = CheckTakeableMemory("StoreOptions.host_bytes", 64 * kGiB, m, "lower it");
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(s.message(),
            "StoreOptions.host_bytes: 64.0 GiB (68719476736 bytes) is more memory than this "
            "machine offers: MemAvailable 23.0 GiB of MemTotal 24.0 GiB, cgroup memory.max 10.0 "
            "GiB (2.0 GiB used), less 1.0 GiB of headroom, leaves 7.0 GiB; lower it");
  // Small machines keep 1/16 of their memory; a machine with less free than that offers 0.
  PinnedMemoryLimits small;
  small.mem_total_bytes = 8 * kGiB;
  small.mem_available_bytes = kGiB / 4;
  EXPECT_EQ(TakeableMemoryBytes(small), 0u);
  small.mem_available_bytes = 4 * kGiB;
  EXPECT_EQ(TakeableMemoryBytes(small), 4 * kGiB - kGiB / 2);
}

}  // namespace
}  // namespace cachepawl
