// The Store with sliding-window attention layers, in CPU mode (docs/DESIGN.md, "Sliding-window
// layers"): a page's windowed KV is its own record (Kind::kWindowKV), saved only for the last
// WindowPages() pages before a state, loaded only for the pages a model at the reused depth
// reads, and never dropped while a cached state needs it. Every load goes into poisoned device
// pages and is compared byte by byte: the full-attention layers of every page and the windowed
// layers of the window's pages hold what was saved, the windowed layers of the other pages
// still hold the poison.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_util.h"
#include "tiers/disk_catalog.h"

namespace cachepawl {
namespace {

using testing::TempDir;

constexpr uint32_t kPage = 4;          // tokens per page
constexpr uint32_t kWindowTokens = 8;  // the windowed layer's window: 2 pages
constexpr size_t kWindowPages = 2;
constexpr std::byte kPoison{0xEE};
constexpr int kHost = static_cast<int>(Tier::kHost);
constexpr int kDisk = static_cast<int>(Tier::kDisk);
constexpr int kKv = static_cast<int>(Kind::kKV);
constexpr int kWindow = static_cast<int>(Kind::kWindowKV);
constexpr int kState = static_cast<int>(Kind::kMamba);

// TinyHybrid with its second attention layer windowed (a full layer, a windowed layer, two
// SSM layers), or with both windowed (no full-attention KV at all, as Samba or RecurrentGemma).
ModelLayout TinyWindowed(bool all_windowed) {
  ModelLayout l = TinyHybrid();
  l.model = all_windowed ? "test/tiny-all-windowed" : "test/tiny-windowed";
  l.attention_layers[1].sliding_window = kWindowTokens;
  if (all_windowed) l.attention_layers[0].sliding_window = kWindowTokens;
  return l;
}

// A device page's content (every attention layer) and a state's, defined by the page hash.
std::vector<std::byte> PageContent(const ModelLayout& l, const PageHash& h) {
  std::vector<std::byte> bytes(l.KvPageBytes());
  uint64_t seed;
  std::memcpy(&seed, h.bytes.data(), sizeof(seed));
  testing::FillRandom(bytes, seed);
  return bytes;
}

class WindowStoreTest : public ::testing::TestWithParam<bool> {
 protected:
  ModelLayout Layout() const { return TinyWindowed(GetParam()); }
  StoreOptions Options(uint64_t host_bytes, uint64_t disk_bytes) {
    return CpuStoreOptions(Layout(), host_bytes, 1 << 20, disk_bytes, dir_.str() + "/store");
  }
  std::unique_ptr<Store> OpenOrDie(const StoreOptions& o) {
    auto s = Store::Open(o);
    EXPECT_TRUE(s.ok()) << "Open: " << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // What an engine saves after prefilling pages [first, pages) of `tokens` (held in its device
  // pool) with the state at `pages`. Returns the Save's status.
  Status SavePrefix(Store* store, const std::vector<uint32_t>& tokens, size_t first, size_t pages) {
    const ModelLayout& l = store->layout();
    const auto hashes = store->HashTokens("", tokens);
    std::vector<uint64_t> slots;
    for (size_t i = first; i < pages; ++i) {
      CACHEPAWL_ASSIGN_OR_RETURN(uint64_t slot, store->AllocateDeviceSlot(Kind::kKV));
      CACHEPAWL_RETURN_IF_ERROR(
          store->WriteDeviceRecord(Kind::kKV, slot, PageContent(l, hashes[i])));
      slots.push_back(slot);
    }
    CACHEPAWL_ASSIGN_OR_RETURN(uint64_t state, store->AllocateDeviceSlot(Kind::kMamba));
    CACHEPAWL_RETURN_IF_ERROR(
        store->WriteDeviceRecord(Kind::kMamba, state, Content(l, hashes[pages - 1], Kind::kMamba)));
    SaveRequest req;
    req.tokens = std::span<const uint32_t>(tokens).first(pages * kPage);
    req.first_page = first;
    req.device_pages = slots;
    req.device_state_slot = state;
    req.state_depth_tokens = pages * kPage;
    auto fence = store->Save(req);
    Status s = fence.ok() ? fence->Wait(std::chrono::seconds(30)) : fence.status();
    for (uint64_t slot : slots) EXPECT_TRUE(store->FreeDeviceSlot(Kind::kKV, slot).ok());
    EXPECT_TRUE(store->FreeDeviceSlot(Kind::kMamba, state).ok());
    return s;
  }

  PrefixMatch LookupOrDie(Store* store, const std::vector<uint32_t>& tokens) {
    auto m = store->Lookup("", tokens);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : PrefixMatch{};
  }

  // Loads the whole reusable prefix of `match` and its state into poisoned slots and checks
  // every byte (see the top of this file).
  Status LoadAndCheck(Store* store, const PrefixMatch& match) {
    const ModelLayout& l = store->layout();
    const size_t n = match.reusable_pages;
    EXPECT_GT(n, 0u);
    std::vector<uint64_t> slots;
    const std::vector<std::byte> poison_page(l.KvPageBytes(), kPoison);
    const std::vector<std::byte> poison_state(l.MambaSlotBytes(), kPoison);
    for (size_t i = 0; i < n; ++i) {
      CACHEPAWL_ASSIGN_OR_RETURN(uint64_t slot, store->AllocateDeviceSlot(Kind::kKV));
      CACHEPAWL_RETURN_IF_ERROR(store->WriteDeviceRecord(Kind::kKV, slot, poison_page));
      slots.push_back(slot);
    }
    CACHEPAWL_ASSIGN_OR_RETURN(uint64_t state, store->AllocateDeviceSlot(Kind::kMamba));
    CACHEPAWL_RETURN_IF_ERROR(store->WriteDeviceRecord(Kind::kMamba, state, poison_state));
    auto fence = store->Load(match, slots, state);
    Status s = fence.ok() ? fence->Wait(std::chrono::seconds(30)) : fence.status();
    if (s.ok()) {
      std::vector<std::byte> got(l.KvPageBytes());
      for (size_t i = 0; i < n; ++i) {
        EXPECT_TRUE(store->ReadDeviceRecord(Kind::kKV, slots[i], got).ok());
        const std::vector<std::byte> want = PageContent(l, match.hashes[i]);
        const bool in_window = i + kWindowPages >= n;
        for (size_t a = 0; a < l.attention_layers.size(); ++a) {
          const bool written = l.AttentionKind(a) == Kind::kKV || in_window;
          for (RecordSegment seg : {l.KSegment(a), l.VSegment(a)}) {
            for (uint64_t b = seg.offset; b < seg.offset + seg.bytes; ++b) {
              const std::byte expect = written ? want[b] : kPoison;
              if (got[b] != expect) {
                ADD_FAILURE() << "page " << i << " layer " << a << " byte " << b
                              << (written ? ": not what was saved"
                                          : ": written outside the window");
                break;
              }
            }
          }
        }
      }
      std::vector<std::byte> st(l.MambaSlotBytes());
      EXPECT_TRUE(store->ReadDeviceRecord(Kind::kMamba, state, st).ok());
      EXPECT_TRUE(st == Content(l, match.hashes[n - 1], Kind::kMamba)) << "state bytes";
    }
    for (uint64_t slot : slots) EXPECT_TRUE(store->FreeDeviceSlot(Kind::kKV, slot).ok());
    EXPECT_TRUE(store->FreeDeviceSlot(Kind::kMamba, state).ok());
    return s;
  }

  TempDir dir_;
};

TEST_P(WindowStoreTest, SavesTheWindowOnlyBeforeTheStateAndLoadsOnlyIt) {
  auto store = OpenOrDie(Options(1 << 20, 0));
  ASSERT_NE(store, nullptr);
  const auto a = Tokens(1, 6 * kPage);
  ASSERT_TRUE(SavePrefix(store.get(), a, 0, 6).ok());
  const StoreStats st = store->Stats();
  EXPECT_EQ(st.saved_pages, GetParam() ? 0u : 6u);  // full-attention KV of every page
  EXPECT_EQ(st.saved_window_pages, kWindowPages);   // windowed KV of pages 4 and 5 only
  EXPECT_EQ(st.saved_states, 1u);
  EXPECT_EQ(st.resident_entries[kHost][kWindow], kWindowPages);
  const PrefixMatch m = LookupOrDie(store.get(), a);
  ASSERT_EQ(m.reusable_pages, 6u);
  EXPECT_EQ(m.window_first_page, 4u);
  EXPECT_EQ(m.window_tiers, (std::vector<Tier>{Tier::kHost, Tier::kHost}));
  {
    const Status ls = LoadAndCheck(store.get(), m);
    EXPECT_TRUE(ls.ok()) << ls.ToString();
  }
  EXPECT_EQ(store->Stats().loaded_entries[kHost][kWindow], kWindowPages);
  EXPECT_EQ(store->Stats().loaded_entries[kHost][kKv], GetParam() ? 0u : 6u);
}

TEST_P(WindowStoreTest, AStateIsReusableOnlyWithItsWholeWindow) {
  auto store = OpenOrDie(Options(1 << 20, 0));
  ASSERT_NE(store, nullptr);
  // Checkpoints at 4 and 8 pages of one prompt: windows {2, 3} and {6, 7}.
  const auto a = Tokens(1, 8 * kPage);
  ASSERT_TRUE(SavePrefix(store.get(), a, 0, 4).ok());
  ASSERT_TRUE(SavePrefix(store.get(), a, 4, 8).ok());
  EXPECT_EQ(store->Stats().saved_window_pages, 2 * kWindowPages);
  PrefixMatch m = LookupOrDie(store.get(), a);
  ASSERT_EQ(m.reusable_pages, 8u);
  {
    const Status ls = LoadAndCheck(store.get(), m);
    EXPECT_TRUE(ls.ok()) << ls.ToString();
  }
  // A prompt that leaves A after 6 pages: the state at 4 (window 2, 3) is the hit; no state at
  // 5 or 6 exists, and pages 4 and 5 have no windowed KV (no state needed it).
  auto b = Tokens(1, 6 * kPage);
  b.push_back(999);
  b.resize(7 * kPage, 7);
  m = LookupOrDie(store.get(), b);
  EXPECT_EQ(m.reusable_pages, 4u);
  EXPECT_EQ(m.window_first_page, 2u);
  {
    const Status ls = LoadAndCheck(store.get(), m);
    EXPECT_TRUE(ls.ok()) << ls.ToString();
  }
  // A state saved at 6 by an engine that hands page 5 only: the windowed KV of page 4 was
  // never saved, so the state at 6 is no hit and the one at 4 is.
  ASSERT_TRUE(SavePrefix(store.get(), a, 5, 6).ok());
  m = LookupOrDie(store.get(), Tokens(1, 6 * kPage));
  EXPECT_EQ(m.reusable_pages, 4u) << "a state at 6 without page 4's windowed KV";
}

TEST_P(WindowStoreTest, WindowsAreNeverDroppedWhileTheirStateIsCached) {
  // A host tier for a few prompts only, no disk: every eviction drops. Whatever stays, each
  // cached state's prefix is reusable (its window is whole) and loads byte-exact.
  auto store = OpenOrDie(Options(64 * 8192, 0));
  ASSERT_NE(store, nullptr);
  std::vector<std::vector<uint32_t>> prompts;
  for (uint32_t p = 0; p < 24; ++p) {
    prompts.push_back(Tokens(1000 * (p + 1), 6 * kPage));
    ASSERT_TRUE(SavePrefix(store.get(), prompts.back(), 0, 6).ok()) << p;
    const StoreStats st = store->Stats();
    const uint64_t states = st.resident_entries[kHost][kState];
    uint64_t reusable = 0;
    for (const auto& t : prompts) reusable += LookupOrDie(store.get(), t).reusable_pages == 6;
    EXPECT_EQ(reusable, states) << "after prompt " << p << ": a cached state lost its window";
    EXPECT_GE(st.resident_entries[kHost][kWindow], kWindowPages * states);
  }
  EXPECT_GT(store->Stats().evictions[kHost][kState], 0u) << "the test wants host pressure";
  for (const auto& t : prompts) {
    const PrefixMatch m = LookupOrDie(store.get(), t);
    if (m.reusable_pages == 6) {
      {
        const Status ls = LoadAndCheck(store.get(), m);
        EXPECT_TRUE(ls.ok()) << ls.ToString();
      }
    }
  }
}

TEST_P(WindowStoreTest, AWindowPartlyOnDiskAndPartlyInHostLoadsByteExact) {
  const StoreOptions o = Options(1 << 20, 8 << 20);
  const auto a = Tokens(1, 6 * kPage);
  {
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(SavePrefix(store.get(), a, 0, 6).ok());
    ASSERT_TRUE(store->Close().ok());  // written through: everything is on disk
  }
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  PrefixMatch m = LookupOrDie(store.get(), a);
  ASSERT_EQ(m.reusable_pages, 6u);
  EXPECT_EQ(m.window_tiers, (std::vector<Tier>{Tier::kDisk, Tier::kDisk}));
  // Loading page 5 alone brings its windowed KV (and its full KV) to host memory.
  {
    auto slot = store->AllocateDeviceSlot(Kind::kKV);
    ASSERT_TRUE(slot.ok());
    const std::vector<uint64_t> one = {*slot};
    LoadOptions lo;
    lo.first_page = 5;
    auto fence = store->Load(m, one, std::nullopt, lo);
    ASSERT_TRUE(fence.ok()) << fence.status().ToString();
    ASSERT_TRUE(fence->Wait(std::chrono::seconds(30)).ok());
    ASSERT_TRUE(store->FreeDeviceSlot(Kind::kKV, *slot).ok());
  }
  m = LookupOrDie(store.get(), a);
  ASSERT_EQ(m.reusable_pages, 6u);
  EXPECT_EQ(m.window_tiers, (std::vector<Tier>{Tier::kDisk, Tier::kHost}));
  {
    const Status ls = LoadAndCheck(store.get(), m);
    EXPECT_TRUE(ls.ok()) << ls.ToString();
  }
  EXPECT_EQ(store->Stats().loaded_entries[kDisk][kWindow], 2u);  // page 5, then page 4
  EXPECT_EQ(store->Stats().loaded_entries[kHost][kWindow], 1u);  // page 5 the second time
}

TEST_P(WindowStoreTest, RestartWithAWindowedPageMissingIsAMissUntilSavedAgain) {
  const StoreOptions o = Options(1 << 20, 8 << 20);
  const auto a = Tokens(1, 6 * kPage), b = Tokens(500, 6 * kPage);
  std::vector<PageHash> ha;
  {
    auto store = OpenOrDie(o);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(SavePrefix(store.get(), a, 0, 6).ok());
    ASSERT_TRUE(SavePrefix(store.get(), b, 0, 6).ok());
    ha = store->HashTokens("", a);
    ASSERT_TRUE(store->Close().ok());
  }
  {  // A's windowed record of page 4 leaves the catalog, as if it had never been written.
    auto catalog = DiskCatalog::Open(o.disk_dir + "/catalog", false, /*chains=*/GetParam());
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    const std::vector<std::string> raw = {
        CatalogRecordKey(DiskKey{Kind::kWindowKV, ha[4], 5 * kPage})};
    ASSERT_TRUE((*catalog)->DeleteRaw(raw).ok());
  }
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  PrefixMatch m = LookupOrDie(store.get(), a);
  EXPECT_EQ(m.reusable_pages, 0u) << "a state whose window is not whole is no hit";
  EXPECT_TRUE(m.window_tiers.empty());
  const PrefixMatch mb = LookupOrDie(store.get(), b);
  ASSERT_EQ(mb.reusable_pages, 6u);
  {
    const Status ls = LoadAndCheck(store.get(), mb);
    EXPECT_TRUE(ls.ok()) << ls.ToString();
  }
  // The engine recomputes A and saves it again: a hit, byte-exact.
  ASSERT_TRUE(SavePrefix(store.get(), a, 0, 6).ok());
  m = LookupOrDie(store.get(), a);
  ASSERT_EQ(m.reusable_pages, 6u);
  {
    const Status ls = LoadAndCheck(store.get(), m);
    EXPECT_TRUE(ls.ok()) << ls.ToString();
  }
}

TEST_P(WindowStoreTest, WriteBackWritesNeededWindowsAndDropsUselessOnes) {
  // Write-back: entries reach disk only when evicted from host memory. A state's window goes to
  // disk with it; windowed KV that no state needs (pages saved without a state) is dropped.
  StoreOptions o = Options(48 * 8192, 8 << 20);
  o.write_policy = WritePolicy::kWriteBack;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  const auto a = Tokens(1, 6 * kPage);
  ASSERT_TRUE(SavePrefix(store.get(), a, 0, 6).ok());
  // Pages without a state: their last two pages' windowed KV is needed by no state.
  for (uint32_t p = 0; p < 40; ++p) {
    const auto t = Tokens(5000 + 100 * p, 6 * kPage);
    const auto hashes = store->HashTokens("", t);
    std::vector<uint64_t> slots;
    for (size_t i = 0; i < 6; ++i) {
      auto slot = store->AllocateDeviceSlot(Kind::kKV);
      ASSERT_TRUE(slot.ok());
      ASSERT_TRUE(
          store->WriteDeviceRecord(Kind::kKV, *slot, PageContent(Layout(), hashes[i])).ok());
      slots.push_back(*slot);
    }
    SaveRequest req;
    req.tokens = t;
    req.device_pages = slots;
    auto fence = store->Save(req);
    ASSERT_TRUE(fence.ok()) << fence.status().ToString();
    ASSERT_TRUE(fence->Wait(std::chrono::seconds(30)).ok());
    for (uint64_t slot : slots) ASSERT_TRUE(store->FreeDeviceSlot(Kind::kKV, slot).ok());
  }
  const StoreStats st = store->Stats();
  EXPECT_GT(st.evictions[kHost][kWindow], 0u) << "the test wants windows evicted";
  // Only A's window ever reached the disk: the useless windows were dropped, not written.
  EXPECT_LE(st.resident_entries[kDisk][kWindow], kWindowPages);
  const PrefixMatch m = LookupOrDie(store.get(), a);
  if (m.reusable_pages == 6) {
    const Status ls = LoadAndCheck(store.get(), m);
    EXPECT_TRUE(ls.ok()) << ls.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(FullAndWindowed, WindowStoreTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("AllWindowed") : "FullAndWindowed";
                         });

}  // namespace
}  // namespace cachepawl
