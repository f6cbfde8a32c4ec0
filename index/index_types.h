// The values the prefix index takes and returns: its options, where an entry lives in each
// tier, the answer of a lookup, eviction victims, and counters. See index/prefix_index.h.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "vocab/page_hash.h"
#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {

// The largest number of pages one index can hold (entries are named by 32-bit indices).
inline constexpr uint64_t kMaxIndexPages = (uint64_t{1} << 32) - 2;
// The largest IndexOptions::window_pages: the longest chain the index holds.
inline constexpr uint32_t kMaxWindowPages = (1u << 24) - 1;

struct IndexOptions {
  // True when the model has SSM layers: a prefix is then reusable only up to a page that has a
  // Mamba state (the hybrid rule). False for attention-only layouts: reusable == KV-only.
  bool require_mamba = false;
  // False for layouts without attention layers (pure SSM, e.g. Mamba-2): pages carry no KV
  // payload. The chain still names prefixes, so a page counts as present (in kv_only_pages and
  // under the hybrid rule) as soon as the index has it under the right parent; no tier ever
  // holds its KV (SetLocation of Kind::kKV is refused) and MatchResult::pages stays empty. The
  // caller removes entries whose subtree holds no state (see PrefixIndex::Remove). Requires
  // require_mamba, unless window_pages > 0 (every attention layer has a sliding window: the
  // prefix is then reusable by its windowed KV).
  bool kv_payload = true;
  // Pages of windowed KV (Kind::kWindowKV: the K/V of the sliding-window attention layers) a
  // reusable prefix of n pages needs before its end: pages max(0, n - W) .. n-1, W =
  // ceil(window tokens / page size). 0: the layout has no windowed layers, and SetLocation and
  // PinForTransfer of Kind::kWindowKV are refused. At most 16,777,215 (the longest chain).
  uint32_t window_pages = 0;
  // The engine saves a Mamba state every `track_interval_pages` pages while it decodes or
  // recomputes; MatchResult::checkpoint_hint_pages is rounded down to a multiple of it. >= 1.
  uint32_t track_interval_pages = 1;
  // Pre-sizes the hash table and the entry storage (no rehash below this many pages).
  uint64_t expected_pages = 0;
  // Inserts beyond this many pages fail with NoSpace. 1 .. kMaxIndexPages.
  uint64_t max_pages = kMaxIndexPages;
  // Bytes of one KV page / one Mamba state in any tier; only used for byte counters and
  // PickVictimsForBytes (0 = unknown).
  uint64_t kv_page_bytes = 0;
  uint64_t mamba_state_bytes = 0;
  uint64_t window_page_bytes = 0;  // one page of windowed KV (Kind::kWindowKV)

  // Hybrid eviction (PrefixIndex, "Eviction"): prefix units and value per byte. False: every
  // kind least recently used first, as before it existed.
  bool hybrid_eviction = false;
  // What a reuse of a state at depth d pages saves, in any unit (the Store uses prefill FLOPs):
  //   value(d) = state_value_per_page * d + state_value_per_page_squared * d * d
  // and the bytes it needs: mamba_state_bytes + d * kv_page_bytes (with KV payload) +
  // min(d, window_pages) * window_page_bytes. Its score is value(d) / bytes(d) per hit. Both
  // >= 0 and finite, not both 0 (when hybrid_eviction).
  double state_value_per_page = 1.0;
  double state_value_per_page_squared = 0.0;

  // value(d) / bytes(d) of a state at depth d pages, as defined above (bytes(d) taken as at
  // least 1). The one definition: the index scores states with it and its model test reuses it.
  double StateValuePerByte(uint32_t depth) const {
    const double d = depth;
    const double value = state_value_per_page * d + state_value_per_page_squared * d * d;
    double bytes = static_cast<double>(mamba_state_bytes);
    if (kv_payload) bytes += d * static_cast<double>(kv_page_bytes);
    bytes +=
        static_cast<double>(std::min(depth, window_pages)) * static_cast<double>(window_page_bytes);
    return value / std::max(bytes, 1.0);
  }

  // InvalidArgument naming the field and value at fault.
  Status Validate() const;
};

// Where one KV page, one page of windowed KV or one Mamba state is held: a bit per tier and that
// tier's slot (host slot id, disk extent id or device page index; any 64-bit value).
struct TierLocations {
  uint8_t mask = 0;                             // bit (1 << tier) set when the tier holds it
  std::array<uint64_t, kNumLocalTiers> slot{};  // meaningful only where `mask` has the tier's bit

  bool empty() const { return mask == 0; }
  bool Has(Tier tier) const { return (mask >> static_cast<int>(tier)) & 1; }
  std::optional<uint64_t> Slot(Tier tier) const {
    if (!Has(tier)) return std::nullopt;
    return slot[static_cast<int>(tier)];
  }
  // The fastest tier that holds it (Device, then Host, then Disk); nullopt when none does.
  std::optional<Tier> Fastest() const;

  friend bool operator==(const TierLocations& a, const TierLocations& b);
};

// The answer of PrefixIndex::Match for hashes h[0..n).
struct MatchResult {
  // The longest prefix reusable under the hybrid rule: KV pages 0..reusable_pages-1 each held
  // by some tier and, when IndexOptions::require_mamba, a Mamba state after page
  // reusable_pages-1 (depth exactly reusable_pages * page_size tokens) held by some tier.
  // With windowed layers (IndexOptions::window_pages W > 0) also the windowed KV of pages
  // max(0, n - W) .. n-1 (n = reusable_pages) each held by some tier: the largest such
  // n <= kv_only_pages (without require_mamba, not necessarily kv_only_pages itself).
  size_t reusable_pages = 0;
  // The longest prefix whose KV pages are each held by some tier (>= reusable_pages). Without
  // KV payload (IndexOptions::kv_payload false): the longest prefix the index has, as
  // indexed_pages.
  size_t kv_only_pages = 0;
  // kv_only_pages rounded down to a multiple of IndexOptions::track_interval_pages: the depth
  // at which the engine should save a Mamba state while it recomputes, so that the next
  // request sharing this prefix hits.
  size_t checkpoint_hint_pages = 0;
  // The longest prefix known to the index at all, held by a tier or not (>= kv_only_pages):
  // pages past kv_only_pages up to here are inserted but not (yet) located anywhere.
  size_t indexed_pages = 0;
  // Where each page of the KV-only prefix is: kv_only_pages elements; none without KV payload
  // (no page is held by any tier).
  std::vector<TierLocations> pages;
  // Where the Mamba state after page reusable_pages-1 is; empty when reusable_pages is 0 or no
  // tier holds one there (always the case for a miss under require_mamba).
  TierLocations state;
  // Where the windowed KV of pages window_first_page .. reusable_pages-1 is, in page order:
  // min(W, reusable_pages) elements (each held by some tier); empty when W is 0 or
  // reusable_pages is 0. window_first_page == reusable_pages - window.size().
  std::vector<TierLocations> window;
  size_t window_first_page = 0;

  void Clear();
};

// Which eviction candidates PrefixIndex::PickVictims considers (hybrid eviction).
enum class VictimClass : uint8_t {
  kAny = 0,
  // KV pages and windowed KV that no cached state can use (under the hybrid rule): evicting
  // them loses no reusable prefix. States: none.
  kNotNeeded = 1,
  // KV pages and windowed KV a cached state needs (held by another tier too); all states.
  kNeeded = 2,
};

// One eviction victim: `kind` of `hash` may leave `tier`, whose slot is `slot`.
struct Victim {
  PageHash hash;
  Kind kind = Kind::kKV;
  Tier tier = Tier::kHost;
  uint64_t slot = 0;
  uint32_t depth_pages = 0;

  friend bool operator==(const Victim&, const Victim&) = default;
};

// A copy of one entry, for tests, tools and the Store's own checks.
struct EntryInfo {
  PageHash hash;
  std::optional<PageHash> parent;  // nullopt for the first page of a chain
  uint32_t depth_pages = 0;        // 1 for the first page of a chain
  TierLocations kv;
  TierLocations state;       // the Mamba state after this page
  uint32_t children = 0;     // entries whose parent this is
  uint32_t kv_locks = 0;     // engine locks on this page or a descendant
  uint32_t state_locks = 0;  // engine locks on exactly this node (its Mamba state)
  std::array<uint16_t, kNumLocalTiers> kv_pins{};
  std::array<uint16_t, kNumLocalTiers> state_pins{};
  uint64_t kv_last_use = 0;     // recency clock value of the last use (see prefix_index.h)
  uint64_t state_last_use = 0;  // 0 when there is no state
  // Hybrid eviction: Match hits of the state since it was attached, and its eviction priority
  // (the GreedyDual-Size-Frequency score: smaller leaves first); 0 otherwise.
  uint32_t state_hits = 0;
  double state_priority = 0;
  // Hybrid eviction of KV (require_mamba layouts with KV payload): entries with a state in
  // some tier among this one and its descendants. The KV page is needed while this is > 0.
  uint32_t subtree_states = 0;
  TierLocations window;  // this page's windowed KV (Kind::kWindowKV)
  // Engine locks on this page or on a descendant at most window_pages - 1 levels below it.
  uint32_t window_locks = 0;
  // Entries holding a Mamba state (in some tier) among this one and its descendants at most
  // window_pages - 1 levels below (require_mamba layouts only): the windowed KV is needed when
  // this is > 0.
  uint32_t window_anchors = 0;
  std::array<uint16_t, kNumLocalTiers> window_pins{};
  uint64_t window_last_use = 0;  // 0 when no tier holds the windowed KV

  friend bool operator==(const EntryInfo&, const EntryInfo&) = default;
};

// Counters and sizes. Every error path of the index has a counter here.
struct IndexStats {
  uint64_t entries = 0;  // indexed pages
  uint64_t states = 0;   // entries with a Mamba state in some tier
  uint64_t windows = 0;  // entries with windowed KV in some tier
  // [kind][tier]: entries (kKV, kWindowKV) or states (kMamba) held by the tier.
  std::array<std::array<uint64_t, kNumLocalTiers>, kNumKinds> located{};
  // located * IndexOptions::kv_page_bytes / mamba_state_bytes / window_page_bytes.
  std::array<std::array<uint64_t, kNumLocalTiers>, kNumKinds> located_bytes{};
  // [kind][tier]: how many PickVictims could return right now (unlocked, unpinned, and for KV
  // no child in the same tier, for windowed KV not needed or held by another tier too).
  std::array<std::array<uint64_t, kNumLocalTiers>, kNumKinds> evictable{};
  uint64_t locked_entries = 0;  // entries with kv_locks > 0
  uint64_t memory_bytes = 0;    // heap bytes the index's own structures reserve

  uint64_t matches = 0;      // Match calls
  uint64_t match_pages = 0;  // pages over all Match calls' kv_only_pages

  // Error paths.
  uint64_t err_bad_enum = 0;         // a Kind or Tier value out of range
  uint64_t err_bad_hash = 0;         // the all-zero hash given as a page
  uint64_t err_unknown_hash = 0;     // a page that is not in the index
  uint64_t err_parent_missing = 0;   // InsertKv under a parent that is not in the index
  uint64_t err_parent_conflict = 0;  // InsertKv of a known page under another parent
  uint64_t err_not_located = 0;      // clear/pin of a location the tier does not hold
  uint64_t err_slot_conflict = 0;    // SetLocation over another slot of the same tier
  uint64_t err_locked = 0;           // clear/remove of a locked entry
  uint64_t err_pinned = 0;           // clear of a pinned location
  uint64_t err_not_locked = 0;       // Unlock without a matching Lock
  uint64_t err_not_pinned = 0;       // Unpin without a matching pin
  uint64_t err_remove_busy = 0;      // Remove of an entry still located or with children
  uint64_t err_overflow = 0;         // a lock, pin or depth counter at its limit
  uint64_t err_full = 0;             // insert beyond IndexOptions::max_pages
  uint64_t err_bytes_unknown = 0;    // PickVictimsForBytes without a per-entry size
  uint64_t err_no_kv_payload = 0;    // SetLocation of KV in an index without KV payload
  uint64_t err_no_window = 0;  // SetLocation/PinForTransfer of windowed KV with window_pages 0
};

}  // namespace cachepawl
