// ReplayEngine: a simulated serving engine over a Store, for `cachepawl replay`.
//
// The engine keeps its own L1 in the store-owned device pool (StoreOptions::device_pool_bytes,
// Store::AllocateDeviceSlot / FreeDeviceSlot / WriteDeviceRecord / ReadDeviceRecord): a map from
// page hash (and from (page hash, depth) for Mamba states) to device slot, with its own LRU.
// For each request it does what an engine does:
//
//   1. hashes the prompt (Store::HashTokens) and finds the longest prefix its L1 can serve under
//      the hybrid rule (KV pages 0..n-1 and, for layouts with SSM layers, a state at depth n;
//      for a pure SSM layout, whose pages hold no KV, the state alone);
//   2. Store::Lookup; when the store reaches further than L1: Lock, Load the missing pages (in
//      chunks of `chunk_pages`, the state with the last chunk) into slots it allocates;
//   3. verifies every byte of every reused page and state (loaded or from L1) against the
//      deterministic content of its key (replay_content.h);
//   4. "computes" the rest of the prompt: writes the pages' content into device slots, and a
//      state at every checkpoint (each multiple of `track_interval_pages` past the reused prefix,
//      and the end of the prompt's full pages), saving pages and state with Store::Save chunk
//      by chunk; pages that L1 served but the store lacks are saved too. A pure SSM layout saves
//      the state at each checkpoint and no pages (Store::Save with none); its reused prefixes
//      count their pages in the tier their state came from;
//   5. waits for its saves, then Unlock.
//
// A miss is not an error. Store calls that fail are counted (ReplayTotals::store_errors) and the
// request goes on as an engine would (recomputing what it could not load). Run() itself fails
// only when the device pool cannot hold even one page and one state of a chunk for a request
// alone; when other requests in flight hold the slots it needs, it waits for them, and when
// every request in flight waits for another's, it gives up its load or the rest of its prompt
// (counted in ReplayTotals::refused, not an error).
//
// Thread safety: Run may be called from several threads at once (`cachepawl replay
// --concurrency N` runs N engine threads, each taking the next request of the trace), each
// call with its own ReplayTotals. The L1 is shared (replay_l1.h): a slot one request is
// loading, writing or saving is pinned and never evicted or rewritten by another, the prefix
// a request found in L1 stays pinned until it has used it, a request never counts as a hit a
// page another is still filling, and two requests of one prefix in flight at once each load it
// into their own slots (each holds its own Store::Lock). Every reused byte is verified either
// way. With calls one at a time the engine decides exactly as it did single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "store/store.h"
#include "tools/replay/replay_l1.h"
#include "tools/replay/replay_report.h"
#include "tools/replay/replay_trace.h"
#include "vocab/status.h"

namespace cachepawl::tools {

struct ReplayEngineOptions {
  std::string ns;                      // namespace of every request
  uint32_t block_size_tokens = 512;    // tokens per trace block id
  uint32_t track_interval_pages = 32;  // Mamba checkpoints; 0: only at the end of each prompt
  size_t chunk_pages = 128;            // pages per Load / Save call
  bool verify_l1_hits = true;          // also verify pages and states L1 serves

  // InvalidArgument naming the field (block size must be a multiple of `page_size_tokens`).
  Status Validate(uint32_t page_size_tokens) const;
};

class ReplayEngine {
 public:
  // `store` must outlive the engine and have a store-owned device pool.
  static StatusOr<std::unique_ptr<ReplayEngine>> Create(Store* store,
                                                        const ReplayEngineOptions& options);
  ~ReplayEngine();
  ReplayEngine(const ReplayEngine&) = delete;
  ReplayEngine& operator=(const ReplayEngine&) = delete;

  // Replays one request; adds what it did to `*totals` (which also gets requests += 1).
  // Thread-safe; concurrent calls need distinct `totals`.
  Status Run(const TraceRequest& request, ReplayTotals* totals);

  // Device slots the engine's L1 holds now, per kind.
  uint64_t l1_resident(Kind kind) const;

 private:
  struct Pending;    // a Save whose fence has not been collected
  class RequestRun;  // the steps above for one request

  ReplayEngine(Store* store, const ReplayEngineOptions& options);

  Store* store_;
  ReplayEngineOptions options_;
  uint32_t page_size_ = 0;
  bool hybrid_ = false;
  bool kv_ = true;  // false for a pure SSM layout: pages hold no KV, a state is the whole prefix
  uint64_t page_bytes_ = 0, state_bytes_ = 0;
  // Sliding-window layers: a load reads their KV only for the last window_pages_ pages before
  // its depth; window_ranges_ is where their K/V lie in a device page (the rest of a page
  // loaded outside the window is the full-attention layers'). full_/window_record_bytes_: the
  // records the store keeps per page.
  uint32_t window_pages_ = 0;
  std::vector<RecordSegment> window_ranges_;
  uint64_t full_record_bytes_ = 0, window_record_bytes_ = 0;
  ReplayL1 l1_;
};

}  // namespace cachepawl::tools
