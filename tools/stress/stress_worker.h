// StressWorker: one engine thread of `cachepawl stress` (tools/stress/stress.h).
//
// It owns device slots of the store-owned pool (max_pages KV pages and one state slot), at most
// kMaxLocks locks, at most kMaxPrefetches prefetches and one Save whose fence it has not waited
// for (its slots are not reused before). Each step it picks an operation at random:
//
//   lookup     Lookup (or LookupHashes) of a random prefix of a random prompt; the answer is
//              checked against the prompt's hashes and the PrefixMatch invariants
//   lock       Lookup, then Lock of the reusable prefix (or of some cached pages); a Lookup of
//              exactly the locked pages afterwards says whether the lock holds a whole hit
//              ("strict": no Load of it may come back NotFound while the lock is held)
//   unlock     Unlock of a held lock (and, now and then, a second Unlock, which must be refused)
//   load       of a held lock's prefix, of a prefix locked for the Load, or of an unlocked match:
//              a random page range, with the state when it ends at the reusable depth; the
//              destination is poisoned first, and every byte compared after the fence fired
//   save       a random depth of a random prompt: its pages from the first one the store lacks
//              (or from page 0, or from a random page) and a state at that depth; the content is
//              written into the device slots first; the fence is waited for now or later
//   prefetch   StartPrefetch of a random match (cancelled at once now and then)
//   cancel     Cancel of an outstanding prefetch
//   fence wait on the pending Save or a prefetch, by Wait, StreamWait, polling Ready,
//              OnComplete or per-layer WaitLayer; a prefetched match is then Loaded half the time
//   stats      Store::Stats
//
// Errors that races allow are counted per operation and code (StressTotals::allowed_errors);
// everything else is an unexpected error.
//
// Thread safety: a worker is used by one thread at a time; its heartbeat is read by the watchdog.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/store.h"
#include "tools/replay/replay_rng.h"
#include "tools/stress/stress_prompts.h"
#include "tools/stress/stress_stream.h"
#include "tools/stress/stress_watchdog.h"

namespace cachepawl::tools {

// What the workers need to know about the layout.
struct StressShape {
  uint32_t page_size = 16;
  bool kv = true;   // attention layers: pages hold KV
  bool ssm = true;  // SSM layers: states
  uint32_t window_pages = 0;
  uint64_t page_bytes = 0, state_bytes = 0;  // device records
  size_t attention_layers = 0;
  std::vector<RecordSegment> window_ranges;  // windowed layers' K and V inside a device page
  uint64_t host_bytes = 0, disk_bytes = 0;   // the tiers' budgets (Stats are checked against)

  static StressShape Of(const ModelLayout& layout, uint64_t host_bytes, uint64_t disk_bytes);
};

// What one worker found; summed over the workers for the report.
struct StressTotals {
  uint64_t load_misses = 0;
  uint64_t strict_locked_loads = 0;
  std::map<std::string, uint64_t> allowed_errors;
  uint64_t unexpected_errors = 0;
  std::vector<std::string> unexpected_seen;
  uint64_t records_verified = 0, bytes_verified = 0;
  uint64_t wrong_records = 0, wrong_bytes = 0;
  std::vector<std::string> wrong_seen;

  void Merge(const StressTotals& other);
};

class StressWorker {
 public:
  static constexpr size_t kMaxLocks = 2;
  static constexpr size_t kMaxPrefetches = 4;

  // `store`, `prompts`, `shape` and `beat` must outlive the worker.
  StressWorker(Store* store, const StressPrompts* prompts, const StressShape* shape, uint32_t id,
               uint64_t seed, StressHeartbeat* beat);
  ~StressWorker();
  StressWorker(const StressWorker&) = delete;
  StressWorker& operator=(const StressWorker&) = delete;

  // Takes the worker's device slots and, in GPU mode, its stream. NoSpace naming --device-bytes
  // when the pool is too small.
  Status Init(uint32_t max_pages, bool gpu);
  // Random operations until `stop`, or `max_ops` of them (0: no limit). `stuck_first`: the
  // watchdog test's hook (StressOp::kStuck).
  void Run(const std::atomic<bool>& stop, uint64_t max_ops, bool stuck_first);
  // Waits for the worker's fences, releases its locks and device slots.
  void Finish();

  const StressTotals& totals() const { return totals_; }

 private:
  struct HeldLock {
    PrefixLock lock;
    PrefixMatch match;  // Lookup of exactly the locked pages, after the lock
    bool strict = false;
  };
  struct PendingPrefetch {
    std::shared_ptr<Store::Prefetch> prefetch;
    PrefixMatch match;
    bool cancelled = false;
  };

  void Step();
  void DoLookup();
  void DoLock();
  void DoUnlock();
  void DoLoad();
  void DoSave();
  void DoPrefetch();
  void DoCancel();
  void DoFenceWait();
  void DoStats();

  // A checked Lookup of the first `pages` pages of `prompt`; nullopt after an unexpected error.
  std::optional<PrefixMatch> LookupChecked(const StressPrompt& prompt, size_t pages);
  // Lock of `pages` pages of `match` and the Lookup that says whether it is strict; nullopt
  // when the Lock was refused (counted).
  std::optional<HeldLock> LockChecked(const PrefixMatch& match, size_t pages);
  void UnlockChecked(HeldLock& held);
  // Loads a random range of `match` (a whole hit when `strict`), verifies every byte.
  void LoadAndVerify(const PrefixMatch& match, bool strict);
  void VerifyPage(const PageHash& hash, uint64_t slot, bool window_loaded);
  void VerifyState(const PageHash& last_page, uint64_t depth_tokens, uint64_t slot);
  void CountWrong(uint64_t wrong, uint64_t bytes, const std::string& what);
  // Waits for `fence` by a method picked at random. `gpu_side`: it may carry a GPU signal.
  Status WaitFence(const Fence& fence, bool gpu_side);
  void CollectSave();
  void WaitPrefetch(size_t i);

  // `status` (not OK) from `call`: allowed under races (counted) or unexpected.
  void Refused(const char* call, const Status& status, bool allowed);
  void Unexpected(const std::string& what);

  Store& store_;
  const StressPrompts& prompts_;
  const StressShape& shape_;
  const uint32_t id_;
  SplitMix64 rng_;
  StressHeartbeat& beat_;
  StressStream stream_;
  std::vector<uint64_t> page_slots_;
  std::optional<uint64_t> state_slot_;
  std::vector<HeldLock> locks_;
  std::deque<PendingPrefetch> prefetches_;
  std::optional<Fence> pending_save_;
  std::vector<std::byte> record_, expected_, poison_page_, poison_state_;
  StressTotals totals_;
};

}  // namespace cachepawl::tools
