// cachepawl stress [options]
//
// Many engine threads over one store whose tiers are far smaller than the working set, every
// loaded byte verified, a watchdog that aborts on a stuck operation (tools/stress/stress.h).

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "tools/cli_args.h"
#include "tools/cli_values.h"
#include "tools/command.h"
#include "tools/parse_policies.h"
#include "tools/stress/stress.h"

namespace cachepawl::tools {
namespace {

constexpr char kName[] = "cachepawl stress";

int RunStressCommand(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{
      "Runs many engine threads against one store for a while: Lookup, Lock, Load, Save,\n"
      "Unlock, StartPrefetch, Cancel and fence waits at random, over a pool of prompts that\n"
      "share prefixes and whose working set is far larger than the host and disk tiers, so\n"
      "evictions race loads. Every loaded byte is compared with what was saved for its key.\n"
      "Errors the API allows under races (NotFound after an eviction, Busy, NoSpace, a\n"
      "cancelled prefetch) are counted; any other error or wrong byte fails the run. A watchdog\n"
      "prints every thread's state and aborts when one operation runs past --watchdog.\n"
      "Exit status: 0 when nothing was wrong, 1 otherwise, 2 for bad arguments;\n"
      "the process aborts (SIGABRT) when the watchdog fires.",
      kName};
  StressOptions o;
  std::string duration_text = "90s", watchdog_text = "60s";
  std::string write_policy = WritePolicyFlag(o.write_policy);
  std::string eviction_policy = EvictionPolicyName(o.eviction_policy);
  uint32_t page_size = 16;
  bool json = false, verbose = false;
  app.add_option("--threads,-t", o.threads, "engine threads (default 16)");
  app.add_option("--duration,-d", duration_text, "how long to run: 90s, 10m, 1h (default 90s)");
  app.add_option("--ops", o.ops_per_thread,
                 "stop each thread after this many operations, if before --duration (default: "
                 "no limit)");
  app.add_option("--layout,-l", o.layout_name,
                 std::string("model layout: ") + kStressLayoutName +
                     " (a small hybrid with full, sliding-window and Mamba layers; the default), "
                     "a preset (cachepawl layout --list) or a JSON file");
  app.add_option("--page-size", page_size, "tokens per KV page (default 16)");
  app.add_option("--device-bytes", o.device_bytes,
                 "the store-owned device pool; each thread holds a prompt's pages and a state "
                 "(default 64M)")
      ->transform(ByteCount());
  app.add_option("--host-bytes", o.host_bytes, "host tier budget (default 16M)")
      ->transform(ByteCount());
  app.add_option("--disk-bytes", o.disk_bytes, "disk tier budget; 0 disables it (default 64M)")
      ->transform(ByteCount());
  app.add_option("--write-policy", write_policy,
                 "when host entries go to disk: through, selective, back (default back)");
  app.add_option("--policy", eviction_policy,
                 "which entries leave a full tier first: lru or hybrid (default hybrid)");
  app.add_option("--seed", o.seed, "seed of the prompt pool and the threads' choices (default 1)");
  app.add_option("--dir", o.dir,
                 "put the store's files here and keep them (default: a temporary folder, "
                 "removed at exit)");
  app.add_option("--watchdog", watchdog_text,
                 "fail (print every thread's state, abort) when one operation runs longer than "
                 "this (default 60s)");
  app.add_flag("--verbose,-v", verbose, "show the store's informational log lines (stderr)");
  app.add_flag("--json", json, "print one JSON object instead of the table (keys below)");
  app.add_flag("--test-stuck-op", o.test_stuck_op)->group("");  // the watchdog's test hook
  app.footer(StressJsonKeysHelp());
  if (auto done = ParseArgs(app, args, io)) return *done;
  auto usage = [&](const std::string& message) {
    io.err << kName << ": " << message << "\n";
    return kExitUsage;
  };
  o.duration_seconds = ParseDuration(duration_text).value_or(0);
  if (o.duration_seconds <= 0) {
    return usage("--duration: '" + duration_text +
                 "' (expected a positive duration such as 90s, 10m, 1h)");
  }
  o.watchdog_seconds = ParseDuration(watchdog_text).value_or(0);
  if (o.watchdog_seconds <= 0) {
    return usage("--watchdog: '" + watchdog_text +
                 "' (expected a positive duration such as 60s, 5m)");
  }
  if (!ParseWritePolicy(write_policy, &o.write_policy)) {
    return usage("--write-policy: '" + write_policy + "' (expected through, selective or back)");
  }
  if (!ParseEvictionPolicy(eviction_policy, &o.eviction_policy)) {
    return usage("--policy: '" + eviction_policy + "' (expected lru or hybrid)");
  }
  if (page_size == 0) return usage("--page-size: 0 (must be > 0)");
  auto layout = ResolveStressLayout(o.layout_name, page_size);
  if (!layout.ok()) return usage(layout.status().message());
  o.layout = std::move(layout).value();
  if (Status s = o.Validate(); !s.ok()) return usage(s.message());

  LogStoreToStderr(verbose);
  o.progress = &io.err;
  auto report = RunStress(o);
  if (!report.ok()) {
    io.err << kName << ": " << report.status().ToString() << "\n";
    const bool bad_input = report.status().IsInvalidArgument() || report.status().IsNoSpace() ||
                           report.status().IsIncompatible();
    return bad_input ? kExitUsage : kExitFailure;
  }
  if (json) {
    io.out << StressJson(*report).dump(2) << "\n";
  } else {
    PrintStressTable(*report, io.out);
  }
  return report->ok() ? kExitOk : kExitFailure;
}

const CommandRegistration kRegistration(
    "stress", "many engine threads on one store under eviction pressure, every byte verified",
    &RunStressCommand);

}  // namespace
}  // namespace cachepawl::tools
