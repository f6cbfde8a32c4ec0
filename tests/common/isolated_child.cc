#include "tests/common/isolated_child.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "tests/common/test_util.h"

extern char** environ;

namespace cachepawl::testing {
namespace {

constexpr char kDirEnv[] = "CACHEPAWL_ISOLATED_DIR";
constexpr char kFdEnv[] = "CACHEPAWL_ISOLATED_FD";
constexpr uid_t kNobody = 65534;
// Records on the pipe: a tag, the text, a NUL. 'R': the child reached the scenario; 'F': a
// failure; 'S': the world could not be made (the text: the call, a space, the errno).
constexpr char kRan = 'R', kFailure = 'F', kCannot = 'S';

// Async-signal-safe (the forked child of a threaded process may call nothing else before
// execve): writes `tag`, `what`, a space, the decimal `err`, and a NUL.
void ChildReport(int fd, char tag, const char* what, int err) {
  char buf[160];
  size_t n = 0;
  buf[n++] = tag;
  for (const char* p = what; *p != '\0' && n < sizeof(buf) - 16; ++p) buf[n++] = *p;
  buf[n++] = ' ';
  char digits[12];
  int d = 0;
  unsigned v = err < 0 ? 0u : static_cast<unsigned>(err);
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (d > 0) buf[n++] = digits[--d];
  buf[n++] = '\0';
  ssize_t w = ::write(fd, buf, n);
  (void)w;
}

bool WriteAll(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t n = std::strlen(text);
  const bool ok = ::write(fd, text, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

// In the forked child: makes the world, then runs the test again. Never returns.
[[noreturn]] void ChildMain(const IsolatedWorld& world, int fd, char** argv, char** envp,
                            const char* uid_map, const char* gid_map, const char* tmpfs_opts,
                            bool switch_user) {
  if (::fcntl(fd, F_SETFD, 0) != 0) {  // the pipe crosses execve
    ChildReport(fd, kCannot, "fcntl", errno);
    ::_exit(77);
  }
  if (world.kind == ChildWorld::kTmpfs) {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      ChildReport(fd, kCannot, "unshare(CLONE_NEWUSER|CLONE_NEWNS)", errno);
      ::_exit(77);
    }
    (void)WriteAll("/proc/self/setgroups", "deny");  // absent on old kernels
    if (!WriteAll("/proc/self/uid_map", uid_map) || !WriteAll("/proc/self/gid_map", gid_map)) {
      ChildReport(fd, kCannot, "writing /proc/self/uid_map", errno);
      ::_exit(77);
    }
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      ChildReport(fd, kCannot, "mount --make-rprivate /", errno);
      ::_exit(77);
    }
    if (::mount("tmpfs", world.dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_opts) != 0) {
      ChildReport(fd, kCannot, "mount -t tmpfs", errno);
      ::_exit(77);
    }
  } else if (switch_user) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      ChildReport(fd, kCannot, "setgroups/setgid/setuid(65534)", errno);
      ::_exit(77);
    }
  }
  ::execve(argv[0], argv, envp);
  ChildReport(fd, kFailure, "execve /proc/self/exe: errno", errno);
  ::_exit(127);
}

class PipeReporter final : public ::testing::EmptyTestEventListener {
 public:
  explicit PipeReporter(int fd) : fd_(fd) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::string rec(1, kFailure);
    rec += r.file_name() != nullptr ? r.file_name() : "?";
    rec += ":" + std::to_string(r.line_number()) + ": " + r.message();
    rec.push_back('\0');
    Send(rec);
  }
  void Send(const std::string& rec) {
    ssize_t w = ::write(fd_, rec.data(), rec.size());
    (void)w;
  }

 private:
  int fd_;
};

std::string ErrnoText(const std::string& record) {
  const size_t space = record.rfind(' ');
  if (space == std::string::npos) return record;
  const int err = std::atoi(record.c_str() + space + 1);
  const char* name = ::strerrorname_np(err);
  return record.substr(0, space) + ": " + (name != nullptr ? name : "errno") + " (" +
         std::strerror(err) + ")";
}

}  // namespace

const char* IsolatedChildDir() {
  static const char* const dir = [] {
    const char* d = std::getenv(kDirEnv);
    const char* fd = std::getenv(kFdEnv);
    if (d == nullptr || fd == nullptr) return static_cast<const char*>(nullptr);
    auto* reporter = new PipeReporter(std::atoi(fd));
    ::testing::UnitTest::GetInstance()->listeners().Append(reporter);  // owned by gtest
    reporter->Send(std::string(1, kRan) + '\0');
    return d;
  }();
  return dir;
}

IsolatedRun RunIsolated(const IsolatedWorld& world) {
  IsolatedRun run;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string filter = "--gtest_filter=";
  filter += info->test_suite_name();
  filter += ".";
  filter += info->name();
  const bool switch_user = world.kind == ChildWorld::kUnprivileged && ::geteuid() == 0;
  if (switch_user) {
    std::error_code ec;
    (void)::chown(world.dir.c_str(), kNobody, kNobody);
    for (const auto& e : std::filesystem::recursive_directory_iterator(world.dir, ec)) {
      (void)::lchown(e.path().c_str(), kNobody, kNobody);
    }
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return run;
  }
  // Everything the child needs is built here: after fork it may only make system calls.
  const std::string env_dir = std::string(kDirEnv) + "=" + world.dir;
  const std::string env_fd = std::string(kFdEnv) + "=" + std::to_string(fds[1]);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    // Not GTEST_OUTPUT and friends: the child must not overwrite the parent's reports.
    if (std::strncmp(*e, "GTEST_", 6) != 0) envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(env_dir.c_str()));
  envp.push_back(const_cast<char*>(env_fd.c_str()));
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  const std::string uid_map = "0 " + std::to_string(::getuid()) + " 1";
  const std::string gid_map = "0 " + std::to_string(::getgid()) + " 1";
  const std::string tmpfs_opts = "size=" + std::to_string(world.tmpfs_bytes) + ",mode=0700";

  const pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return run;
  }
  if (pid == 0) {
    ::close(fds[0]);
    ChildMain(world, fds[1], argv, envp.data(), uid_map.c_str(), gid_map.c_str(),
              tmpfs_opts.c_str(), switch_user);
  }
  ::close(fds[1]);
  std::string all;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      all.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  bool ran = false;
  std::vector<std::string> failures;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find('\0', pos);
    if (end == std::string::npos) end = all.size();
    const std::string rec = all.substr(pos, end - pos);
    pos = end + 1;
    if (rec.empty()) continue;
    if (rec[0] == kRan) ran = true;
    if (rec[0] == kFailure) failures.push_back(rec.substr(1));
    if (rec[0] == kCannot) run.skip_reason = ErrnoText(rec.substr(1));
  }
  if (!run.skip_reason.empty()) {
#if defined(__SANITIZE_THREAD__)
    // TSan's runtime runs a thread of its own in every process, and unshare(CLONE_NEWUSER)
    // refuses a multi-threaded caller (EINVAL): the plain and ASan builds run these scenarios.
    const bool must_run = false;
#else
    const char* ci = std::getenv("CI");
    const bool must_run = ci != nullptr && std::string(ci) == "true";
#endif
    if (must_run) {
      ADD_FAILURE() << "cannot make the test's world (" << run.skip_reason
                    << "); CI=true: this scenario must run in CI";
      run.skip_reason.clear();
    } else {
      run.skipped = true;
      run.skip_reason = "cannot make the test's world: " + run.skip_reason;
    }
    return run;
  }
  for (const std::string& f : failures) ADD_FAILURE() << "in the child: " << f;
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << "the child was killed by signal " << WTERMSIG(status) << " ("
                  << ::strsignal(WTERMSIG(status)) << ")";
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << "the child exited with status " << WEXITSTATUS(status);
  }
  if (!ran) ADD_FAILURE() << "the child never reached the scenario (" << filter << ")";
  return run;
}

void RunInIsolatedChild(ChildWorld kind, void (*scenario)(const std::string& dir),
                        uint64_t tmpfs_bytes) {
  if (const char* dir = IsolatedChildDir()) return scenario(dir);
  TempDir tmp;
  const IsolatedRun run = RunIsolated({kind, tmp.str(), tmpfs_bytes});
  if (run.skipped) GTEST_SKIP() << run.skip_reason;
}

}  // namespace cachepawl::testing
