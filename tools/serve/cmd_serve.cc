// cachepawl serve --dir D --layout L --host-bytes B [--disk-bytes B] [--socket PATH]
//                 [--socket-group G] [--page-size P] [--tp-size N] [--device N]
//                 [--write-policy P] [--json]
// Runs an owner store as its own process (Store::Serve): the engine's processes attach to it
// (Store::Attach, cachepawl.Store.attach), and its host and disk tiers outlive an engine's
// restart. In the foreground; the log goes to stderr. SIGTERM or SIGINT: a clean shutdown (the
// attached processes' next calls fail with Unavailable; the disk catalog is persisted). SIGUSR1,
// and the end with --json: one line of the store's stats as JSON on stdout (StoreStats, with
// the attached processes under "serve"). --tp-size N: one store for the N ranks of a
// tensor-parallel deployment (layouts/layout_tp.h splits L); each rank's process attaches with
// its rank's layout (AttachOptions::tp_rank) and moves its own shares.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <ostream>
#include <string>

#include "layouts/layout_presets.h"
#include "layouts/layout_tp.h"
#include "store/store.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "tools/parse_policies.h"

namespace cachepawl::tools {
namespace {

int CmdServe(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{"Run an owner store other processes attach to (Store::Attach)", "cachepawl serve"};
  std::string dir, layout, socket, group, write_policy = "through";
  uint64_t host_bytes = 0, disk_bytes = 0;
  uint32_t page_size = 16, max_clients = 256, tp_size = 1;
  int device = -1;
  bool json = false, verbose = false;
  app.add_option("--dir", dir, "Folder of the disk tier's catalog and data (and the socket)")
      ->required();
  app.add_option("--layout", layout, "Model layout: a preset name or a JSON file")->required();
  app.add_option("--host-bytes", host_bytes, "Host tier bytes (shared memory)")
      ->required()
      ->transform(ByteCount());
  app.add_option("--disk-bytes", disk_bytes, "Disk tier bytes (0: no disk tier)")
      ->transform(ByteCount());
  app.add_option("--socket", socket, "The socket clients attach to (default DIR/cachepawl.sock)");
  app.add_option("--socket-group", group, "Admit this group too (socket mode 0660)");
  app.add_option("--page-size", page_size, "Tokens per page (presets)");
  app.add_option("--tp-size", tp_size,
                 "Serve the N ranks of a tensor-parallel deployment of the layout (each rank "
                 "attaches with its own share, Store::Attach with tp_rank)");
  app.add_option("--device", device,
                 "a CUDA device whose context pins the host tier (default -1: none; the owner "
                 "copies nothing to a GPU itself, its clients register their own mappings)");
  app.add_option("--write-policy", write_policy, "Disk write policy: through|selective|back");
  app.add_option("--max-clients", max_clients, "Attached processes at most");
  uint32_t poll_spin_us = ServeOptions().poll_spin_us;
  app.add_option("--poll-spin-us", poll_spin_us,
                 "How long a session polls for a client's next call before it sleeps (default "
                 "200)");
  uint32_t inflight_spin_us = ServeOptions().inflight_spin_us;
  app.add_option("--inflight-spin-us", inflight_spin_us,
                 "How long a session polls for the end of a client's copies in flight before it "
                 "sleeps (default 20000)");
  app.add_flag("--json", json, "Print the stats as one JSON line at the end (and on SIGUSR1)");
  app.add_flag("-v,--verbose", verbose, "Log informational lines too");
  if (auto rc = ParseArgs(app, args, io)) return *rc;
  LogStoreToStderr(true);
  (void)verbose;
  StoreOptions o;
  o.layout_name = layout;
  o.page_size_tokens = page_size;
  if (tp_size != 1) {
    auto whole = ResolveLayout(layout, page_size);
    auto rank = whole.ok() ? ShardLayout(*whole, tp_size, 0) : whole;
    if (!rank.ok()) {
      io.err << "cachepawl serve: --layout '" << layout << "' --tp-size " << tp_size << ": "
             << rank.status().ToString() << "\n";
      return kExitUsage;
    }
    o.layout = std::move(rank).value();
  }
  o.host_bytes = host_bytes;
  o.disk_dir = dir;
  o.disk_bytes = disk_bytes;
  o.cuda_device = device;
  if (!ParseWritePolicy(write_policy, &o.write_policy)) {
    io.err << "cachepawl serve: --write-policy: '" << write_policy
           << "' (expected through, selective or back)\n";
    return kExitUsage;
  }
  ServeOptions so;
  so.socket_path = socket.empty() ? dir + "/cachepawl.sock" : socket;
  so.socket_group = group;
  so.max_clients = max_clients;
  so.poll_spin_us = poll_spin_us;
  so.inflight_spin_us = inflight_spin_us;
  // The signals are waited for on this thread; every thread the store starts inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto store = Store::Serve(o, so);
  if (!store.ok()) {
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    io.err << "cachepawl serve: " << store.status().ToString() << "\n";
    return store.status().IsInvalidArgument() ? kExitUsage : kExitFailure;
  }
  const ModelLayout& served = (*store)->layout();
  io.err << "cachepawl serve: serving '" << served.model << "'"
         << (served.tp_size > 1
                 ? " as a tensor-parallel group of " + std::to_string(served.tp_size) +
                       " ranks (each attaches with its rank's layout)"
                 : std::string())
         << " on " << so.socket_path << " (pid " << getpid() << "); SIGTERM stops" << std::endl;
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGUSR1) {
      io.out << (*store)->Stats().ToJson() << std::endl;
      continue;
    }
    break;
  }
  io.err << "cachepawl serve: stopping" << std::endl;
  const StoreStats last = (*store)->Stats();
  const Status closed = (*store)->Close();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  if (json) io.out << last.ToJson() << std::endl;
  if (!closed.ok()) {
    io.err << "cachepawl serve: close: " << closed.ToString() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

const CommandRegistration kServe("serve", "Run an owner store other processes attach to", CmdServe);

}  // namespace
}  // namespace cachepawl::tools
