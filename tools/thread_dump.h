// What every thread of this process is waiting on, for a watchdog's report when a command stops
// making progress (docs/RELIABILITY.md, "Watchdogs").
//
// DumpThreads() lists each thread of /proc/self/task:
//   thread 4242 "cachepawl" state S (sleeping) wchan futex_wait_queue syscall futex(0x7f..., 0x80)
//   thread 4250 "cuda-EvtHandlr" state D (uninterruptible: inside the kernel, signals wait)
//     wchan uvm_... syscall ioctl(fd 7 -> /dev/nvidia-uvm, 0x...)
// then the thread's user stack (one frame a line: address, module + offset for addr2line, and
// the symbol where the module exports it; the `cachepawl` tool exports its symbols), and its
// kernel stack where /proc lets this process read it (root). A thread that does not take the
// stack request within 250 ms (state D: inside a driver or an uninterruptible wait; or signals
// blocked) is listed without its user stack, saying so.
//
// The user stacks are taken with a real-time signal (SIGRTMIN + 4) sent to each thread in turn;
// its handler stays installed after the first dump (a request that arrives late must not kill
// the process) and does nothing for threads not asked. Call DumpThreads from one thread at a
// time (a mutex serializes concurrent calls); it allocates, so it is not for signal handlers.
//
// Thread safety: safe to call from any thread; the dump describes the process at that moment.
#pragma once

#include <string>

namespace cachepawl::tools {

std::string DumpThreads();

}  // namespace cachepawl::tools
