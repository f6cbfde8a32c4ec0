// The records of PrefixIndex's entries (index/prefix_index.h) and the constants that describe
// them: the part of its internals (index/prefix_index_internal.h) that is data, not method.
// Nothing outside index/ includes it, except the index's unit tests (tests/index/).
//
// Layout. Entries are named by 32-bit indices and live in two ChunkedArrays (never moved): a
// 64-byte aligned hot part with everything Match reads (one cache line per page) and a 32-byte
// cold part; a PageTable maps a hash to its index. An EntryAllocator hands out the
// indices so that a chain grown page by page, even interleaved with other chains (pages inserted as
// requests decode), has consecutive indices inside aligned blocks of 16: Match then predicts
// most pages' entries from the previous page's and reads the table about once per block (see
// index/chain_finder.h). A KV location is kept inline as a 32-bit slot;
// slots that do not fit (>= 0xFFFFFFFF) go to a side map keyed by (index, tier). Mamba states
// are few and large, so they live in their own slab with full 64-bit slots, named by the
// entry's `state` index. Windowed KV (Kind::kWindowKV, only when IndexOptions::window_pages W
// > 0) lives in a slab of the same records, named by a WindowEntry per entry (a third array,
// with the window's counters, allocated only for windowed layouts), so an index without
// windowed layers pays nothing for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "index/chunked_array.h"
#include "index/entry_allocator.h"
#include "index/index_allocator.h"
#include "index/page_table.h"
#include "index/victim_queue.h"
#include "vocab/page_hash.h"
#include "vocab/status.h"
#include "vocab/types.h"

namespace cachepawl {
namespace prefix_index_internal {

using index_internal::ChunkedArray;
using index_internal::EntryAllocator;
using index_internal::HashOrderKey;
using index_internal::IndexAllocator;
using index_internal::PageTable;
using index_internal::VictimItem;
using index_internal::VictimQueue;

inline constexpr uint32_t kNone = 0xFFFFFFFFu;
// (The hot part's 64 bytes, the cold part's 32 and the table's slots: ~118 bytes per page;
// windowed layouts add a WindowEntry, hybrid eviction of KV a subtree count.)
inline constexpr uint32_t kSpilledSlot = 0xFFFFFFFFu;  // the slot is in Impl::spilled
inline constexpr uint8_t kPickedBit = 1u << 3;         // scratch mark during one PickVictims
inline constexpr uint16_t kMaxPins = 0xFFFF;
inline constexpr uint32_t kMaxCount = 0xFFFFFFFFu;
inline constexpr uint32_t kMaxDepth = (1u << 24) - 1;  // HotEntry::depth is 24 bits
inline constexpr int kKv = static_cast<int>(Kind::kKV);
inline constexpr int kMamba = static_cast<int>(Kind::kMamba);
inline constexpr int kWindow = static_cast<int>(Kind::kWindowKV);
// Victim queues: one per kind (kKv: KV not needed, or every KV page without hybrid eviction;
// kMamba; kWindow: windowed KV not needed) and one each for needed KV and needed windowed KV
// that another tier holds too.
inline constexpr int kWindowQ = kWindow;
inline constexpr int kNeededWindowQ = kNumKinds;
inline constexpr int kNeededKvQ = kNumKinds + 1;
inline constexpr int kNumQueues = kNumKinds + 2;
// The kind whose entries queue q holds.
inline constexpr int KindOfQueue(int q) {
  return q == kNeededKvQ ? kKv : q == kNeededWindowQ ? kWindow : q;
}
// The queue of kind k's candidates that are needed (kNeeded) or not (kNotNeeded).
inline constexpr int QueueOf(int kind, bool needed) {
  if (kind == kKv) return needed ? kNeededKvQ : kKv;
  if (kind == kWindow) return needed ? kNeededWindowQ : kWindowQ;
  return kind;
}
// Hits counted in a state's hybrid score at most (so that an old favourite ages out).
inline constexpr uint32_t kMaxScoredHits = 32;
// A state's flag (hybrid eviction): attached at a depth engines rarely resume from, neither a
// multiple of the track interval nor the end of a prompt (the entry had children then). Its
// score counts kOffTrackWeight of its value.
inline constexpr uint8_t kOffTrackBit = 1u << 7;
inline constexpr double kOffTrackWeight = 0.25;
// Queues may hold this many items beyond twice the evictable count before a rebuild.
inline constexpr size_t kQueueSlack = 1024;

inline constexpr uint8_t Bit(int tier) { return static_cast<uint8_t>(1u << tier); }
// The `queued` bit of queue q and tier t in an entry's (KV queues) or a record's flags.
inline constexpr uint8_t QueuedBit(int q, int tier) {
  return static_cast<uint8_t>(Bit(tier) << (q == kNeededWindowQ || q == kNeededKvQ ? 4 : 0));
}
// How a KV page or windowed KV stands in a tier for eviction.
enum EvictClass : uint8_t { kNotEvictable = 0, kUnneeded = 1, kNeededCopied = 2 };

// An entry is two parts at the same index. The hot part is what Match reads: one aligned cache
// line. The cold part is the bookkeeping of mutations and eviction.
struct alignas(64) HotEntry {
  PageHash hash;
  std::atomic<uint64_t> last_use{0};  // written by Match under the shared lock
  uint32_t parent = kNone;
  uint32_t state = kNone;  // index into Impl::states
  uint32_t kv_slot[kNumLocalTiers] = {};
  uint32_t depth : 24 = 0;  // pages from the root, 1 for a first page; 0 marks a free entry
  uint32_t kv_mask : 8 = 0;
};
static_assert(sizeof(HotEntry) == 64, "the hot part of an entry is one cache line");

struct ColdEntry {
  uint32_t tier_children[kNumLocalTiers] = {};  // children whose KV the tier holds
  uint32_t children = 0;
  uint32_t kv_locks = 0;
  uint32_t state_locks = 0;
  uint16_t kv_pins[kNumLocalTiers] = {};
  // QueuedBit(kKv, tier), QueuedBit(kNeededKvQ, tier): queued in that KV queue; kPickedBit.
  uint8_t flags = 0;
};
static_assert(sizeof(ColdEntry) == 32, "two cold parts per cache line; an entry is 96 bytes");

// Windowed KV bookkeeping of an entry, only for layouts with windowed layers (Core::win).
struct WindowEntry {
  uint32_t record = kNone;  // index into Core::windows: this page's windowed KV
  uint32_t locks = 0;       // sum of state_locks at this entry and W-1 levels below
  uint32_t anchors = 0;     // entries with a state at this entry and W-1 levels below
};

// A Mamba state (Core::states) or one page's windowed KV (Core::windows).
struct State {
  std::atomic<uint64_t> last_use{0};  // written by Match under the shared lock
  // Hybrid eviction of states: hits since attached and the score (a non-negative double's bits,
  // which order as the doubles do), written by Match under the shared lock.
  std::atomic<uint32_t> hits{0};
  std::atomic<uint64_t> priority{0};
  uint64_t slot[kNumLocalTiers] = {};
  uint32_t entry = kNone;
  uint16_t pins[kNumLocalTiers] = {};
  uint8_t mask = 0;
  // QueuedBit(queue, tier): queued in that queue (kMamba; kWindowQ, kNeededWindowQ);
  // kPickedBit.
  uint8_t flags = 0;
};

// The PageTable's view of the entries: the hash stored at an index.
struct EntryKeys {
  const ChunkedArray<HotEntry, 16>* hot;
  const PageHash& operator()(uint32_t i) const { return (*hot)[i].hash; }
};

inline std::string Describe(const PageHash& h) { return "page " + h.ToHex(); }

inline Status CheckKindTier(Kind kind, Tier tier) {
  if (!IsValidKind(static_cast<uint8_t>(kind))) {
    return Status::InvalidArgument("kind: " + std::to_string(static_cast<int>(kind)) +
                                   " (expected 0..2)");
  }
  if (!IsValidTier(static_cast<uint8_t>(tier))) {
    return Status::InvalidArgument("tier: " + std::to_string(static_cast<int>(tier)) +
                                   " (expected 0..2)");
  }
  return Status::OK();
}

// The IndexOptions field UnitBytes reads, per kind.
inline constexpr const char* kUnitBytesField[kNumKinds] = {
    "index.kv_page_bytes", "index.mamba_state_bytes", "index.window_page_bytes"};

inline std::string Where(Kind kind, Tier tier) {
  return std::string(KindName(kind)) + " in " + std::string(TierName(tier));
}

}  // namespace prefix_index_internal
}  // namespace cachepawl
