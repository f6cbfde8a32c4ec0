// The model-based test's universe of pages and its brute-force reference index (plain fields,
// linear scans, no incremental bookkeeping: counts the index keeps per entry, such as window
// locks and anchors, are recomputed here when asked). See prefix_index_model_test.cc.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "index/prefix_index.h"

namespace cachepawl::index_model {

inline constexpr int kPrefixes = 300;
inline constexpr int kNoNode = -1;

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
  std::array<std::optional<uint64_t>, kNumLocalTiers> loc;
  std::array<uint16_t, kNumLocalTiers> pins{};
  uint64_t last_use = 0;
  uint32_t hits = 0;       // hybrid eviction of states
  double priority = 0;     // hybrid eviction of states: the GreedyDual score
  bool off_track = false;  // attached off the track interval, not at a prompt\'s end
  bool empty() const { return !loc[0] && !loc[1] && !loc[2]; }
};

struct RefEntry {
  bool present = false;
  int parent = kNoNode;
  uint32_t depth = 0;
  std::array<std::optional<uint64_t>, kNumLocalTiers> kv;
  std::optional<RefState> state;
  std::optional<RefState> window;  // the page's windowed KV
  uint32_t kv_locks = 0;
  uint32_t state_locks = 0;
  std::array<uint16_t, kNumLocalTiers> kv_pins{};
  uint64_t last_use = 0;
};

inline TierLocations ToLocations(const std::array<std::optional<uint64_t>, kNumLocalTiers>& loc) {
  TierLocations out;
  for (int t = 0; t < kNumLocalTiers; ++t) {
    if (loc[t]) {
      out.mask |= static_cast<uint8_t>(1u << t);
      out.slot[t] = *loc[t];
    }
  }
  return out;
}

inline bool ValidEnums(Kind kind, Tier tier) {
  return IsValidKind(static_cast<uint8_t>(kind)) && IsValidTier(static_cast<uint8_t>(tier));
}

class RefIndex {
 public:
  RefIndex(const Universe& u, const IndexOptions& o) : u_(u), options_(o), e_(u.size()) {}

  // ----- the window rule, from scratch ------------------------------------------------------
  // {locks, anchors} at n and its descendants at most W-1 levels below (by a walk down).
  std::pair<uint32_t, uint32_t> WindowSums(int n) const {
    std::pair<uint32_t, uint32_t> sums{0, 0};
    WalkDown(n, options_.window_pages, &sums);
    return sums;
  }
  bool Needed(int n) const { return WindowSums(n).second > 0; }

  // ----- hybrid eviction, from scratch --------------------------------------------------------
  bool HybridKv() const {
    return options_.hybrid_eviction && options_.require_mamba && options_.kv_payload;
  }
  bool HybridStates() const { return options_.hybrid_eviction && options_.require_mamba; }
  // States in n's subtree (itself included), by a walk down; 0 without hybrid eviction of KV.
  uint32_t SubtreeStates(int n) const {
    if (!HybridKv()) return 0;
    uint32_t count = e_[n].state ? 1 : 0;
    for (int c : kids_[n]) count += SubtreeStates(c);
    return count;
  }
  // 0: not evictable; 1: evictable, not needed; 2: needed, evictable (held in another tier).
  // `tier_children`: children of n whose KV tier t holds, not counting picked ones.
  int KvClass(int n, int t, int tier_children) const {
    const RefEntry& e = e_[n];
    if (!e.kv[t] || tier_children != 0 || e.kv_locks != 0 || e.kv_pins[t] != 0) return 0;
    if (SubtreeStates(n) == 0) return 1;
    for (int u = 0; u < kNumLocalTiers; ++u) {
      if (u != t && e.kv[u]) return 2;
    }
    return 0;
  }
  // value(d) / bytes(d) * min(hits + 1, 32) + inflation, the same operations as the index (the
  // value per byte is IndexOptions::StateValuePerByte, checked against hand-computed values in
  // prefix_index_hybrid_test.cc; this model checks what the index does with it).
  double Priority(uint32_t depth, uint32_t hits, bool off_track) const {
    const double weight = static_cast<double>(std::min(hits + 1, 32u)) * (off_track ? 0.25 : 1.0);
    return inflation_ + weight * options_.StateValuePerByte(depth);
  }
  // 0: not evictable; 1: evictable, not needed; 2: needed, evictable (held in another tier).
  int WindowClass(int n, int t) const {
    const RefEntry& e = e_[n];
    if (!e.window || !e.window->loc[t] || e.window->pins[t] != 0) return 0;
    const auto [locks, anchors] = WindowSums(n);
    if (locks != 0) return 0;
    if (anchors == 0) return 1;
    for (int u = 0; u < kNumLocalTiers; ++u) {
      if (u != t && e.window->loc[u]) return 2;
    }
    return 0;
  }

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
    if (kind == Kind::kWindowKV && options_.window_pages == 0) return Code::kInvalidArgument;
    const int n = Find(h);
    if (n == kNoNode) return Code::kNotFound;
    const int t = static_cast<int>(tier);
    RefEntry& e = e_[n];
    if (kind == Kind::kKV) {
      if (e.kv[t]) return *e.kv[t] == slot ? Code::kOk : Code::kFailedPrecondition;
      e.kv[t] = slot;
      return Code::kOk;
    }
    std::optional<RefState>& r = kind == Kind::kMamba ? e.state : e.window;
    if (r && r->loc[t]) return *r->loc[t] == slot ? Code::kOk : Code::kFailedPrecondition;
    if (!r) {
      r.emplace();
      r->last_use = clock_;
      if (kind == Kind::kMamba && HybridStates()) {
        const uint32_t track = options_.track_interval_pages;
        r->off_track = track > 1 && e.depth % track != 0 && children_[n] > 0;
        r->priority = Priority(e.depth, 0, r->off_track);
      }
    }
    r->loc[t] = slot;
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
    std::optional<RefState>* r = kind == Kind::kMamba ? &e.state : &e.window;
    std::optional<uint64_t>* loc = kv ? &e.kv[t] : (*r ? &(*r)->loc[t] : nullptr);
    if (loc == nullptr || !*loc) return {Code::kNotFound, 0};
    if ((kv ? e.kv_pins[t] : (*r)->pins[t]) != 0) return {Code::kBusy, 0};
    const uint32_t locks = kv                     ? e.kv_locks
                           : kind == Kind::kMamba ? e.state_locks
                                                  : WindowSums(n).first;
    if (locks != 0) return {Code::kBusy, 0};
    const uint64_t slot = **loc;
    loc->reset();
    if (!kv && (*r)->empty()) r->reset();
    return {Code::kOk, slot};
  }

  Code Remove(const PageHash& h) {
    clock_ += 2;
    const int n = Find(h);
    if (n == kNoNode) return Code::kNotFound;
    const RefEntry& e = e_[n];
    if (e.kv[0] || e.kv[1] || e.kv[2] || e.state || e.window) return Code::kFailedPrecondition;
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
    if (pin && kind == Kind::kWindowKV && options_.window_pages == 0) {
      return Code::kInvalidArgument;
    }
    const int t = static_cast<int>(tier);
    std::map<int, int> uses;
    for (const PageHash& h : hashes) {
      const int n = Find(h);
      if (n == kNoNode) return Code::kNotFound;
      const RefEntry& e = e_[n];
      const RefState* r = Record(e, kind);
      const bool held = kind == Kind::kKV ? e.kv[t].has_value() : (r && r->loc[t]);
      const int pins = !held ? 0 : (kind == Kind::kKV ? e.kv_pins[t] : r->pins[t]);
      const int k = ++uses[n];
      if (pin && !held) return Code::kNotFound;
      if (pin && pins + k > 0xFFFF) return Code::kFailedPrecondition;
      if (!pin && pins - k < 0) return Code::kFailedPrecondition;
    }
    for (const auto& [n, k] : uses) {
      uint16_t& pins = kind == Kind::kKV ? e_[n].kv_pins[t]
                                         : const_cast<RefState*>(Record(e_[n], kind))->pins[t];
      pins = static_cast<uint16_t>(pin ? pins + k : pins - k);
    }
    return Code::kOk;
  }

  // Brute force: repeatedly the least (last use, deeper, hash) among the eligible, counting
  // picked children as gone for their parents.
  // Hybrid eviction: KV not needed first, then needed KV held elsewhere; states by score.
  std::pair<Code, std::vector<Victim>> PickVictims(Tier tier, Kind kind, size_t max_count,
                                                   VictimClass cls = VictimClass::kAny) {
    clock_ += 2;
    if (!ValidEnums(kind, tier)) return {Code::kInvalidArgument, {}};
    if (static_cast<uint8_t>(cls) > 2) return {Code::kInvalidArgument, {}};
    const int t = static_cast<int>(tier);
    if (kind == Kind::kWindowKV) return {Code::kOk, PickWindows(t, max_count, cls)};
    if (kind == Kind::kMamba && cls == VictimClass::kNotNeeded) return {Code::kOk, {}};
    const bool kv = kind == Kind::kKV;
    std::vector<int> tier_children(e_.size(), 0);
    if (kv) {
      for (size_t n = 0; n < e_.size(); ++n) {
        if (e_[n].present && e_[n].kv[t] && e_[n].parent != kNoNode) ++tier_children[e_[n].parent];
      }
    }
    std::vector<bool> picked(e_.size(), false);
    std::vector<Victim> out;
    // KV: class 1 (not needed) first, then class 2; states: one class.
    for (int want = 1; want <= 2; ++want) {
      if (kv && ((want == 1 && cls == VictimClass::kNeeded) ||
                 (want == 2 && cls == VictimClass::kNotNeeded))) {
        continue;
      }
      if (!kv && want == 2) break;
      while (out.size() < max_count) {
        int best = kNoNode;
        std::tuple<uint64_t, int64_t, PageHash> best_key;
        for (size_t n = 0; n < e_.size(); ++n) {
          const RefEntry& e = e_[n];
          if (!e.present || picked[n]) continue;
          uint64_t order;
          if (kv) {
            if (KvClass(static_cast<int>(n), t, tier_children[n]) != want) continue;
            order = e.last_use;
          } else {
            if (!e.state || !e.state->loc[t] || e.state_locks != 0 || e.state->pins[t] != 0) {
              continue;
            }
            order = HybridStates() ? std::bit_cast<uint64_t>(e.state->priority) : e.state->last_use;
          }
          const auto key = std::make_tuple(order, -int64_t{e.depth}, u_.hash[n]);
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
        if (!kv && HybridStates()) inflation_ = std::max(inflation_, e.state->priority);
      }
    }
    return {Code::kOk, out};
  }

  MatchResult Match(std::span<const PageHash> hashes) {
    MatchResult r;
    const uint64_t now = clock_ + 1;
    int prev = kNoNode, last_kv = kNoNode, last_state = kNoNode;
    bool kv_run = true;
    std::vector<int> ids;  // the KV-only prefix's entries
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
      ids.push_back(n);
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
    if (const size_t w = options_.window_pages; w > 0) {
      // The largest n whose window (and state, under the hybrid rule) is all there.
      r.reusable_pages = 0;
      last_state = kNoNode;
      for (size_t n = ids.size(); n > 0 && r.reusable_pages == 0; --n) {
        bool ok = !options_.require_mamba || e_[ids[n - 1]].state.has_value();
        for (size_t j = n - std::min(w, n); j < n && ok; ++j) ok = e_[ids[j]].window.has_value();
        if (ok) r.reusable_pages = n;
      }
      const size_t n = r.reusable_pages;
      r.window_first_page = n - std::min(w, n);
      for (size_t j = r.window_first_page; j < n; ++j) {
        r.window.push_back(ToLocations(e_[ids[j]].window->loc));
        e_[ids[j]].window->last_use = now;
      }
      if (n > 0) last_state = ids[n - 1];
    }
    r.checkpoint_hint_pages = r.kv_only_pages - r.kv_only_pages % options_.track_interval_pages;
    if (last_state != kNoNode && e_[last_state].state) {
      RefState& st = *e_[last_state].state;
      r.state = ToLocations(st.loc);
      st.last_use = now;
      if (HybridStates()) st.priority = Priority(e_[last_state].depth, ++st.hits, st.off_track);
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
      if (HybridStates()) {
        info.state_hits = e.state->hits;
        info.state_priority = e.state->priority;
      }
    }
    info.subtree_states = SubtreeStates(n);
    if (e.window) {
      info.window = ToLocations(e.window->loc);
      info.window_pins = e.window->pins;
      info.window_last_use = e.window->last_use;
    }
    std::tie(info.window_locks, info.window_anchors) = WindowSums(n);
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
  void Counts(uint64_t located[kNumKinds][kNumLocalTiers], uint64_t evictable[kNumKinds][kNumLocalTiers]) {
    std::vector<std::array<int, kNumLocalTiers>> tier_children(e_.size(), {0, 0, 0});
    for (const RefEntry& e : e_) {
      for (int t = 0; t < kNumLocalTiers; ++t) {
        if (e.present && e.kv[t] && e.parent != kNoNode) ++tier_children[e.parent][t];
      }
    }
    for (size_t n = 0; n < e_.size(); ++n) {
      const RefEntry& e = e_[n];
      if (!e.present) continue;
      for (int t = 0; t < kNumLocalTiers; ++t) {
        if (e.kv[t]) {
          ++located[0][t];
          if (KvClass(static_cast<int>(n), t, tier_children[n][t]) != 0) ++evictable[0][t];
        }
        if (e.state && e.state->loc[t]) {
          ++located[1][t];
          if (e.state_locks == 0 && e.state->pins[t] == 0) ++evictable[1][t];
        }
        if (e.window && e.window->loc[t]) {
          ++located[2][t];
          if (WindowClass(static_cast<int>(n), t) != 0) ++evictable[2][t];
        }
      }
    }
  }

 private:
  static const RefState* Record(const RefEntry& e, Kind kind) {
    const std::optional<RefState>& r = kind == Kind::kMamba ? e.state : e.window;
    return r ? &*r : nullptr;
  }
  // Adds the locks and anchors of n and its descendants `levels` - 1 levels below.
  void WalkDown(int n, uint32_t levels, std::pair<uint32_t, uint32_t>* sums) const {
    if (levels == 0) return;
    sums->first += e_[n].state_locks;
    sums->second += options_.require_mamba && e_[n].state ? 1 : 0;
    for (int c : kids_[n]) WalkDown(c, levels - 1, sums);
  }
  // Brute force: every evictable windowed KV in tier t, not needed first, then each group by
  // (last use, deeper, hash).
  std::vector<Victim> PickWindows(int t, size_t max_count, VictimClass cls) const {
    std::vector<std::tuple<int, uint64_t, int64_t, PageHash, int>> all;
    for (size_t n = 0; n < e_.size(); ++n) {
      if (!e_[n].present) continue;
      const int c = WindowClass(static_cast<int>(n), t);
      if (c == 0) continue;
      if ((cls == VictimClass::kNotNeeded && c != 1) || (cls == VictimClass::kNeeded && c != 2)) {
        continue;
      }
      all.emplace_back(c, e_[n].window->last_use, -int64_t{e_[n].depth}, u_.hash[n], int(n));
    }
    std::sort(all.begin(), all.end());
    std::vector<Victim> out;
    for (size_t k = 0; k < all.size() && k < max_count; ++k) {
      const RefEntry& e = e_[std::get<4>(all[k])];
      out.push_back(Victim{std::get<3>(all[k]), Kind::kWindowKV, static_cast<Tier>(t),
                           *e.window->loc[t], e.depth});
    }
    return out;
  }

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
    if (p != kNoNode) {
      ++children_[p];
      kids_[p].push_back(id);
    }
    ++live_;
    *added = id;
    return Code::kOk;
  }
  void Erase(int n) {
    if (const int p = e_[n].parent; p != kNoNode) {
      --children_[p];
      kids_[p].erase(std::find(kids_[p].begin(), kids_[p].end(), n));
    }
    e_[n] = RefEntry{};
    --live_;
  }

  const Universe& u_;
  const IndexOptions options_;
  std::vector<RefEntry> e_;
  std::vector<int> children_ = std::vector<int>(e_.size(), 0);
  std::vector<std::vector<int>> kids_ = std::vector<std::vector<int>>(e_.size());
  size_t live_ = 0;
  uint64_t clock_ = 0;
  double inflation_ = 0;  // hybrid eviction of states
};

}  // namespace cachepawl::index_model
