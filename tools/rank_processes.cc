#include "tools/rank_processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cuda/gpu_runtime.h"

extern char** environ;

namespace cachepawl::tools {

RankProcesses::~RankProcesses() {
  for (size_t r = 0; r < procs_.size(); ++r) Kill(r);
}

void RankProcesses::Kill(size_t r) {
  Proc& p = procs_[r];
  if (p.in >= 0) close(p.in);
  if (p.out >= 0) close(p.out);
  p.in = p.out = -1;
  if (p.pid > 0) {
    kill(p.pid, SIGKILL);
    int st = 0;
    while (waitpid(p.pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  p.pid = -1;
  p.buffer.clear();
}

Status RankProcesses::Start(size_t r, const std::vector<std::string>& args,
                            const std::string& gpu) {
  if (r > procs_.size()) return Status::InvalidArgument("rank process " + std::to_string(r));
  if (r == procs_.size()) procs_.emplace_back();
  Kill(r);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return Status::FromErrno("rank process: pipe", errno);
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return Status::FromErrno("rank process: pipe", errno);
  }
  std::vector<std::string> argv_text = args;
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (gpu.empty() || std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0) env_text.push_back(*e);
  }
  if (!gpu.empty()) env_text.push_back("CUDA_VISIBLE_DEVICES=" + gpu);
  std::vector<char*> envp;
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  Proc& p = procs_[r];
  const int rc = posix_spawn(&p.pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  p.in = in[1];
  p.out = out[0];
  if (rc != 0) {
    p.pid = -1;
    return Status::FromErrno("rank process: starting '" + args[0] + "'", rc);
  }
  return Status::OK();
}

Status RankProcesses::Send(size_t r, const std::string& line) {
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(procs_[r].in, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::Unavailable("rank " + std::to_string(r) + " (pid " +
                                 std::to_string(procs_[r].pid) + ") is gone");
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

StatusOr<std::string> RankProcesses::Read(size_t r, double seconds) {
  Proc& p = procs_[r];
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::min(seconds, 1e7)));
  for (;;) {
    const size_t nl = p.buffer.find('\n');
    if (nl != std::string::npos) {
      std::string line = p.buffer.substr(0, nl);
      p.buffer.erase(0, nl + 1);
      return line;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Status::TimedOut("rank " + std::to_string(r));
    pollfd pfd{p.out, POLLIN, 0};
    const int n = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) return Status::FromErrno("poll", errno);
    if (n <= 0) continue;
    char chunk[4096];
    const ssize_t got = read(p.out, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return Status::Unavailable("rank " + std::to_string(r) + " (pid " + std::to_string(p.pid) +
                                 ") ended");
    }
    p.buffer.append(chunk, static_cast<size_t>(got));
  }
}

std::string GpuOfRank(uint32_t r) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<std::string> ids;
  if (visible != nullptr && *visible != '\0') {
    std::stringstream in(visible);
    for (std::string id; std::getline(in, id, ',');) ids.push_back(id);
  } else {
    for (int i = 0; i < cuda::DeviceCount(); ++i) ids.push_back(std::to_string(i));
  }
  return ids.empty() ? "" : ids[r % ids.size()];
}

AttachOptions RankAttachOptions(const std::string& socket, uint32_t rank, bool gpu,
                                uint64_t pool_bytes) {
  AttachOptions ao;
  ao.socket_path = socket;
  ao.tp_rank = rank;
  ao.cuda_device = gpu ? 0 : -1;  // (CUDA_VISIBLE_DEVICES names this rank's GPU)
  ao.device_pool_bytes = pool_bytes;
  ao.call_timeout_ms = 120000;
  ao.owner_timeout_ms = 120000;
  return ao;
}

std::string DescribeThreadsOf(pid_t pid) {
  std::ostringstream o;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator(task_dir, ec)) {
    std::ifstream comm(t.path() / "comm"), stat(t.path() / "stat"), wchan(t.path() / "wchan");
    std::string name, fields, where;
    std::getline(comm, name);
    std::getline(stat, fields);
    std::getline(wchan, where);
    const size_t paren = fields.rfind(')');
    const char state =
        paren != std::string::npos && paren + 2 < fields.size() ? fields[paren + 2] : '?';
    o << "  thread " << t.path().filename().string() << " \"" << name << "\" state " << state
      << " wchan " << (where.empty() ? "-" : where) << "\n";
  }
  if (ec) o << "  (" << task_dir << ": " << ec.message() << ")\n";
  return o.str();
}

}  // namespace cachepawl::tools
