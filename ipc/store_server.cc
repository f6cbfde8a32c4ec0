#include "ipc/store_server.h"

#include <grp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cachepawl::ipc {

namespace {
constexpr int kHelloTimeoutMs = 5000;

sockaddr_un AddressOf(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// True when an owner listens on `path`.
bool SomeoneListens(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr = AddressOf(path);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}
}  // namespace

StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(StoreImpl* store,
                                                          const ServeOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  if (store->host_arena().shared_fd() < 0) {
    return Status::FailedPrecondition("serve: the store's host arena is not in shared memory");
  }
  std::unique_ptr<StoreServer> s(new StoreServer());
  s->context_.store = store;
  s->context_.options = options;
  s->context_.stats.enabled = true;
  const uint64_t page = store->layout().page_size_tokens;
  s->context_.max_pages = store->options().max_prompt_tokens / page;
  s->layout_json_ = LayoutToJson(store->layout());
  s->build_id_ = BuildId();
  s->owner_uid_ = geteuid();
  if (!options.socket_group.empty()) {
    group* g = getgrnam(options.socket_group.c_str());
    if (g == nullptr) {
      return Status::InvalidArgument("ServeOptions.socket_group: '" + options.socket_group +
                                     "' (no such group)");
    }
    s->group_ = g->gr_gid;
  }
  const std::string& path = options.socket_path;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Status::InvalidArgument("ServeOptions.socket_path: '" + path +
                                     "' exists and is not a socket");
    }
    if (SomeoneListens(path)) {
      return Status::Busy("ServeOptions.socket_path: an owner already serves on '" + path + "'");
    }
    (void)unlink(path.c_str());  // stale: its owner is gone
  }
  s->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return Status::FromErrno("serve: socket", errno);
  sockaddr_un addr = AddressOf(path);
  // The file is created with no access for anyone else, then opened to the group if named.
  const mode_t old_mask = umask(0177);
  const int bound = bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  umask(old_mask);
  if (bound != 0) {
    return Status::FromErrno("serve: bind to '" + path + "'", bind_errno);
  }
  if (s->group_ != static_cast<gid_t>(-1)) {
    if (chown(path.c_str(), static_cast<uid_t>(-1), s->group_) != 0 ||
        chmod(path.c_str(), 0660) != 0) {
      const int e = errno;
      (void)unlink(path.c_str());
      return Status::FromErrno(
          "serve: giving '" + path + "' to group '" + options.socket_group + "'", e);
    }
  }
  if (listen(s->listen_fd_, 128) != 0) {
    const int e = errno;
    (void)unlink(path.c_str());
    return Status::FromErrno("serve: listen on '" + path + "'", e);
  }
  // (Logged before any thread of the server starts: the first log line sets up spdlog's registry,
  // which the session threads then read.)
  spdlog::info("serve: listening on {} (layout '{}', host arena {} MiB in shared memory)", path,
               store->layout().model, store->host_arena().capacity_bytes() >> 20);
  s->handlers_ = std::make_unique<TaskQueue>(options.handler_threads);
  s->context_.handlers = s->handlers_.get();
  s->accept_thread_ = std::thread([raw = s.get()] { raw->AcceptLoop(); });
  return s;
}

void StoreServer::AcceptLoop() {
  while (!closing_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int r = poll(&p, 1, 100);
    if (r <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto channel = std::make_unique<Channel>(fd, context_.options.send_timeout_ms);
    auto peer = PeerOf(fd);
    if (!peer.ok()) continue;  // (the channel closes the socket)
    std::lock_guard<std::mutex> lock(sessions_mu_);
    ReapDone();
    if (sessions_.size() >= context_.options.max_clients) {
      Refuse(*channel, *peer,
             Status::Busy("the owner serves ServeOptions.max_clients = " +
                          std::to_string(context_.options.max_clients) + " clients already"));
      continue;
    }
    auto entry = std::make_unique<Session>();
    Session* raw = entry.get();
    const PeerCredentials who = *peer;
    raw->thread = std::thread([this, raw, who, channel = std::move(channel)]() mutable {
      Hello hello;
      if (Greet(*channel, who, &hello)) {
        {
          std::lock_guard<std::mutex> lock(sessions_mu_);  // (Stop reads it under the lock)
          raw->session = std::make_shared<ClientSession>(std::move(channel), who, hello, &context_);
        }
        raw->session->Run(closing_);
      }
      raw->done.store(true);
    });
    sessions_.push_back(std::move(entry));
  }
}

void StoreServer::Refuse(Channel& channel, const PeerCredentials& peer, const Status& why) {
  spdlog::warn("serve: refused pid {} (uid {}): {}", peer.pid, peer.uid, why.ToString());
  {
    std::lock_guard<std::mutex> lock(context_.mu);
    ++context_.stats.refused;
  }
  Writer w;
  w.StatusOf(why);
  (void)channel.Send(static_cast<uint16_t>(Msg::kRefused), 0, w.bytes());
}

Status StoreServer::CheckClientLayout(const Hello& hello) const {
  const ModelLayout& mine = context_.store->layout();
  auto theirs = ParseLayoutJson(hello.layout_json);
  if (!theirs.ok()) return theirs.status().WithContext("Hello.layout");
  if (theirs->tp_size > 1 && theirs->tp_rank != hello.tp_rank) {
    return Status::InvalidArgument("Hello.tp_rank: " + std::to_string(hello.tp_rank) +
                                   " (the client's layout is rank " +
                                   std::to_string(theirs->tp_rank) + "'s)");
  }
  ModelLayout as_mine = *theirs;  // the group's ranks differ in tp_rank only
  as_mine.tp_rank = mine.tp_rank;
  if (LayoutToJson(as_mine) == layout_json_) return Status::OK();
  return Status::Incompatible("the client expects layout '" + theirs->model + "' (tp_size " +
                              std::to_string(theirs->tp_size) + ", fingerprint " +
                              theirs->FingerprintHex().substr(0, 16) + "), the owner serves '" +
                              mine.model + "' (tp_size " + std::to_string(mine.tp_size) +
                              ", fingerprint " + mine.FingerprintHex().substr(0, 16) + ")");
}

bool StoreServer::Greet(Channel& channel, const PeerCredentials& peer, Hello* hello_out) {
  if (peer.uid != owner_uid_ && !(group_ != static_cast<gid_t>(-1) && peer.gid == group_)) {
    Refuse(channel, peer,
           Status::FailedPrecondition(
               "uid " + std::to_string(peer.uid) + " may not attach: the owner (uid " +
               std::to_string(owner_uid_) + ") admits its own user" +
               (group_ != static_cast<gid_t>(-1) ? " and group " + context_.options.socket_group
                                                 : std::string(" only (ServeOptions.socket_group "
                                                               "names a group to admit)"))));
    return false;
  }
  Frame frame;
  Status s = channel.Receive(&frame, kHelloTimeoutMs);
  if (s.ok() && frame.type != static_cast<uint16_t>(Msg::kHello)) {
    s = Status::InvalidArgument(std::string("the first message is ") + MsgName(frame.type) +
                                ", not Hello");
  }
  if (frame.fd >= 0) close(frame.fd);
  Hello hello;
  if (s.ok()) s = Decode(frame.payload, &hello);
  if (s.ok() && hello.build != build_id_) {
    s = Status::Incompatible("the client's build '" + hello.build + "' is not the owner's '" +
                             build_id_ + "'");
  }
  const ModelLayout& mine = context_.store->layout();
  if (s.ok() && hello.tp_rank >= mine.tp_size) {
    s = Status::InvalidArgument("Hello.tp_rank: " + std::to_string(hello.tp_rank) +
                                " (the owner's layout '" + mine.model + "' has tp_size " +
                                std::to_string(mine.tp_size) + ")");
  }
  if (s.ok() && !hello.layout_json.empty()) s = CheckClientLayout(hello);
  if (!s.ok()) {
    if (s.IsInvalidArgument() || s.IsUnavailable() || s.IsTimedOut()) {
      std::lock_guard<std::mutex> lock(context_.mu);
      ++context_.stats.bad_messages;
    }
    Refuse(channel, peer, s.WithContext("attach"));
    return false;
  }
  *hello_out = hello;
  const HostArena& arena = context_.store->host_arena();
  HelloOk ok;
  ok.layout_json = layout_json_;
  if (hello.tp_rank != mine.tp_rank) {
    ModelLayout rank = mine;  // (the same shapes on every rank: ShardLayout)
    rank.tp_rank = hello.tp_rank;
    ok.layout_json = LayoutToJson(rank);
  }
  ok.arena_bytes = arena.capacity_bytes();
  ok.chunk_bytes = arena.chunk_bytes();
  ok.max_prompt_tokens = context_.store->options().max_prompt_tokens;
  ok.owner_pid = getpid();
  if (!channel.Send(static_cast<uint16_t>(Msg::kHelloOk), 0, Encode(ok), arena.shared_fd()).ok()) {
    return false;
  }
  std::lock_guard<std::mutex> lock(context_.mu);
  ++context_.stats.attaches;
  ++context_.stats.clients_now;
  return true;
}

void StoreServer::ReapDone() {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if ((*it)->done.load()) {
      (*it)->thread.join();
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

void StoreServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  closing_.store(true);
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (auto& s : sessions_) {
      // A session still greeting has no ClientSession yet: its Hello wait is bounded.
      if (s->session) s->session->Shutdown();
    }
  }
  // The sessions' threads end (and reclaim) once their readers see the shutdown; a session
  // created after the loop above sees closing_ before it reads.
  for (;;) {
    std::unique_lock<std::mutex> lock(sessions_mu_);
    bool all = true;
    for (auto& s : sessions_) {
      if (!s->done.load()) {
        all = false;
        if (s->session) s->session->Shutdown();
      }
    }
    if (all) break;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    ReapDone();
  }
  handlers_.reset();  // runs the calls already posted (their copies fail: the sessions are gone)
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    (void)unlink(context_.options.socket_path.c_str());
  }
}

ServeStats StoreServer::stats() const {
  std::lock_guard<std::mutex> lock(context_.mu);
  return context_.stats;
}

}  // namespace cachepawl::ipc
