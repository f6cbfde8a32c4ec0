// RankProcesses: the processes of a tensor-parallel run's ranks (`bench store --tp-size`,
// `replay --tp-size`), each this program run again, driven one line at a time over its stdin
// and answering one line at a time on its stdout. Every process is SIGKILLed and reaped when
// the RankProcesses goes, so that a failing run leaves none behind.
//
// Thread safety: one thread drives a RankProcesses.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "vocab/attach_options.h"
#include "vocab/status.h"

namespace cachepawl::tools {

class RankProcesses {
 public:
  RankProcesses() = default;
  ~RankProcesses();
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  // Starts process `r` running `argv` (argv[0] the program): r == size() adds one, r < size()
  // replaces one that was killed. `gpu` not empty: its CUDA_VISIBLE_DEVICES.
  Status Start(size_t r, const std::vector<std::string>& argv, const std::string& gpu);
  // Writes `line` and a newline to r's stdin; Unavailable when it is gone.
  Status Send(size_t r, const std::string& line);
  // r's next line (without the newline): TimedOut after `seconds`, Unavailable once its stdout
  // ended (it exited or was killed).
  StatusOr<std::string> Read(size_t r, double seconds);
  // SIGKILLs r and reaps it.
  void Kill(size_t r);
  pid_t pid(size_t r) const { return procs_[r].pid; }
  size_t size() const { return procs_.size(); }

 private:
  struct Proc {
    pid_t pid = -1;
    int in = -1, out = -1;
    std::string buffer;
  };
  std::vector<Proc> procs_;
};

// The GPU rank r runs on: the r-th (modulo their number) of CUDA_VISIBLE_DEVICES's list, or of
// the devices CUDA sees; "" when there is none.
std::string GpuOfRank(uint32_t r);

// The attach options of a rank process (one of RankProcesses, started with GpuOfRank's GPU as
// its only visible device): rank `rank` of the group served on `socket`, a device pool of its
// own of `pool_bytes`, calls and an owner allowed two minutes (a Save may wait for host room).
AttachOptions RankAttachOptions(const std::string& socket, uint32_t rank, bool gpu,
                                uint64_t pool_bytes);

// What /proc says every thread of `pid` waits on, a line each (a rank that stopped answering).
std::string DescribeThreadsOf(pid_t pid);

}  // namespace cachepawl::tools
