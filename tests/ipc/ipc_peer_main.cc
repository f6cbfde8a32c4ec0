// ipc_peer: a real second process for the shared-store tests (tests/ipc/shared_store_test.cc).
//
//   ipc_peer serve SOCKET HOST_MIB [DISK_DIR DISK_MIB]   an owner (TinyHybrid, CPU mode) until
//                                                        SIGTERM; prints "ready"
//   ipc_peer client SOCKET [--layout attention|tpR/N] STEP...  attaches (CPU mode, its own
//                                     device pool; tpR/N: as rank R of TinyHybrid over N ranks,
//                                     whose shares' contents are the rank's) and runs the steps
//
// Steps: save SEED PAGES (a prompt of PAGES pages and its state, contents by hash), load SEED
// PAGES (looks up, locks, loads into poisoned slots, compares every byte, unlocks), hold SEED
// PAGES (locks, prints "locked", sleeps until killed), churn SEED (saves and loads prompts of
// seeds SEED..SEED+31 without end, every load verified; prints "churning"). Exit codes: 0 done,
// 2 usage, 3 a miss where a hit was expected, 4 wrong bytes, 5 an error (printed), 6 attach
// refused (its status printed as "refused CODE: ...").
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

constexpr uint32_t kTokensPerSeed = 100000;

int Fail(const Status& s, const char* what) {
  std::printf("error %s: %s\n", what, s.ToString().c_str());
  std::fflush(stdout);
  return 5;
}

std::vector<uint32_t> PromptOf(uint64_t seed, size_t pages, const ModelLayout& layout) {
  return Tokens(static_cast<uint32_t>(seed * kTokensPerSeed), pages * layout.page_size_tokens);
}

// Saves the prompt of `seed` (its pages and its state at the end). NoSpace is not an error.
int SavePrompt(Store& store, uint64_t seed, size_t pages) {
  const ModelLayout& layout = store.layout();
  const std::vector<uint32_t> tokens = PromptOf(seed, pages, layout);
  const std::vector<PageHash> hashes = store.HashTokens("", tokens);
  std::vector<uint64_t> slots;
  for (size_t i = 0; i < pages; ++i) {
    auto slot = store.AllocateDeviceSlot(Kind::kKV);
    if (!slot.ok()) return Fail(slot.status(), "allocate");
    slots.push_back(*slot);
    if (Status s = store.WriteDeviceRecord(Kind::kKV, *slot, Content(layout, hashes[i], Kind::kKV));
        !s.ok()) {
      return Fail(s, "write");
    }
  }
  auto state = store.AllocateDeviceSlot(Kind::kMamba);
  if (!state.ok()) return Fail(state.status(), "allocate");
  (void)store.WriteDeviceRecord(Kind::kMamba, *state, Content(layout, hashes.back(), Kind::kMamba));
  auto fence = store.Save(WholePromptSave(tokens, slots, *state));
  Status s = fence.ok() ? fence->Wait() : fence.status();
  for (uint64_t slot : slots) (void)store.FreeDeviceSlot(Kind::kKV, slot);
  (void)store.FreeDeviceSlot(Kind::kMamba, *state);
  if (!s.ok() && !s.IsNoSpace()) return Fail(s, "save");
  return 0;
}

// Loads and verifies the prompt of `seed`. `must_hit`: a miss is exit code 3; otherwise a miss
// (or an entry evicted meanwhile) is fine.
int LoadPrompt(Store& store, uint64_t seed, size_t pages, bool must_hit) {
  const ModelLayout& layout = store.layout();
  const std::vector<uint32_t> tokens = PromptOf(seed, pages, layout);
  auto match = store.Lookup("", tokens);
  if (!match.ok()) return Fail(match.status(), "lookup");
  const size_t n = match->reusable_pages;
  if (n < pages) {
    if (!must_hit) return 0;
    std::printf("miss: %zu of %zu pages\n", n, pages);
    return 3;
  }
  auto lock = store.Lock(*match, n);
  if (!lock.ok()) return must_hit ? Fail(lock.status(), "lock") : 0;
  std::vector<uint64_t> slots;
  for (size_t i = 0; i < n; ++i) slots.push_back(*store.AllocateDeviceSlot(Kind::kKV));
  const uint64_t state = *store.AllocateDeviceSlot(Kind::kMamba);
  std::vector<std::byte> poison(layout.KvPageBytes(), std::byte{0xEE});
  for (uint64_t s : slots) (void)store.WriteDeviceRecord(Kind::kKV, s, poison);
  auto fence = store.Load(*match, slots, state);
  Status st = fence.ok() ? fence->Wait() : fence.status();
  int rc = 0;
  if (!st.ok()) {
    rc = must_hit ? Fail(st, "load") : 0;
  } else {
    std::vector<std::byte> got(layout.KvPageBytes());
    for (size_t i = 0; i < n && rc == 0; ++i) {
      (void)store.ReadDeviceRecord(Kind::kKV, slots[i], got);
      if (got != Content(layout, match->hashes[i], Kind::kKV)) {
        std::printf("wrong bytes: seed %llu page %zu\n", static_cast<unsigned long long>(seed), i);
        rc = 4;
      }
    }
    std::vector<std::byte> s(layout.RecordBytes(Kind::kMamba));
    (void)store.ReadDeviceRecord(Kind::kMamba, state, s);
    if (rc == 0 && s != Content(layout, match->hashes[n - 1], Kind::kMamba)) {
      std::printf("wrong bytes: seed %llu state\n", static_cast<unsigned long long>(seed));
      rc = 4;
    }
  }
  for (uint64_t s : slots) (void)store.FreeDeviceSlot(Kind::kKV, s);
  (void)store.FreeDeviceSlot(Kind::kMamba, state);
  (void)store.Unlock(*lock);
  return rc;
}

int Serve(int argc, char** argv) {
  if (argc < 4) return 2;
  StoreOptions o =
      CpuStoreOptions(TinyHybrid(), std::stoull(argv[3]) << 20, 0,
                      argc >= 6 ? std::stoull(argv[5]) << 20 : 0, argc >= 6 ? argv[4] : "");
  ServeOptions so;
  so.socket_path = argv[2];
  so.dead_client_grace_ms = 2000;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto store = Store::Serve(o, so);
  if (!store.ok()) return Fail(store.status(), "serve");
  std::printf("ready\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  return (*store)->Close().ok() ? 0 : 5;
}

int Client(int argc, char** argv) {
  if (argc < 3) return 2;
  AttachOptions ao;
  ao.socket_path = argv[2];
  ao.cuda_device = -1;
  ao.device_pool_bytes = 8 << 20;
  ao.call_timeout_ms = 5000;
  int i = 3;
  if (i + 1 < argc && std::string(argv[i]) == "--layout") {
    const std::string name = argv[i + 1];
    unsigned rank = 0, ranks = 0;
    if (name == "attention") {
      ao.layout = TinyAttentionOnly();
    } else if (std::sscanf(name.c_str(), "tp%u/%u", &rank, &ranks) == 2) {
      ao.layout = TinyHybrid();
      ao.layout->tp_rank = rank;
      ao.layout->tp_size = ranks;
    } else {
      ao.layout = TinyHybrid();
    }
    i += 2;
  }
  auto store = Store::Attach(ao);
  if (!store.ok()) {
    std::printf("refused %s\n", store.status().ToString().c_str());
    std::fflush(stdout);
    return 6;
  }
  Store& s = **store;
  for (; i < argc; ++i) {
    const std::string step = argv[i];
    if (step == "churn") {
      const uint64_t base = std::stoull(argv[++i]);
      std::printf("churning\n");
      std::fflush(stdout);
      std::mt19937_64 rng(base ^ static_cast<uint64_t>(getpid()));
      for (;;) {
        const uint64_t seed = base + rng() % 32;
        const size_t pages = 4 + seed % 13;
        const int rc = rng() % 2 ? SavePrompt(s, seed, pages) : LoadPrompt(s, seed, pages, false);
        if (rc != 0) return rc;
      }
    }
    if (i + 2 >= argc) return 2;
    const uint64_t seed = std::stoull(argv[i + 1]);
    const size_t pages = std::stoull(argv[i + 2]);
    i += 2;
    int rc = 0;
    if (step == "save") {
      rc = SavePrompt(s, seed, pages);
    } else if (step == "load") {
      rc = LoadPrompt(s, seed, pages, true);
    } else if (step == "hold") {
      auto match = s.Lookup("", PromptOf(seed, pages, s.layout()));
      if (!match.ok()) return Fail(match.status(), "lookup");
      auto lock = s.Lock(*match, match->reusable_pages);
      if (!lock.ok()) return Fail(lock.status(), "lock");
      std::printf("locked %zu\n", lock->hashes.size());
      std::fflush(stdout);
      for (;;) pause();
    } else {
      return 2;
    }
    if (rc != 0) return rc;
    std::printf("%s %llu ok\n", step.c_str(), static_cast<unsigned long long>(seed));
    std::fflush(stdout);
  }
  return (*store)->Close().ok() ? 0 : 5;
}

}  // namespace
}  // namespace cachepawl

int main(int argc, char** argv) {
  // A test that dies (an abort, a sanitizer's report) takes its peers with it: an orphaned owner
  // would keep the test's output open and CTest waiting until its timeout.
  const pid_t parent = getppid();
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return 9;  // (it died before the line above)
  if (argc >= 2 && std::string(argv[1]) == "serve") return cachepawl::Serve(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "client") return cachepawl::Client(argc, argv);
  std::fprintf(stderr, "usage: ipc_peer serve|client ... (see the source)\n");
  return 2;
}
