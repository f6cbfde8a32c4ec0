// RunProcesses (tools/replay/replay_processes.h).
#include "tools/replay/replay_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "store/store.h"
#include "tools/command.h"
#include "tools/replay/replay_replicas.h"

extern char** environ;

namespace cachepawl::tools {
namespace {

using Clock = std::chrono::steady_clock;

bool Listening(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), std::min(path.size(), sizeof(addr.sun_path) - 1));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// The owner as a process of its own (`cachepawl serve`), for --kill-owner.
class OwnerProcess {
 public:
  OwnerProcess(std::string self, std::vector<std::string> args, std::string socket)
      : self_(std::move(self)), args_(std::move(args)), socket_(std::move(socket)) {}
  ~OwnerProcess() { Stop(SIGKILL); }

  // Starts it and waits until it listens (at most 120 s: a large disk tier recovers first).
  Status Start() {
    std::vector<std::string> argv_strings = {self_, "serve"};
    argv_strings.insert(argv_strings.end(), args_.begin(), args_.end());
    argv_strings.push_back("--socket");
    argv_strings.push_back(socket_);
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return Status::FromErrno("--kill-owner: starting the owner", rc);
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return Status::Unavailable("--kill-owner: the owner (cachepawl serve) exited at start");
      }
      if (Listening(socket_)) return Status::OK();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::TimedOut("--kill-owner: the owner did not listen within 120 s");
  }
  void Stop(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  const std::string self_;
  const std::vector<std::string> args_;
  const std::string socket_;
  pid_t pid_ = -1;
};

// The owner's stats through an attached store (for an owner in another process).
std::optional<StoreStats> AskOwner(const std::string& socket) {
  AttachOptions ao;
  ao.socket_path = socket;
  ao.cuda_device = -1;
  ao.call_timeout_ms = 5000;
  auto store = Store::Attach(ao);
  if (!store.ok()) return std::nullopt;
  StoreStats st = (*store)->Stats();
  (void)(*store)->Close();
  return st;
}

uint64_t Sum(const nlohmann::json& reports, const char* key) {
  uint64_t total = 0;
  for (const auto& r : reports) {
    if (r.is_object() && r.contains(key) && r[key].is_number()) total += r[key].get<uint64_t>();
  }
  return total;
}

}  // namespace

int RunProcesses(const std::string& self, const std::vector<std::string>& child_args,
                 const ProcessesRun& run, std::ostream& out, std::ostream& err) {
  char dir_template[] = "/tmp/cachepawl-owner.XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    err << "cachepawl replay: --processes: cannot make a temporary folder: " << std::strerror(errno)
        << "\n";
    return kExitFailure;
  }
  const std::string dir = dir_template;
  const std::string socket = dir + "/owner.sock";
  std::unique_ptr<Store> owner;
  std::unique_ptr<OwnerProcess> owner_process;
  if (run.kill_owner) {
    owner_process = std::make_unique<OwnerProcess>(self, run.serve_args, socket);
    if (Status s = owner_process->Start(); !s.ok()) {
      err << "cachepawl replay: " << s.ToString() << "\n";
      std::filesystem::remove_all(dir);
      return kExitFailure;
    }
  } else {
    ServeOptions so;
    so.socket_path = socket;
    auto served = Store::Serve(run.owner, so);
    if (!served.ok()) {
      err << "cachepawl replay: --processes: " << served.status().ToString() << "\n";
      std::filesystem::remove_all(dir);
      return served.status().IsInvalidArgument() ? kExitUsage : kExitFailure;
    }
    owner = std::move(served).value();
  }

  // --kill-owner: SIGKILL the owner every 2 to 6 s and start it again; what each owner reclaimed
  // from dead clients is asked for just before its kill.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  uint64_t owner_kills = 0;
  ServeStats reclaimed;
  Status killer_error;
  auto add = [&](const ServeStats& s) {
    reclaimed.attaches += s.attaches;
    reclaimed.clients_gone += s.clients_gone;
    reclaimed.locks_released += s.locks_released;
    reclaimed.copies_failed += s.copies_failed;
    reclaimed.reclaim_max_us = std::max(reclaimed.reclaim_max_us, s.reclaim_max_us);
    reclaimed.bad_messages += s.bad_messages;
    reclaimed.refused += s.refused;
  };
  std::thread killer;
  if (run.kill_owner) {
    killer = std::thread([&] {
      std::mt19937_64 rng(run.seed);
      std::unique_lock<std::mutex> lock(mu);
      for (;;) {
        const auto wait = std::chrono::milliseconds(2000 + rng() % 4000);
        if (cv.wait_for(lock, wait, [&] { return stop; })) return;
        lock.unlock();
        if (auto st = AskOwner(socket)) add(st->serve);
        owner_process->Stop(SIGKILL);
        Status s = owner_process->Start();
        lock.lock();
        ++owner_kills;
        if (!s.ok()) {
          killer_error = s;
          return;
        }
      }
    });
  }

  std::vector<std::string> args = child_args;
  args.push_back("--attach");
  args.push_back(socket);
  nlohmann::json reports;
  const auto start = Clock::now();
  int code = RunReplayShares(self, args, run.processes, "--processes", err, &reports);
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  if (killer.joinable()) killer.join();
  if (owner) {
    add(owner->Stats().serve);
    (void)owner->Close();
  } else {
    if (auto st = AskOwner(socket)) add(st->serve);
    owner_process->Stop(SIGTERM);
  }
  std::filesystem::remove_all(dir);
  if (!killer_error.ok()) {
    err << "cachepawl replay: " << killer_error.ToString() << "\n";
    code = kExitFailure;
  }
  const uint64_t wrong = Sum(reports, "wrong_bytes");
  if (wrong > 0 && code == kExitOk) code = kExitFailure;

  nlohmann::json totals = {{"requests", Sum(reports, "requests")},
                           {"verified_bytes", Sum(reports, "verified_bytes")},
                           {"verified_records", Sum(reports, "verified_records")},
                           {"wrong_bytes", wrong},
                           {"wrong_records", Sum(reports, "wrong_records")},
                           {"store_errors", Sum(reports, "store_errors")},
                           {"client_kills", Sum(reports, "crashes")},
                           {"owner_losses", Sum(reports, "owner_losses")},
                           {"wall_seconds", wall}};
  nlohmann::json owner_json = {{"in_process", !run.kill_owner}, {"kills", owner_kills}};
  for (const auto& [name, value] : reclaimed.Fields()) {
    if (std::string(name) != "clients_now" && std::string(name) != "calls")
      owner_json[name] = value;
  }
  if (run.json) {
    out << nlohmann::json{{"ok", code == kExitOk},
                          {"processes", reports},
                          {"totals", totals},
                          {"owner", owner_json}}
               .dump(2)
        << "\n";
    return code;
  }
  out << "cachepawl replay: " << run.processes << " engine processes attached to one store ("
      << (run.kill_owner
              ? "the owner a process of its own, killed " + std::to_string(owner_kills) + " times"
              : std::string("the owner in this process"))
      << ")\n\n"
      << "process  requests   hit pages  verified bytes  wrong bytes  client kills  owner losses  "
         "store errors\n";
  for (size_t i = 0; i < reports.size(); ++i) {
    const nlohmann::json& r = reports[i];
    if (!r.is_object()) {
      out << std::setw(7) << i << "  (no report)\n";
      continue;
    }
    out << std::setw(7) << i << std::setw(10) << r.value("requests", uint64_t{0}) << std::fixed
        << std::setprecision(1) << std::setw(11)
        << 100 * (r.contains("hit_rate") ? r["hit_rate"].value("pages", 0.0) : 0.0) << "%"
        << std::setw(16) << r.value("verified_bytes", uint64_t{0}) << std::setw(13)
        << r.value("wrong_bytes", uint64_t{0}) << std::setw(14) << r.value("crashes", uint64_t{0})
        << std::setw(14) << r.value("owner_losses", uint64_t{0}) << std::setw(14)
        << r.value("store_errors", uint64_t{0}) << "\n";
  }
  out << "\ntotal: " << totals["requests"].get<uint64_t>() << " requests in "
      << std::setprecision(1) << wall << " s, " << totals["verified_bytes"].get<uint64_t>()
      << " bytes verified, " << wrong << " wrong; " << totals["client_kills"].get<uint64_t>()
      << " client processes killed, " << totals["owner_losses"].get<uint64_t>()
      << " found the owner gone\n"
      << "owner: " << reclaimed.attaches << " attaches, " << reclaimed.clients_gone
      << " clients gone; of dead clients " << reclaimed.locks_released << " locks released and "
      << reclaimed.copies_failed << " copies failed (their slots freed), the longest reclaim "
      << reclaimed.reclaim_max_us << " us after the connection ended\n"
      << (code == kExitOk ? "OK" : "FAILED") << "\n";
  return code;
}

}  // namespace cachepawl::tools
