// A tensor-parallel group's store shared by its rank processes: the owner (this process, rank
// 0 of TinyHybrid over 2 ranks) and rank processes attached with their rank's layout
// (tests/ipc/ipc_peer_main.cc, `--layout tpR/N`). Each rank saves and loads its own shares
// (contents that differ per rank), verified byte for byte in the process that loads them; an
// entry is a hit only once every rank saved; a rank process killed while saving leaves no hit.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/ipc/child_process.h"
#include "tests/ipc/shared_store_fixture.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

using testing::ChildProcess;
using Clock = std::chrono::steady_clock;

ModelLayout Rank(uint32_t rank, uint32_t ranks = 2) {
  ModelLayout l = TinyHybrid();
  l.tp_rank = rank;
  l.tp_size = ranks;
  return l;
}

std::vector<uint32_t> Prompt(const Store& store, uint64_t seed, size_t pages) {
  return Tokens(static_cast<uint32_t>(seed * 100000), pages * store.layout().page_size_tokens);
}

class SharedStoreTpTest : public SharedStoreTest {
 protected:
  std::unique_ptr<Store> ServeRank0(uint32_t partial_timeout_ms = 30000) {
    return SharedStoreTest::Serve(16 * kMiB, 30000, Rank(0), partial_timeout_ms);
  }
  // A rank process that runs `steps` and exits with `want` (0: every step done; 3: a miss
  // where a hit was asked for).
  void RunRank(const std::string& rank, std::vector<std::string> steps, int want = 0) {
    std::vector<std::string> argv = {CACHEPAWL_IPC_PEER, "client", socket_, "--layout", rank};
    argv.insert(argv.end(), steps.begin(), steps.end());
    ChildProcess peer(argv);
    EXPECT_EQ(peer.Wait(), want) << rank << ": " << peer.output();
  }
  size_t Reusable(Store& store, uint64_t seed, size_t pages) {
    auto m = store.Lookup("", Prompt(store, seed, pages));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? m->reusable_pages : 0;
  }
};

TEST_F(SharedStoreTpTest, RankProcessesMakeAnEntryAHitTogetherAndEachLoadsItsOwnShares) {
  auto owner = ServeRank0();
  ASSERT_NE(owner, nullptr);
  // Rank 1's process saves first: a partial entry, a miss for every rank.
  RunRank("tp1/2", {"save", "1", "4"});
  EXPECT_EQ(Reusable(*owner, 1, 4), 0u);
  EXPECT_GT(owner->Stats().tp_partial_entries, 0u);
  RunRank("tp1/2", {"load", "1", "4"}, /*want=*/3);  // a miss
  // The owner saves rank 0's shares: now a hit, and each rank loads its own bytes.
  SavePrompt(*owner, 1, 4);
  EXPECT_EQ(Reusable(*owner, 1, 4), 4u);
  LoadAndVerify(*owner, 1, 4);
  RunRank("tp1/2", {"load", "1", "4"});
  RunRank("tp0/2", {"load", "1", "4"});
  // Both ranks attached (the owner only serves): rank 0's process, then rank 1's.
  RunRank("tp0/2", {"save", "2", "3"});
  EXPECT_EQ(Reusable(*owner, 2, 3), 0u);
  RunRank("tp1/2", {"save", "2", "3", "load", "2", "3"});
  LoadAndVerify(*owner, 2, 3);
  EXPECT_EQ(owner->Stats().tp_partial_entries, 0u);
}

TEST_F(SharedStoreTpTest, ARankKilledWhileSavingNeverLeavesAHitAndTheOthersServeOn) {
  auto owner = ServeRank0(/*partial_timeout_ms=*/300);
  ASSERT_NE(owner, nullptr);
  // Rank 1's process saves and loads prompts 100..131 without pause; rank 0 never saves them,
  // so none may ever be a hit, while it runs or after it was killed mid-operation.
  ChildProcess churn({CACHEPAWL_IPC_PEER, "client", socket_, "--layout", "tp1/2", "churn", "100"});
  ASSERT_EQ(churn.ReadLine(), "churning") << churn.output();
  const auto until = Clock::now() + std::chrono::milliseconds(600);
  size_t lookups = 0;
  while (Clock::now() < until) {
    for (uint64_t seed = 100; seed < 132; ++seed) {
      ASSERT_EQ(Reusable(*owner, seed, 4 + seed % 13), 0u) << "seed " << seed;
      ++lookups;
    }
  }
  churn.Kill(SIGKILL);
  EXPECT_EQ(churn.Wait(), 128 + SIGKILL) << churn.output();
  EXPECT_GT(lookups, 32u);
  EXPECT_GT(owner->Stats().tp_partial_entries, 0u);
  for (uint64_t seed = 100; seed < 132; ++seed)
    EXPECT_EQ(Reusable(*owner, seed, 4 + seed % 13), 0u);
  // The group serves on: rank 0 (the owner) and a new rank 1 process complete a prompt.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past tp_partial_timeout_ms
  SavePrompt(*owner, 7, 5);
  RunRank("tp1/2", {"save", "7", "5", "load", "7", "5"});
  LoadAndVerify(*owner, 7, 5);
  // The dead rank's partial entries went at the Save after their timeout.
  EXPECT_GT(owner->Stats().tp_partials_dropped, 0u);
}

TEST_F(SharedStoreTpTest, RanksAreCheckedAtAttachAndOnEveryCall) {
  auto owner = ServeRank0();
  ASSERT_NE(owner, nullptr);
  AttachOptions ao = Attaching();
  ao.tp_rank = 2;
  auto bad = Store::Attach(ao);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsInvalidArgument()) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("Hello.tp_rank: 2 (the owner's layout "
                                        "'test/tiny-hybrid' has tp_size 2)"),
            std::string::npos)
      << bad.status().ToString();
  ao = Attaching();
  ao.layout = TinyHybrid();  // the whole model's layout, not a rank's
  bad = Store::Attach(ao);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsIncompatible()) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("(tp_size 1,"), std::string::npos)
      << bad.status().ToString();
  ao.layout = Rank(1);
  ao.tp_rank = 0;
  bad = Store::Attach(ao);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("AttachOptions.tp_rank: 0 (the expected layout is rank "
                                        "1's)"),
            std::string::npos)
      << bad.status().ToString();

  // Rank 1 by AttachOptions.tp_rank alone: its layout is rank 1's; it moves rank 1's shares only.
  ao = Attaching();
  ao.tp_rank = 1;
  auto rank1 = Store::Attach(ao);
  ASSERT_TRUE(rank1.ok()) << rank1.status().ToString();
  Store& r1 = **rank1;
  EXPECT_EQ(r1.layout().tp_rank, 1u);
  EXPECT_EQ(r1.layout().tp_size, 2u);
  const auto tokens = Prompt(r1, 3, 2);
  const uint64_t page = *r1.AllocateDeviceSlot(Kind::kKV);
  const std::vector<uint64_t> pages = {page};
  SaveRequest req;
  req.tokens = tokens;
  req.device_pages = pages;
  req.tp_rank = 0;
  auto save = r1.Save(req);
  ASSERT_FALSE(save.ok());
  EXPECT_NE(save.status().message().find("SaveRequest.tp_rank: 0 (this process attached as rank "
                                         "1 of 2"),
            std::string::npos)
      << save.status().ToString();
  LoadOptions lo;
  lo.tp_rank = 0;
  auto load = r1.Load(PrefixMatch{}, {}, std::nullopt, lo);
  ASSERT_FALSE(load.ok());
  EXPECT_NE(load.status().message().find("LoadOptions.tp_rank: 0"), std::string::npos)
      << load.status().ToString();
  // The same rank named explicitly is fine; the rank-1 shares it saves come back to it alone.
  SavePrompt(r1, 4, 2);
  EXPECT_EQ(Reusable(*owner, 4, 2), 0u);
  SavePrompt(*owner, 4, 2);
  LoadAndVerify(r1, 4, 2);
  LoadAndVerify(*owner, 4, 2);
  ASSERT_TRUE(r1.FreeDeviceSlot(Kind::kKV, page).ok());
}

}  // namespace
}  // namespace cachepawl
