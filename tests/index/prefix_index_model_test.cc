// PrefixIndex against a brute-force reference: 1,000,000 random operations (inserts, chains,
// locations, Mamba states, matches, locks, pins, evictions, removals, bad input) over a few
// hundred prefixes with shared branches, for attention-only, hybrid and pure SSM (pages without
// KV payload) indexes. Every operation's result is compared at the step it
// happens (status code, match result, victims, cleared slot, the touched entries); the whole
// index, its counters and CheckInvariants() every kFullCheckEvery operations and at the end.
//
// Reproduce a failure with CACHEPAWL_TEST_SEED=<seed> (the EnvSeed case), or the fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "index/prefix_index.h"
#include "tests/common/test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CACHEPAWL_INDEX_MODEL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CACHEPAWL_INDEX_MODEL_SANITIZED 1
#endif
#endif

namespace cachepawl {
namespace {

#ifdef CACHEPAWL_INDEX_MODEL_SANITIZED
constexpr int kOperations = 100'000;  // sanitizers run ~10x slower
#else
constexpr int kOperations = 1'000'000;
#endif
constexpr int kFullCheckEvery = 2'000;
constexpr int kPrefixes = 300;
constexpr int kNoNode = -1;
constexpr size_t kHeld = 48;

using Code = Status::Code;

// ----- the universe of pages: a forest of prefixes with shared branches ---------------------

struct Universe {
  std::vector<PageHash> hash;
  std::vector<int> parent;  // the intended parent; kNoNode for a first page
  std::vector<std::vector<int>> children;
  std::unordered_map<PageHash, int> id;
  std::vector<PageHash> foreign;  // never inserted

  PageHash RandomHash(std::mt19937_64& rng) {
    for (;;) {
      PageHash h;
      for (auto& b : h.bytes) b = static_cast<uint8_t>(rng());
      // Distinct first 8 bytes keep the eviction tie-break (hash bytes) identical to the
      // reference's full-hash comparison.
      if (!h.IsZero() && !id.count(h) && first8.insert(Prefix8(h)).second) return h;
    }
  }
  static uint64_t Prefix8(const PageHash& h) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | h.bytes[i];
    return v;
  }
  int Add(int parent_id, std::mt19937_64& rng) {
    const int n = static_cast<int>(hash.size());
    hash.push_back(RandomHash(rng));
    parent.push_back(parent_id);
    children.emplace_back();
    if (parent_id != kNoNode) children[parent_id].push_back(n);
    id[hash.back()] = n;
    return n;
  }
  // Each prefix extends a random existing page (or starts a new chain) by 1..8 pages.
  static Universe Make(std::mt19937_64& rng) {
    Universe u;
    for (int p = 0; p < kPrefixes; ++p) {
      int at =
          (u.hash.empty() || rng() % 8 == 0) ? kNoNode : static_cast<int>(rng() % u.hash.size());
      const int len = 1 + static_cast<int>(rng() % 8);
      for (int i = 0; i < len; ++i) at = u.Add(at, rng);
    }
    for (int i = 0; i < 16; ++i) u.foreign.push_back(u.RandomHash(rng));
    return u;
  }
  std::vector<int> PathTo(int n) const {
    std::vector<int> path;
    for (int i = n; i != kNoNode; i = parent[i]) path.push_back(i);
    std::reverse(path.begin(), path.end());
    return path;
  }
  int size() const { return static_cast<int>(hash.size()); }

 private:
  std::set<uint64_t> first8;
};

// ----- the reference: plain fields, linear scans ---------------------------------------------

struct RefState {
  std::array<std::optional<uint64_t>, kNumTiers> loc;
  std::array<uint16_t, kNumTiers> pins{};
  uint64_t last_use = 0;
  bool empty() const { return !loc[0] && !loc[1] && !loc[2]; }
};

struct RefEntry {
  bool present = false;
  int parent = kNoNode;
  uint32_t depth = 0;
  std::array<std::optional<uint64_t>, kNumTiers> kv;
  std::optional<RefState> state;
  uint32_t kv_locks = 0;
  uint32_t state_locks = 0;
  std::array<uint16_t, kNumTiers> kv_pins{};
  uint64_t last_use = 0;
};

TierLocations ToLocations(const std::array<std::optional<uint64_t>, kNumTiers>& loc) {
  TierLocations out;
  for (int t = 0; t < kNumTiers; ++t) {
    if (loc[t]) {
      out.mask |= static_cast<uint8_t>(1u << t);
      out.slot[t] = *loc[t];
    }
  }
  return out;
}

bool ValidEnums(Kind kind, Tier tier) {
  return IsValidKind(static_cast<uint8_t>(kind)) && IsValidTier(static_cast<uint8_t>(tier));
}

class RefIndex {
 public:
  RefIndex(const Universe& u, const IndexOptions& o) : u_(u), options_(o), e_(u.size()) {}

  int Find(const PageHash& h) const {
    auto it = u_.id.find(h);
    if (it == u_.id.end() || !e_[it->second].present) return kNoNode;
    return it->second;
  }
  const RefEntry& entry(int n) const { return e_[n]; }
  size_t live() const { return live_; }

  Code InsertKv(const std::optional<PageHash>& parent, const PageHash& h) {
    clock_ += 2;
    int added;
    return InsertOne(parent, h, &added);
  }

  Code InsertChain(const std::optional<PageHash>& parent, std::span<const PageHash> hashes) {
    clock_ += 2;
    std::vector<int> added;
    std::optional<PageHash> up = parent;
    for (const PageHash& h : hashes) {
      int n;
      const Code c = InsertOne(up, h, &n);
      if (c != Code::kOk) {
        for (size_t j = added.size(); j-- > 0;) Erase(added[j]);
        return c;
      }
      if (n != kNoNode) added.push_back(n);
      up = h;
    }
    return Code::kOk;
  }

  Code SetLocation(const PageHash& h, Kind kind, Tier tier, uint64_t slot) {
    clock_ += 2;
    if (!ValidEnums(kind, tier)) return Code::kInvalidArgument;
    if (kind == Kind::kKV && !options_.kv_payload) return Code::kInvalidArgument;
    const int n = Find(h);
    if (n == kNoNode) return Code::kNotFound;
    const int t = static_cast<int>(tier);
    RefEntry& e = e_[n];
    if (kind == Kind::kKV) {
      if (e.kv[t]) return *e.kv[t] == slot ? Code::kOk : Code::kFailedPrecondition;
      e.kv[t] = slot;
      return Code::kOk;
    }
    if (e.state && e.state->loc[t]) {
      return *e.state->loc[t] == slot ? Code::kOk : Code::kFailedPrecondition;
    }
    if (!e.state) {
      e.state.emplace();
      e.state->last_use = clock_;
    }
    e.state->loc[t] = slot;
    return Code::kOk;
  }

  std::pair<Code, uint64_t> ClearLocation(const PageHash& h, Kind kind, Tier tier) {
    clock_ += 2;
    if (!ValidEnums(kind, tier)) return {Code::kInvalidArgument, 0};
    const int n = Find(h);
    if (n == kNoNode) return {Code::kNotFound, 0};
    const int t = static_cast<int>(tier);
    RefEntry& e = e_[n];
    const bool kv = kind == Kind::kKV;
    std::optional<uint64_t>* loc = kv ? &e.kv[t] : (e.state ? &e.state->loc[t] : nullptr);
    if (loc == nullptr || !*loc) return {Code::kNotFound, 0};
    if ((kv ? e.kv_pins[t] : e.state->pins[t]) != 0) return {Code::kBusy, 0};
    if ((kv ? e.kv_locks : e.state_locks) != 0) return {Code::kBusy, 0};
    const uint64_t slot = **loc;
    loc->reset();
    if (!kv && e.state->empty()) e.state.reset();
    return {Code::kOk, slot};
  }

  Code Remove(const PageHash& h) {
    clock_ += 2;
    const int n = Find(h);
    if (n == kNoNode) return Code::kNotFound;
    const RefEntry& e = e_[n];
    if (e.kv[0] || e.kv[1] || e.kv[2] || e.state) return Code::kFailedPrecondition;
    if (children_[n] != 0) return Code::kFailedPrecondition;
    if (e.kv_locks != 0 || e.state_locks != 0) return Code::kBusy;
    Erase(n);
    return Code::kOk;
  }

  Code Lock(const PageHash& h) {
    clock_ += 2;
    const int n = Find(h);
    if (n == kNoNode) return Code::kNotFound;
    for (int i = n; i != kNoNode; i = e_[i].parent) ++e_[i].kv_locks;
    ++e_[n].state_locks;
    return Code::kOk;
  }

  Code Unlock(const PageHash& h) {
    clock_ += 2;
    const int n = Find(h);
    if (n == kNoNode) return Code::kNotFound;
    if (e_[n].state_locks == 0) return Code::kFailedPrecondition;
    for (int i = n; i != kNoNode; i = e_[i].parent) --e_[i].kv_locks;
    --e_[n].state_locks;
    return Code::kOk;
  }

  Code Pin(std::span<const PageHash> hashes, Kind kind, Tier tier, bool pin) {
    clock_ += 2;
    if (!ValidEnums(kind, tier)) return Code::kInvalidArgument;
    const int t = static_cast<int>(tier);
    std::map<int, int> uses;
    for (const PageHash& h : hashes) {
      const int n = Find(h);
      if (n == kNoNode) return Code::kNotFound;
      const RefEntry& e = e_[n];
      const bool held = kind == Kind::kKV ? e.kv[t].has_value() : (e.state && e.state->loc[t]);
      const int pins = !held ? 0 : (kind == Kind::kKV ? e.kv_pins[t] : e.state->pins[t]);
      const int k = ++uses[n];
      if (pin && !held) return Code::kNotFound;
      if (pin && pins + k > 0xFFFF) return Code::kFailedPrecondition;
      if (!pin && pins - k < 0) return Code::kFailedPrecondition;
    }
    for (const auto& [n, k] : uses) {
      uint16_t& pins = kind == Kind::kKV ? e_[n].kv_pins[t] : e_[n].state->pins[t];
      pins = static_cast<uint16_t>(pin ? pins + k : pins - k);
    }
    return Code::kOk;
  }

  // Brute force: repeatedly the least (last use, deeper, hash) among the eligible, counting
  // picked children as gone for their parents.
  std::pair<Code, std::vector<Victim>> PickVictims(Tier tier, Kind kind, size_t max_count) {
    clock_ += 2;
    if (!ValidEnums(kind, tier)) return {Code::kInvalidArgument, {}};
    const int t = static_cast<int>(tier);
    const bool kv = kind == Kind::kKV;
    std::vector<int> tier_children(e_.size(), 0);
    if (kv) {
      for (size_t n = 0; n < e_.size(); ++n) {
        if (e_[n].present && e_[n].kv[t] && e_[n].parent != kNoNode) ++tier_children[e_[n].parent];
      }
    }
    std::vector<bool> picked(e_.size(), false);
    std::vector<Victim> out;
    while (out.size() < max_count) {
      int best = kNoNode;
      std::tuple<uint64_t, int64_t, PageHash> best_key;
      for (size_t n = 0; n < e_.size(); ++n) {
        const RefEntry& e = e_[n];
        if (!e.present || picked[n]) continue;
        uint64_t last_use;
        if (kv) {
          if (!e.kv[t] || tier_children[n] != 0 || e.kv_locks != 0 || e.kv_pins[t] != 0) continue;
          last_use = e.last_use;
        } else {
          if (!e.state || !e.state->loc[t] || e.state_locks != 0 || e.state->pins[t] != 0) continue;
          last_use = e.state->last_use;
        }
        const auto key = std::make_tuple(last_use, -int64_t{e.depth}, u_.hash[n]);
        if (best == kNoNode || key < best_key) {
          best = static_cast<int>(n);
          best_key = key;
        }
      }
      if (best == kNoNode) break;
      picked[best] = true;
      const RefEntry& e = e_[best];
      out.push_back(Victim{u_.hash[best], kind, tier, kv ? *e.kv[t] : *e.state->loc[t], e.depth});
      if (kv && e.parent != kNoNode) --tier_children[e.parent];
    }
    return {Code::kOk, out};
  }

  MatchResult Match(std::span<const PageHash> hashes) {
    MatchResult r;
    const uint64_t now = clock_ + 1;
    int prev = kNoNode, last_kv = kNoNode, last_state = kNoNode;
    bool kv_run = true;
    for (size_t i = 0; i < hashes.size(); ++i) {
      const int n = Find(hashes[i]);
      if (n == kNoNode || e_[n].parent != prev) break;
      prev = n;
      r.indexed_pages = i + 1;
      RefEntry& e = e_[n];
      if (!kv_run) continue;
      // Without KV payload (pure SSM) a page is there when the index has it.
      if (!e.kv[0] && !e.kv[1] && !e.kv[2] && options_.kv_payload) {
        kv_run = false;
        continue;
      }
      r.kv_only_pages = i + 1;
      if (options_.kv_payload) r.pages.push_back(ToLocations(e.kv));
      e.last_use = now;
      last_kv = n;
      if (e.state) {
        last_state = n;
        r.reusable_pages = options_.require_mamba ? i + 1 : r.reusable_pages;
      }
    }
    if (!options_.require_mamba) {
      r.reusable_pages = r.kv_only_pages;
      last_state = last_kv;
    }
    r.checkpoint_hint_pages = r.kv_only_pages - r.kv_only_pages % options_.track_interval_pages;
    if (last_state != kNoNode && e_[last_state].state) {
      r.state = ToLocations(e_[last_state].state->loc);
      e_[last_state].state->last_use = now;
    }
    return r;
  }

  // Child counts are kept per step for speed; Dump() recounts them by a scan.
  EntryInfo Info(int n) const { return Info(n, children_[n]); }

  EntryInfo Info(int n, int children) const {
    const RefEntry& e = e_[n];
    EntryInfo info;
    info.hash = u_.hash[n];
    if (e.parent != kNoNode) info.parent = u_.hash[e.parent];
    info.depth_pages = e.depth;
    info.kv = ToLocations(e.kv);
    info.children = static_cast<uint32_t>(children);
    info.kv_locks = e.kv_locks;
    info.state_locks = e.state_locks;
    info.kv_pins = e.kv_pins;
    info.kv_last_use = e.last_use;
    if (e.state) {
      info.state = ToLocations(e.state->loc);
      info.state_pins = e.state->pins;
      info.state_last_use = e.state->last_use;
    }
    return info;
  }

  std::vector<EntryInfo> Dump() const {
    std::vector<int> children(e_.size(), 0);
    for (const RefEntry& e : e_) {
      if (e.present && e.parent != kNoNode) ++children[e.parent];
    }
    std::vector<EntryInfo> out;
    for (int n = 0; n < u_.size(); ++n) {
      if (e_[n].present) out.push_back(Info(n, children[n]));
    }
    std::sort(out.begin(), out.end(),
              [](const EntryInfo& a, const EntryInfo& b) { return a.hash < b.hash; });
    return out;
  }

  // [kind][tier] located and evictable counts.
  void Counts(uint64_t located[kNumKinds][kNumTiers], uint64_t evictable[kNumKinds][kNumTiers]) {
    std::vector<std::array<int, kNumTiers>> tier_children(e_.size(), {0, 0, 0});
    for (const RefEntry& e : e_) {
      for (int t = 0; t < kNumTiers; ++t) {
        if (e.present && e.kv[t] && e.parent != kNoNode) ++tier_children[e.parent][t];
      }
    }
    for (size_t n = 0; n < e_.size(); ++n) {
      const RefEntry& e = e_[n];
      if (!e.present) continue;
      for (int t = 0; t < kNumTiers; ++t) {
        if (e.kv[t]) {
          ++located[0][t];
          if (tier_children[n][t] == 0 && e.kv_locks == 0 && e.kv_pins[t] == 0) ++evictable[0][t];
        }
        if (e.state && e.state->loc[t]) {
          ++located[1][t];
          if (e.state_locks == 0 && e.state->pins[t] == 0) ++evictable[1][t];
        }
      }
    }
  }

 private:
  Code InsertOne(const std::optional<PageHash>& parent, const PageHash& h, int* added) {
    *added = kNoNode;
    if (h.IsZero()) return Code::kInvalidArgument;
    const bool has_parent = parent && !parent->IsZero();
    if (has_parent && *parent == h) return Code::kInvalidArgument;
    int p = kNoNode;
    if (has_parent) {
      p = Find(*parent);
      if (p == kNoNode) return Code::kNotFound;
    }
    const int n = Find(h);
    if (n != kNoNode) return e_[n].parent == p ? Code::kOk : Code::kInvalidArgument;
    if (live_ >= options_.max_pages) return Code::kNoSpace;
    const int id = u_.id.at(h);  // the test inserts universe pages only
    RefEntry& e = e_[id];
    e = RefEntry{};
    e.present = true;
    e.parent = p;
    e.depth = p == kNoNode ? 1 : e_[p].depth + 1;
    e.last_use = clock_;
    if (p != kNoNode) ++children_[p];
    ++live_;
    *added = id;
    return Code::kOk;
  }
  void Erase(int n) {
    if (e_[n].parent != kNoNode) --children_[e_[n].parent];
    e_[n] = RefEntry{};
    --live_;
  }

  const Universe& u_;
  const IndexOptions options_;
  std::vector<RefEntry> e_;
  std::vector<int> children_ = std::vector<int>(e_.size(), 0);
  size_t live_ = 0;
  uint64_t clock_ = 0;
};

// ----- the driver ---------------------------------------------------------------------------

struct ModelConfig {
  uint64_t seed;
  bool require_mamba;
  uint32_t track_interval_pages;
  uint64_t max_pages;
  bool kv_payload = true;  // false: a pure SSM layout (pages without KV)
};

class ModelRun {
 public:
  explicit ModelRun(const ModelConfig& cfg)
      : rng_(cfg.seed), u_(Universe::Make(rng_)), options_(MakeOptions(cfg)), ref_(u_, options_) {
    auto index = PrefixIndex::Create(options_);
    EXPECT_TRUE(index.ok());
    index_ = std::move(index).value();
  }

  void Run(int operations) {
    for (step_ = 0; step_ < operations; ++step_) {
      Step();
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "first failure at operation " << step_;
        return;
      }
      if ((step_ + 1) % kFullCheckEvery == 0) FullCheck();
    }
    FullCheck();
    // The run must have exercised the interesting paths.
    EXPECT_GT(hits_, operations / 100);
    EXPECT_GT(victims_, operations / 100);
    EXPECT_GT(pins_ok_, operations / 1000);
  }

 private:
  static IndexOptions MakeOptions(const ModelConfig& cfg) {
    IndexOptions o;
    o.require_mamba = cfg.require_mamba;
    o.track_interval_pages = cfg.track_interval_pages;
    o.max_pages = cfg.max_pages;
    o.kv_payload = cfg.kv_payload;
    return o;
  }

  uint64_t R(uint64_t n) { return rng_() % n; }
  bool P(int percent) { return R(100) < static_cast<uint64_t>(percent); }

  // A universe page, present in the index most of the time.
  int Node() {
    for (int tries = 0; tries < 6 && P(80); ++tries) {
      const int n = static_cast<int>(R(u_.size()));
      if (ref_.Find(u_.hash[n]) != kNoNode) return n;
    }
    return static_cast<int>(R(u_.size()));
  }
  const PageHash& Foreign() { return u_.foreign[R(u_.foreign.size())]; }
  Tier AnyTier() { return static_cast<Tier>(R(kNumTiers)); }
  // Without KV payload, KV is asked for now and then (every such location is refused).
  Kind AnyKind() { return P(options_.kv_payload ? 75 : 10) ? Kind::kKV : Kind::kMamba; }
  uint64_t Slot() {
    if (P(5)) return 0xFFFFFFFFull + R(1000);  // slots that do not fit 32 bits
    return R(64);
  }
  std::optional<PageHash> ParentOf(int n) {
    if (u_.parent[n] == kNoNode) return std::nullopt;
    return u_.hash[u_.parent[n]];
  }

  void ExpectCode(const Status& s, Code want, const char* op) {
    EXPECT_EQ(s.code(), want) << op << " at operation " << step_ << ": " << s.ToString();
  }
  void ExpectEntry(const PageHash& h) {
    const int n = ref_.Find(h);
    const std::optional<EntryInfo> got = index_->Lookup(h);
    ASSERT_EQ(got.has_value(), n != kNoNode) << "presence at operation " << step_;
    if (got) {
      EXPECT_TRUE(*got == ref_.Info(n)) << "entry at operation " << step_;
    }
  }

  void Step() {
    const uint64_t dice = R(100);
    if (dice < 14) return DoInsert();
    if (dice < 18) return DoInsertChain();
    if (dice < 40) return DoSetLocation();
    if (dice < 46) return DoClear();
    if (dice < 56) return DoEvict();
    if (dice < 60) return DoRemove();
    // Locks and pins held at once stay around kHeld, so eviction meets them often but is not
    // blocked everywhere.
    if (dice < 66) return locked_.size() < kHeld ? DoLock() : DoUnlock();
    if (dice < 72) return DoUnlock();
    if (dice < 77) return pinned_.size() < kHeld ? DoPin() : DoUnpin();
    if (dice < 80) return DoUnpin();
    if (dice < 98) return DoMatch();
    return DoBadInput();
  }

  void DoInsert() {
    const int n = Node();
    std::optional<PageHash> parent = ParentOf(n);
    const uint64_t how = R(100);
    if (how < 6) {
      parent = std::nullopt;
    } else if (how < 12) {
      parent = u_.hash[Node()];  // usually the wrong parent
    } else if (how < 14) {
      parent = Foreign();
    }
    const PageHash& h = u_.hash[n];
    ExpectCode(index_->InsertKv(parent, h), ref_.InsertKv(parent, h), "InsertKv");
    ExpectEntry(h);
  }

  void DoInsertChain() {
    const std::vector<int> path = u_.PathTo(Node());
    const size_t from = R(path.size());
    const size_t len = 1 + R(std::min<size_t>(6, path.size() - from));
    std::vector<PageHash> chain;
    for (size_t i = from; i < from + len; ++i) chain.push_back(u_.hash[path[i]]);
    if (P(5)) chain.push_back(chain.front());  // a repeat: must fail and leave nothing
    const std::optional<PageHash> parent =
        from == 0 ? std::nullopt : std::optional<PageHash>(u_.hash[path[from - 1]]);
    ExpectCode(index_->InsertChain(parent, chain), ref_.InsertChain(parent, chain), "InsertChain");
    for (const PageHash& h : chain) ExpectEntry(h);
  }

  void DoSetLocation() {
    const PageHash& h = u_.hash[Node()];
    const Kind kind = AnyKind();
    const Tier tier = AnyTier();
    uint64_t slot = Slot();
    // Sometimes the slot it already has there (an idempotent repeat).
    if (auto info = index_->Lookup(h); info && P(30)) {
      const TierLocations& loc = kind == Kind::kKV ? info->kv : info->state;
      if (loc.Has(tier)) slot = *loc.Slot(tier);
    }
    ExpectCode(index_->SetLocation(h, kind, tier, slot), ref_.SetLocation(h, kind, tier, slot),
               "SetLocation");
    ExpectEntry(h);
  }

  void Clear(const PageHash& h, Kind kind, Tier tier) {
    const auto [code, slot] = ref_.ClearLocation(h, kind, tier);
    const StatusOr<uint64_t> got = index_->ClearLocation(h, kind, tier);
    ExpectCode(got.status(), code, "ClearLocation");
    if (got.ok() && code == Code::kOk) {
      EXPECT_EQ(*got, slot) << "cleared slot, op " << step_;
    }
    ExpectEntry(h);
  }

  void DoClear() { Clear(u_.hash[Node()], AnyKind(), AnyTier()); }

  // As the Store evicts: pick, sometimes copy to disk first, then clear all or some.
  void DoEvict() {
    const Tier tier = AnyTier();
    const Kind kind = AnyKind();
    const size_t max_count = R(5);
    const auto [code, want] = ref_.PickVictims(tier, kind, max_count);
    const StatusOr<std::vector<Victim>> got = index_->PickVictims(tier, kind, max_count);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(code, Code::kOk);
    ASSERT_EQ(*got, want) << "victims at operation " << step_;
    victims_ += want.size();
    const size_t clear = P(70) ? want.size() : R(want.size() + 1);
    for (size_t i = 0; i < clear; ++i) {
      const Victim& v = want[i];
      if (v.tier != Tier::kDisk && P(30)) {
        const uint64_t slot = Slot();
        ExpectCode(index_->SetLocation(v.hash, v.kind, Tier::kDisk, slot),
                   ref_.SetLocation(v.hash, v.kind, Tier::kDisk, slot), "SetLocation(disk)");
      }
      Clear(v.hash, v.kind, v.tier);
    }
  }

  void DoRemove() {
    const PageHash& h = P(3) ? Foreign() : u_.hash[Node()];
    ExpectCode(index_->Remove(h), ref_.Remove(h), "Remove");
    ExpectEntry(h);
  }

  void DoLock() {
    const PageHash& h = u_.hash[Node()];
    const Code want = ref_.Lock(h);
    ExpectCode(index_->Lock(h), want, "Lock");
    if (want == Code::kOk) locked_.push_back(h);
    ExpectEntry(h);
  }

  void DoUnlock() {
    PageHash h = u_.hash[Node()];
    if (!locked_.empty() && P(85)) {
      const size_t i = R(locked_.size());
      h = locked_[i];
      locked_[i] = locked_.back();
      locked_.pop_back();
    }
    ExpectCode(index_->Unlock(h), ref_.Unlock(h), "Unlock");
    ExpectEntry(h);
  }

  struct PinKey {
    PageHash hash;
    Kind kind;
    Tier tier;
  };

  void DoPin() {
    // A page and up to two ancestors, in a tier the page is in (most of the time).
    const Kind kind = AnyKind();
    Tier tier = AnyTier();
    const int node = Node();
    if (auto info = index_->Lookup(u_.hash[node]); info && P(80)) {
      const TierLocations& loc = kind == Kind::kKV ? info->kv : info->state;
      if (loc.Fastest()) tier = *loc.Fastest();
    }
    std::vector<PageHash> hashes;
    for (int i = node, n = 1 + static_cast<int>(R(3)); i != kNoNode && n > 0; --n) {
      hashes.push_back(u_.hash[i]);
      i = u_.parent[i];
    }
    if (P(3)) hashes.push_back(Foreign());
    const Code want = ref_.Pin(hashes, kind, tier, /*pin=*/true);
    ExpectCode(index_->PinForTransfer(hashes, kind, tier), want, "PinForTransfer");
    if (want == Code::kOk) {
      ++pins_ok_;
      for (const PageHash& h : hashes) pinned_.push_back({h, kind, tier});
    }
    for (const PageHash& h : hashes) ExpectEntry(h);
  }

  void DoUnpin() {
    PinKey key{u_.hash[Node()], AnyKind(), AnyTier()};
    if (!pinned_.empty() && P(85)) {
      const size_t i = R(pinned_.size());
      key = pinned_[i];
      pinned_[i] = pinned_.back();
      pinned_.pop_back();
    }
    std::vector<PageHash> hashes = {key.hash};
    const Code want = ref_.Pin(hashes, key.kind, key.tier, /*pin=*/false);
    ExpectCode(index_->Unpin(hashes, key.kind, key.tier), want, "Unpin");
    ExpectEntry(key.hash);
  }

  void DoMatch() {
    const int n = Node();
    std::vector<PageHash> query;
    for (int i : u_.PathTo(n)) query.push_back(u_.hash[i]);
    // Sometimes on along a child, or cut short, or with a foreign page or out of order.
    for (int at = n; P(40) && !u_.children[at].empty();) {
      at = u_.children[at][R(u_.children[at].size())];
      query.push_back(u_.hash[at]);
    }
    if (P(10)) query.resize(R(query.size() + 1));
    if (P(5) && !query.empty()) query[R(query.size())] = Foreign();
    if (P(3) && query.size() > 1) std::swap(query[0], query[1]);
    const MatchResult want = ref_.Match(query);
    index_->Match(query, &result_);
    EXPECT_EQ(result_.reusable_pages, want.reusable_pages) << "op " << step_;
    EXPECT_EQ(result_.kv_only_pages, want.kv_only_pages) << "op " << step_;
    EXPECT_EQ(result_.checkpoint_hint_pages, want.checkpoint_hint_pages) << "op " << step_;
    EXPECT_EQ(result_.indexed_pages, want.indexed_pages) << "op " << step_;
    EXPECT_TRUE(result_.pages == want.pages) << "page locations at op " << step_;
    EXPECT_TRUE(result_.state == want.state) << "state location at op " << step_;
    hits_ += want.reusable_pages > 0;
    for (size_t i = 0; i < want.kv_only_pages; ++i) ExpectEntry(query[i]);
  }

  void DoBadInput() {
    const PageHash& h = u_.hash[Node()];
    const Tier bad_tier = static_cast<Tier>(3 + R(250));
    const Kind bad_kind = static_cast<Kind>(3 + R(250));
    switch (R(6)) {
      case 0:
        ExpectCode(index_->SetLocation(h, Kind::kKV, bad_tier, 1),
                   ref_.SetLocation(h, Kind::kKV, bad_tier, 1), "SetLocation(bad tier)");
        break;
      case 1:
        Clear(h, bad_kind, Tier::kHost);
        break;
      case 2: {
        const auto [code, want] = ref_.PickVictims(bad_tier, Kind::kKV, 1);
        ExpectCode(index_->PickVictims(bad_tier, Kind::kKV, 1).status(), code, "PickVictims");
        break;
      }
      case 3:
        ExpectCode(index_->InsertKv(std::nullopt, PageHash::Zero()),
                   ref_.InsertKv(std::nullopt, PageHash::Zero()), "InsertKv(zero)");
        break;
      case 4:
        ExpectCode(index_->InsertKv(h, h), ref_.InsertKv(h, h), "InsertKv(self)");
        break;
      default: {
        std::vector<PageHash> hashes = {h};
        ExpectCode(index_->PinForTransfer(hashes, bad_kind, Tier::kDisk),
                   ref_.Pin(hashes, bad_kind, Tier::kDisk, true), "Pin(bad kind)");
        break;
      }
    }
    ExpectEntry(h);
  }

  void FullCheck() {
    const Status inv = index_->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv.ToString() << " after operation " << step_;
    ASSERT_TRUE(index_->DumpEntries() == ref_.Dump()) << "whole index after operation " << step_;
    uint64_t located[kNumKinds][kNumTiers] = {};
    uint64_t evictable[kNumKinds][kNumTiers] = {};
    ref_.Counts(located, evictable);
    const IndexStats s = index_->Stats();
    EXPECT_EQ(s.entries, ref_.live());
    for (int k = 0; k < kNumKinds; ++k) {
      for (int t = 0; t < kNumTiers; ++t) {
        EXPECT_EQ(s.located[k][t], located[k][t]) << k << "/" << t << " op " << step_;
        EXPECT_EQ(s.evictable[k][t], evictable[k][t]) << k << "/" << t << " op " << step_;
      }
    }
  }

  std::mt19937_64 rng_;
  Universe u_;
  const IndexOptions options_;
  RefIndex ref_;
  std::unique_ptr<PrefixIndex> index_;
  MatchResult result_;
  std::vector<PageHash> locked_;
  std::vector<PinKey> pinned_;
  int step_ = 0;
  int64_t hits_ = 0;
  int64_t victims_ = 0;
  int64_t pins_ok_ = 0;
};

class PrefixIndexModelTest : public ::testing::TestWithParam<ModelConfig> {};

TEST_P(PrefixIndexModelTest, MatchesReferenceForAMillionOperations) {
  const ModelConfig cfg = GetParam();
  SCOPED_TRACE("seed " + std::to_string(cfg.seed));
  ModelRun run(cfg);
  run.Run(kOperations);
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, PrefixIndexModelTest,
    ::testing::Values(ModelConfig{1, false, 1, kMaxIndexPages},
                      ModelConfig{2, true, 4, kMaxIndexPages},
                      ModelConfig{3, true, 3, 500},  // max_pages below the universe: NoSpace
                      ModelConfig{4, true, 2, kMaxIndexPages, /*kv_payload=*/false}),
    [](const ::testing::TestParamInfo<ModelConfig>& info) {
      return "Seed" + std::to_string(info.param.seed);
    });

TEST(PrefixIndexModelEnvTest, EnvSeed) {
  const uint64_t seed = testing::SeedFromEnv(20261122);
  SCOPED_TRACE("CACHEPAWL_TEST_SEED=" + std::to_string(seed));
  // Seeds cycle through attention-only, hybrid and pure SSM (no KV payload) indexes.
  const uint64_t mode = seed % 3;
  ModelRun run(ModelConfig{seed, mode != 0, static_cast<uint32_t>(1 + seed % 5), kMaxIndexPages,
                           /*kv_payload=*/mode != 2});
  run.Run(kOperations);
}

}  // namespace
}  // namespace cachepawl
