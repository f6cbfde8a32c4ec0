#include "ipc/client_session.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <utility>

namespace cachepawl::ipc {

namespace {
using Clock = std::chrono::steady_clock;

// Waits until process `pid` has exited (its memory and its devices released), at most `ms`.
// True when it has.
bool WaitForExit(pid_t pid, uint32_t ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    int r = 0;
    do {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      r = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    } while (r < 0 && errno == EINTR);
    close(pidfd);
    return r > 0;
  }
  if (errno == ESRCH) return true;  // already gone (and reaped)
  // No pidfd (an old kernel): poll for the process to be gone.
  while (Clock::now() < deadline) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}
}  // namespace

// The client's copies: each Submit is one Copy message; the fence fires on its CopyDone (or
// when the client is gone: Reclaim).
class ClientSession::Queue final : public TransferQueue {
 public:
  Queue(std::weak_ptr<ClientSession> session, uint64_t fence_id)
      : session_(std::move(session)), fence_id_(fence_id) {}
  Fence Submit(Operation op) override {
    std::shared_ptr<ClientSession> s = session_.lock();
    if (!s) return Fence::Completed(Status::Unavailable("the attached client is gone"));
    return s->SubmitCopy(fence_id_, std::move(op));
  }
  bool gpu_mode() const override { return false; }  // the client's GPU waits are the client's

 private:
  std::weak_ptr<ClientSession> session_;
  const uint64_t fence_id_;
};

ClientSession::ClientSession(std::unique_ptr<Channel> channel, PeerCredentials peer,
                             const Hello& hello, ServerContext* context)
    : channel_(std::move(channel)),
      peer_(peer),
      gpu_copies_(hello.gpu_copies),
      tp_rank_(hello.tp_rank),
      context_(context),
      store_(context->store) {}

ClientSession::~ClientSession() {
  if (area_base_ != nullptr) {
    munmap(const_cast<char*>(area_base_),
           size_t{area_.slots} * area_.slot_hashes * sizeof(PageHash));
  }
}

Status ClientSession::MapHashArea(std::string_view payload, int fd) {
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) close(fd);
    }
  } closer{fd};
  HashArea area;
  CACHEPAWL_RETURN_IF_ERROR(Decode(payload, context_->max_pages, &area));
  if (fd < 0) return Status::InvalidArgument("HashArea: no memfd came with it");
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return Status::InvalidArgument(std::string("HashArea: the descriptor is not a memfd (") +
                                   std::strerror(errno) + ")");
  }
  if ((seals & F_SEAL_SHRINK) == 0) {
    return Status::InvalidArgument("HashArea: the memfd is not sealed against shrinking");
  }
  // A plain memfd lives in tmpfs (a hugetlbfs one would charge the owner in huge pages).
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    return Status::InvalidArgument("HashArea: the memfd is not a plain (tmpfs) one");
  }
  const size_t bytes = size_t{area.slots} * area.slot_hashes * sizeof(PageHash);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    return Status::InvalidArgument("HashArea: the memfd holds " + std::to_string(st.st_size) +
                                   " bytes, " + std::to_string(area.slots) + " slots of " +
                                   std::to_string(area.slot_hashes) + " hashes need " +
                                   std::to_string(bytes));
  }
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::FromErrno("HashArea: mmap", errno);
  std::lock_guard<std::mutex> lock(mu_);
  if (area_base_ != nullptr) {
    munmap(p, bytes);
    return Status::FailedPrecondition("HashArea: this client gave one already");
  }
  area_ = area;
  area_base_ = static_cast<const char*>(p);
  return Status::OK();
}

void ClientSession::ReplyLookup(uint64_t id, std::span<const PageHash> hashes) {
  auto m = store_->LookupHashes(hashes);
  if (!m.ok()) return Reply(id, m.status());
  Writer w;
  PutMatch(w, *m, /*with_hashes=*/false);  // (the client has them)
  Reply(id, Status::OK(), w.bytes());
}

void ClientSession::CountBad() {
  std::lock_guard<std::mutex> lock(context_->mu);
  ++context_->stats.bad_messages;
}

void ClientSession::Reply(uint64_t id, const Status& s, std::string_view body) {
  {
    std::lock_guard<std::mutex> lock(context_->mu);
    ++context_->stats.calls;
  }
  // A client that is gone gets nothing: its reader ends the session.
  (void)channel_->Send(static_cast<uint16_t>(Msg::kReply), id, EncodeReply(s, body));
}

Fence ClientSession::SubmitCopy(uint64_t fence_id, Operation op) {
  if (op.units.empty()) return Fence::Completed(Status::OK());
  uint64_t op_id = 0;
  Fence fence;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_) return Fence::Completed(Status::Unavailable("the attached client is gone"));
    op_id = next_op_++;
    auto completer = std::make_unique<FenceCompleter>();
    fence = completer->fence();
    copies_.emplace(op_id, std::move(completer));
    copies_pending_.store(static_cast<uint32_t>(copies_.size()), std::memory_order_relaxed);
  }
  // A failed send leaves the copy in copies_: the reader sees the connection end, and Reclaim
  // fails it once the client cannot touch its slots any more.
  if (Status s = channel_->Send(static_cast<uint16_t>(Msg::kCopy), op_id,
                                Encode(CopyOrder{fence_id, std::move(op)}));
      !s.ok()) {
    channel_->Shutdown();
  }
  return fence;
}

void ClientSession::CopyDone(uint64_t op_id, const Status& s) {
  std::unique_ptr<FenceCompleter> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = copies_.find(op_id);
    if (it == copies_.end()) {
      spdlog::warn("serve: client pid {}: CopyDone for copy {}, which it was not given", peer_.pid,
                   op_id);
      CountBad();
      return;
    }
    done = std::move(it->second);
    copies_.erase(it);
    copies_pending_.store(static_cast<uint32_t>(copies_.size()), std::memory_order_relaxed);
  }
  done->Complete(s.ok() ? s : s.WithContext("the attached client's copy"));
}

void ClientSession::ForwardFence(uint64_t fence_id, const Fence& fence) {
  std::weak_ptr<ClientSession> weak = weak_from_this();
  fence.OnComplete([weak, fence_id](const Status& s) {
    if (auto self = weak.lock()) {
      Writer w;
      w.StatusOf(s);
      (void)self->channel_->Send(static_cast<uint16_t>(Msg::kFenceDone), fence_id, w.bytes());
      std::lock_guard<std::mutex> lock(self->mu_);
      self->prefetches_.erase(fence_id);
    }
  });
}

void ClientSession::Run(const std::atomic<bool>& closing) {
  ReadLoop(closing);
  std::thread helper;
  {
    std::lock_guard<std::mutex> lock(lead_mu_);
    helper = std::move(helper_);
  }
  if (helper.joinable()) helper.join();
}

void ClientSession::ReadLoop(const std::atomic<bool>& closing) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(lead_mu_);
      lead_cv_.wait(lock, [&] { return !reading_ || ended_; });
      if (ended_) return;
      reading_ = true;
    }
    Frame frame;
    Status s = closing.load()
                   ? Status::Unavailable("the owner is stopping")
                   : channel_->Receive(&frame, -1, context_->options.poll_spin_us, &copies_pending_,
                                       gpu_copies_ ? context_->options.inflight_spin_us : 0);
    if (!s.ok()) {
      if (!s.IsUnavailable()) {
        spdlog::warn("serve: client pid {}: {} (connection dropped)", peer_.pid, s.ToString());
        CountBad();
      }
      End(closing.load());
      return;
    }
    if (frame.fd >= 0 && frame.type != static_cast<uint16_t>(Msg::kHashArea)) {
      close(frame.fd);  // a client passes no other descriptor
      frame.fd = -1;
    }
    const auto type = static_cast<Msg>(frame.type);
    if (type != Msg::kLoad && type != Msg::kSave && type != Msg::kPrefetch) {
      Handle(std::move(frame));
      std::lock_guard<std::mutex> lock(lead_mu_);
      reading_ = false;  // (this thread takes it again at once unless the other one waits)
      continue;
    }
    // A call that may wait (for host room): run it on this thread and let the session's other
    // thread read meanwhile; when that one is at such a call already, the handler threads run it.
    bool here = false;
    {
      std::lock_guard<std::mutex> lock(lead_mu_);
      here = !working_;
      if (here) {
        working_ = true;
        reading_ = false;
        if (!helper_.joinable()) {
          helper_ = std::thread([self = shared_from_this(), &closing] { self->ReadLoop(closing); });
        }
      }
    }
    if (!here) {
      std::shared_ptr<ClientSession> self = shared_from_this();
      context_->handlers->Post(
          [self, frame = std::move(frame)]() mutable { self->HandleAsync(std::move(frame)); });
      std::lock_guard<std::mutex> lock(lead_mu_);
      reading_ = false;
      continue;
    }
    lead_cv_.notify_all();
    HandleAsync(std::move(frame));
    std::lock_guard<std::mutex> lock(lead_mu_);
    working_ = false;
  }
}

void ClientSession::End(bool closing) {
  {
    std::lock_guard<std::mutex> lock(lead_mu_);
    if (ended_) return;
    ended_ = true;
  }
  lead_cv_.notify_all();
  channel_->Shutdown();  // (a connection dropped for a malformed frame: the client sees it end)
  Reclaim(closing);
}

void ClientSession::Handle(Frame frame) {
  const auto type = static_cast<Msg>(frame.type);
  const size_t max_pages = context_->max_pages;
  switch (type) {
    case Msg::kLookupHashes: {
      Reader r(frame.payload);
      std::vector<PageHash> hashes = r.Hashes("LookupHashes.hashes", max_pages);
      if (Status s = r.Finish(); !s.ok()) {
        CountBad();
        return Reply(frame.id, s.WithContext("LookupHashes"));
      }
      return ReplyLookup(frame.id, hashes);
    }
    case Msg::kHashArea: {
      Status s = MapHashArea(frame.payload, std::exchange(frame.fd, -1));
      if (!s.ok()) CountBad();
      return Reply(frame.id, s);
    }
    case Msg::kLookupInArea: {
      HashArea area;
      const char* base = nullptr;
      {
        std::lock_guard<std::mutex> g(mu_);
        area = area_;
        base = area_base_;
      }
      AreaLookup q;
      if (Status s = Decode(frame.payload, area, &q); !s.ok()) {
        CountBad();
        return Reply(frame.id, s);
      }
      // Copied out before use: what the client writes meanwhile changes only its own answer.
      const auto* slot = reinterpret_cast<const PageHash*>(
          base + size_t{q.slot} * area.slot_hashes * sizeof(PageHash));
      return ReplyLookup(frame.id, std::vector<PageHash>(slot, slot + q.hashes));
    }
    case Msg::kLock: {
      Reader r(frame.payload);
      PrefixMatch match = GetMatch(r, max_pages);
      const uint64_t pages = r.U64("Lock.pages");
      if (Status s = r.Finish(); !s.ok()) {
        CountBad();
        return Reply(frame.id, s.WithContext("Lock"));
      }
      auto lock = store_->Lock(match, pages);
      if (!lock.ok()) return Reply(frame.id, lock.status());
      {
        std::lock_guard<std::mutex> g(mu_);
        if (!lock->hashes.empty()) locks_.emplace(lock->hashes.back(), *lock);
      }
      Writer w;
      w.Hashes(lock->hashes);
      w.U8(lock->with_state ? 1 : 0);
      return Reply(frame.id, Status::OK(), w.bytes());
    }
    case Msg::kUnlock: {
      Reader r(frame.payload);
      std::vector<PageHash> hashes = r.Hashes("Unlock.hashes", max_pages);
      if (Status s = r.Finish(); !s.ok() || hashes.empty()) {
        CountBad();
        return Reply(frame.id,
                     (s.ok() ? Status::InvalidArgument("no hashes") : s).WithContext("Unlock"));
      }
      PrefixLock lock;
      {
        std::lock_guard<std::mutex> g(mu_);
        auto [lo, hi] = locks_.equal_range(hashes.back());
        auto it = lo;
        while (it != hi && it->second.hashes != hashes) ++it;
        if (it == hi) {
          return Reply(frame.id,
                       Status::FailedPrecondition("Unlock: this process holds no lock on those " +
                                                  std::to_string(hashes.size()) +
                                                  " pages (released already, or never locked)"));
        }
        lock = it->second;
        locks_.erase(it);
      }
      return Reply(frame.id, store_->Unlock(lock));
    }
    case Msg::kCancelPrefetch: {
      Reader r(frame.payload);
      const uint64_t fence_id = r.U64("CancelPrefetch.fence_id");
      if (!r.Finish().ok()) return CountBad();
      std::lock_guard<std::mutex> g(mu_);
      auto it = prefetches_.find(fence_id);
      if (it != prefetches_.end()) it->second->Cancel();
      return;
    }
    case Msg::kStats: {
      StoreStats st = store_->Stats();
      {
        std::lock_guard<std::mutex> lock(context_->mu);
        st.serve = context_->stats;
      }
      return Reply(frame.id, Status::OK(),
                   std::string_view(reinterpret_cast<const char*>(&st), sizeof(st)));
    }
    case Msg::kPing:
      (void)channel_->Send(static_cast<uint16_t>(Msg::kPong), frame.id, {});
      return;
    case Msg::kCopyDone: {
      Reader r(frame.payload);
      Status s = r.StatusOf("CopyDone.status");
      if (Status bad = r.Finish(); !bad.ok()) {
        CountBad();
        s = bad.WithContext("CopyDone (undecodable: the copy counts as failed)");
      }
      return CopyDone(frame.id, s);
    }
    default:
      spdlog::warn("serve: client pid {}: message type {} ({}) is not a call (refused)", peer_.pid,
                   frame.type, MsgName(frame.type));
      CountBad();
      return Reply(frame.id,
                   Status::InvalidArgument("message type " + std::to_string(frame.type) + " (" +
                                           MsgName(frame.type) + "): not a call a client makes"));
  }
}

void ClientSession::HandleAsync(Frame frame) {
  // (A Queue keeps only a weak reference: this session may end while its copies are queued.)
  std::weak_ptr<ClientSession> self = weak_from_this();
  {
    const size_t max_pages = context_->max_pages;
    StatusOr<Fence> fence = Status::Internal("unhandled");
    uint64_t fence_id = 0;
    const auto type = static_cast<Msg>(frame.type);
    if (type == Msg::kLoad) {
      LoadCall call;
      if (Status s = Decode(frame.payload, max_pages, &call); !s.ok()) {
        CountBad();
        return Reply(frame.id, s.WithContext("Load"));
      }
      fence_id = call.fence_id;
      call.opts.tp_rank = tp_rank_;
      fence = store_->LoadVia(std::make_shared<Queue>(self, fence_id), call.match,
                              call.device_pages, call.state_slot, call.opts);
    } else if (type == Msg::kSave) {
      SaveCall call;
      if (Status s = Decode(frame.payload, max_pages, &call); !s.ok()) {
        CountBad();
        return Reply(frame.id, s.WithContext("Save"));
      }
      fence_id = call.fence_id;
      SaveRequest req;
      req.hashes = call.hashes;
      req.first_page = call.first_page;
      req.device_pages = call.device_pages;
      req.device_state_slot = call.state_slot;
      req.state_depth_tokens = call.state_depth_tokens;
      req.tp_rank = tp_rank_;
      fence = store_->SaveVia(std::make_shared<Queue>(self, fence_id), req);
    } else {
      Reader r(frame.payload);
      fence_id = r.U64("Prefetch.fence_id");
      PrefixMatch match = GetMatch(r, max_pages);
      if (Status s = r.Finish(); !s.ok()) {
        CountBad();
        return Reply(frame.id, s.WithContext("Prefetch"));
      }
      auto p = store_->StartPrefetch(match);
      if (p.ok()) {
        {
          std::lock_guard<std::mutex> g(mu_);
          prefetches_[fence_id] = *p;
        }
        fence = (*p)->fence();
      } else {
        fence = p.status();
      }
    }
    if (!fence.ok()) return Reply(frame.id, fence.status());
    Reply(frame.id, Status::OK());
    ForwardFence(fence_id, *fence);
  }
}

void ClientSession::Reclaim(bool closing) {
  const auto start = Clock::now();
  std::multimap<PageHash, PrefixLock> locks;
  std::unordered_map<uint64_t, std::shared_ptr<Store::Prefetch>> prefetches;
  {
    std::lock_guard<std::mutex> g(mu_);
    gone_ = true;
    locks.swap(locks_);
    prefetches.swap(prefetches_);
  }
  for (auto& [hash, lock] : locks) (void)store_->Unlock(lock);
  for (auto& [id, p] : prefetches) p->Cancel();
  bool copies = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    copies = !copies_.empty();
  }
  bool exited = true;
  if (copies && !closing) exited = WaitForExit(peer_.pid, context_->options.dead_client_grace_ms);
  std::unordered_map<uint64_t, std::unique_ptr<FenceCompleter>> failed;
  {
    std::lock_guard<std::mutex> g(mu_);
    failed.swap(copies_);
    copies_pending_.store(0, std::memory_order_relaxed);
  }
  const std::string why = "the attached client (pid " + std::to_string(peer_.pid) +
                          ") went away during the copy" +
                          (exited ? "" : " (its process lives on; its slots are reclaimed)");
  for (auto& [id, c] : failed) c->Complete(Status::Unavailable(why));
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  {
    std::lock_guard<std::mutex> lock(context_->mu);
    ServeStats& st = context_->stats;
    ++st.clients_gone;
    --st.clients_now;
    st.locks_released += locks.size();
    st.copies_failed += failed.size();
    st.reclaim_max_us = std::max<uint64_t>(st.reclaim_max_us, static_cast<uint64_t>(us.count()));
  }
  if (!locks.empty() || !failed.empty()) {
    spdlog::info("serve: client pid {} gone: {} lock(s) released, {} copy(ies) failed in {} us",
                 peer_.pid, locks.size(), failed.size(), us.count());
  }
}

}  // namespace cachepawl::ipc
