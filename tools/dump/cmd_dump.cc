// cachepawl dump STORE_DIR [--list [--kind kv|mamba|window] [--prefix HASH] | --verify] [--json]
//
// Looks inside a store's disk tier without writing to it (safe while an engine has the store
// open): a summary, one line per record, or a verification of every record.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "layouts/layout_presets.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "tools/dump/dump_store.h"
#include "tools/human_bytes.h"

namespace cachepawl::tools {
namespace {

using nlohmann::json;

// The JSON output. Paths come from the catalog and may be any bytes (a Linux file name need not
// be UTF-8): bytes that are not UTF-8 print as U+FFFD instead of failing the dump.
std::string JsonText(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace);
}

constexpr char kName[] = "cachepawl dump";

std::string HexChecksum(uint64_t c) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(c));
  return buf;
}

std::string BucketLabel(uint64_t bucket) {
  if (bucket <= 1) return std::to_string(bucket);
  return std::to_string(bucket) + "-" + std::to_string(bucket * 2 - 1);
}

// Whether the record names its page's parent: KV pages, window records (the windowed part of a
// page), and the states of a chained store (whose pages have no KV records: the state carries
// its chain).
bool HasParent(const StoreView& view, const CatalogRecord& r) {
  return r.key.kind != Kind::kMamba || view.chained();
}

json RecordJson(const StoreView& view, const CatalogRecord& r) {
  const uint64_t p = view.page_size_tokens();
  const bool known_file = r.extent.file < view.files().size();
  json chain = nullptr;
  if (view.chained() && r.key.kind == Kind::kMamba) {
    chain = json::array();
    for (const PageHash& h : r.chain) chain.push_back(h.ToHex());
  }
  return {{"kind", std::string(KindName(r.key.kind))},
          {"hash", r.key.hash.ToHex()},
          {"parent", HasParent(view, r) ? json(r.parent.ToHex()) : json(nullptr)},
          {"chain", chain},
          {"depth_tokens", r.key.depth},
          {"depth_pages", p != 0 ? json(r.key.depth / p) : json(nullptr)},
          {"file", known_file ? view.files()[r.extent.file].path
                              : "file #" + std::to_string(r.extent.file)},
          {"offset", r.extent.offset},
          {"bytes", r.extent.bytes},
          {"checksum", HexChecksum(r.checksum)},
          {"stamp", r.stamp}};
}

std::string RecordLine(const StoreView& view, const CatalogRecord& r) {
  const json j = RecordJson(view, r);
  std::string line = std::string(KindName(r.key.kind)) + " " + r.key.hash.ToHex();
  line += " parent " + (HasParent(view, r) ? r.parent.ToHex() : std::string("-"));
  line += " depth " + std::to_string(r.key.depth);
  if (j["chain"].is_array()) line += " chain " + std::to_string(r.chain.size()) + " pages";
  line += " " + j["file"].get<std::string>() + " @" + std::to_string(r.extent.offset) + " +" +
          std::to_string(r.extent.bytes);
  line += " checksum " + HexChecksum(r.checksum) + " stamp " + std::to_string(r.stamp);
  return line;
}

json SummaryJson(const StoreView& view, const StoreView::TreeShape& t) {
  uint64_t count[kNumKinds] = {}, bytes[kNumKinds] = {};
  for (const CatalogRecord& r : view.records()) {
    ++count[static_cast<int>(r.key.kind)];
    bytes[static_cast<int>(r.key.kind)] += r.extent.bytes;
  }
  json files = json::array();
  for (const DataFileInfo& f : view.files()) {
    files.push_back({{"path", f.path},
                     {"error", f.error.empty() ? json(nullptr) : json(f.error)},
                     {"size", f.size},
                     {"records", f.records},
                     {"used_bytes", f.used_bytes},
                     {"free_bytes", f.free_bytes},
                     {"free_runs", f.free_runs},
                     {"largest_free", f.largest_free}});
  }
  // Buckets of depth in pages, in order: [{"pages": "4-7", "count": n}, ...].
  auto histogram = [](const std::map<uint64_t, uint64_t>& h) {
    json j = json::array();
    for (const auto& [bucket, n] : h) j.push_back({{"pages", BucketLabel(bucket)}, {"count", n}});
    return j;
  };
  json longest = json::array();
  for (const CatalogRecord* r : t.longest) longest.push_back(RecordJson(view, *r));
  return {
      {"store_dir", view.dir()},
      {"format_version", view.meta().format_version},
      {"fingerprint", PageHash{view.meta().fingerprint}.ToHex()},
      {"layout", view.layout_name().empty() ? json(nullptr) : json(view.layout_name())},
      {"page_size_tokens", view.page_size_tokens()},
      {"pure_ssm", view.pure_ssm()},
      {"chained", view.chained()},
      {"window_pages",
       view.layout().has_value() ? json(view.layout()->WindowPages()) : json(nullptr)},
      {"open_by_pid", view.holder_pid() ? json(*view.holder_pid()) : json(nullptr)},
      {"records",
       {{"kv", {{"count", count[0]}, {"bytes", bytes[0]}}},
        {"mamba", {{"count", count[1]}, {"bytes", bytes[1]}}},
        {"window", {{"count", count[2]}, {"bytes", bytes[2]}}}}},
      {"undecodable_catalog_entries", view.bad_catalog_keys().size()},
      {"unknown_catalog_entries", view.unknown_catalog_keys().size()},
      {"files", files},
      {"tree",
       {{"chains", t.roots},
        {"leaves", t.leaves},
        {"branching_points", t.branching_points},
        {"max_fanout", t.max_fanout},
        {"orphan_pages", t.orphan_pages},
        {"orphan_states", t.orphan_states},
        {"orphan_window", t.orphan_window},
        {"pages_by_depth", histogram(t.pages_by_depth)},
        {"states_by_depth", histogram(t.states_by_depth)},
        {"window_by_depth", histogram(t.window_by_depth)},
        {"longest", longest},
        {"oldest", t.oldest ? RecordJson(view, *t.oldest) : json(nullptr)},
        {"newest", t.newest ? RecordJson(view, *t.newest) : json(nullptr)}}},
  };
}

void PrintSummary(const json& s, std::ostream& out) {
  out << "store " << s["store_dir"].get<std::string>() << ": format version " << s["format_version"]
      << ", "
      << (s["open_by_pid"].is_null()
              ? std::string("not open by another process")
              : "open by process " + std::to_string(s["open_by_pid"].get<int>()))
      << "\n";
  out << "layout "
      << (s["layout"].is_null() ? "unknown (not a built-in preset)"
                                : s["layout"].get<std::string>())
      << ", fingerprint " << s["fingerprint"].get<std::string>() << "\n";
  const json& rec = s["records"];
  out << "records: " << rec["kv"]["count"] << " KV pages (" << HumanBytes(rec["kv"]["bytes"])
      << "), " << rec["mamba"]["count"] << " Mamba states (" << HumanBytes(rec["mamba"]["bytes"])
      << ")";
  if (rec["window"]["count"] != 0 || (s["window_pages"].is_number() && s["window_pages"] != 0)) {
    out << ", " << rec["window"]["count"] << " window records ("
        << HumanBytes(rec["window"]["bytes"]) << ")";
  }
  if (s["undecodable_catalog_entries"] != 0) {
    out << "; " << s["undecodable_catalog_entries"] << " undecodable catalog entries";
  }
  out << "\ndata files:\n";
  for (const json& f : s["files"]) {
    out << "  " << f["path"].get<std::string>() << ": ";
    if (!f["error"].is_null()) {
      out << "CANNOT BE READ: " << f["error"].get<std::string>() << "\n";
      continue;
    }
    out << HumanBytes(f["size"]) << ", " << f["records"] << " records in "
        << HumanBytes(f["used_bytes"]) << ", " << HumanBytes(f["free_bytes"]) << " free in "
        << f["free_runs"] << " runs (largest " << HumanBytes(f["largest_free"]) << ")\n";
  }
  const json& t = s["tree"];
  out << "prefix tree (" << s["page_size_tokens"] << " tokens per page): " << t["chains"]
      << " chains, " << t["leaves"] << " leaves, " << t["branching_points"]
      << " branching points (max fan-out " << t["max_fanout"] << "), " << t["orphan_pages"]
      << " orphan pages, " << t["orphan_states"] << " orphan states";
  if (t["orphan_window"] != 0 || rec["window"]["count"] != 0) {
    out << ", " << t["orphan_window"] << " orphan window records";
  }
  out << "\n";
  if (s["pure_ssm"].get<bool>()) {
    out << "  (no attention layers: the pages are the states' chains, without records)\n";
  } else if (s["chained"].get<bool>()) {
    out << "  (no full-attention layers: the pages are the states' chains, without KV records; "
           "window records hold the windowed part of the pages before a state)\n";
  }
  const bool chained = s["chained"].get<bool>();
  for (const char* h : {"pages_by_depth", "states_by_depth", "window_by_depth"}) {
    if (h[0] == 'w' && t[h].empty()) continue;
    out << "  "
        << (h[0] == 'p'
                ? (chained ? "chain pages by depth (pages): " : "KV pages by depth (pages):    ")
            : h[0] == 's' ? "Mamba states by depth (pages):"
                          : "window records by depth (pages):");
    for (const json& b : t[h]) out << "  " << b["pages"].get<std::string>() << ": " << b["count"];
    out << "\n";
  }
  for (const json& r : t["longest"]) {
    out << "  longest: " << r["depth_pages"] << " pages (" << r["depth_tokens"] << " tokens) "
        << r["hash"].get<std::string>() << "\n";
  }
  for (const char* which : {"oldest", "newest"}) {
    if (t[which].is_null()) continue;
    out << "  " << which << " record: " << t[which]["kind"].get<std::string>() << " "
        << t[which]["hash"].get<std::string>() << " at depth " << t[which]["depth_tokens"]
        << " (access stamp " << t[which]["stamp"] << ")\n";
  }
}

int RunDump(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Shows what a store's disk tier holds, without writing to it (works while an engine has\n"
      "the store open): layout, format, records and bytes per kind, extents per data file, the\n"
      "prefix tree's shape. --list prints one line per record; --verify reads every record and\n"
      "checks header and checksum (exit 1 when anything is wrong). Exit 2 for bad arguments,\n"
      "a folder that is not a store, or a store of a newer format.",
      kName};
  std::string dir, kind_name, prefix, layout_name;
  uint32_t page_size = 16;
  bool list = false, verify = false, json_out = false, no_scan = false;
  app.add_option("STORE_DIR", dir, "the store's folder (StoreOptions::disk_dir, replay --dir)")
      ->required();
  app.add_flag("--list", list,
               "one line per record: kind, hash, parent, depth, file @offset "
               "+bytes, checksum, access stamp (the states of a layout without full-attention "
               "layers: also their chains)");
  app.add_option("--kind", kind_name, "with --list: only kv, mamba or window records");
  app.add_option("--prefix", prefix,
                 "with --list: only records whose hash starts with these hex "
                 "digits");
  app.add_flag("--verify", verify,
               "read and check every record; report corrupt and orphaned "
               "records and record headers in unnamed space");
  app.add_flag("--no-free-space-scan", no_scan, "with --verify: skip reading the free space");
  app.add_option("--layout", layout_name,
                 "the store's layout (a preset or JSON file) when it is not a built-in preset");
  app.add_option("--page-size", page_size, "page size for --layout (default 16)");
  app.add_flag("--json", json_out,
               "print JSON (summary: an object; --list: an array; --verify: "
               "an object)");
  if (auto exit = ParseArgs(app, args, io)) return *exit;
  auto usage = [&](const std::string& m) {
    io.err << kName << ": " << m << "\n";
    return kExitUsage;
  };
  if (list && verify) return usage("--list and --verify: choose one");
  if (!list && (!kind_name.empty() || !prefix.empty())) {
    return usage("--kind and --prefix go with --list");
  }
  std::optional<Kind> kind;
  if (!kind_name.empty()) {
    kind = ParseKind(kind_name);
    if (!kind) return usage("--kind: '" + kind_name + "' (expected kv, mamba or window)");
  }
  for (char& c : prefix) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) || prefix.size() > 64) {
      return usage("--prefix: '" + prefix + "' (expected up to 64 hex digits)");
    }
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::optional<ModelLayout> layout;
  if (!layout_name.empty()) {
    auto l = ResolveLayout(layout_name, page_size);
    if (!l.ok()) return usage("--layout: " + l.status().ToString());
    layout = *l;
  }

  auto opened = StoreView::Open(dir, layout);
  if (!opened.ok()) {
    const Status& s = opened.status();
    io.err << kName << ": " << s.ToString() << "\n";
    const bool bad_input = s.IsInvalidArgument() || s.IsNotFound() || s.IsIncompatible();
    return bad_input ? kExitUsage : kExitFailure;
  }
  StoreView& view = **opened;
  bool unreadable = false;
  for (const DataFileInfo& f : view.files()) {
    if (!f.error.empty()) {
      unreadable = true;
      io.err << kName << ": data file " << f.path << " cannot be read: " << f.error << "\n";
    }
  }

  if (list) {
    json rows = json::array();
    for (const CatalogRecord& r : view.records()) {
      if (kind && r.key.kind != *kind) continue;
      if (!prefix.empty() && r.key.hash.ToHex().compare(0, prefix.size(), prefix) != 0) continue;
      if (json_out) {
        rows.push_back(RecordJson(view, r));
      } else {
        io.out << RecordLine(view, r) << "\n";
      }
    }
    if (json_out) io.out << JsonText(rows) << "\n";
    return unreadable ? kExitFailure : kExitOk;
  }

  if (verify) {
    const StoreView::Verification v = view.Verify(!no_scan);
    if (json_out) {
      json problems = json::array();
      for (const auto& p : v.problems) {
        problems.push_back({{"kind", p.kind}, {"record", p.record}, {"detail", p.detail}});
      }
      io.out << JsonText(json{{"ok", v.ok()},
                              {"records", view.records().size()},
                              {"records_checked", v.records_checked},
                              {"bytes_read", v.bytes_read},
                              {"corrupt", v.corrupt},
                              {"catalog_problems", v.catalog_problems},
                              {"overlaps", v.overlaps},
                              {"unreadable_files", v.unreadable_files},
                              {"orphans", v.orphans},
                              {"unnamed_in_free_space", v.unnamed_in_free},
                              {"scanned_free_space", v.scanned_free_space},
                              {"changed_while_reading", v.changed_while_reading},
                              {"problems", problems}})
             << "\n";
    } else {
      for (const auto& p : v.problems) {
        const bool warning = p.kind == "orphan" || p.kind == "unnamed";
        io.out << (warning ? "warning " : "WRONG ") << p.kind << " " << p.record << ": " << p.detail
               << "\n";
      }
      io.out << "verified " << v.records_checked << " of " << view.records().size() << " records ("
             << HumanBytes(v.bytes_read) << " read): " << v.corrupt << " corrupt, "
             << v.catalog_problems << " bad catalog entries, " << v.overlaps
             << " overlapping extents, " << v.unreadable_files
             << " unreadable files; warnings: " << v.orphans
             << " orphans (the store reclaims them when it opens), " << v.unnamed_in_free
             << " record headers in free space" << (v.scanned_free_space ? "" : " (not scanned)");
      if (v.changed_while_reading > 0) {
        io.out << "; " << v.changed_while_reading << " records changed by the running store";
      }
      io.out << "\n" << (v.ok() ? "OK" : "FAILED") << "\n";
    }
    return v.ok() ? kExitOk : kExitFailure;
  }

  const json summary = SummaryJson(view, view.Shape());
  if (json_out) {
    io.out << JsonText(summary) << "\n";
  } else {
    PrintSummary(summary, io.out);
  }
  return unreadable ? kExitFailure : kExitOk;
}

const CommandRegistration kRegistration("dump", "inspect or verify a store's disk tier (read-only)",
                                        &RunDump);

}  // namespace
}  // namespace cachepawl::tools
