#include "ipc/attached_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "cuda/gpu_runtime.h"
#include "layouts/layout_presets.h"
#include "store/owned_device_pool.h"
#include "vocab/internal/fence_access.h"
#include "vocab/internal/stage_profile.h"

namespace cachepawl {

StatusOr<std::unique_ptr<Store>> Store::Attach(const AttachOptions& options) {
  return ipc::AttachedStore::Attach(options);
}

namespace ipc {

namespace {
using Clock = std::chrono::steady_clock;
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}
}  // namespace

class AttachedStore::PrefetchImpl final : public Store::Prefetch {
 public:
  PrefetchImpl(std::shared_ptr<Channel> channel, uint64_t id, Fence fence)
      : channel_(std::move(channel)), id_(id), fence_(std::move(fence)) {}
  Fence fence() const override { return fence_; }
  void Cancel() override {
    if (fence_.Ready()) return;
    Writer w;
    w.U64(id_);
    (void)channel_->Send(static_cast<uint16_t>(Msg::kCancelPrefetch), 0, w.bytes());
  }

 private:
  const std::shared_ptr<Channel> channel_;
  const uint64_t id_;
  const Fence fence_;
};

StatusOr<std::unique_ptr<Store>> AttachedStore::Attach(const AttachOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<AttachedStore> s(new AttachedStore(options));
  CACHEPAWL_RETURN_IF_ERROR(s->Connect().WithContext("attach to '" + options.socket_path + "'"));
  return std::unique_ptr<Store>(std::move(s));
}

Status AttachedStore::Connect() {
  std::string expected_json;
  uint32_t tp_rank = 0;
  if (options_.layout || !options_.layout_name.empty()) {
    StatusOr<ModelLayout> want =
        options_.layout ? StatusOr<ModelLayout>(*options_.layout)
                        : ResolveLayout(options_.layout_name, options_.page_size_tokens);
    if (!want.ok()) return want.status().WithContext("AttachOptions.layout_name");
    expected_json = LayoutToJson(*want);
    if (options_.tp_rank && *options_.tp_rank != want->tp_rank && want->tp_size > 1) {
      return Status::InvalidArgument("AttachOptions.tp_rank: " + std::to_string(*options_.tp_rank) +
                                     " (the expected layout is rank " +
                                     std::to_string(want->tp_rank) + "'s)");
    }
    tp_rank = want->tp_rank;
  }
  if (options_.tp_rank) tp_rank = *options_.tp_rank;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("socket", errno);
  channel_ = std::make_shared<Channel>(fd, options_.call_timeout_ms);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, options_.socket_path.data(), options_.socket_path.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    if (e == EACCES || e == EPERM) {
      return Status::FailedPrecondition(
          std::string("connect: ") + std::strerror(e) +
          " (the owner admits its own Unix user, and the group ServeOptions.socket_group names)");
    }
    return Status::Unavailable(std::string("no owner serves there (connect: ") + std::strerror(e) +
                               ")");
  }
  Hello hello;
  hello.build = BuildId();
  hello.layout_json = expected_json;
  hello.pid = getpid();
  hello.gpu_copies = options_.cuda_device >= 0 && cuda::GpuAvailable();
  hello.tp_rank = tp_rank;
  CACHEPAWL_RETURN_IF_ERROR(channel_->Send(static_cast<uint16_t>(Msg::kHello), 0, Encode(hello)));
  Frame frame;
  Status s = channel_->Receive(&frame, static_cast<int>(options_.call_timeout_ms));
  if (s.IsTimedOut()) {
    return Status::Unavailable("the owner did not answer within AttachOptions.call_timeout_ms " +
                               std::to_string(options_.call_timeout_ms) + " ms");
  }
  CACHEPAWL_RETURN_IF_ERROR(s);
  struct FdCloser {
    int fd;
    ~FdCloser() {
      if (fd >= 0) close(fd);
    }
  } arena_fd{frame.fd};
  if (frame.type == static_cast<uint16_t>(Msg::kRefused)) {
    Reader r(frame.payload);
    Status why = r.StatusOf("Refused.status");
    return r.status().ok() ? why : r.status();
  }
  if (frame.type != static_cast<uint16_t>(Msg::kHelloOk)) {
    return Status::InvalidArgument(std::string("the owner answered Hello with ") +
                                   MsgName(frame.type));
  }
  HelloOk ok;
  CACHEPAWL_RETURN_IF_ERROR(Decode(frame.payload, &ok));
  if (arena_fd.fd < 0) return Status::InvalidArgument("HelloOk came without the host arena");
  auto layout = ParseLayoutJson(ok.layout_json);
  if (!layout.ok()) return layout.status().WithContext("the owner's layout");
  layout_ = *layout;
  if (layout_.tp_rank != tp_rank) {
    return Status::InvalidArgument("HelloOk.layout: rank " + std::to_string(layout_.tp_rank) +
                                   "'s, this process asked for rank " + std::to_string(tp_rank));
  }
  // A group's host records hold every share; this rank's starts at its offset.
  auto group = GroupLayout(layout_);
  if (!group.ok()) return group.status().WithContext("the owner's layout");
  for (Kind k : kAllKinds) {
    rank_offset_[static_cast<int>(k)] =
        uint64_t{layout_.TpShareOf(k, tp_rank)} * layout_.RecordBytes(k);
  }
  auto hasher = PageHasher::Create(layout_.page_size_tokens);
  if (!hasher.ok()) return hasher.status();
  hasher_ = std::make_unique<PageHasher>(std::move(hasher).value());
  max_prompt_tokens_ = ok.max_prompt_tokens;
  owner_pid_ = ok.owner_pid;
  gpu_ = hello.gpu_copies;
  auto view = HostArenaView::Open(*group, arena_fd.fd, {ok.arena_bytes, ok.chunk_bytes}, gpu_,
                                  std::max(0, options_.cuda_device));
  if (!view.ok()) return view.status();
  view_ = std::move(view).value();
  if (options_.device_pool_bytes > 0) {
    DevicePoolArenaOptions po;
    po.budget_bytes = options_.device_pool_bytes;
    po.device = std::max(0, options_.cuda_device);
    po.use_gpu =
        gpu_ ? DevicePoolArenaOptions::UseGpu::kAuto : DevicePoolArenaOptions::UseGpu::kOff;
    auto arena = DevicePoolArena::Create(layout_, po);
    if (!arena.ok()) return arena.status().WithContext("AttachOptions.device_pool_bytes");
    device_arena_ = std::move(arena).value();
    CACHEPAWL_RETURN_IF_ERROR(CreateMover(device_arena_->description()));
  }
  CACHEPAWL_RETURN_IF_ERROR(SetUpHashArea());
  last_heard_ns_.store(NowNs());
  reader_ = std::thread([this] { ReaderLoop(); });
  return Status::OK();
}

AttachedStore::~AttachedStore() {
  (void)Close();
  if (area_ != nullptr) {
    munmap(area_, size_t{area_shape_.slots} * area_shape_.slot_hashes * sizeof(PageHash));
  }
}

uint32_t AttachedStore::SpinUs() const {
  // CPU-mode copies run on this process's threads: no polling beside them past poll_spin_us.
  return gpu_ ? std::max(options_.poll_spin_us, options_.inflight_spin_us) : options_.poll_spin_us;
}

Status AttachedStore::SetUpHashArea() {
  // 8 slots (engine threads looking up at once through this store; more go over the socket) of
  // the longest prompt, at most 16,384 pages (512 KiB) a slot; memory is touched only as used.
  constexpr uint32_t kSlots = 8;
  const uint64_t max_pages = max_prompt_tokens_ / layout_.page_size_tokens;
  if (max_pages == 0) return Status::OK();
  HashArea shape{kSlots, static_cast<uint32_t>(std::min<uint64_t>(max_pages, 16384))};
  const size_t bytes = size_t{shape.slots} * shape.slot_hashes * sizeof(PageHash);
  const int fd = memfd_create("cachepawl-hash-area", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    spdlog::warn("attach: no hash area (memfd_create: {}); lookups go over the socket",
                 std::strerror(errno));
    return Status::OK();
  }
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    spdlog::warn("attach: no hash area ({}); lookups go over the socket", std::strerror(errno));
    close(fd);
    return Status::OK();
  }
  auto reply = Call(Msg::kHashArea, Encode(shape), fd);
  close(fd);  // (the owner has its own descriptor)
  if (!reply.ok()) {
    munmap(p, bytes);
    // A connection that the call dropped (the owner gone or silent) fails the attach.
    CACHEPAWL_RETURN_IF_ERROR(CheckUsable());
    spdlog::warn("attach: the owner refused the hash area ({}); lookups go over the socket",
                 reply.status().ToString());
    return Status::OK();
  }
  area_ = static_cast<char*>(p);
  area_shape_ = shape;
  std::lock_guard<std::mutex> lock(mu_);
  area_free_ = (uint64_t{1} << shape.slots) - 1;
  return Status::OK();
}

int AttachedStore::TakeSlot() {
  std::lock_guard<std::mutex> lock(mu_);
  if (area_free_ == 0) return -1;
  const int slot = __builtin_ctzll(area_free_);
  area_free_ &= ~(uint64_t{1} << slot);
  return slot;
}

void AttachedStore::ReleaseSlot(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  area_free_ |= uint64_t{1} << slot;
}

Status AttachedStore::CreateMover(const DevicePoolDescription& pool) {
  DeviceMoverOptions to;
  to.mode = pool.device < 0 ? DeviceMoverOptions::Mode::kOff : DeviceMoverOptions::Mode::kAuto;
  to.save_priority = options_.write_stream_priority;
  to.load_priority = options_.load_stream_priority;
  to.staging_bytes = options_.staging_bytes;
  to.completion_spin_us = options_.completion_spin_us;
  to.wait_spin_us = options_.wait_spin_us;
  to.inline_dispatch = options_.inline_dispatch;
  auto mover = DeviceMover::Create(layout_, pool, view_.get(), to);
  if (!mover.ok()) return mover.status().WithContext("device pool");
  std::lock_guard<std::mutex> lock(mu_);
  mover_ = std::move(mover).value();
  return Status::OK();
}

bool AttachedStore::gpu_mode() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mover_ ? mover_->gpu_mode() : gpu_;
}

Status AttachedStore::CheckUsable() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Status::FailedPrecondition("store is closed");
  return dropped_;
}

void AttachedStore::Drop(const Status& why) const {
  std::unordered_map<uint64_t, PendingFence> fences;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dropped_.ok()) dropped_ = why;
    for (auto& [id, call] : calls_) {
      call->done.store(true, std::memory_order_release);
      call->status = dropped_;
    }
    fences.swap(fences_);
  }
  cv_.notify_all();
  reader_cv_.notify_one();
  channel_->Shutdown();
  for (auto& [id, f] : fences) {
    if (f.deferred) f.deferred->Resolve({});
    f.user->Complete(why);
  }
}

StatusOr<std::string> AttachedStore::Call(Msg type, std::string_view payload, int pass_fd) const {
  auto call = std::make_shared<PendingCall>();
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    CACHEPAWL_RETURN_IF_ERROR(dropped_);
    id = next_id_++;
    calls_[id] = call;
  }
  last_heard_ns_.store(std::max(last_heard_ns_.load(), NowNs()));
  if (Status s = channel_->Send(static_cast<uint16_t>(type), id, payload, pass_fd); !s.ok()) {
    Drop(Status::Unavailable("the owner (pid " + std::to_string(owner_pid_) + ") at '" +
                             options_.socket_path + "' is gone: " + s.message()));
  }
  // The caller reads the owner's messages itself while no other thread does (its answer then
  // wakes this thread, not a reader thread that would wake it), dispatching whatever comes
  // first; while another thread reads, it waits for that one to pass its answer on.
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(options_.call_timeout_ms);
  // The answer is expected: reads poll without sleeping until this (then sleep in poll).
  const auto spin_until = start + std::chrono::microseconds(SpinUs());
  std::unique_lock<std::mutex> lock(mu_);
  while (!call->done.load() && dropped_.ok()) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    if (reading_) {
      cv_.wait_until(lock, deadline, [&] { return call->done.load() || !reading_; });
      continue;
    }
    reading_ = true;
    lock.unlock();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const auto spin = std::chrono::duration_cast<std::chrono::microseconds>(spin_until - now);
    (void)ReadOne(static_cast<int>(std::min<int64_t>(left.count() + 1, 50)),
                  static_cast<uint32_t>(std::max<int64_t>(0, spin.count())));
    lock.lock();
    reading_ = false;
    cv_.notify_all();
    if (!fences_.empty()) reader_cv_.notify_one();
  }
  if (!call->done.load()) {
    lock.unlock();
    Drop(Status::Unavailable(std::string(MsgName(static_cast<uint16_t>(type))) +
                             ": no answer from the owner (pid " + std::to_string(owner_pid_) +
                             ") within AttachOptions.call_timeout_ms " +
                             std::to_string(options_.call_timeout_ms) + " ms"));
    lock.lock();
  }
  calls_.erase(id);
  if (!call->status.ok()) return call->status;
  return std::move(call->body);
}

Status AttachedStore::ReadOne(int timeout_ms, uint32_t spin_us) const {
  Frame frame;
  Status s = channel_->Receive(&frame, timeout_ms, spin_us);
  if (s.IsTimedOut()) return s;
  if (!s.ok()) {
    Drop(Status::Unavailable("the owner (pid " + std::to_string(owner_pid_) + ") at '" +
                             options_.socket_path + "' is gone: " + s.message()));
    return s;
  }
  last_heard_ns_.store(NowNs());
  if (frame.fd >= 0) close(frame.fd);
  Dispatch(frame);
  return Status::OK();
}

void AttachedStore::ReaderLoop() {
  int64_t last_ping_ns = 0;
  const int64_t timeout_ns = int64_t{options_.owner_timeout_ms} * 1000000;
  for (;;) {
    // The reader watches the socket only while fences are pending (their Copy and FenceDone
    // come unasked) and no caller reads: a caller's answer then wakes the caller alone.
    bool watch = false, pending = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      reader_cv_.wait_for(lock, std::chrono::milliseconds(100), [&] {
        return closed_ || !dropped_.ok() || (!reading_ && !fences_.empty());
      });
      if (closed_ || !dropped_.ok()) return;
      watch = !reading_ && !fences_.empty();
      pending = !calls_.empty() || !fences_.empty();
    }
    if (watch) {
      // Polls without sleeping (yielding the core) for the spin after the last message sent or
      // heard, while the fences' answers may come at once; then sleeps in poll. A caller that
      // takes the reader's role meanwhile ends the poll.
      pollfd p{channel_->fd(), POLLIN, 0};
      const int64_t spin_end_ns = last_heard_ns_.load() + int64_t{SpinUs()} * 1000;
      int r = 0;
      for (;;) {
        r = poll(&p, 1, 0);
        if (r != 0 || reading_.load(std::memory_order_relaxed) || NowNs() >= spin_end_ns) break;
        sched_yield();
      }
      if (r == 0 && !reading_.load(std::memory_order_relaxed)) r = poll(&p, 1, 100);
      if (r < 0 && errno != EINTR) {
        Drop(Status::FromErrno("poll of the owner's socket", errno));
        return;
      }
      if (r > 0) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (reading_) continue;  // a caller took the role: it dispatches what came
          reading_ = true;
        }
        const Status s = ReadOne(0, 0);
        {
          std::lock_guard<std::mutex> lock(mu_);
          reading_ = false;
        }
        cv_.notify_all();
        if (!s.ok() && !s.IsTimedOut()) return;
        continue;
      }
    }
    if (!pending) continue;
    const int64_t now = NowNs(), quiet = now - last_heard_ns_.load();
    if (quiet > timeout_ns) {
      Drop(Status::Unavailable("the owner (pid " + std::to_string(owner_pid_) +
                               ") was silent for AttachOptions.owner_timeout_ms " +
                               std::to_string(options_.owner_timeout_ms) +
                               " ms while operations were pending"));
      return;
    }
    if (quiet > timeout_ns / 2 && now - last_ping_ns > timeout_ns / 4) {
      last_ping_ns = now;
      (void)channel_->Send(static_cast<uint16_t>(Msg::kPing), 0, {});
    }
  }
}

void AttachedStore::Dispatch(Frame& frame) const {
  switch (static_cast<Msg>(frame.type)) {
    case Msg::kReply: {
      std::string body;
      Status st = DecodeReply(frame.payload, &body);
      std::lock_guard<std::mutex> lock(mu_);
      auto it = calls_.find(frame.id);
      if (it != calls_.end()) {
        it->second->status = st;
        it->second->body = std::move(body);
        it->second->done.store(true, std::memory_order_release);
        cv_.notify_all();
      }
      break;
    }
    case Msg::kCopy: {
      CopyOrder order;
      Status st = Decode(frame.payload, &order);
      if (!st.ok()) {
        Writer w;
        w.StatusOf(st.WithContext("the client could not decode the Copy"));
        (void)channel_->Send(static_cast<uint16_t>(Msg::kCopyDone), frame.id, w.bytes());
        break;
      }
      const_cast<AttachedStore*>(this)->RunCopy(frame.id, std::move(order));
      break;
    }
    case Msg::kFenceDone: {
      Reader r(frame.payload);
      Status st = r.StatusOf("FenceDone.status");
      if (Status bad = r.Finish(); !bad.ok()) st = bad.WithContext("FenceDone (undecodable)");
      PendingFence f;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = fences_.find(frame.id);
        if (it == fences_.end()) break;
        f = std::move(it->second);
        fences_.erase(it);
      }
      cv_.notify_all();
      if (f.deferred) f.deferred->Resolve({});  // (no effect when a Copy resolved it)
      f.user->Complete(st);
      break;
    }
    default:
      break;  // Pong, and anything a later owner may send
  }
}

void AttachedStore::RunCopy(uint64_t op_id, CopyOrder order) {
  std::shared_ptr<DeviceMover> mover;
  std::shared_ptr<FenceCompleter> user;
  std::shared_ptr<DeferredStreamWaiter> deferred;
  bool complete_on_copy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mover = mover_;
    if (mover) ++copies_in_flight_;
  }
  if (!mover) {
    Writer w;
    w.StatusOf(Status::FailedPrecondition(
        "the attached process has no device pool (AttachOptions.device_pool_bytes or "
        "RegisterDevicePool)"));
    (void)channel_->Send(static_cast<uint16_t>(Msg::kCopyDone), op_id, w.bytes());
    return;
  }
  const bool per_layer = order.op.per_layer_fences;
  if (layout_.tp_rank > 0) {
    const bool save = order.op.direction == Direction::kSave;
    for (CacheTransferUnit& u : order.op.units) {
      (save ? u.dst : u.src).offset = rank_offset_[static_cast<int>(u.kind)];
    }
  }
  const uint64_t submit_ns = profile::Now();
  Fence inner = mover->Submit(std::move(order.op));
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fences_.find(order.fence_id);
    if (it != fences_.end()) {
      if (!it->second.has_copy && it->second.start_ns != 0 && submit_ns >= it->second.start_ns) {
        profile::AddNanos(profile::Stage::kAttachedCopyOrder, submit_ns - it->second.start_ns);
      }
      it->second.last_copy = inner;
      it->second.has_copy = true;
      user = it->second.user;
      deferred = std::move(it->second.deferred);
      complete_on_copy = it->second.complete_on_copy;
    }
  }
  if (deferred) deferred->Resolve(internal::FenceAccess::StreamWaiter(inner));
  if (per_layer && user) {
    for (size_t l = 0; l < inner.num_layers(); ++l) {
      (void)inner.OnLayerComplete(l, [user, l](const Status& s) { user->CompleteLayer(l, s); });
    }
  }
  if (complete_on_copy && user) {
    inner.OnComplete([user](const Status& s) { user->Complete(s); });
  }
  inner.OnComplete([this, op_id](const Status& s) {
    Writer w;
    w.StatusOf(s);
    (void)channel_->Send(static_cast<uint16_t>(Msg::kCopyDone), op_id, w.bytes());
    std::lock_guard<std::mutex> lock(mu_);
    --copies_in_flight_;
    cv_.notify_all();
  });
}

uint64_t AttachedStore::NewFence(std::shared_ptr<FenceCompleter> user,
                                 std::shared_ptr<DeferredStreamWaiter> deferred,
                                 bool complete_on_copy, uint64_t start_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  fences_[id] = PendingFence{std::move(user), std::move(deferred), Fence(),
                             false,           complete_on_copy,    start_ns};
  if (fences_.size() == 1) reader_cv_.notify_one();
  return id;
}

void AttachedStore::ForgetFence(uint64_t id) {
  PendingFence f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fences_.find(id);
    if (it == fences_.end()) return;
    f = std::move(it->second);
    fences_.erase(it);
  }
  cv_.notify_all();
  if (f.deferred) f.deferred->Resolve({});
}

Status AttachedStore::CheckPages(std::string_view what, uint64_t pages) const {
  const uint64_t page = layout_.page_size_tokens;
  if (pages <= max_prompt_tokens_ / page) return Status::OK();
  return Status::InvalidArgument(std::string(what) + ": " + std::to_string(pages) + " pages of " +
                                 std::to_string(page) +
                                 " tokens (more than the owner's StoreOptions.max_prompt_tokens " +
                                 std::to_string(max_prompt_tokens_) + ")");
}

StatusOr<PrefixMatch> AttachedStore::Lookup(std::string_view ns, std::span<const uint32_t> tokens) {
  CACHEPAWL_RETURN_IF_ERROR(CheckUsable());
  if (tokens.size() > max_prompt_tokens_) {
    return Status::InvalidArgument(
        "tokens: " + std::to_string(tokens.size()) +
        " tokens (more than the owner's StoreOptions.max_prompt_tokens " +
        std::to_string(max_prompt_tokens_) + ")");
  }
  return LookupHashes(hasher_->HashTokens(ns, tokens));
}

StatusOr<PrefixMatch> AttachedStore::LookupHashes(std::span<const PageHash> hashes) {
  CACHEPAWL_RETURN_IF_ERROR(CheckPages("hashes", hashes.size()));
  StatusOr<std::string> reply = Status::Internal("no call");
  const int slot = hashes.size() <= area_shape_.slot_hashes ? TakeSlot() : -1;
  if (slot >= 0) {
    // The hashes go through this connection's hash area: 8 bytes cross the socket.
    if (!hashes.empty()) {
      std::memcpy(
          area_ + size_t{static_cast<uint32_t>(slot)} * area_shape_.slot_hashes * sizeof(PageHash),
          hashes.data(), hashes.size_bytes());
    }
    reply =
        Call(Msg::kLookupInArea,
             Encode(AreaLookup{static_cast<uint32_t>(slot), static_cast<uint32_t>(hashes.size())}));
    ReleaseSlot(slot);
  } else {
    Writer w;
    w.Hashes(hashes);
    reply = Call(Msg::kLookupHashes, w.bytes());
  }
  CACHEPAWL_ASSIGN_OR_RETURN(std::string body, std::move(reply));
  Reader r(body);
  PrefixMatch m = GetMatch(r, hashes.size(), hashes);
  CACHEPAWL_RETURN_IF_ERROR(r.Finish().WithContext("the owner's LookupHashes reply"));
  return m;
}

StatusOr<PrefixLock> AttachedStore::Lock(const PrefixMatch& match, size_t pages) {
  CACHEPAWL_RETURN_IF_ERROR(CheckPages("match.hashes", match.hashes.size()));
  Writer w;
  PutMatch(w, match);
  w.U64(pages);
  CACHEPAWL_ASSIGN_OR_RETURN(std::string body, Call(Msg::kLock, w.bytes()));
  Reader r(body);
  PrefixLock lock;
  lock.hashes = r.Hashes("Lock.hashes", match.hashes.size());
  lock.with_state = r.Bool("Lock.with_state");
  CACHEPAWL_RETURN_IF_ERROR(r.Finish().WithContext("the owner's Lock reply"));
  return lock;
}

Status AttachedStore::Unlock(PrefixLock& lock) {
  if (lock.released) return Status::FailedPrecondition("lock was already released");
  if (lock.hashes.empty()) {
    lock.released = true;
    return Status::OK();
  }
  Writer w;
  w.Hashes(lock.hashes);
  auto reply = Call(Msg::kUnlock, w.bytes());
  if (reply.ok() || reply.status().IsUnavailable()) lock.released = true;  // (gone with the owner)
  if (!reply.ok()) return reply.status();
  return Status::OK();
}

Status AttachedStore::CheckRank(std::string_view field, std::optional<uint32_t> rank) const {
  if (!rank || *rank == layout_.tp_rank) return Status::OK();
  return Status::InvalidArgument(
      std::string(field) + ": " + std::to_string(*rank) + " (this process attached as rank " +
      std::to_string(layout_.tp_rank) + " of " + std::to_string(layout_.tp_size) +
      ": it moves that rank's shares only; attach once per rank, AttachOptions.tp_rank)");
}

StatusOr<Fence> AttachedStore::Load(const PrefixMatch& match,
                                    std::span<const uint64_t> device_pages,
                                    std::optional<uint64_t> device_state_slot,
                                    const LoadOptions& opts) {
  CACHEPAWL_RETURN_IF_ERROR(CheckUsable());
  CACHEPAWL_RETURN_IF_ERROR(CheckRank("LoadOptions.tp_rank", opts.tp_rank));
  CACHEPAWL_RETURN_IF_ERROR(CheckPages("match.hashes", match.hashes.size()));
  const size_t piece = options_.load_split_pages;
  if (piece == 0 || opts.per_layer_fences || device_pages.size() < 2 * size_t{piece}) {
    return LoadPiece(match, device_pages, device_state_slot, opts);
  }
  // Pieces of `piece` pages, one call after the other: piece k's copy runs while the owner
  // handles piece k + 1. The state comes with the last piece (its depth is the Load's end).
  std::vector<Fence> parts;
  Status refused;
  for (size_t at = 0; at < device_pages.size() && refused.ok(); at += piece) {
    const size_t count = std::min<size_t>(piece, device_pages.size() - at);
    const bool last = at + count == device_pages.size();
    LoadOptions o = opts;
    o.first_page = opts.first_page + at;
    auto part = LoadPiece(match, device_pages.subspan(at, count),
                          last ? device_state_slot : std::nullopt, o);
    if (part.ok()) {
      parts.push_back(*part);
    } else {
      refused = part.status();
    }
  }
  if (!refused.ok()) {
    // The engine may reuse the pages once Load returns: the pieces under way land first.
    for (const Fence& f : parts) (void)f.Wait();
    return refused;
  }
  return AllOf(std::move(parts));
}

Fence AttachedStore::AllOf(std::vector<Fence> parts) {
  auto all = std::make_shared<FenceCompleter>();
  struct Count {
    std::mutex mu;
    size_t left;
    Status first;
  };
  auto count = std::make_shared<Count>();
  count->left = parts.size();
  Fence fence = all->fence();
  if (!parts.empty()) {
    internal::FenceAccess::SetWaitSpin(fence, internal::FenceAccess::WaitSpin(parts.back()));
  }
  // StreamWait: the engine's stream waits for every piece (each its own copy's event).
  internal::FenceAccess::SetStreamWaiter(fence, [parts](void* stream) -> Status {
    for (const Fence& f : parts) CACHEPAWL_RETURN_IF_ERROR(f.StreamWait(stream));
    return Status::OK();
  });
  for (const Fence& f : parts) {
    f.OnComplete([all, count](const Status& s) {
      Status done;
      {
        std::lock_guard<std::mutex> lock(count->mu);
        if (!s.ok() && count->first.ok()) count->first = s;
        if (--count->left > 0) return;
        done = count->first;
      }
      all->Complete(done);
    });
  }
  return fence;
}

StatusOr<Fence> AttachedStore::LoadPiece(const PrefixMatch& match,
                                         std::span<const uint64_t> device_pages,
                                         std::optional<uint64_t> device_state_slot,
                                         const LoadOptions& opts) {
  const uint64_t start_ns = profile::Now();
  auto user =
      std::make_shared<FenceCompleter>(opts.per_layer_fences ? layout_.attention_layers.size() : 0);
  std::shared_ptr<DeferredStreamWaiter> deferred;
  if (gpu_mode()) {
    deferred =
        std::make_shared<DeferredStreamWaiter>(std::chrono::milliseconds(options_.stream_wait_ms));
    internal::FenceAccess::SetStreamWaiter(
        user->fence(), [deferred](void* stream) { return deferred->Wait(stream); });
    internal::FenceAccess::SetWaitSpin(user->fence(), options_.wait_spin_us);
  }
  LoadCall call;
  call.fence_id = NewFence(user, deferred, /*complete_on_copy=*/true, start_ns);
  call.match = match;
  call.device_pages.assign(device_pages.begin(), device_pages.end());
  call.state_slot = device_state_slot;
  call.opts = opts;
  auto reply = Call(Msg::kLoad, Encode(call));
  profile::Add(profile::Stage::kAttachedCall, start_ns);
  if (!reply.ok()) {
    ForgetFence(call.fence_id);
    return reply.status();
  }
  return user->fence();
}

StatusOr<Fence> AttachedStore::Save(const SaveRequest& request) {
  CACHEPAWL_RETURN_IF_ERROR(CheckUsable());
  CACHEPAWL_RETURN_IF_ERROR(CheckRank("SaveRequest.tp_rank", request.tp_rank));
  if (!request.hashes.empty() && !request.tokens.empty()) {
    return Status::InvalidArgument("SaveRequest: give tokens or hashes, not both");
  }
  SaveCall call;
  if (request.hashes.empty()) {
    if (request.tokens.size() > max_prompt_tokens_) {
      return Status::InvalidArgument(
          "SaveRequest.tokens: " + std::to_string(request.tokens.size()) +
          " tokens (more than the owner's StoreOptions.max_prompt_tokens " +
          std::to_string(max_prompt_tokens_) + ")");
    }
    call.hashes = hasher_->HashTokens(request.ns, request.tokens);
  } else {
    CACHEPAWL_RETURN_IF_ERROR(CheckPages("SaveRequest.hashes", request.hashes.size()));
    call.hashes.assign(request.hashes.begin(), request.hashes.end());
  }
  auto user = std::make_shared<FenceCompleter>();
  if (gpu_mode()) internal::FenceAccess::SetWaitSpin(user->fence(), options_.wait_spin_us);
  call.fence_id = NewFence(user, nullptr, /*complete_on_copy=*/false);
  call.first_page = request.first_page;
  call.device_pages.assign(request.device_pages.begin(), request.device_pages.end());
  call.state_slot = request.device_state_slot;
  call.state_depth_tokens = request.state_depth_tokens;
  auto reply = Call(Msg::kSave, Encode(call));
  if (!reply.ok()) {
    ForgetFence(call.fence_id);
    return reply.status();
  }
  Fence fence = user->fence();
  if (gpu_mode()) {
    // Every Copy of the Save came before its Reply: the last one (operations of one direction
    // complete in order) is what a stream waits for. None: the fence fires on the owner's word.
    std::function<Status(void*)> waiter;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = fences_.find(call.fence_id);
      if (it != fences_.end() && it->second.has_copy) {
        waiter = internal::FenceAccess::StreamWaiter(it->second.last_copy);
      }
    }
    if (!waiter) waiter = [fence](void*) { return fence.Wait(); };
    internal::FenceAccess::SetStreamWaiter(fence, std::move(waiter));
  }
  return fence;
}

StatusOr<std::shared_ptr<Store::Prefetch>> AttachedStore::StartPrefetch(const PrefixMatch& match) {
  CACHEPAWL_RETURN_IF_ERROR(CheckUsable());
  CACHEPAWL_RETURN_IF_ERROR(CheckPages("match.hashes", match.hashes.size()));
  auto user = std::make_shared<FenceCompleter>();
  const uint64_t id = NewFence(user, nullptr, /*complete_on_copy=*/false);
  Writer w;
  w.U64(id);
  PutMatch(w, match);
  auto reply = Call(Msg::kPrefetch, w.bytes());
  if (!reply.ok()) {
    ForgetFence(id);
    return reply.status();
  }
  return std::shared_ptr<Store::Prefetch>(
      std::make_shared<PrefetchImpl>(channel_, id, user->fence()));
}

Status AttachedStore::RegisterDevicePool(const DevicePoolDescription& pool) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (mover_ || registering_)
      return Status::FailedPrecondition("a device pool is already registered");
    registering_ = true;
  }
  Status s = CreateMover(pool);
  std::lock_guard<std::mutex> lock(mu_);
  registering_ = false;
  return s;
}

Status AttachedStore::UnregisterDevicePool() {
  std::shared_ptr<DeviceMover> mover;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::FailedPrecondition("store is closed");
    if (device_arena_) {
      return Status::FailedPrecondition(
          "the device pool is the client's own (AttachOptions.device_pool_bytes): it goes with "
          "Close");
    }
    if (registering_) return Status::FailedPrecondition("a device pool is being registered");
    if (!mover_) return Status::FailedPrecondition("no device pool is registered");
    registering_ = true;
    mover = std::move(mover_);
    // Copies the owner sends from now on fail (no pool); those under way finish first.
    cv_.wait(lock, [&] { return copies_in_flight_ == 0; });
    registering_ = false;
  }
  mover.reset();
  return Status::OK();
}

StatusOr<uint64_t> AttachedStore::AllocateDeviceSlot(Kind kind) {
  CACHEPAWL_RETURN_IF_ERROR(CheckUsable());
  return AllocateOwnedDeviceSlot(device_arena_.get(), layout_, kind);
}

Status AttachedStore::FreeDeviceSlot(Kind kind, uint64_t slot) {
  CACHEPAWL_RETURN_IF_ERROR(CheckUsable());
  return FreeOwnedDeviceSlot(device_arena_.get(), layout_, kind, slot);
}

Status AttachedStore::WriteDeviceRecord(Kind kind, uint64_t slot,
                                        std::span<const std::byte> record) {
  CACHEPAWL_RETURN_IF_ERROR(CheckUsable());
  return WriteOwnedDeviceRecord(device_arena_.get(), layout_, kind, slot, record);
}

Status AttachedStore::ReadDeviceRecord(Kind kind, uint64_t slot, std::span<std::byte> record) {
  CACHEPAWL_RETURN_IF_ERROR(CheckUsable());
  return ReadOwnedDeviceRecord(device_arena_.get(), layout_, kind, slot, record);
}

StoreStats AttachedStore::Stats() const {
  StoreStats st;
  auto body = Call(Msg::kStats, {});
  if (body.ok() && body->size() == sizeof(StoreStats)) std::memcpy(&st, body->data(), sizeof(st));
  return st;
}

Status AttachedStore::Close() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::OK();
    // Drain: the fences in flight fire (the reader fails them if the owner goes or goes silent).
    cv_.wait(lock, [&] { return fences_.empty() || !dropped_.ok(); });
    closed_ = true;
  }
  reader_cv_.notify_one();
  if (!channel_) return Status::OK();  // (Attach failed before connecting)
  channel_->Shutdown();
  if (reader_.joinable()) reader_.join();
  std::shared_ptr<DeviceMover> mover;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return copies_in_flight_ == 0; });
    mover = std::move(mover_);
  }
  mover.reset();
  device_arena_.reset();
  view_.reset();
  return Status::OK();
}

}  // namespace ipc
}  // namespace cachepawl
