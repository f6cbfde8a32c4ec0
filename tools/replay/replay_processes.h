// `cachepawl replay ... --processes N [--crash-every K [--kill-owner]]`: one store shared by N
// engine processes. An owner serves the store (Store::Serve in this process; with --kill-owner a
// `cachepawl serve` process, SIGKILLed every few seconds and started again on the same folder);
// N client processes (this program run with `--replica I/N --attach SOCKET`) replay their share
// of the requests through attached stores, every loaded byte verified in the client that loads
// it. With --crash-every each client is a crash-mode supervisor whose store processes are
// SIGKILLed about every K requests (their locks and copies are the owner's to reclaim); a store
// process that finds the owner gone exits and is started again once the owner is back. One
// report: per-process rows, totals, and what the owner reclaimed from dead clients.
//
// Thread safety: called once, from the command's thread.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "vocab/store_options.h"

namespace cachepawl::tools {

struct ProcessesRun {
  uint32_t processes = 2;
  bool kill_owner = false;  // the owner in its own process, SIGKILLed and restarted
  bool json = false;
  uint64_t seed = 1;
  StoreOptions owner;  // the store the owner serves (without --kill-owner)
  // With --kill-owner: the `cachepawl serve` arguments of the owner (without --socket).
  std::vector<std::string> serve_args;
};

// `self`: this program; `child_args`: the replay's arguments for each client (without
// --processes, --kill-owner, --json). Returns 0 when every client exited 0 and no byte was wrong,
// 1 when something was wrong, 2 when a client could not start or refused its arguments.
int RunProcesses(const std::string& self, const std::vector<std::string>& child_args,
                 const ProcessesRun& run, std::ostream& out, std::ostream& err);

}  // namespace cachepawl::tools
