// cachepawl info [--dir PATH] [--layout NAME|FILE [--page-size P] [--host-bytes B]
//                [--disk-bytes B] [--device-bytes B] [--track-interval P]] [--json]
// What the store would use on this machine: the GPUs (name, compute capability, VRAM total and
// free, PCIe link), how much host memory may be pinned (ulimit -l, the cgroup's limit), huge
// pages, io_uring, the file system of the disk tier's folder and whether O_DIRECT works there;
// and, for a layout, how many KV pages and Mamba states (and, for layouts with sliding-window
// layers, window records) fit in the given tier sizes. Works
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
#include "layouts/layout_presets.h"
#include "tiers/machine_probe.h"
#include "tiers/tier_capacity.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "tools/human_bytes.h"
#include "tools/parse_bytes.h"
#include "vocab/model_layout.h"

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
          {"window_slot_bytes", c.window_slot_bytes},
          {"pages_only", c.pages_only},
          {"states_only", c.states_only},
          {"window_only", c.window_only},
          {"window_pages", c.window_pages},
          {"pages_per_state", c.pages_per_state},
          {"mixed_pages", c.mixed_pages},
          {"mixed_states", c.mixed_states},
          {"mixed_window", c.mixed_window}};
}

std::string SlotText(uint64_t bytes) { return bytes ? HumanBytes(bytes) : std::string("-"); }

unsigned long long Ull(uint64_t v) { return static_cast<unsigned long long>(v); }

// One row of the capacity table; `window`: the layout has windowed layers, whose columns
// (window slot, window only, window records of the mix) are added.
std::string CapacityRow(const char* tier, const TierCapacity& c, bool window) {
  char buf[320];
  if (!window) {
    std::snprintf(buf, sizeof(buf), "  %-7s %10s  %10s  %10s  %11llu  %11llu  %9llu + %llu\n", tier,
                  HumanBytes(c.bytes).c_str(), SlotText(c.page_slot_bytes).c_str(),
                  SlotText(c.state_slot_bytes).c_str(), Ull(c.pages_only), Ull(c.states_only),
                  Ull(c.mixed_pages), Ull(c.mixed_states));
  } else {
    std::snprintf(buf, sizeof(buf),
                  "  %-7s %10s  %10s  %11s  %10s  %11llu  %12llu  %11llu  %9llu + %llu + %llu\n",
                  tier, HumanBytes(c.bytes).c_str(), SlotText(c.page_slot_bytes).c_str(),
                  SlotText(c.window_slot_bytes).c_str(), SlotText(c.state_slot_bytes).c_str(),
                  Ull(c.pages_only), Ull(c.window_only), Ull(c.states_only), Ull(c.mixed_pages),
                  Ull(c.mixed_window), Ull(c.mixed_states));
  }
  return buf;
}

// The layout section's text: sizes, the window (if any), the capacity table.
std::string LayoutText(const ModelLayout& l, uint32_t track_interval, const TierCapacity& host,
                       const TierCapacity& disk, const TierCapacity& device) {
  const std::string ti = std::to_string(track_interval);
  std::string text = "layout:            " + l.model + ", page " +
                     std::to_string(l.page_size_tokens) + " tokens: KV page " +
                     std::to_string(l.KvPageBytes()) + " B, state " +
                     std::to_string(l.MambaSlotBytes()) + " B (upper bounds below)\n";
  if (!l.has_window()) {
    text += "  tier          size   page slot  state slot   pages only  states only   mix: " +
            std::string("pages + states (1 state / ") + ti + " pages)\n";
  } else {
    const std::string window = std::to_string(l.RecordBytes(Kind::kWindowKV)) + " B";
    text += "  windowed layers: window " + std::to_string(l.WindowTokens()) + " tokens (" +
            std::to_string(l.WindowPages()) + " pages); on host and disk a page is " +
            (l.Stores(Kind::kKV)
                 ? "a full-attention record of " + std::to_string(l.RecordBytes(Kind::kKV)) +
                       " B and a window record of " + window
                 : "a window record of " + window + " (every attention layer is windowed)") +
            "\n";
    text += "  a state (a reusable depth) needs the " + std::to_string(l.WindowPages()) +
            " window records before it; a device page holds every attention layer\n";
    text += "  tier          size   page slot  window slot  state slot   pages only  window only" +
            std::string("  states only   mix: pages + window records + states (1 state / ") + ti +
            " pages)\n";
  }
  const bool w = l.has_window();
  return text + CapacityRow("host", host, w) + CapacityRow("disk", disk, w) +
         CapacityRow("device", device, w);
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
  // null when not known (no cgroup limit; /proc/meminfo unreadable).
  const std::optional<uint64_t> takeable = TakeableMemoryBytes(pin);
  out["pinned_memory"]["cgroup_memory_used_bytes"] =
      pin.cgroup_memory_current_bytes ? json(*pin.cgroup_memory_current_bytes) : json(nullptr);
  out["pinned_memory"]["store_may_take_bytes"] = takeable ? json(*takeable) : json(nullptr);
  text +=
      "pinned memory:     ulimit -l " + OptionalHuman(pin.memlock_soft_bytes) + " (hard " +
      OptionalHuman(pin.memlock_hard_bytes) + "); cgroup memory limit " +
      OptionalHuman(pin.cgroup_memory_max_bytes) +
      (pin.cgroup_file.empty() ? std::string(" (no cgroup file)") : " (" + pin.cgroup_file + ")") +
      "; MemTotal " + HumanBytes(pin.mem_total_bytes) + ", MemAvailable " +
      HumanBytes(pin.mem_available_bytes) + "\n";
  // What Store::Open accepts for host_bytes (plus a CPU-mode device pool) on this machine now.
  text += "a store may take:  " + (takeable ? HumanBytes(*takeable) : std::string("unknown")) +
          " of host memory (host_bytes, plus the device pool in CPU mode: MemAvailable or the "
          "cgroup's room, less headroom)\n";

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
                     {"full_kv_record_bytes", layout->RecordBytes(Kind::kKV)},
                     {"window_kv_record_bytes", layout->RecordBytes(Kind::kWindowKV)},
                     {"window_tokens", layout->WindowTokens()},
                     {"window_pages", layout->WindowPages()},
                     {"host", CapacityJson(host)},
                     {"disk", CapacityJson(disk)},
                     {"device_pool", CapacityJson(device)}};
    text += LayoutText(*layout, track_interval, host, disk, device);
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
