// cachepawl info [--dir PATH] [--layout NAME|FILE [--page-size P] [--host-bytes B]
//                [--disk-bytes B] [--device-bytes B] [--track-interval P]] [--json]
// What the store would use on this machine: the GPUs (name, compute capability, VRAM total and
// free, PCIe link), how much host memory may be pinned (ulimit -l, the cgroup's limit), huge
// pages, io_uring, the file system of the disk tier's folder and whether O_DIRECT works there;
// and, for a layout, how many KV pages and Mamba states fit in the given tier sizes. Works
// without a GPU (and in a build without CUDA). Everything is read by library code
// (tiers/machine_probe.h, tiers/tier_capacity.h, cuda/gpu_runtime.h); this file prints it.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cuda/gpu_runtime.h"
#include "store/model_layout.h"
#include "tiers/machine_probe.h"
#include "tiers/tier_capacity.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "tools/human_bytes.h"
#include "tools/parse_bytes.h"

namespace cachepawl::tools {
namespace {

using nlohmann::json;

json OptionalBytes(const std::optional<uint64_t>& v) { return v ? json(*v) : json("unlimited"); }

std::string OptionalHuman(const std::optional<uint64_t>& v) {
  return v ? HumanBytes(*v) : std::string("unlimited");
}

json GpusJson(std::string* text) {
  json gpus = json::array();
  const int n = cuda::DeviceCount();
  *text += "GPUs:              " + std::to_string(n);
  if (n == 0) *text += " (" + cuda::DescribeDevice(0) + "; the store runs in CPU mode)";
  *text += "\n";
  for (int d = 0; d < n; ++d) {
    auto props = cuda::QueryDevice(d);
    if (!props.ok()) {
      gpus.push_back({{"index", d}, {"error", props.status().ToString()}});
      *text += "  [" + std::to_string(d) + "] " + props.status().ToString() + "\n";
      continue;
    }
    const cuda::GpuProperties& p = *props;
    json g = {{"index", d},
              {"name", p.name},
              {"compute_capability",
               std::to_string(p.compute_major) + "." + std::to_string(p.compute_minor)},
              {"sm_count", p.sm_count},
              {"vram_total_bytes", p.total_bytes},
              {"vram_free_bytes", p.free_bytes},
              {"pci_bus_id", p.pci_bus_id},
              {"driver_version", p.driver_version},
              {"runtime_version", p.runtime_version}};
    std::string line = "  [" + std::to_string(d) + "] " + p.name + "  sm_" +
                       std::to_string(p.compute_major) + std::to_string(p.compute_minor) + "  " +
                       std::to_string(p.sm_count) + " SMs  VRAM " + HumanBytes(p.total_bytes) +
                       " (" + HumanBytes(p.free_bytes) + " free)";
    if (auto link = ProbePcieLink(p.pci_bus_id)) {
      g["pcie"] = {{"generation", link->generation},
                   {"width", link->width},
                   {"max_generation", link->max_generation},
                   {"max_width", link->max_width},
                   {"speed", link->speed}};
      line += "  PCIe gen " + std::to_string(link->generation) + " x" +
              std::to_string(link->width) + " (max gen " + std::to_string(link->max_generation) +
              " x" + std::to_string(link->max_width) + ")";
    } else {
      g["pcie"] = nullptr;
      line += "  PCIe link: not in sysfs";
    }
    line += "  bus " + p.pci_bus_id + "  driver " + std::to_string(p.driver_version / 1000) + "." +
            std::to_string(p.driver_version % 1000 / 10);
    *text += line + "\n";
    gpus.push_back(std::move(g));
  }
  return gpus;
}

json CapacityJson(const TierCapacity& c) {
  return {{"bytes", c.bytes},
          {"page_slot_bytes", c.page_slot_bytes},
          {"state_slot_bytes", c.state_slot_bytes},
          {"pages_only", c.pages_only},
          {"states_only", c.states_only},
          {"pages_per_state", c.pages_per_state},
          {"mixed_pages", c.mixed_pages},
          {"mixed_states", c.mixed_states}};
}

std::string CapacityRow(const char* tier, const TierCapacity& c) {
  char buf[256];
  std::snprintf(
      buf, sizeof(buf), "  %-7s %10s  %10s  %10s  %11llu  %11llu  %9llu + %llu\n", tier,
      HumanBytes(c.bytes).c_str(), c.page_slot_bytes ? HumanBytes(c.page_slot_bytes).c_str() : "-",
      c.state_slot_bytes ? HumanBytes(c.state_slot_bytes).c_str() : "-",
      static_cast<unsigned long long>(c.pages_only), static_cast<unsigned long long>(c.states_only),
      static_cast<unsigned long long>(c.mixed_pages),
      static_cast<unsigned long long>(c.mixed_states));
  return buf;
}

int RunInfo(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Prints what the store would use on this machine: GPUs (VRAM, PCIe link), the\n"
      "pinned-memory limits, huge pages, io_uring, the disk folder's file system and\n"
      "O_DIRECT support; with --layout, how many KV pages and Mamba states fit in the\n"
      "given tier sizes. Works without a GPU.",
      "cachepawl info"};
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp && *tmp ? tmp : "/tmp";
  std::string layout_name;
  uint32_t page_size = 16;
  std::string host_text = "1G";
  std::string disk_text = "0";
  std::string device_text = "0";
  uint32_t track_interval = 1;
  bool as_json = false;
  app.add_option("--dir", dir, "the disk tier's folder to probe (default: $TMPDIR or /tmp)");
  app.add_option("--layout", layout_name, "a preset name or JSON layout file");
  CLI::Option* page_opt = app.add_option("--page-size,-p", page_size, "tokens per page (16)");
  app.add_option("--host-bytes", host_text, "host tier size for --layout (default 1G)");
  app.add_option("--disk-bytes", disk_text, "disk tier size for --layout (default 0: none)");
  app.add_option("--device-bytes", device_text,
                 "store-owned device pool size for --layout (default 0: none)");
  app.add_option("--track-interval", track_interval,
                 "pages per saved state in the mixed column (default 1)");
  app.add_flag("--json", as_json, "print JSON");
  if (auto exit = ParseArgs(app, args, io)) return *exit;

  uint64_t sizes[3] = {};
  const std::pair<const char*, std::string*> size_flags[] = {
      {"--host-bytes", &host_text}, {"--disk-bytes", &disk_text}, {"--device-bytes", &device_text}};
  for (size_t i = 0; i < 3; ++i) {
    auto v = ParseBytes(size_flags[i].first, *size_flags[i].second);
    if (!v.ok()) {
      io.err << "cachepawl info: " << v.status().message() << "\n";
      return kExitUsage;
    }
    sizes[i] = *v;
  }
  if (track_interval == 0) {
    io.err << "cachepawl info: --track-interval: 0 (must be > 0)\n";
    return kExitUsage;
  }
  if (page_size == 0) {
    io.err << "cachepawl info: --page-size: 0 (must be > 0)\n";
    return kExitUsage;
  }
  std::optional<ModelLayout> layout;
  if (!layout_name.empty()) {
    auto l = ResolveLayout(layout_name, page_size);
    if (!l.ok()) {
      io.err << "cachepawl info: --layout: " << l.status().message() << "\n";
      return kExitUsage;
    }
    layout = std::move(*l);
    if (page_opt->count() > 0) layout->page_size_tokens = page_size;
  }

  std::string text =
      std::string("build:             CUDA ") + (cuda::BuiltWithCuda() ? "yes" : "no") + "\n";
  json out;
  out["built_with_cuda"] = cuda::BuiltWithCuda();
  out["gpus"] = GpusJson(&text);

  const PinnedMemoryLimits pin = ProbePinnedMemory();
  out["pinned_memory"] = {{"memlock_soft_bytes", OptionalBytes(pin.memlock_soft_bytes)},
                          {"memlock_hard_bytes", OptionalBytes(pin.memlock_hard_bytes)},
                          {"cgroup_memory_max_bytes", OptionalBytes(pin.cgroup_memory_max_bytes)},
                          {"cgroup_file", pin.cgroup_file},
                          {"mem_total_bytes", pin.mem_total_bytes},
                          {"mem_available_bytes", pin.mem_available_bytes}};
  text +=
      "pinned memory:     ulimit -l " + OptionalHuman(pin.memlock_soft_bytes) + " (hard " +
      OptionalHuman(pin.memlock_hard_bytes) + "); cgroup memory limit " +
      OptionalHuman(pin.cgroup_memory_max_bytes) +
      (pin.cgroup_file.empty() ? std::string(" (no cgroup file)") : " (" + pin.cgroup_file + ")") +
      "; MemTotal " + HumanBytes(pin.mem_total_bytes) + ", MemAvailable " +
      HumanBytes(pin.mem_available_bytes) + "\n";

  const HugePages huge = ProbeHugePages();
  out["huge_pages"] = {{"page_bytes", huge.page_bytes},
                       {"total", huge.total},
                       {"free", huge.free},
                       {"transparent", huge.transparent}};
  text += "huge pages:        " + std::to_string(huge.total) + " of " +
          HumanBytes(huge.page_bytes) + " (" + std::to_string(huge.free) +
          " free); transparent: " + (huge.transparent.empty() ? "?" : huge.transparent) + "\n";

  const IoUringProbe ring = ProbeIoUring();
  out["io_uring"] = {{"available", ring.available}, {"error", ring.error}, {"kernel", ring.kernel}};
  text += "io_uring:          " + std::string(ring.available ? "available" : ring.error) +
          " (kernel " + ring.kernel + ")\n";

  const DirectoryProbe d = ProbeDirectory(dir);
  out["dir"] = {{"path", d.path},
                {"file_system", d.file_system},
                {"total_bytes", d.total_bytes},
                {"free_bytes", d.free_bytes},
                {"o_direct", d.o_direct},
                {"error", d.error}};
  if (d.file_system.empty()) {
    text += "disk folder:       " + d.error + "\n";
  } else {
    text += "disk folder:       " + d.path + ": " + d.file_system + ", " +
            HumanBytes(d.free_bytes) + " free of " + HumanBytes(d.total_bytes) + "; O_DIRECT " +
            (d.o_direct ? std::string("works") : "fails: " + d.error) + "\n";
  }

  if (layout) {
    const TierCapacity host = RecordTierCapacity(*layout, sizes[0], track_interval);
    const TierCapacity disk = RecordTierCapacity(*layout, sizes[1], track_interval);
    const TierCapacity device = DevicePoolCapacity(*layout, sizes[2], track_interval);
    out["layout"] = {{"model", layout->model},
                     {"page_size_tokens", layout->page_size_tokens},
                     {"kv_page_bytes", layout->KvPageBytes()},
                     {"state_bytes", layout->MambaSlotBytes()},
                     {"host", CapacityJson(host)},
                     {"disk", CapacityJson(disk)},
                     {"device_pool", CapacityJson(device)}};
    text += "layout:            " + layout->model + ", page " +
            std::to_string(layout->page_size_tokens) + " tokens: KV page " +
            std::to_string(layout->KvPageBytes()) + " B, state " +
            std::to_string(layout->MambaSlotBytes()) + " B (upper bounds below)\n";
    text += "  tier          size   page slot  state slot   pages only  states only   mix: " +
            std::string("pages + states (1 state / ") + std::to_string(track_interval) +
            " pages)\n";
    text += CapacityRow("host", host) + CapacityRow("disk", disk) + CapacityRow("device", device);
  }
  if (as_json) {
    io.out << out.dump(2) << "\n";
  } else {
    io.out << text;
  }
  return kExitOk;
}

const CommandRegistration kInfo("info", "what the store would use on this machine", RunInfo);

}  // namespace
}  // namespace cachepawl::tools
