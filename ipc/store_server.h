// StoreServer: makes an owner's store (Store::Serve) reachable from the other processes of the
// node. It listens on ServeOptions::socket_path, checks each connecting process (its user, its
// build's protocol, its layout: the Hello), passes it the host arena's memfd, and runs one
// ClientSession (ipc/client_session.h) per attached process on a thread of its own.
//
// Access: the socket file is 0600 (0660 with ServeOptions::socket_group, its group set to that
// group), and the owner checks the peer's credentials (SO_PEERCRED): a process of another user
// (or, with a group, not of it) is refused with a Refused message naming the rule, and logged.
//
// Thread safety: Start and Stop from one thread; stats() from any.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "ipc/client_session.h"
#include "store/store_impl.h"
#include "vocab/attach_options.h"

namespace cachepawl::ipc {

class StoreServer {
 public:
  // Listens on options.socket_path (a stale socket file is replaced; one an owner still
  // listens on is Busy). `store` must outlive the server and have a shared host arena.
  static StatusOr<std::unique_ptr<StoreServer>> Start(StoreImpl* store,
                                                      const ServeOptions& options);
  ~StoreServer() { Stop(); }
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Stops accepting, ends every session (their clients' next calls fail with Unavailable),
  // waits for the calls in progress, removes the socket file. Idempotent.
  void Stop();
  ServeStats stats() const;

 private:
  struct Session {
    std::shared_ptr<ClientSession> session;  // set once greeted; guarded by sessions_mu_
    std::thread thread;
    std::atomic<bool> done{false};
  };
  StoreServer() = default;
  void AcceptLoop();
  // The Hello exchange; true when the client was accepted (HelloOk sent).
  // `hello`: what the client said (its copies, its rank).
  bool Greet(Channel& channel, const PeerCredentials& peer, Hello* hello);
  void Refuse(Channel& channel, const PeerCredentials& peer, const Status& why);
  // The layout a client expects (Hello.layout_json, not empty): the owner's, or, in a
  // tensor-parallel group's store, another rank's of the same group with tp_rank hello.tp_rank.
  // Incompatible naming both layouts, or InvalidArgument naming the field.
  Status CheckClientLayout(const Hello& hello) const;
  void ReapDone();  // joins sessions that ended; requires sessions_mu_

  ServerContext context_;
  std::unique_ptr<TaskQueue> handlers_;
  std::string layout_json_;
  std::string build_id_;
  int listen_fd_ = -1;
  uid_t owner_uid_ = 0;
  gid_t group_ = static_cast<gid_t>(-1);  // ServeOptions::socket_group's, when named
  std::atomic<bool> closing_{false};
  std::thread accept_thread_;
  std::mutex sessions_mu_;
  std::list<std::unique_ptr<Session>> sessions_;  // guarded by sessions_mu_
  bool stopped_ = false;
};

}  // namespace cachepawl::ipc
