// cachepawl layout PRESET|FILE [--page-size P] [--tp-size N [--tp-rank R]] [--json|--sizes]
// cachepawl layout --from-hf-config CONFIG.json [--dtype D] [--state-dtype D]
//                  [--convention transformers|sglang] [--page-size P] [--model NAME]
//                  [--tp-size N [--tp-rank R]] [--json|--sizes]
// cachepawl layout --list
// Prints a layout (a built-in preset, a JSON layout file, or the layout transformers keeps for a
// Hugging Face config.json: layouts/layout_from_hf.h): its layers, the bytes of one KV page and
// one Mamba slot, and its fingerprint; or, with --json, the layout as a JSON layout file (which
// `cachepawl layout FILE` reads back, so it has no derived sizes); or, with --sizes, the derived
// sizes as JSON (KV page, full-attention and window records, window, state, fingerprint).
// --tp-size N gives rank R's share (default 0) of an N-way tensor-parallel deployment, split as
// the engines split heads and channels (layouts/layout_tp.h); every rank's sizes are equal.
// --list prints the preset names, one a line.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "layouts/layout_from_hf.h"
#include "layouts/layout_presets.h"
#include "layouts/layout_tp.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "vocab/model_layout.h"

namespace cachepawl::tools {
namespace {

// The --from-hf-config options; each usage error names the flag and the value.
struct HfFlags {
  std::string config;
  std::string dtype = "bf16";
  std::string state_dtype = "fp32";
  std::string convention = "transformers";
  std::string model;
};

StatusOr<HfLayoutOptions> HfOptions(const HfFlags& flags, uint32_t page_size) {
  HfLayoutOptions o;
  const auto dtype = ParseDType(flags.dtype);
  if (!dtype) return Status::InvalidArgument("--dtype: '" + flags.dtype + "' (unknown dtype)");
  const auto state_dtype = ParseDType(flags.state_dtype);
  if (!state_dtype) {
    return Status::InvalidArgument("--state-dtype: '" + flags.state_dtype + "' (unknown dtype)");
  }
  const auto convention = ParseStateConvention(flags.convention);
  if (!convention) {
    return Status::InvalidArgument("--convention: '" + flags.convention +
                                   "' (expected transformers or sglang)");
  }
  o.cache_dtype = *dtype;
  o.state_dtype = *state_dtype;
  o.convention = *convention;
  o.page_size_tokens = page_size;
  o.model = flags.model;
  return o;
}

StatusOr<ModelLayout> LayoutOfHfConfig(const HfFlags& flags, uint32_t page_size) {
  CACHEPAWL_ASSIGN_OR_RETURN(HfLayoutOptions options, HfOptions(flags, page_size));
  return LayoutFromHfConfigFile(flags.config, options);
}

// A preset or a layout file; `page_size_given` overrides the page size a file names.
StatusOr<ModelLayout> LayoutOfName(const std::string& name, uint32_t page_size,
                                   bool page_size_given) {
  CACHEPAWL_ASSIGN_OR_RETURN(ModelLayout layout, ResolveLayout(name, page_size));
  if (page_size_given && layout.page_size_tokens != page_size) {
    layout.page_size_tokens = page_size;
    CACHEPAWL_RETURN_IF_ERROR(layout.Validate());
  }
  return layout;
}

// The sizes that follow from a layout, as JSON (`--sizes`).
std::string SizesJson(const ModelLayout& l) {
  const nlohmann::json j = {{"model", l.model},
                            {"page_size_tokens", l.page_size_tokens},
                            {"kv_page_bytes", l.KvPageBytes()},
                            {"full_kv_record_bytes", l.RecordBytes(Kind::kKV)},
                            {"window_kv_record_bytes", l.RecordBytes(Kind::kWindowKV)},
                            {"window_tokens", l.WindowTokens()},
                            {"window_pages", l.WindowPages()},
                            {"state_bytes", l.MambaSlotBytes()},
                            {"fingerprint", l.FingerprintHex()}};
  return j.dump(2) + "\n";
}

int RunLayout(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Prints a model's cache layout: its layers, the bytes of one KV page and one\n"
      "Mamba state slot, and the layout fingerprint. NAME is a built-in preset\n"
      "(--list shows them) or the path of a JSON layout file (docs/MODELS.md);\n"
      "--from-hf-config reads a Hugging Face config.json instead.",
      "cachepawl layout"};
  std::string name;
  uint32_t page_size = 16;
  bool list = false;
  bool json = false;
  bool sizes = false;
  uint32_t tp_size = 1;
  uint32_t tp_rank = 0;
  HfFlags hf;
  app.add_option("name", name, "preset name or JSON layout file");
  CLI::Option* page_size_opt =
      app.add_option("--page-size,-p", page_size,
                     "tokens per KV page (default: the file's page_size_tokens, else 16)");
  app.add_flag("--list,-l", list, "print the preset names, one per line");
  CLI::Option* tp_size_opt = app.add_option(
      "--tp-size", tp_size,
      "tensor-parallel ranks: print one rank's share of the heads and channels (default 1)");
  CLI::Option* tp_rank_opt =
      app.add_option("--tp-rank", tp_rank, "with --tp-size: the rank (default 0)");
  app.add_flag("--json", json, "print the layout as a JSON layout file");
  app.add_flag("--sizes", sizes,
               "print the derived sizes as JSON: kv_page_bytes, full_kv_record_bytes, "
               "window_kv_record_bytes, window_tokens, window_pages, state_bytes, fingerprint");
  CLI::Option* hf_opt = app.add_option(
      "--from-hf-config", hf.config,
      "the layout transformers keeps for this Hugging Face config.json (docs/MODELS.md)");
  const std::vector<CLI::Option*> hf_only = {
      app.add_option("--dtype", hf.dtype,
                     "with --from-hf-config: K/V and conv state dtype (default bf16)"),
      app.add_option("--state-dtype", hf.state_dtype,
                     "with --from-hf-config: recurrent state dtype (default fp32)"),
      app.add_option("--convention", hf.convention,
                     "with --from-hf-config: conv state width, transformers (d_conv) or sglang "
                     "(d_conv - 1); default transformers"),
      app.add_option("--model", hf.model,
                     "with --from-hf-config: the layout's model name (default: the config's "
                     "_name_or_path, else its model_type)")};
  if (auto exit = ParseArgs(app, args, io)) return *exit;

  if (list) {
    if (!name.empty() || json || sizes || page_size_opt->count() > 0 || hf_opt->count() > 0 ||
        tp_size_opt->count() > 0 || tp_rank_opt->count() > 0) {
      io.err << "cachepawl layout: --list takes no other arguments\n";
      return kExitUsage;
    }
    for (const std::string& preset : LayoutPresetNames()) io.out << preset << "\n";
    return kExitOk;
  }
  if (json && sizes) {
    io.err << "cachepawl layout: --json and --sizes: pick one (the layout file or its sizes)\n";
    return kExitUsage;
  }
  if (hf_opt->count() == 0) {
    for (const CLI::Option* o : hf_only) {
      if (o->count() > 0) {
        io.err << "cachepawl layout: " << o->get_name() << " goes with --from-hf-config\n";
        return kExitUsage;
      }
    }
  }
  if (hf_opt->count() > 0 && !name.empty()) {
    io.err << "cachepawl layout: --from-hf-config takes no preset or layout file (got '" << name
           << "')\n";
    return kExitUsage;
  }
  if (hf_opt->count() == 0 && name.empty()) {
    io.err << "cachepawl layout: expected a preset name or a layout file (--list shows the "
              "presets, --from-hf-config reads a config.json, --help shows the usage)\n";
    return kExitUsage;
  }
  if (tp_rank_opt->count() > 0 && tp_size_opt->count() == 0) {
    io.err << "cachepawl layout: --tp-rank goes with --tp-size\n";
    return kExitUsage;
  }
  auto layout = hf_opt->count() > 0 ? LayoutOfHfConfig(hf, page_size)
                                    : LayoutOfName(name, page_size, page_size_opt->count() > 0);
  if (layout.ok() && tp_size_opt->count() > 0) {
    auto rank = ShardLayout(*layout, tp_size, tp_rank);
    if (!rank.ok()) {
      io.err << "cachepawl layout: --tp-size " << tp_size << " --tp-rank " << tp_rank << ": "
             << rank.status().ToString() << "\n";
      return kExitUsage;
    }
    layout = std::move(rank);
  }
  if (!layout.ok()) {
    io.err << "cachepawl layout: " << layout.status().ToString() << "\n";
    return kExitUsage;
  }
  io.out << (json ? LayoutToJson(*layout) : sizes ? SizesJson(*layout) : layout->Describe());
  return kExitOk;
}

const CommandRegistration kRegistration(
    "layout",
    "print a model layout (preset, JSON file or Hugging Face config.json): sizes and fingerprint",
    &RunLayout);

}  // namespace
}  // namespace cachepawl::tools
