// Channel: one end of an owner <-> client connection (a Unix domain stream socket), as frames:
//
//   [u32 payload bytes][u16 message type][u16 zero][u64 id][payload]
//
// with, at most once per frame, a file descriptor passed alongside (SCM_RIGHTS: the owner's host
// arena memfd at attach). Why a Unix socket and this framing: docs/DESIGN.md, "One store, several
// processes".
//
// Errors: Send returns Unavailable once the peer is gone or Shutdown() was called (and when a
// send blocks longer than the socket's send timeout: the peer does not read). Receive returns
// TimedOut when no frame began within its timeout, Unavailable at the peer's end of stream, and
// InvalidArgument for a frame that breaks the format (a payload over kMaxFrameBytes, a non-zero
// reserved field, a frame cut short); after an error other than TimedOut the channel is unusable.
//
// Thread safety: Send may be called from any number of threads (a mutex keeps frames whole);
// Receive from one thread at a time; Shutdown from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "vocab/status.h"

namespace cachepawl::ipc {

inline constexpr uint32_t kMaxFrameBytes = 64u << 20;
// How long a reader polls without sleeping (yielding its core to any thread that wants it) for
// the rest of a frame that began: the sender is still copying it. (Between frames, the options'
// poll_spin_us.)
inline constexpr uint32_t kSpinUs = 200;
inline constexpr size_t kFrameHeaderBytes = 16;

struct Frame {
  uint16_t type = 0;
  uint64_t id = 0;
  std::string payload;
  int fd = -1;  // a descriptor that came with the frame (the receiver owns it), else -1
};

class Channel {
 public:
  // Takes ownership of the connected socket `fd`; `send_timeout_ms` bounds each Send.
  Channel(int fd, uint32_t send_timeout_ms);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  Status Send(uint16_t type, uint64_t id, std::string_view payload, int pass_fd = -1);
  // `timeout_ms` < 0: waits without a bound for a frame to begin; a frame that began must end
  // within the send timeout. `spin_us` > 0: polls the socket without sleeping for that long
  // first (a peer that answers at once costs no wake-up of this thread). `expecting` non-null:
  // while it is above 0 (work in flight whose answer will come), the poll goes on up to
  // `expect_spin_us` from the start.
  Status Receive(Frame* frame, int timeout_ms, uint32_t spin_us = 0,
                 const std::atomic<uint32_t>* expecting = nullptr, uint32_t expect_spin_us = 0);
  // Ends both directions: a Receive in progress returns Unavailable, later Sends fail.
  void Shutdown();
  int fd() const { return fd_; }

 private:
  // Reads exactly `n` bytes (collecting a passed descriptor into *fd); `first_timeout_ms` bounds
  // the wait for the first byte.
  Status ReadFull(char* p, size_t n, int first_timeout_ms, uint32_t spin_us, int* fd,
                  const std::atomic<uint32_t>* expecting = nullptr, uint32_t expect_spin_us = 0);

  const int fd_;
  const uint32_t send_timeout_ms_;
  std::mutex send_mu_;
};

// The peer's process, user and group (SO_PEERCRED).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
StatusOr<PeerCredentials> PeerOf(int fd);

}  // namespace cachepawl::ipc
