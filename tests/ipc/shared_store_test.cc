// One store for several processes (Store::Serve, Store::Attach): real processes (tests/ipc/
// ipc_peer_main.cc, spawned), a real socket, the real owner. What crosses processes is checked
// byte for byte; what a dead process held is checked to come back.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "ipc/channel.h"
#include "ipc/protocol.h"
#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/ipc/child_process.h"
#include "tests/ipc/shared_store_fixture.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

using testing::ChildProcess;
using Clock = std::chrono::steady_clock;

std::vector<std::string> Peer(std::vector<std::string> args) {
  args.insert(args.begin(), CACHEPAWL_IPC_PEER);
  return args;
}

TEST_F(SharedStoreTest, ProcessesSharePagesBothWays) {
  auto owner = Serve(16 * kMiB);
  ASSERT_NE(owner, nullptr);
  // A client saves; the owner and a second client load what it saved, byte for byte.
  ChildProcess a(Peer({"client", socket_, "save", "1", "10", "save", "2", "7"}));
  ASSERT_EQ(a.Wait(), 0) << a.output();
  LoadAndVerify(*owner, 1, 10);
  // The owner saves; a client loads what the owner saved, and what the first client did.
  SavePrompt(*owner, 3, 5);
  ChildProcess b(Peer({"client", socket_, "load", "1", "10", "load", "2", "7", "load", "3", "5"}));
  ASSERT_EQ(b.Wait(), 0) << b.output();
  // An attached Store in this process too (the same API: Lookup, Lock, Load, Stats).
  auto attached = Store::Attach(Attaching());
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  LoadAndVerify(**attached, 2, 7);
  SavePrompt(**attached, 4, 6);
  LoadAndVerify(*owner, 4, 6);
  const StoreStats st = (*attached)->Stats();
  EXPECT_TRUE(st.serve.enabled);
  EXPECT_EQ(st.serve.attaches, 3u);
  EXPECT_EQ(st.serve.refused, 0u);
  EXPECT_GE(st.saves, 4u);
  ASSERT_TRUE((*attached)->Close().ok());
  EXPECT_LE(WaitFor(*owner, [](const StoreStats& s) { return s.serve.clients_now == 0; }).count(),
            10000);
  EXPECT_EQ(owner->Stats().serve.clients_gone, 3u);
}

TEST_F(SharedStoreTest, AKilledClientsLockIsReleased) {
  // 64 host slots (8 KiB each); host_space_wait_ms 0: a full tier is NoSpace at once.
  auto owner = Serve(64 * 8192, /*host_space_wait_ms=*/0);
  ASSERT_NE(owner, nullptr);
  SavePrompt(*owner, 1, 20);  // 20 pages and a state: 21 slots
  ChildProcess holder(Peer({"client", socket_, "hold", "1", "20"}));
  ASSERT_TRUE(holder.WaitForLine("locked 20")) << holder.output();
  // While the lock holds, the tier cannot make room for one Save of 50 pages (43 slots are not
  // locked).
  auto fill = [&](uint32_t first_token) {
    const auto tokens = Tokens(first_token, 50 * 4);
    std::vector<uint64_t> slots;
    for (int i = 0; i < 50; ++i) slots.push_back(*owner->AllocateDeviceSlot(Kind::kKV));
    SaveRequest req;
    req.tokens = tokens;
    req.device_pages = slots;
    auto f = owner->Save(req);
    const Status st = f.ok() ? f->Wait() : f.status();
    for (uint64_t s : slots) (void)owner->FreeDeviceSlot(Kind::kKV, s);
    return st;
  };
  EXPECT_TRUE(fill(10000000).IsNoSpace());
  const auto killed = Clock::now();
  holder.Kill(SIGKILL);
  const auto took =
      WaitFor(*owner, [](const StoreStats& s) { return s.serve.locks_released == 1; });
  std::printf(
      "lock of a SIGKILLed client released %lld ms after the kill\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count()));
  ASSERT_EQ(owner->Stats().serve.locks_released, 1u) << "after " << took.count() << " ms";
  EXPECT_EQ(owner->Stats().serve.clients_now, 0u);
  // Its pages are evictable again: the same fill now succeeds.
  EXPECT_TRUE(fill(20000000).ok());
}

TEST_F(SharedStoreTest, ClientsKilledMidOperationLeaveNothingBehind) {
  auto owner = Serve(4 * kMiB);  // 512 slots: the churners evict each other's prompts
  ASSERT_NE(owner, nullptr);
  uint64_t kills = 0;
  for (int round = 0; round < 6; ++round) {
    std::vector<std::unique_ptr<ChildProcess>> churners;
    for (int c = 0; c < 3; ++c) {
      churners.push_back(std::make_unique<ChildProcess>(
          Peer({"client", socket_, "churn", std::to_string(10 + 40 * c)})));
    }
    for (auto& c : churners) ASSERT_TRUE(c->WaitForLine("churning")) << c->output();
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + 40 * round));
    for (auto& c : churners) {
      c->Kill(SIGKILL);
      // A churner that exited by itself found wrong bytes or an error: its output says which.
      ASSERT_EQ(c->Wait(), 128 + SIGKILL) << c->output();
      ++kills;
    }
  }
  WaitFor(*owner, [&](const StoreStats& s) { return s.serve.clients_gone == kills; });
  const StoreStats st = owner->Stats();
  EXPECT_EQ(st.serve.clients_gone, kills);
  EXPECT_EQ(st.serve.clients_now, 0u);
  std::printf(
      "%llu clients killed mid-operation: %llu copies failed with them, longest reclaim "
      "%llu us\n",
      static_cast<unsigned long long>(kills),
      static_cast<unsigned long long>(st.serve.copies_failed),
      static_cast<unsigned long long>(st.serve.reclaim_max_us));
  // Nothing they held stays held: the whole tier can be refilled (a leaked slot, a lock or an
  // unfinished Save left behind would make this NoSpace), and what a new client loads verifies.
  for (uint64_t seed = 500; seed < 500 + 30; ++seed) SavePrompt(*owner, seed, 16);
  ChildProcess check(
      Peer({"client", socket_, "load", "529", "16", "save", "600", "9", "load", "600", "9"}));
  ASSERT_EQ(check.Wait(), 0) << check.output();
  LoadAndVerify(*owner, 600, 9);
}

TEST_F(SharedStoreTest, RefusesAnotherLayoutAnotherBuildAndAnotherUser) {
  auto owner = Serve(16 * kMiB);
  ASSERT_NE(owner, nullptr);
  ChildProcess other(Peer({"client", socket_, "--layout", "attention"}));
  ASSERT_TRUE(other.WaitForLine("refused Incompatible")) << other.output();
  EXPECT_NE(other.output().find("test/tiny-attention"), std::string::npos) << other.output();
  EXPECT_EQ(other.Wait(), 6);
  ChildProcess same(Peer({"client", socket_, "--layout", "hybrid", "save", "1", "3"}));
  EXPECT_EQ(same.Wait(), 0) << same.output();

  // Another build, another protocol version: a raw Hello.
  for (const auto& [protocol, build] : std::vector<std::pair<uint32_t, std::string>>{
           {ipc::kProtocolVersion, "cachepawl 0.0 other"}, {ipc::kProtocolVersion + 1, ""}}) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, socket_.data(), socket_.size());
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ipc::Channel ch(fd, 2000);
    ipc::Hello hello;
    hello.protocol = protocol;
    hello.build = build;
    ASSERT_TRUE(ch.Send(static_cast<uint16_t>(ipc::Msg::kHello), 0, ipc::Encode(hello)).ok());
    ipc::Frame f;
    ASSERT_TRUE(ch.Receive(&f, 5000).ok());
    ASSERT_EQ(f.type, static_cast<uint16_t>(ipc::Msg::kRefused));
    ipc::Reader r(f.payload);
    const Status why = r.StatusOf("status");
    EXPECT_TRUE(why.IsIncompatible()) << why.ToString();
  }

  // Another Unix user (a child that drops to uid 65534; it starts no thread: this process is
  // multi-threaded). The socket file (0600) keeps it out; opened to everyone, the owner's own
  // check of the peer's credentials refuses it.
  if (geteuid() == 0) {
    auto connect_as_nobody = [&]() -> int {  // the child's exit: 0 refused as expected
      const pid_t pid = fork();
      if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(9);
        const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, socket_.data(), socket_.size());
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
          _exit(errno == EACCES ? 1 : 8);  // the file's mode refused it
        }
        ipc::Channel ch(fd, 2000);
        ipc::Frame f;
        if (!ch.Receive(&f, 5000).ok() || f.type != static_cast<uint16_t>(ipc::Msg::kRefused)) {
          _exit(7);
        }
        ipc::Reader r(f.payload);
        const Status why = r.StatusOf("status");
        _exit(why.IsFailedPrecondition() && why.message().find("uid 65534") != std::string::npos
                  ? 0
                  : 6);
      }
      int st = 0;
      if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
      return WEXITSTATUS(st);
    };
    EXPECT_EQ(connect_as_nobody(), 1) << "the socket file let another user connect";
    ASSERT_EQ(chmod(dir_.str().c_str(), 0755), 0);
    ASSERT_EQ(chmod(socket_.c_str(), 0666), 0);
    EXPECT_EQ(connect_as_nobody(), 0) << "the owner did not refuse another user";
    EXPECT_GE(owner->Stats().serve.refused, 4u);
  }
  EXPECT_GE(owner->Stats().serve.refused, 3u);
}

// True once process `pid` is stopped (state T in /proc/PID/stat): a SIGSTOP takes effect only
// when the kernel next schedules the process.
bool WaitUntilStopped(pid_t pid) {
  for (int i = 0; i < 5000; ++i) {
    FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (f == nullptr) return false;
    char buf[512] = {};
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    const char* close_paren = std::strrchr(buf, ')');
    if (n > 0 && close_paren != nullptr && close_paren[1] == ' ' && close_paren[2] == 'T') {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A connection that has said Hello, for sending malformed calls.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    connected_ = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ch_ = std::make_unique<ipc::Channel>(fd, 2000);
    ipc::Hello hello;
    hello.build = ipc::BuildId();
    ipc::Frame f;
    connected_ = connected_ &&
                 ch_->Send(static_cast<uint16_t>(ipc::Msg::kHello), 0, ipc::Encode(hello)).ok() &&
                 ch_->Receive(&f, 5000).ok() && f.type == static_cast<uint16_t>(ipc::Msg::kHelloOk);
    if (f.fd >= 0) close(f.fd);
  }
  bool connected() const { return connected_; }
  ipc::Channel& channel() { return *ch_; }
  // The status of the Reply to a call of `type` with `payload` (and the descriptor `fd`, when
  // >= 0); its body into `*body`.
  Status Call(ipc::Msg type, const std::string& payload, int fd = -1, std::string* body = nullptr) {
    if (!ch_->Send(static_cast<uint16_t>(type), 77, payload, fd).ok()) {
      return Status::Unavailable("send");
    }
    ipc::Frame f;
    if (Status s = ch_->Receive(&f, 5000); !s.ok()) return s;
    if (f.type != static_cast<uint16_t>(ipc::Msg::kReply) || f.id != 77) {
      return Status::Internal("not a reply");
    }
    std::string unused;
    return ipc::DecodeReply(f.payload, body != nullptr ? body : &unused);
  }

 private:
  std::unique_ptr<ipc::Channel> ch_;
  bool connected_ = false;
};

TEST_F(SharedStoreTest, MalformedMessagesAreRefusedAndTheOwnerServesOn) {
  auto owner = Serve(16 * kMiB);
  ASSERT_NE(owner, nullptr);
  SavePrompt(*owner, 1, 8);
  RawClient raw(socket_);
  ASSERT_TRUE(raw.connected());
  // A hash list longer than any prompt the owner accepts (max_prompt_tokens / page size).
  {
    ipc::Writer w;
    w.U32(1u << 30);
    Status s = raw.Call(ipc::Msg::kLookupHashes, w.bytes());
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find("LookupHashes.hashes"), std::string::npos) << s.ToString();
  }
  // A truncated Load, a Save with trailing bytes, a Lock whose match counts past its hashes.
  {
    ipc::LoadCall load;
    load.fence_id = 1;
    std::string bytes = ipc::Encode(load);
    Status s = raw.Call(ipc::Msg::kLoad, bytes.substr(0, bytes.size() - 3));
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    ipc::SaveCall save;
    s = raw.Call(ipc::Msg::kSave, ipc::Encode(save) + "xx");
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    PrefixMatch m;
    m.kv_only_pages = 5;
    ipc::Writer w;
    ipc::PutMatch(w, m);
    w.U64(5);
    s = raw.Call(ipc::Msg::kLock, w.bytes());
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.message().find("kv_only_pages"), std::string::npos) << s.ToString();
  }
  // A message that is not a call, an Unlock of a lock never taken, a CopyDone for no copy.
  {
    Status s = raw.Call(static_cast<ipc::Msg>(999), "");
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    ipc::Writer w;
    w.Hashes(owner->HashTokens("", Tokens(100000, 8 * 4)));
    s = raw.Call(ipc::Msg::kUnlock, w.bytes());
    EXPECT_TRUE(s.IsFailedPrecondition()) << s.ToString();
    ipc::Writer done;
    done.StatusOf(Status::OK());
    ASSERT_TRUE(
        raw.channel().Send(static_cast<uint16_t>(ipc::Msg::kCopyDone), 12345, done.bytes()).ok());
  }
  // A frame header announcing more than the largest frame: the owner drops this connection.
  {
    RawClient huge(socket_);
    ASSERT_TRUE(huge.connected());
    char header[ipc::kFrameHeaderBytes] = {};
    const uint32_t len = ipc::kMaxFrameBytes + 1;
    std::memcpy(header, &len, 4);
    ASSERT_EQ(write(huge.channel().fd(), header, sizeof(header)),
              static_cast<ssize_t>(sizeof(header)));
    ipc::Frame f;
    EXPECT_TRUE(huge.channel().Receive(&f, 5000).IsUnavailable());
  }
  // The owner serves on: this connection and a new process both work.
  EXPECT_TRUE(raw.Call(ipc::Msg::kStats, "").ok());
  ChildProcess client(Peer({"client", socket_, "load", "1", "8"}));
  EXPECT_EQ(client.Wait(), 0) << client.output();
  EXPECT_GE(owner->Stats().serve.bad_messages, 6u);
}

// A memfd of `bytes`, sealed against shrinking and growing when `sealed`.
int AreaMemfd(size_t bytes, bool sealed) {
  const int fd = memfd_create("test-hash-area", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  if (sealed) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  }
  return fd;
}

TEST_F(SharedStoreTest, AHashAreaIsCheckedAndLooksUpAsTheSocketDoes) {
  auto owner = Serve(16 * kMiB);
  ASSERT_NE(owner, nullptr);
  SavePrompt(*owner, 1, 8);
  const auto hashes = owner->HashTokens("", Tokens(100000, 8 * owner->layout().page_size_tokens));
  ASSERT_EQ(hashes.size(), 8u);
  RawClient raw(socket_);
  ASSERT_TRUE(raw.connected());
  Status s = raw.Call(ipc::Msg::kLookupInArea, ipc::Encode(ipc::AreaLookup{0, 8}));
  EXPECT_TRUE(s.IsFailedPrecondition()) << s.ToString();
  EXPECT_NE(s.message().find("gave no hash area"), std::string::npos) << s.ToString();
  // No descriptor, an unsealed memfd, one smaller than its slots, too many slots.
  const ipc::HashArea shape{2, 64};
  const size_t bytes = 2 * 64 * sizeof(PageHash);
  s = raw.Call(ipc::Msg::kHashArea, ipc::Encode(shape));
  EXPECT_NE(s.message().find("HashArea: no memfd"), std::string::npos) << s.ToString();
  int fd = AreaMemfd(bytes, false);
  s = raw.Call(ipc::Msg::kHashArea, ipc::Encode(shape), fd);
  close(fd);
  EXPECT_NE(s.message().find("not sealed against shrinking"), std::string::npos) << s.ToString();
  fd = AreaMemfd(100, true);
  s = raw.Call(ipc::Msg::kHashArea, ipc::Encode(shape), fd);
  close(fd);
  EXPECT_NE(s.message().find("the memfd holds 100 bytes"), std::string::npos) << s.ToString();
  fd = AreaMemfd(bytes, true);
  s = raw.Call(ipc::Msg::kHashArea, ipc::Encode(ipc::HashArea{17, 64}), fd);
  EXPECT_NE(s.message().find("HashArea.slots: 17"), std::string::npos) << s.ToString();
  // A good area: a lookup through slot 1 answers byte for byte as LookupHashes does.
  ASSERT_TRUE(raw.Call(ipc::Msg::kHashArea, ipc::Encode(shape), fd).ok());
  char* area = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  ASSERT_NE(area, MAP_FAILED);
  std::memcpy(area + 64 * sizeof(PageHash), hashes.data(), 8 * sizeof(PageHash));
  std::string by_area, by_socket;
  ASSERT_TRUE(
      raw.Call(ipc::Msg::kLookupInArea, ipc::Encode(ipc::AreaLookup{1, 8}), -1, &by_area).ok());
  ipc::Writer w;
  w.Hashes(hashes);
  ASSERT_TRUE(raw.Call(ipc::Msg::kLookupHashes, w.bytes(), -1, &by_socket).ok());
  EXPECT_EQ(by_area, by_socket);
  ipc::Reader r(by_area);
  const PrefixMatch m = ipc::GetMatch(r, 4096, hashes);
  EXPECT_TRUE(r.Finish().ok());
  EXPECT_EQ(m.reusable_pages, 8u);
  // A slot past the area, more hashes than a slot holds, a second area.
  s = raw.Call(ipc::Msg::kLookupInArea, ipc::Encode(ipc::AreaLookup{2, 8}));
  EXPECT_NE(s.message().find("LookupInArea.slot: 2"), std::string::npos) << s.ToString();
  s = raw.Call(ipc::Msg::kLookupInArea, ipc::Encode(ipc::AreaLookup{0, 65}));
  EXPECT_NE(s.message().find("LookupInArea.hashes: 65"), std::string::npos) << s.ToString();
  fd = AreaMemfd(bytes, true);
  s = raw.Call(ipc::Msg::kHashArea, ipc::Encode(shape), fd);
  close(fd);
  EXPECT_TRUE(s.IsFailedPrecondition()) << s.ToString();
  munmap(area, bytes);
  // An attached store sets up its own area (one call at attach, which the owner takes: no bad
  // message), and its lookups answer as the owner's own.
  const ServeStats before = owner->Stats().serve;
  AttachOptions ao;
  ao.socket_path = socket_;
  ao.cuda_device = -1;
  auto client = Store::Attach(ao);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const ServeStats attached = owner->Stats().serve;
  EXPECT_EQ(attached.calls, before.calls + 1);
  EXPECT_EQ(attached.bad_messages, before.bad_messages);
  auto mine = (*client)->LookupHashes(hashes);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(mine->reusable_pages, 8u);
  EXPECT_EQ(mine->hashes, hashes);
  EXPECT_GE(owner->Stats().serve.bad_messages, 6u);
}

TEST_F(SharedStoreTest, OwnerGoneClientsFailFastThenReattachToTheRestartedOwner) {
  const std::string disk = dir_.str() + "/disk";
  auto owner = std::make_unique<ChildProcess>(Peer({"serve", socket_, "16", disk, "64"}));
  ASSERT_TRUE(owner->WaitForLine("ready")) << owner->output();
  AttachOptions ao = Attaching();
  ao.call_timeout_ms = 500;
  ao.owner_timeout_ms = 500;
  {
    auto client = Store::Attach(ao);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    Store& s = **client;
    for (uint64_t seed = 1; seed <= 3; ++seed) SavePrompt(s, seed, 6);
    // Write-through: wait until the disk tier holds all three prompts (18 pages, 3 states).
    for (int i = 0; i < 2000; ++i) {
      const StoreStats st = s.Stats();
      const int disk_tier = static_cast<int>(Tier::kDisk);
      if (st.resident_entries[disk_tier][static_cast<int>(Kind::kKV)] == 18 &&
          st.resident_entries[disk_tier][static_cast<int>(Kind::kMamba)] == 3) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // A stopped owner: a call returns Unavailable within its bound (never hangs), and so does
    // every later call, at once.
    owner->Kill(SIGSTOP);
    ASSERT_TRUE(WaitUntilStopped(owner->pid()));
    const auto start = Clock::now();
    auto m = s.Lookup("", Tokens(100000, 24));
    const auto took = Clock::now() - start;
    EXPECT_TRUE(m.status().IsUnavailable()) << m.status().ToString();
    EXPECT_LT(took, std::chrono::seconds(5));
    const auto again = Clock::now();
    EXPECT_TRUE(s.Lookup("", Tokens(100000, 24)).status().IsUnavailable());
    EXPECT_LT(Clock::now() - again, std::chrono::milliseconds(100));
    owner->Kill(SIGKILL);
    EXPECT_EQ(owner->Wait(), 128 + SIGKILL);
    EXPECT_TRUE(s.Close().ok());
  }
  // A killed owner while a Save's fence is pending: the fence fires (Unavailable, or OK if the
  // Save had finished), never hangs.
  owner = std::make_unique<ChildProcess>(Peer({"serve", socket_, "16", disk, "64"}));
  ASSERT_TRUE(owner->WaitForLine("ready")) << owner->output();
  {
    auto client = Store::Attach(ao);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    Store& s = **client;
    const ModelLayout& layout = s.layout();
    const auto tokens = Tokens(900000, 300 * 4);
    std::vector<uint64_t> slots;
    for (int i = 0; i < 300; ++i) slots.push_back(*s.AllocateDeviceSlot(Kind::kKV));
    SaveRequest req;
    req.tokens = tokens;
    req.device_pages = slots;
    auto fence = s.Save(req);
    owner->Kill(SIGKILL);
    if (fence.ok()) {
      const Status st = fence->Wait(std::chrono::seconds(10));
      EXPECT_FALSE(st.IsTimedOut()) << "a fence outlived its owner";
      EXPECT_TRUE(st.ok() || st.IsUnavailable()) << st.ToString();
    }
    EXPECT_TRUE(s.Lookup("", tokens).status().IsUnavailable());
    (void)layout;
    EXPECT_EQ(owner->Wait(), 128 + SIGKILL);
  }
  // The owner restarted on the same folder: clients attach again, and the disk tier serves what
  // verifies.
  owner = std::make_unique<ChildProcess>(Peer({"serve", socket_, "16", disk, "64"}));
  ASSERT_TRUE(owner->WaitForLine("ready")) << owner->output();
  auto client = Store::Attach(ao);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (uint64_t seed = 1; seed <= 3; ++seed) LoadAndVerify(**client, seed, 6);
  EXPECT_GE((*client)->Stats().disk_records_recovered, 21u);
  ASSERT_TRUE((*client)->Close().ok());
  owner->Kill(SIGTERM);
  EXPECT_EQ(owner->Wait(), 0) << owner->output();
}

TEST(AttachOptionsTest, BadOptionsNameTheField) {
  AttachOptions ao;
  Status s = Store::Attach(ao).status();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("AttachOptions.socket_path"), std::string::npos) << s.ToString();
  ao.socket_path = std::string(200, 'x');
  s = Store::Attach(ao).status();
  EXPECT_NE(s.message().find("107"), std::string::npos) << s.ToString();
  ao.socket_path = "/nonexistent/cachepawl.sock";
  s = Store::Attach(ao).status();
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  ao.call_timeout_ms = 0;
  EXPECT_NE(Store::Attach(ao).status().message().find("call_timeout_ms"), std::string::npos);
  ServeOptions so;
  so.socket_path = "/tmp/x.sock";
  so.handler_threads = 0;
  StoreOptions o = CpuStoreOptions(TinyHybrid(), 16 * kMiB, 0, 0, "");
  s = Store::Serve(o, so).status();
  EXPECT_NE(s.message().find("ServeOptions.handler_threads"), std::string::npos) << s.ToString();
  so.handler_threads = 8;
  so.poll_spin_us = 100001;
  s = Store::Serve(o, so).status();
  EXPECT_NE(s.message().find("ServeOptions.poll_spin_us: 100001"), std::string::npos)
      << s.ToString();
  so.poll_spin_us = 200;
  so.inflight_spin_us = 100001;
  s = Store::Serve(o, so).status();
  EXPECT_NE(s.message().find("ServeOptions.inflight_spin_us: 100001"), std::string::npos)
      << s.ToString();
  so.inflight_spin_us = 0;
  testing::TempDir dir;
  so.socket_path = dir.str() + "/s.sock";
  so.socket_group = "no-such-group-cachepawl";
  s = Store::Serve(o, so).status();
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("'no-such-group-cachepawl' (no such group)"), std::string::npos)
      << s.ToString();
  so.socket_group.clear();
  so.socket_path = dir.str() + "/a-file";
  { std::ofstream(so.socket_path) << "not a socket"; }
  s = Store::Serve(o, so).status();
  EXPECT_NE(s.message().find("exists and is not a socket"), std::string::npos) << s.ToString();
  ao = AttachOptions();
  ao.socket_path = "/tmp/x.sock";
  ao.poll_spin_us = 100001;
  s = Store::Attach(ao).status();
  EXPECT_NE(s.message().find("AttachOptions.poll_spin_us: 100001"), std::string::npos)
      << s.ToString();
  ao.poll_spin_us = 200;
  ao.inflight_spin_us = 100001;
  s = Store::Attach(ao).status();
  EXPECT_NE(s.message().find("AttachOptions.inflight_spin_us: 100001"), std::string::npos)
      << s.ToString();
  ao.inflight_spin_us = 200;
  ao.completion_spin_us = 1000001;
  s = Store::Attach(ao).status();
  EXPECT_NE(s.message().find("AttachOptions.completion_spin_us: 1000001"), std::string::npos)
      << s.ToString();
  ao.completion_spin_us = 0;
  ao.wait_spin_us = 1000001;
  s = Store::Attach(ao).status();
  EXPECT_NE(s.message().find("AttachOptions.wait_spin_us: 1000001"), std::string::npos)
      << s.ToString();
}

TEST_F(SharedStoreTest, ASecondOwnerOnALiveSocketIsBusyAStaleOneIsReplaced) {
  auto owner = Serve(16 * kMiB);
  ASSERT_NE(owner, nullptr);
  StoreOptions o = CpuStoreOptions(TinyHybrid(), 16 * kMiB, 0, 0, "");
  ServeOptions so;
  so.socket_path = socket_;
  Status s = Store::Serve(o, so).status();
  EXPECT_TRUE(s.IsBusy()) << s.ToString();
  // A socket file left by an owner that died (nobody listens): replaced.
  ChildProcess dead(Peer({"serve", dir_.str() + "/stale.sock", "16"}));
  ASSERT_TRUE(dead.WaitForLine("ready"));
  dead.Kill(SIGKILL);
  dead.Wait();
  so.socket_path = dir_.str() + "/stale.sock";
  auto second = Store::Serve(o, so);
  EXPECT_TRUE(second.ok()) << second.status().ToString();
}

}  // namespace
}  // namespace cachepawl
