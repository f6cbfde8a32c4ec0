// ChainFinder (index/chain_finder.h) on its own, not through PrefixIndex: entries put into a hot
// array and a PageTable as the index puts them (indices from the real EntryAllocator, or chosen
// to force each way the pipeline predicts), and every answer compared with a plain lookup
// (std::unordered_map from hash to index) walked the same way: the index of each page, up to and
// including the first page the index does not have.
//
// Reproduce a failure of the random case with CACHEPAWL_TEST_SEED=<seed>.
#include "index/chain_finder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "index/chunked_array.h"
#include "index/entry_allocator.h"
#include "index/page_table.h"
#include "index/prefix_index_internal.h"
#include "tests/common/test_util.h"
#include "tests/index/index_test_util.h"
#include "vocab/page_hash.h"

namespace cachepawl::prefix_index_internal {
namespace {

using cachepawl::testing::H;
constexpr uint32_t kBlock = EntryAllocator::kBlock;
// More pages than the pipeline keeps in flight (64).
constexpr size_t kLong = 1000;

// A hash other than `h` with the same PageTable::Mix (so the same home slot and tag): w0 ^
// rotl(w1, 17) is unchanged when w1 changes by d and w0 by rotl(d, 17).
PageHash MixTwin(const PageHash& h) {
  uint64_t w[4];
  std::memcpy(w, h.bytes.data(), sizeof(w));
  constexpr uint64_t d = 0x5A5A'0000'0000'1234ull;
  w[1] ^= d;
  w[0] ^= std::rotl(d, 17);
  PageHash out;
  std::memcpy(out.bytes.data(), w, sizeof(w));
  return out;
}

// Entries at chosen indices, laid out as Core keeps them: hot entries (depth 0 marks a free one)
// and the table naming the live ones. The model is the same mapping in a std::unordered_map.
class Entries {
 public:
  // Puts `hash` (not present) at the free index `index`, under entry `parent` (kNone: none).
  void Put(uint32_t index, const PageHash& hash, uint32_t parent = kNone) {
    // The allocator's high water mark is a whole number of blocks.
    high_water_ = std::max(high_water_, (index / kBlock + 1) * kBlock);
    hot_.Reserve(high_water_);
    HotEntry& e = hot_[index];
    ASSERT_EQ(e.depth, 0u) << "index " << index << " is taken";
    e.hash = hash;
    e.parent = parent;
    e.depth = parent == kNone ? 1 : hot_[parent].depth + 1;
    table_.ReserveOneMore(EntryKeys{&hot_});
    PageTable::InsertPoint at{};
    ASSERT_EQ(table_.FindForInsert(hash, PageTable::Mix(hash), EntryKeys{&hot_}, &at), kNone);
    table_.InsertAt(at, index);
    model_[hash] = index;
  }
  // Frees entry `index` as Core::RemoveUnlinked does: out of the table, depth 0, its hash left.
  void Free(uint32_t index) {
    HotEntry& e = hot_[index];
    table_.Erase(e.hash, index, EntryKeys{&hot_});
    model_.erase(e.hash);
    e.depth = 0;
    e.parent = kNone;
  }
  // Puts `hashes` as one chain at `indices` (under `parent`); returns the indices.
  std::vector<uint32_t> PutChain(std::span<const PageHash> hashes,
                                 const std::vector<uint32_t>& indices, uint32_t parent = kNone) {
    for (size_t i = 0; i < hashes.size(); ++i) {
      Put(indices[i], hashes[i], i == 0 ? parent : indices[i - 1]);
    }
    return indices;
  }

  // The finder's answers for `hashes`, as Match asks: pages 0, 1, ... until the first kNone.
  std::vector<uint32_t> Walk(std::span<const PageHash> hashes) const {
    ChainFinder finder(table_, hot_, high_water_, hashes);
    std::vector<uint32_t> out;
    for (size_t i = 0; i < hashes.size(); ++i) {
      out.push_back(finder.Find(i));
      if (out.back() == kNone) break;
    }
    return out;
  }
  // The same walk over the model.
  std::vector<uint32_t> ModelWalk(std::span<const PageHash> hashes) const {
    std::vector<uint32_t> out;
    for (const PageHash& h : hashes) {
      const auto it = model_.find(h);
      out.push_back(it == model_.end() ? kNone : it->second);
      if (out.back() == kNone) break;
    }
    return out;
  }
  // Walk(hashes) == `want` and == ModelWalk(hashes).
  void ExpectWalk(std::span<const PageHash> hashes, const std::vector<uint32_t>& want) const {
    EXPECT_EQ(ModelWalk(hashes), want) << "the test's own expectation";
    EXPECT_EQ(Walk(hashes), want);
  }

  uint32_t high_water() const { return high_water_; }
  const HotEntry& hot(uint32_t i) const { return hot_[i]; }

 private:
  ChunkedArray<HotEntry, 16> hot_;
  PageTable table_;
  uint32_t high_water_ = 0;
  std::unordered_map<PageHash, uint32_t> model_;
};

std::vector<uint32_t> Consecutive(uint32_t first, size_t n) {
  std::vector<uint32_t> out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

// `want` followed by kNone.
std::vector<uint32_t> ThenNone(std::vector<uint32_t> want) {
  want.push_back(kNone);
  return want;
}

TEST(ChainFinderTest, EmptyQueryAndEmptyIndex) {
  Entries empty;
  const std::vector<PageHash> query = testing::Chain(1, 3);
  empty.ExpectWalk(query, {kNone});
  empty.ExpectWalk({}, {});
  Entries some;
  some.PutChain(query, Consecutive(0, 3));
  some.ExpectWalk({}, {});
}

TEST(ChainFinderTest, FindsAChainLongerThanThePipelineInsertedWhole) {
  // InsertChain: one run of blocks, so boundaries are predicted as x+1 too (blocks follow).
  Entries entries;
  const std::vector<PageHash> chain = testing::Chain(1, kLong);
  const std::vector<uint32_t> at = entries.PutChain(chain, Consecutive(0, kLong));
  entries.ExpectWalk(chain, at);
  // Every prefix length around the pipeline's stages and block boundaries.
  const size_t lengths[] = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 129};
  for (const size_t n : lengths) {
    SCOPED_TRACE(n);
    entries.ExpectWalk(std::span(chain).first(n),
                       std::vector<uint32_t>(at.begin(), at.begin() + n));
  }
  // Starting in the middle of a block (a phase other than 0).
  entries.ExpectWalk(std::span(chain).subspan(7, 100),
                     std::vector<uint32_t>(at.begin() + 7, at.begin() + 107));
}

TEST(ChainFinderTest, FindsInterleavedChainsGrownPageByPage) {
  // Chains grown a page at a time, in turns, get their indices from the real allocator as
  // InsertKv's do: consecutive inside blocks, a block elsewhere when one ends, and (more chains
  // than open blocks) runs cut short where a block was closed.
  constexpr size_t kChains = 12;
  EntryAllocator ids(/*max_open=*/8);
  Entries entries;
  std::vector<std::vector<PageHash>> chains(kChains);
  std::vector<std::vector<uint32_t>> at(kChains);
  for (size_t p = 0; p < 300; ++p) {
    for (size_t c = 0; c < kChains; ++c) {
      const uint32_t parent = at[c].empty() ? kNone : at[c].back();
      const uint32_t i = ids.Allocate(parent);
      chains[c].push_back(H(c * 100000 + p + 1));
      entries.Put(i, chains[c].back(), parent);
      at[c].push_back(i);
    }
  }
  for (size_t c = 0; c < kChains; ++c) {
    SCOPED_TRACE(c);
    entries.ExpectWalk(chains[c], at[c]);
  }
}

TEST(ChainFinderTest, FindsScatteredIndices) {
  // No two pages in a row at consecutive indices: the finder stays in table mode.
  Entries entries;
  const std::vector<PageHash> chain = testing::Chain(1, 500);
  std::vector<uint32_t> at(chain.size());
  for (size_t i = 0; i < at.size(); ++i) at[i] = static_cast<uint32_t>((i * 7919) % 4001);
  entries.PutChain(chain, at);
  entries.ExpectWalk(chain, at);
}

TEST(ChainFinderTest, StopsAtTheFirstMissingPage) {
  Entries entries;
  const std::vector<PageHash> chain = testing::Chain(1, 200);
  const std::vector<uint32_t> at = entries.PutChain(chain, Consecutive(0, 200));
  const std::vector<PageHash> scattered_chain = testing::Chain(1000, 200);
  std::vector<uint32_t> scattered(200);
  for (size_t i = 0; i < scattered.size(); ++i) {
    scattered[i] = static_cast<uint32_t>(1024 + (i * 37) % 211 * 16);
  }
  entries.PutChain(scattered_chain, scattered);
  for (const auto* c : {&chain, &scattered_chain}) {
    const std::vector<uint32_t>& idx = c == &chain ? at : scattered;
    const size_t missing_pages[] = {0, 1, 15, 16, 17, 63, 64, 65, 150, 199};
    for (const size_t missing : missing_pages) {
      SCOPED_TRACE(missing);
      std::vector<PageHash> query = *c;
      query[missing] = H(999999);  // absent; the pages after it are present
      entries.ExpectWalk(query,
                         ThenNone(std::vector<uint32_t>(idx.begin(), idx.begin() + missing)));
    }
    // Past the chain's end.
    std::vector<PageHash> longer = *c;
    longer.push_back(H(999999));
    longer.push_back(H(1));
    entries.ExpectWalk(longer, ThenNone(idx));
  }
}

TEST(ChainFinderTest, ReportsPagesWhateverTheirParent) {
  // The finder looks each hash up; that page i's parent is page i-1 is Match's check.
  Entries entries;
  const std::vector<PageHash> a = testing::Chain(1, 40);
  const std::vector<PageHash> b = testing::Chain(1001, 40);
  const std::vector<uint32_t> at_a = entries.PutChain(a, Consecutive(0, 40));
  const std::vector<uint32_t> at_b = entries.PutChain(b, Consecutive(64, 40));
  std::vector<PageHash> query(a.begin(), a.begin() + 20);
  query.insert(query.end(), b.begin() + 10, b.end());
  std::vector<uint32_t> want(at_a.begin(), at_a.begin() + 20);
  want.insert(want.end(), at_b.begin() + 10, at_b.end());
  EXPECT_NE(entries.hot(at_b[10]).parent, at_a[19]);
  entries.ExpectWalk(query, want);
  // A page twice in a row.
  const std::vector<PageHash> twice = {a[0], a[1], a[1], a[2]};
  entries.ExpectWalk(twice, {at_a[0], at_a[1], at_a[1], at_a[2]});
}

TEST(ChainFinderTest, ChecksThePredictedEntry) {
  Entries entries;
  const std::vector<PageHash> a = testing::Chain(1, 100);
  std::vector<uint32_t> at = entries.PutChain(a, Consecutive(0, 100));
  // Page 40 freed and put again elsewhere: the predicted index 40 still has its hash, but is
  // free (depth 0).
  entries.Free(at[40]);
  entries.Put(500, a[40], at[39]);
  at[40] = 500;
  // Page 70's index taken by another chain's page, page 70 put elsewhere: the predicted entry
  // is live, with another hash.
  entries.Free(at[70]);
  entries.Put(at[70], H(5000));
  entries.Put(600, a[70], at[69]);
  at[70] = 600;
  entries.ExpectWalk(a, at);
}

TEST(ChainFinderTest, ComparesFullHashesWhereTagsCollide) {
  // A twin with the same Mix sits first in the probe run: the first tag match is the twin.
  Entries entries;
  const std::vector<PageHash> a = testing::Chain(1, 50);
  const size_t twins[] = {0, 3, 16, 17, 30};
  for (const size_t i : twins) {
    ASSERT_EQ(PageTable::Mix(MixTwin(a[i])), PageTable::Mix(a[i]));
    ASSERT_NE(MixTwin(a[i]), a[i]);
    entries.Put(static_cast<uint32_t>(2000 + i * 16), MixTwin(a[i]));
  }
  std::vector<uint32_t> at(a.size());
  for (size_t i = 0; i < a.size(); ++i) at[i] = static_cast<uint32_t>(i < 25 ? i * 3 : 100 + i);
  entries.PutChain(a, at);
  entries.ExpectWalk(a, at);
  // An absent page whose twin is present.
  std::vector<PageHash> query(a.begin(), a.begin() + 10);
  query.push_back(MixTwin(a[40]));
  entries.ExpectWalk(query, ThenNone(std::vector<uint32_t>(at.begin(), at.begin() + 10)));
}

TEST(ChainFinderTest, PredictionPastTheHighWaterMark) {
  // A chain inserted whole ends at the last index below the high water mark; the query goes
  // on with a page at a lower index, so the prediction x+1 is past the last entry.
  Entries entries;
  const std::vector<PageHash> low = testing::Chain(5000, 3);
  const std::vector<uint32_t> at_low = entries.PutChain(low, Consecutive(0, 3));
  const std::vector<PageHash> a = testing::Chain(1, 64);
  const std::vector<uint32_t> at = entries.PutChain(a, Consecutive(64, 64));
  ASSERT_EQ(at.back() + 1, entries.high_water());
  std::vector<PageHash> query = a;
  query.insert(query.end(), low.begin(), low.end());
  std::vector<uint32_t> want = at;
  want.insert(want.end(), at_low.begin(), at_low.end());
  entries.ExpectWalk(query, want);
  // And an absent page there.
  query = a;
  query.push_back(H(999999));
  entries.ExpectWalk(query, ThenNone(at));
}

TEST(ChainFinderTest, RandomChainsMatchTheModel) {
  const uint64_t seed = cachepawl::testing::SeedFromEnv(20261124);
  SCOPED_TRACE("CACHEPAWL_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto below = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  EntryAllocator ids(/*max_open=*/16);
  Entries entries;
  std::vector<std::vector<PageHash>> chains;  // each from its root
  std::vector<std::vector<uint32_t>> at;
  std::vector<uint32_t> children;  // per index
  uint64_t next_hash = 1;
  auto grow = [&](size_t c) {
    const uint32_t parent = at[c].empty() ? kNone : at[c].back();
    const uint32_t i = ids.Allocate(parent);
    chains[c].push_back(H(next_hash++));
    entries.Put(i, chains[c].back(), parent);
    at[c].push_back(i);
    children.resize(std::max<size_t>(children.size(), i + 1), 0);
    if (parent != kNone) ++children[parent];
  };
  for (int step = 0; step < 40000; ++step) {
    const size_t op = below(100);
    if (chains.empty() || op < 3) {  // a new chain: a root, or forked off a chain's page
      chains.emplace_back();
      at.emplace_back();
      if (chains.size() > 1 && below(2) == 0) {
        const size_t from = below(chains.size() - 1);
        const size_t n = below(at[from].size() + 1);
        chains.back().assign(chains[from].begin(), chains[from].begin() + n);
        at.back().assign(at[from].begin(), at[from].begin() + n);
      }
      grow(chains.size() - 1);
    } else if (op < 10) {  // a chain inserted whole
      const size_t c = below(chains.size());
      for (size_t k = 1 + below(200); k-- > 0;) grow(c);
    } else if (op < 90) {  // chains grown page by page, in turns
      grow(below(chains.size()));
    } else {  // a chain's last page removed, when it is a leaf
      const size_t c = below(chains.size());
      if (at[c].empty() || children[at[c].back()] != 0) continue;
      const uint32_t i = at[c].back();
      if (entries.hot(i).parent != kNone) --children[entries.hot(i).parent];
      entries.Free(i);
      ids.Free(i);
      // Forks that shared the page end with it (it had no child): they lose it too.
      for (size_t d = 0; d < chains.size(); ++d) {
        if (!at[d].empty() && at[d].back() == i) {
          chains[d].pop_back();
          at[d].pop_back();
        }
      }
    }
  }
  size_t walked = 0;
  for (int q = 0; q < 3000; ++q) {
    const std::vector<PageHash>& c = chains[below(chains.size())];
    std::vector<PageHash> query(c.begin(), c.begin() + below(c.size() + 1));
    switch (below(5)) {
      case 0:  // an absent page, then more
        query.push_back(H(next_hash + 1 + below(1000)));
        [[fallthrough]];
      case 1: {  // another chain's pages
        const std::vector<PageHash>& d = chains[below(chains.size())];
        query.insert(query.end(), d.begin() + below(d.size() + 1), d.end());
        break;
      }
      case 2:  // the twin of a present page
        if (!query.empty()) query.push_back(MixTwin(query[below(query.size())]));
        break;
      default:
        break;
    }
    const std::vector<uint32_t> want = entries.ModelWalk(query);
    walked += want.size();
    ASSERT_EQ(entries.Walk(query), want) << "query " << q << " of " << query.size() << " pages";
  }
  EXPECT_GT(walked, 3000u * 20) << "the queries are long enough to go through the pipeline";
}

}  // namespace
}  // namespace cachepawl::prefix_index_internal
