// PrefixIndex under concurrent callers: Match, Lookup and Stats from reader threads while a
// writer inserts, sets and clears locations, evicts, locks, pins and removes. Run it under
// TSan (CACHEPAWL_SANITIZE=thread) for the data-race check; in every build it checks that a
// reader never sees a slot that was not written for that page and tier, nor an inconsistent
// result, and that the invariants hold at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "index/prefix_index.h"
#include "tests/common/test_util.h"

namespace cachepawl {
namespace {

constexpr int kChains = 12;
constexpr int kChainPages = 48;
constexpr int kSharedPages = 16;  // every chain starts with chain 0's first pages
constexpr int kWriterOps = 100'000;

struct Pages {
  std::vector<PageHash> hash;  // by page id
  std::vector<int> parent;     // page id or -1
  std::unordered_map<PageHash, int> id;
  std::vector<std::vector<PageHash>> chains;  // each a full query root..leaf
};

Pages MakePages(uint64_t seed) {
  Pages p;
  auto add = [&](int parent) {
    PageHash h;
    testing::FillRandom(std::as_writable_bytes(std::span(h.bytes)), seed * 1000003 + p.hash.size());
    p.id[h] = static_cast<int>(p.hash.size());
    p.hash.push_back(h);
    p.parent.push_back(parent);
    return static_cast<int>(p.hash.size()) - 1;
  };
  std::vector<int> shared;
  for (int c = 0; c < kChains; ++c) {
    std::vector<PageHash> chain;
    int at = -1;
    for (int i = 0; i < kChainPages; ++i) {
      if (c > 0 && i < kSharedPages) {
        at = shared[i];
      } else {
        at = add(at);
        if (c == 0 && i < kSharedPages) shared.push_back(at);
      }
      chain.push_back(p.hash[at]);
    }
    p.chains.push_back(chain);
  }
  return p;
}

class ReaderThreads {
 public:
  explicit ReaderThreads(std::atomic<bool>& done) : done_(done) {}
  ReaderThreads(const ReaderThreads&) = delete;
  ReaderThreads& operator=(const ReaderThreads&) = delete;
  ~ReaderThreads() { Stop(); }
  void Start(std::function<void()> fn) { threads_.emplace_back(std::move(fn)); }
  void Stop() {
    done_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  std::atomic<bool>& done_;
  std::vector<std::thread> threads_;
};

// The only slots the writer ever stores: a reader can check every location it sees.
uint64_t KvSlot(int page, Tier tier) { return uint64_t(page) * 8 + static_cast<int>(tier); }
uint64_t StateSlot(int page, Tier tier) {
  return (uint64_t{1} << 40) + uint64_t(page) * 8 + static_cast<int>(tier);
}

TEST(PrefixIndexConcurrencyTest, MatchWhileWriting) {
  const uint64_t seed = testing::SeedFromEnv(7);
  SCOPED_TRACE("CACHEPAWL_TEST_SEED=" + std::to_string(seed));
  const Pages pages = MakePages(seed);
  IndexOptions options;
  options.require_mamba = true;
  options.track_interval_pages = 4;
  auto created = PrefixIndex::Create(options);
  ASSERT_TRUE(created.ok());
  PrefixIndex& index = **created;
  for (const auto& chain : pages.chains) ASSERT_TRUE(index.InsertChain(std::nullopt, chain).ok());

  std::atomic<bool> done{false};
  std::atomic<int64_t> bad{0};
  std::atomic<int64_t> hits{0};
  auto reader = [&](uint64_t reader_seed) {
    std::mt19937_64 rng(reader_seed);
    MatchResult r;
    while (!done.load(std::memory_order_relaxed)) {
      const auto& chain = pages.chains[rng() % kChains];
      const size_t len = 1 + rng() % chain.size();
      const std::span<const PageHash> query(chain.data(), len);
      index.Match(query, &r);
      bool ok = r.reusable_pages <= r.kv_only_pages && r.kv_only_pages <= r.indexed_pages &&
                r.indexed_pages <= len && r.pages.size() == r.kv_only_pages &&
                r.checkpoint_hint_pages % 4 == 0 && r.checkpoint_hint_pages <= r.kv_only_pages &&
                r.state.empty() == (r.reusable_pages == 0);
      for (size_t i = 0; i < r.pages.size(); ++i) {
        const int page = pages.id.at(query[i]);
        ok = ok && !r.pages[i].empty();
        for (int t = 0; t < kNumLocalTiers; ++t) {
          if (r.pages[i].Has(Tier(t))) ok = ok && r.pages[i].slot[t] == KvSlot(page, Tier(t));
        }
      }
      if (r.reusable_pages > 0) {
        const int page = pages.id.at(query[r.reusable_pages - 1]);
        for (int t = 0; t < kNumLocalTiers; ++t) {
          if (r.state.Has(Tier(t))) ok = ok && r.state.slot[t] == StateSlot(page, Tier(t));
        }
        hits.fetch_add(1, std::memory_order_relaxed);
      }
      if (auto info = index.Lookup(query[len - 1]); info) {
        ok = ok && info->state_locks <= info->kv_locks && info->hash == query[len - 1];
      }
      if (rng() % 64 == 0) ok = ok && index.Stats().entries > 0;
      if (!ok) bad.fetch_add(1, std::memory_order_relaxed);
    }
  };
  // Stops and joins the readers however the writer below leaves (an ASSERT returns early).
  ReaderThreads readers(done);
  readers.Start([&] { reader(seed + 1); });
  readers.Start([&] { reader(seed + 2); });

  // The writer: everything but Match, with the slots above. Errors (Busy, NotFound...) are
  // expected; the invariants are checked at the end.
  std::mt19937_64 rng(seed);
  std::vector<PageHash> locked;
  std::vector<std::pair<PageHash, Tier>> pinned;
  int extra = 0;
  for (int op = 0; op < kWriterOps; ++op) {
    const int page = static_cast<int>(rng() % pages.hash.size());
    const PageHash& h = pages.hash[page];
    const Tier tier = Tier(rng() % kNumLocalTiers);
    switch (rng() % 10) {
      case 0:
      case 1:
      case 2:
        (void)index.SetLocation(h, Kind::kKV, tier, KvSlot(page, tier));
        break;
      case 3:
        (void)index.SetLocation(h, Kind::kMamba, tier, StateSlot(page, tier));
        break;
      case 4: {
        auto victims = index.PickVictims(tier, rng() % 2 ? Kind::kKV : Kind::kMamba, 3);
        ASSERT_TRUE(victims.ok());
        for (const Victim& v : *victims) {
          ASSERT_TRUE(index.ClearLocation(v.hash, v.kind, v.tier).ok());
        }
        break;
      }
      case 5:
        (void)index.ClearLocation(h, rng() % 2 ? Kind::kKV : Kind::kMamba, tier);
        break;
      case 6:
        if (locked.size() < 8 && index.Lock(h).ok()) {
          locked.push_back(h);
        } else if (!locked.empty()) {
          ASSERT_TRUE(index.Unlock(locked.back()).ok());
          locked.pop_back();
        }
        break;
      case 7:
        if (pinned.size() < 8 && index.PinForTransfer(h, Kind::kKV, tier).ok()) {
          pinned.emplace_back(h, tier);
        } else if (!pinned.empty()) {
          ASSERT_TRUE(index.Unpin(pinned.back().first, Kind::kKV, pinned.back().second).ok());
          pinned.pop_back();
        }
        break;
      default: {
        // A short-lived page under a random one: inserted, located, cleared, removed.
        PageHash fresh;
        testing::FillRandom(std::as_writable_bytes(std::span(fresh.bytes)), ~seed - ++extra);
        ASSERT_TRUE(index.InsertKv(h, fresh).ok());
        ASSERT_TRUE(index.SetLocation(fresh, Kind::kKV, Tier::kHost, 1).ok());
        ASSERT_TRUE(index.ClearLocation(fresh, Kind::kKV, Tier::kHost).ok());
        ASSERT_TRUE(index.Remove(fresh).ok());
        break;
      }
    }
  }
  readers.Stop();
  EXPECT_EQ(bad.load(), 0) << "inconsistent Match/Lookup results";
  EXPECT_GT(hits.load(), 0);
  for (const PageHash& h : locked) EXPECT_TRUE(index.Unlock(h).ok());
  for (const auto& [h, tier] : pinned) EXPECT_TRUE(index.Unpin(h, Kind::kKV, tier).ok());
  const Status inv = index.CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv.ToString();
  EXPECT_EQ(index.Stats().locked_entries, 0u);
}

}  // namespace
}  // namespace cachepawl
