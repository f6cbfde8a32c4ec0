#include "tools/bench/bench_lookup_load.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <vector>

#include "store/store.h"

extern char** environ;

namespace cachepawl::tools::bench_store {

StatusOr<std::unique_ptr<LookupLoad>> LookupLoad::Start(const std::string& self,
                                                        const std::string& socket) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno("lookup load: pipe", errno);
  std::vector<std::string> args = {self, "bench", "store", "--lookup-load", socket};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::unique_ptr<LookupLoad> load(new LookupLoad());
  const int rc = posix_spawn(&load->pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    load->pid_ = -1;
    return Status::FromErrno("lookup load: starting '" + self + "'", rc);
  }
  // Its first line says it is attached and looking up (at most 60 s).
  pollfd p{fds[0], POLLIN, 0};
  char buf[64] = {};
  const bool ready = poll(&p, 1, 60000) > 0 && read(fds[0], buf, sizeof(buf) - 1) > 0;
  close(fds[0]);
  if (!ready) return Status::Unavailable("lookup load: the process did not attach within 60 s");
  return load;
}

LookupLoad::~LookupLoad() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int st = 0;
  while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
}

int RunLookupLoad(const std::string& socket) {
  AttachOptions ao;
  ao.socket_path = socket;
  ao.cuda_device = -1;
  auto store = Store::Attach(ao);
  if (!store.ok()) {
    std::fprintf(stderr, "lookup load: %s\n", store.status().ToString().c_str());
    return 1;
  }
  const uint32_t page = (*store)->layout().page_size_tokens;
  std::mt19937 rng(static_cast<uint32_t>(getpid()));
  std::vector<uint32_t> tokens(2048 * page);
  for (uint32_t& t : tokens) t = rng() % 128000;
  const std::vector<PageHash> hashes = (*store)->HashTokens("", tokens);
  std::printf("looking up\n");
  std::fflush(stdout);
  for (;;) {
    auto m = (*store)->LookupHashes(hashes);
    if (!m.ok()) return m.status().IsUnavailable() ? 0 : 1;
  }
}

}  // namespace cachepawl::tools::bench_store
