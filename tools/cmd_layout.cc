// cachepawl layout PRESET|FILE [--page-size P] [--json]
// cachepawl layout --list
// Prints a layout (a built-in preset or a JSON layout file): its layers, the bytes of one KV
// page and one Mamba slot, and its fingerprint; or, with --json, the layout as a JSON layout
// file (which `cachepawl layout FILE` reads back). --list prints the preset names, one a line.
#include <CLI/CLI.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "store/model_layout.h"
#include "tools/cli_args.h"
#include "tools/command.h"

namespace cachepawl::tools {
namespace {

int RunLayout(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Prints a model's cache layout: its layers, the bytes of one KV page and one\n"
      "Mamba state slot, and the layout fingerprint. NAME is a built-in preset\n"
      "(--list shows them) or the path of a JSON layout file (docs/MODELS.md).",
      "cachepawl layout"};
  std::string name;
  uint32_t page_size = 16;
  bool list = false;
  bool json = false;
  app.add_option("name", name, "preset name or JSON layout file");
  CLI::Option* page_size_opt =
      app.add_option("--page-size,-p", page_size,
                     "tokens per KV page (default: the file's page_size_tokens, else 16)");
  app.add_flag("--list,-l", list, "print the preset names, one per line");
  app.add_flag("--json", json, "print the layout as a JSON layout file");
  if (auto exit = ParseArgs(app, args, io)) return *exit;

  if (list) {
    if (!name.empty() || json || page_size_opt->count() > 0) {
      io.err << "cachepawl layout: --list takes no other arguments\n";
      return kExitUsage;
    }
    for (const std::string& preset : LayoutPresetNames()) io.out << preset << "\n";
    return kExitOk;
  }
  if (name.empty()) {
    io.err << "cachepawl layout: expected a preset name or a layout file (--list shows the "
              "presets, --help the usage)\n";
    return kExitUsage;
  }

  auto layout = ResolveLayout(name, page_size);
  if (layout.ok() && page_size_opt->count() > 0 && layout->page_size_tokens != page_size) {
    // A file that names its own page size: --page-size overrides it.
    layout->page_size_tokens = page_size;
    Status valid = layout->Validate();
    if (!valid.ok()) layout = valid;
  }
  if (!layout.ok()) {
    io.err << "cachepawl layout: " << layout.status().ToString() << "\n";
    return kExitUsage;
  }
  io.out << (json ? LayoutToJson(*layout) : layout->Describe());
  return kExitOk;
}

const CommandRegistration kRegistration(
    "layout", "print a model layout (preset or JSON file): sizes and fingerprint", &RunLayout);

}  // namespace
}  // namespace cachepawl::tools
