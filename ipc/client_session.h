// ClientSession: the owner's side of one attached process (ipc/store_server.h starts one per
// accepted connection). It reads the client's calls and answers them against the owner's store;
// the device <-> host copies of the client's Loads and Saves go to the client itself (a
// TransferQueue that sends Copy messages and completes on CopyDone), so the bytes never pass
// through the owner.
//
// What the session holds for its client: the locks it took (released when it goes), its
// prefetches (cancelled), and its copies in flight. When the connection ends (a clean close, a
// death, a malformed frame, a send that timed out), Run() releases the locks at once, waits for
// the client's process to exit (at most ServeOptions::dead_client_grace_ms; the copy engines of a
// living process may still be at work on the host slots), and then fails every copy in flight:
// the store frees the slots of unfinished Saves (never published) and unpins those of Loads.
//
// Thread safety: Run() on the session's own thread; Shutdown() and the queue's Submit from any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ipc/channel.h"
#include "ipc/protocol.h"
#include "store/store_impl.h"
#include "store/task_queue.h"
#include "vocab/attach_options.h"

namespace cachepawl::ipc {

// What every session of one server shares (owned by the server).
struct ServerContext {
  StoreImpl* store = nullptr;
  ServeOptions options;
  TaskQueue* handlers = nullptr;  // Load, Save and Prefetch calls
  size_t max_pages = 0;           // the longest hash list a call may carry
  mutable std::mutex mu;          // guards stats
  ServeStats stats;
};

class ClientSession : public std::enable_shared_from_this<ClientSession> {
 public:
  // `hello`: what the client said at attach. With GPU copies (copy engines) the session polls
  // for their CopyDone (ServeOptions::inflight_spin_us) rather than sleep; in a tensor-parallel
  // group's store its Loads and Saves move rank hello.tp_rank's shares.
  ClientSession(std::unique_ptr<Channel> channel, PeerCredentials peer, const Hello& hello,
                ServerContext* context);
  ~ClientSession();

  // Reads and answers calls until the connection ends, then reclaims what the client held.
  // `closing`: the server is stopping (no wait for the client's process). Lookups, locks and
  // the like are answered on the reading thread. A Load, Save or Prefetch (which may wait for
  // host room) runs on the thread that read it while the session's second thread (started on
  // the first such call) reads on: leader and follower, so the call's copies start without a
  // hand-off; when both are at such calls, the server's handler threads take the next one.
  // Returns once both threads are done.
  void Run(const std::atomic<bool>& closing);
  // Ends the connection (Run then returns).
  void Shutdown() { channel_->Shutdown(); }
  const PeerCredentials& peer() const { return peer_; }

 private:
  class Queue;
  void ReadLoop(const std::atomic<bool>& closing);  // (on each of the session's threads)
  // The connection ended: wakes the other thread, reclaims (once).
  void End(bool closing);
  // One call: its reply, or a refusal naming the message.
  void Handle(Frame frame);
  void HandleAsync(Frame frame);  // Load, Save, Prefetch
  void Reply(uint64_t id, const Status& s, std::string_view body = {});
  // The answer to a LookupHashes or a LookupInArea: the match without its hashes.
  void ReplyLookup(uint64_t id, std::span<const PageHash> hashes);
  // The Copy message of `op` for the call with `fence_id`; the fence fires on CopyDone.
  Fence SubmitCopy(uint64_t fence_id, Operation op);
  void CopyDone(uint64_t op_id, const Status& s);
  // Sends FenceDone when `fence` fires.
  void ForwardFence(uint64_t fence_id, const Fence& fence);
  void Reclaim(bool closing);
  void CountBad();
  // HashArea: maps the client's sealed memfd `fd` (closes it).
  Status MapHashArea(std::string_view payload, int fd);

  std::unique_ptr<Channel> channel_;
  const PeerCredentials peer_;
  const bool gpu_copies_;
  const uint32_t tp_rank_;
  ServerContext* const context_;
  StoreImpl* const store_;

  std::mutex lead_mu_;
  std::condition_variable lead_cv_;
  bool reading_ = false;  // a thread reads the socket; guarded by lead_mu_
  bool working_ = false;  // a thread runs a Load, Save or Prefetch; guarded by lead_mu_
  bool ended_ = false;    // guarded by lead_mu_
  std::thread helper_;    // the second thread; guarded by lead_mu_

  std::mutex mu_;
  bool gone_ = false;                                                     // guarded by mu_
  uint64_t next_op_ = 1;                                                  // guarded by mu_
  std::unordered_map<uint64_t, std::unique_ptr<FenceCompleter>> copies_;  // guarded by mu_
  // copies_.size(), for the reading threads' poll (ServeOptions::inflight_spin_us); set under mu_.
  std::atomic<uint32_t> copies_pending_{0};
  std::multimap<PageHash, PrefixLock> locks_;  // by last hash; guarded by mu_
  // The client's hash area (HashArea), mapped read-only once; guarded by mu_ (the mapping stays
  // until the session is destroyed).
  HashArea area_;
  const char* area_base_ = nullptr;
  std::unordered_map<uint64_t, std::shared_ptr<Store::Prefetch>> prefetches_;  // guarded by mu_
};

}  // namespace cachepawl::ipc
