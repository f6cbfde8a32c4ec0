#include "tools/replay/replay_setup.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <utility>

#include "tiers/disk_folders.h"

namespace cachepawl::tools {

StoreOptions ReplaySetup::StoreOptionsIn(const std::string& dir) const {
  StoreOptions so;
  so.layout = layout;
  so.page_size_tokens = page_size_tokens;
  so.host_bytes = host_bytes;
  so.disk_bytes = disk_bytes;
  so.disk_dir = disk_bytes > 0 ? dir : "";
  so.remote.seeds = remote_seeds;
  so.remote.write_policy = remote_write_policy;
  so.write_policy = write_policy;
  so.eviction_policy = eviction_policy;
  so.device_pool_bytes = device_bytes;
  so.track_interval_pages = track_interval_pages;
  so.max_prompt_tokens = max_prompt_tokens;
  so.wipe_on_layout_mismatch = wipe_on_layout_mismatch;
  so.wipe_unreadable_catalog = wipe_unreadable_catalog;
  return so;
}

ReplayEngineOptions ReplaySetup::EngineOptions() const {
  ReplayEngineOptions eo;
  eo.ns = ns;
  eo.block_size_tokens = block_size_tokens;
  eo.track_interval_pages = track_interval_pages;
  eo.chunk_pages = chunk_pages;
  return eo;
}

CeilingOptions ReplaySetup::CeilingOptionsOf() const {
  CeilingOptions co;
  co.block_size_tokens = block_size_tokens;
  co.page_size_tokens = page_size_tokens;
  co.track_interval_pages = track_interval_pages;
  co.hybrid = layout.has_ssm();
  return co;
}

ReplayStoreDir::~ReplayStoreDir() {
  if (remove_ && !path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  if (reaper_pipe_ >= 0) ::close(reaper_pipe_);
  if (reaper_pid_ > 0) {
    while (::waitpid(reaper_pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

namespace {

// Starts `sh -c 'cat >/dev/null; exec rm -rf -- "$0"' <folder>` with its stdin the read end of a
// new pipe, in a session of its own. Returns the write end and the reaper's pid, or an error
// (the folder is then removed only by the destructor).
Status StartReaper(const std::string& folder, int* pipe_out, pid_t* pid_out) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno("pipe2", errno);
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_adddup2(&actions, fds[0], 0);
  ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, 1, 2);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &all);
  ::posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::string sh = "sh", c = "-c", script = "cat >/dev/null; exec rm -rf -- \"$0\"";
  std::string arg = folder;
  char* argv[] = {sh.data(), c.data(), script.data(), arg.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(fds[1]);
    return Status::FromErrno("posix_spawn /bin/sh", rc);
  }
  *pipe_out = fds[1];
  *pid_out = pid;
  return Status::OK();
}

}  // namespace

Status ReplayStoreDir::Use(const std::string& dir) {
  if (!dir.empty()) {
    // The store's folder: made 0700 (disk.dir), as the store would.
    CACHEPAWL_RETURN_IF_ERROR(CreateFolder(dir).WithContext("--dir"));
    path_ = dir;
    return Status::OK();
  }
  const char* base = std::getenv("TMPDIR");
  std::string templ =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/cachepawl-replay-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return Status::FromErrno("mkdtemp " + templ, errno);
  path_ = templ;
  remove_ = true;
  if (Status s = StartReaper(path_, &reaper_pipe_, &reaper_pid_); !s.ok()) {
    spdlog::warn(
        "replay: {} (the temporary folder {} is removed at exit, but not if the "
        "process is killed)",
        s.ToString(), path_);
  }
  return Status::OK();
}

StatusOr<ReplayReport> ReplayReportOf(const ReplaySetup& setup, ReplayRunResult run,
                                      const std::string& kept_dir) {
  CACHEPAWL_ASSIGN_OR_RETURN(Ceiling ceiling,
                             ComputeCeiling(run.replayed, setup.CeilingOptionsOf()));
  const ModelLayout& layout = setup.layout;
  ReplayReport report;
  report.source = setup.source;
  report.bad_trace_lines = setup.bad_trace_lines;
  report.layout = setup.layout_name;
  report.page_size_tokens = setup.page_size_tokens;
  report.block_size_tokens = setup.block_size_tokens;
  report.track_interval_pages = setup.track_interval_pages;
  report.device_bytes = setup.device_bytes;
  report.host_bytes = setup.host_bytes;
  report.disk_bytes = setup.disk_bytes;
  report.eviction_policy = EvictionPolicyName(setup.eviction_policy);
  report.kv_page_bytes = layout.KvPageBytes();
  report.state_bytes = layout.has_ssm() ? layout.MambaSlotBytes() : 0;
  report.full_record_bytes = layout.RecordBytes(Kind::kKV);
  report.window_record_bytes = layout.RecordBytes(Kind::kWindowKV);
  report.window_pages = layout.Stores(Kind::kWindowKV) ? layout.WindowPages() : 0;
  report.store_dir = kept_dir;
  report.wall_seconds = run.wall_seconds;
  report.concurrency = run.concurrency;
  report.crashes = run.crashes;
  report.owner_losses = run.owner_losses;
  report.kills_during_open = run.kills_during_open;
  report.reopens = run.reopens;
  report.ceiling = ceiling;
  report.totals = std::move(run.totals);
  report.store = run.store;
  return report;
}

StatusOr<ReplayReport> RunReplayInTemporaryDir(const ReplaySetup& setup,
                                               const RequestSource& source,
                                               const ReplayRunOptions& options) {
  if (options.crash_every > 0) {
    return Status::InvalidArgument("--crash-every: " + std::to_string(options.crash_every) +
                                   " (a run in a temporary folder has no crash mode)");
  }
  ReplayStoreDir dir;
  CACHEPAWL_RETURN_IF_ERROR(dir.Use(""));
  const StoreOptions so = setup.StoreOptionsIn(dir.path());
  CACHEPAWL_RETURN_IF_ERROR(so.Validate());
  StoreFactory open_store = [so] { return Store::Open(so); };
  CACHEPAWL_ASSIGN_OR_RETURN(ReplayRunResult run,
                             RunReplay(open_store, setup.EngineOptions(), source, options));
  return ReplayReportOf(setup, std::move(run), "");
}

}  // namespace cachepawl::tools
