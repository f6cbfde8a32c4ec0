#include "ipc/channel.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace cachepawl::ipc {

namespace {
int PollFor(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}
}  // namespace

Channel::Channel(int fd, uint32_t send_timeout_ms) : fd_(fd), send_timeout_ms_(send_timeout_ms) {
  timeval tv{};
  tv.tv_sec = send_timeout_ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>(send_timeout_ms % 1000) * 1000;
  (void)setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

Channel::~Channel() { close(fd_); }

void Channel::Shutdown() { (void)shutdown(fd_, SHUT_RDWR); }

Status Channel::Send(uint16_t type, uint64_t id, std::string_view payload, int pass_fd) {
  if (payload.size() > kMaxFrameBytes) {
    return Status::InvalidArgument("frame payload: " + std::to_string(payload.size()) +
                                   " bytes (at most " + std::to_string(kMaxFrameBytes) + ")");
  }
  char header[kFrameHeaderBytes] = {};
  const uint32_t len = static_cast<uint32_t>(payload.size());
  std::memcpy(header, &len, 4);
  std::memcpy(header + 4, &type, 2);
  std::memcpy(header + 8, &id, 8);
  std::lock_guard<std::mutex> lock(send_mu_);
  iovec iov[2] = {{header, kFrameHeaderBytes}, {const_cast<char*>(payload.data()), payload.size()}};
  size_t iov_at = 0;
  size_t left = kFrameHeaderBytes + payload.size();
  bool fd_sent = pass_fd < 0;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  while (left > 0) {
    msghdr msg{};
    msg.msg_iov = iov + iov_at;
    msg.msg_iovlen = 2 - iov_at;
    if (!fd_sent) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return Status::Unavailable("the peer read nothing for " + std::to_string(send_timeout_ms_) +
                                   " ms (send timeout)");
      }
      return Status::Unavailable(std::string("the peer is gone (send: ") + std::strerror(errno) +
                                 ")");
    }
    fd_sent = true;
    size_t done = static_cast<size_t>(n);
    left -= done;
    while (done > 0 && iov_at < 2) {
      const size_t take = std::min(done, iov[iov_at].iov_len);
      iov[iov_at].iov_base = static_cast<char*>(iov[iov_at].iov_base) + take;
      iov[iov_at].iov_len -= take;
      done -= take;
      if (iov[iov_at].iov_len == 0) ++iov_at;
    }
  }
  return Status::OK();
}

Status Channel::ReadFull(char* p, size_t n, int first_timeout_ms, uint32_t spin_us, int* fd,
                         const std::atomic<uint32_t>* expecting, uint32_t expect_spin_us) {
  size_t got = 0;
  bool waited = false;  // the first read of each piece is tried before any poll
  const auto start = std::chrono::steady_clock::now();
  const auto spin_until = start + std::chrono::microseconds(spin_us);
  const auto expect_until = start + std::chrono::microseconds(expect_spin_us);
  while (got < n) {
    if (waited) {
      const int timeout = got == 0 ? first_timeout_ms : static_cast<int>(send_timeout_ms_);
      const int r = PollFor(fd_, timeout);
      if (r < 0) return Status::FromErrno("poll of the channel", errno);
      if (r == 0) {
        if (got == 0) return Status::TimedOut("no frame");
        return Status::InvalidArgument("frame cut short: " + std::to_string(got) + " of " +
                                       std::to_string(n) + " bytes, then nothing for " +
                                       std::to_string(send_timeout_ms_) + " ms");
      }
    }
    iovec iov{p + got, n - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t r2 = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r2 < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // Nothing yet: spin while the spin lasts (yielding the core to any thread that wants
        // it), then sleep in poll.
        const auto now = std::chrono::steady_clock::now();
        waited = now >= spin_until &&
                 (expecting == nullptr || expecting->load(std::memory_order_relaxed) == 0 ||
                  now >= expect_until);
        if (!waited) sched_yield();
        continue;
      }
      if (errno == EINTR) continue;
      return Status::Unavailable(std::string("the peer is gone (recv: ") + std::strerror(errno) +
                                 ")");
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed = -1;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (*fd < 0) {
          *fd = passed;
        } else {
          close(passed);  // one descriptor per frame: extra ones are dropped
        }
      }
    }
    if (r2 == 0) {
      if (got == 0) return Status::Unavailable("the peer closed the connection");
      return Status::InvalidArgument("frame cut short: the peer closed the connection after " +
                                     std::to_string(got) + " of " + std::to_string(n) + " bytes");
    }
    got += static_cast<size_t>(r2);
  }
  return Status::OK();
}

Status Channel::Receive(Frame* frame, int timeout_ms, uint32_t spin_us,
                        const std::atomic<uint32_t>* expecting, uint32_t expect_spin_us) {
  char header[kFrameHeaderBytes];
  frame->fd = -1;
  Status s = ReadFull(header, kFrameHeaderBytes, timeout_ms, spin_us, &frame->fd, expecting,
                      expect_spin_us);
  uint32_t len = 0;
  uint16_t reserved = 0;
  if (s.ok()) {
    std::memcpy(&len, header, 4);
    std::memcpy(&frame->type, header + 4, 2);
    std::memcpy(&reserved, header + 6, 2);
    std::memcpy(&frame->id, header + 8, 8);
    if (len > kMaxFrameBytes) {
      s = Status::InvalidArgument("frame payload: " + std::to_string(len) + " bytes (at most " +
                                  std::to_string(kMaxFrameBytes) + ")");
    } else if (reserved != 0) {
      s = Status::InvalidArgument("frame header: reserved field " + std::to_string(reserved) +
                                  " (must be 0)");
    }
  }
  if (s.ok()) {
    frame->payload.resize(len);
    if (len > 0) {
      // The rest of a frame that began is on its way: spin for it rather than sleep.
      s = ReadFull(frame->payload.data(), len, static_cast<int>(send_timeout_ms_), kSpinUs,
                   &frame->fd);
      if (s.IsTimedOut()) {
        s = Status::InvalidArgument("frame cut short: a header for " + std::to_string(len) +
                                    " payload bytes, then nothing for " +
                                    std::to_string(send_timeout_ms_) + " ms");
      }
    }
  }
  if (!s.ok() && frame->fd >= 0) {
    close(frame->fd);
    frame->fd = -1;
  }
  return s;
}

StatusOr<PeerCredentials> PeerOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::FromErrno("SO_PEERCRED", errno);
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

}  // namespace cachepawl::ipc
