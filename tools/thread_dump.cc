#include "tools/thread_dump.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace cachepawl::tools {
namespace {

constexpr int kMaxFrames = 64;
constexpr auto kStackWait = std::chrono::milliseconds(250);

// The one outstanding stack request: the thread asked, and its frames once it answered.
std::atomic<pid_t> g_target{0};
std::atomic<int> g_count{-1};
void* g_frames[kMaxFrames];

pid_t Tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

int StackSignal() { return SIGRTMIN + 4; }

void OnStackRequest(int, siginfo_t*, void*) {
  const int saved_errno = errno;
  if (Tid() == g_target.load(std::memory_order_acquire)) {
    const int n = ::backtrace(g_frames, kMaxFrames);
    g_count.store(n, std::memory_order_release);
  }
  errno = saved_errno;
}

// Installs the handler once and for good (see the header); false when that failed.
bool InstallHandler() {
  static const bool installed = [] {
    void* warm[2];
    (void)::backtrace(warm, 2);  // loads the unwinder now, outside any signal handler
    struct sigaction sa {};
    sa.sa_sigaction = &OnStackRequest;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return ::sigaction(StackSignal(), &sa, nullptr) == 0;
  }();
  return installed;
}

std::string ReadSmall(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

const char* StateName(char s) {
  switch (s) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "uninterruptible: inside the kernel, signals wait";
    case 'T':
      return "stopped";
    case 't':
      return "traced";
    case 'Z':
      return "zombie";
    case 'X':
      return "dead";
    case 'I':
      return "idle";
    default:
      return "?";
  }
}

// The name of an x86-64 system call the store's threads are found in, and whether its first
// argument is a file descriptor; empty elsewhere (the number is printed then).
struct SyscallName {
  long nr;
  const char* name;
  bool fd_first;
};
constexpr SyscallName kSyscalls[] = {
#if defined(__x86_64__)
    {0, "read", true},
    {1, "write", true},
    {7, "poll", false},
    {16, "ioctl", true},
    {17, "pread64", true},
    {18, "pwrite64", true},
    {19, "readv", true},
    {20, "writev", true},
    {23, "select", false},
    {35, "nanosleep", false},
    {42, "connect", true},
    {43, "accept", true},
    {44, "sendto", true},
    {45, "recvfrom", true},
    {46, "sendmsg", true},
    {47, "recvmsg", true},
    {61, "wait4", false},
    {74, "fsync", true},
    {75, "fdatasync", true},
    {202, "futex", false},
    {230, "clock_nanosleep", false},
    {232, "epoll_wait", true},
    {270, "pselect6", false},
    {271, "ppoll", false},
    {281, "epoll_pwait", true},
    {288, "accept4", true},
    {295, "preadv", true},
    {296, "pwritev", true},
    {327, "preadv2", true},
    {328, "pwritev2", true},
    {426, "io_uring_enter", true},
#endif
    {-1, nullptr, false}};

// /proc/self/task/T/syscall ("NR a1 a2 ... sp pc", "-1 sp pc", "running") in words.
std::string DescribeSyscall(const std::string& raw) {
  if (raw.empty()) return "unknown";
  if (raw == "running") return "none (running)";
  std::istringstream in(raw);
  long nr = 0;
  in >> nr;
  if (nr < 0) return "none (blocked outside a system call)";
  std::vector<std::string> args;
  for (std::string a; args.size() < 3 && in >> a;) args.push_back(a);
  const SyscallName* known = nullptr;
  for (const SyscallName& s : kSyscalls) {
    if (s.nr == nr && s.name != nullptr) known = &s;
  }
  std::string out = known ? known->name : "syscall " + std::to_string(nr);
  out += "(";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ", ";
    out += args[i];
    if (i == 0 && known && known->fd_first) {
      const long fd = std::strtol(args[0].c_str(), nullptr, 16);
      char target[256];
      const std::string link = "/proc/self/fd/" + std::to_string(fd);
      const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
      if (n > 0) out += " = fd " + std::to_string(fd) + " -> " + std::string(target, n);
    }
  }
  return out + ")";
}

std::string Frame(int i, void* addr) {
  char line[64];
  std::snprintf(line, sizeof(line), "    #%-2d %p", i, addr);
  std::string out = line;
  Dl_info info{};
  if (::dladdr(addr, &info) == 0 || info.dli_fname == nullptr) return out;
  const auto offset =
      reinterpret_cast<uintptr_t>(addr) - reinterpret_cast<uintptr_t>(info.dli_fbase);
  std::snprintf(line, sizeof(line), "+0x%zx", static_cast<size_t>(offset));
  out += std::string(" ") + info.dli_fname + line;
  if (info.dli_sname != nullptr) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    out += std::string(" ") + (status == 0 && demangled ? demangled : info.dli_sname);
    std::free(demangled);
  }
  return out;
}

// The user stack of thread `tid` (this thread's own directly), or why there is none.
std::string UserStack(pid_t tid, bool handler) {
  int n = 0;
  void* frames[kMaxFrames];
  if (tid == Tid()) {
    n = ::backtrace(frames, kMaxFrames);
  } else {
    if (!handler) return "    (no user stack: the stack signal's handler could not be installed)\n";
    g_count.store(-1, std::memory_order_relaxed);
    g_target.store(tid, std::memory_order_release);
    if (::syscall(SYS_tgkill, ::getpid(), tid, StackSignal()) != 0) {
      g_target.store(0);
      return "    (no user stack: the thread is gone)\n";
    }
    const auto deadline = std::chrono::steady_clock::now() + kStackWait;
    while ((n = g_count.load(std::memory_order_acquire)) < 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    g_target.store(0, std::memory_order_release);
    if (n < 0) {
      return "    (no user stack: the thread did not take the request in 250 ms: inside the kernel "
             "or signals blocked)\n";
    }
    std::memcpy(frames, g_frames, sizeof(void*) * static_cast<size_t>(n));
  }
  std::string out;
  for (int i = 0; i < n; ++i) out += Frame(i, frames[i]) + "\n";
  return out;
}

}  // namespace

std::string DumpThreads() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const bool handler = InstallHandler();
  std::vector<pid_t> tids;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(dir)) {
      if (e->d_name[0] != '.') tids.push_back(static_cast<pid_t>(std::atol(e->d_name)));
    }
    ::closedir(dir);
  }
  std::string out = "process " + std::to_string(::getpid()) + ": " + std::to_string(tids.size()) +
                    " threads (this one: " + std::to_string(Tid()) + ")\n";
  for (pid_t tid : tids) {
    const std::string task = "/proc/self/task/" + std::to_string(tid);
    const std::string stat = ReadSmall(task + "/stat");
    const size_t paren = stat.rfind(')');
    const char state =
        paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
    const std::string wchan = ReadSmall(task + "/wchan");
    out += "thread " + std::to_string(tid) + " \"" + ReadSmall(task + "/comm") + "\" state " +
           state + " (" + StateName(state) + ") wchan " +
           (wchan.empty() || wchan == "0" ? "-" : wchan) + " syscall " +
           DescribeSyscall(ReadSmall(task + "/syscall")) + "\n";
    out += UserStack(tid, handler);
    const std::string kernel = ReadSmall(task + "/stack");
    if (!kernel.empty()) out += "    kernel stack:\n" + kernel + "\n";
  }
  return out;
}

}  // namespace cachepawl::tools
