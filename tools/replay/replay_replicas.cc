// RunReplicas (tools/replay/replay_replicas.h).
#include "tools/replay/replay_replicas.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/command.h"

namespace cachepawl::tools {
namespace {

struct Child {
  pid_t pid = -1;
  std::string output;  // its stdout file
  int status = 0;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int RunReplayShares(const std::string& self, const std::vector<std::string>& args, uint32_t shares,
                    const char* what, std::ostream& err, nlohmann::json* reports_out) {
  const uint32_t replicas = shares;
  char dir_template[] = "/tmp/cachepawl-replicas.XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    err << "cachepawl replay: " << what
        << ": cannot make a temporary folder: " << std::strerror(errno) << "\n";
    return kExitFailure;
  }
  const std::string dir = dir_template;
  std::vector<Child> children(replicas);
  for (uint32_t i = 0; i < replicas; ++i) {
    std::vector<std::string> argv_strings = {self, "replay"};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    argv_strings.push_back("--replica");
    argv_strings.push_back(std::to_string(i) + "/" + std::to_string(replicas));
    argv_strings.push_back("--json");
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    children[i].output = dir + "/replica-" + std::to_string(i) + ".json";
    const int fd =
        ::open(children[i].output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      err << "cachepawl replay: " << what << ": " << children[i].output << ": "
          << std::strerror(errno) << "\n";
      break;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    ::close(fd);
    if (pid < 0) {
      err << "cachepawl replay: " << what << ": fork: " << std::strerror(errno) << "\n";
      break;
    }
    children[i].pid = pid;
  }
  int code = kExitOk;
  nlohmann::json reports = nlohmann::json::array();
  for (uint32_t i = 0; i < replicas; ++i) {
    Child& c = children[i];
    if (c.pid < 0) {
      code = kExitUsage;
      reports.push_back(nullptr);
      continue;
    }
    while (::waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
    }
    const int exit_code = WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 128;
    if (exit_code != kExitOk) {
      err << "cachepawl replay: " << (std::string(what) == "--replicas" ? "replica " : "process ")
          << i << " of " << replicas << " exited with " << exit_code << "\n";
      code = exit_code == kExitUsage || exit_code == 127 ? kExitUsage
             : code == kExitOk                           ? kExitFailure
                                                         : code;
    }
    auto report = nlohmann::json::parse(ReadAll(c.output), nullptr, /*allow_exceptions=*/false);
    reports.push_back(report.is_discarded() ? nlohmann::json(nullptr) : report);
    (void)::unlink(c.output.c_str());
  }
  (void)::rmdir(dir.c_str());
  *reports_out = std::move(reports);
  return code;
}

int RunReplicas(const std::string& self, const std::vector<std::string>& args, uint32_t replicas,
                bool json, std::ostream& out, std::ostream& err) {
  nlohmann::json reports;
  const int code = RunReplayShares(self, args, replicas, "--replicas", err, &reports);
  if (json) {
    out << nlohmann::json{{"ok", code == kExitOk}, {"replicas", reports}}.dump(2) << "\n";
    return code;
  }
  out << "cachepawl replay: " << replicas
      << " replicas behind a round-robin router, one remote tier\n\n"
      << "replica  requests   hit pages  from remote   remote fetched  remote written  wrong "
         "bytes\n";
  for (uint32_t i = 0; i < replicas; ++i) {
    const nlohmann::json& r = reports[i];
    if (!r.is_object()) {
      out << std::setw(7) << i << "  (no report)\n";
      continue;
    }
    const auto& remote = r.contains("remote") ? r["remote"] : nlohmann::json::object();
    out << std::setw(7) << i << std::setw(10) << r.value("requests", 0) << std::fixed
        << std::setprecision(1) << std::setw(11) << 100 * r["hit_rate"].value("pages", 0.0) << "%"
        << std::setw(12) << 100 * r["hit_rate_by_tier"]["remote"].value("pages", 0.0) << "%"
        << std::setw(17) << remote.value("loaded", 0) << std::setw(16) << remote.value("writes", 0)
        << std::setw(13) << r.value("wrong_bytes", 0) << "\n";
  }
  out << (code == kExitOk ? "OK" : "FAILED") << "\n";
  return code;
}

}  // namespace cachepawl::tools
