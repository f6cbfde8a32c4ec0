// RemoteReader: the Store's reads of the remote tier (tiers/remote_tier.h). ExtendMatch is a
// Lookup's look past the local match: one existence batch, within the lookup deadline (an
// unreachable cluster is a miss), turned into the pages, windowed KV and state the match may use
// from the cluster under the hybrid rule. Get reads records into host slots, verified by the
// tier; the store runs each Load's or Prefetch's fetch on the reader threads (Post), so one slow
// fetch does not hold the others, and publishes what arrived itself.
//
// Thread safety: every method may be called from any thread, without the store's mutex (none is
// needed: the reader holds no state of the store's).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "store/store.h"
#include "store/task_queue.h"
#include "tiers/remote_tier.h"
#include "vocab/model_layout.h"

namespace cachepawl {

class RemoteReader {
 public:
  struct Options {
    uint32_t threads = 4;                           // RemoteOptions::reader_threads
    std::chrono::milliseconds lookup_deadline{20};  // RemoteOptions::lookup_deadline_ms
    uint32_t track_interval_pages = 1;              // the checkpoint hint's rounding
  };
  // The fastest local tier holding `kind` of page `hash`, if any (the index; no lock).
  using LocalTier = std::function<std::optional<Tier>(const PageHash& hash, Kind kind)>;

  // `remote` and `layout` must outlive this object.
  RemoteReader(RemoteTier* remote, const ModelLayout* layout, const Options& options)
      : remote_(remote),
        layout_(layout),
        options_(options),
        readers_(std::make_unique<TaskQueue>(options.threads)) {}

  // Extends `m`, a local match over all of `m.hashes`, with what the cluster holds past it:
  // KV pages (Tier::kRemote in page_tiers, kv_only_pages), and the deepest reusable depth past
  // the local one whose state and window are in some tier (reusable_pages, state_tier,
  // window_first_page, window_tiers); the checkpoint hint follows. Returns the reusable pages
  // it added.
  size_t ExtendMatch(PrefixMatch& m, const LocalTier& local_tier) const;
  // Reads records into the host slots given (RemoteTier::Get): per record OK, NotFound (missing
  // or dropped after failing verification), or the transport's error. Blocks on the cluster.
  std::vector<Status> Get(std::span<const RemoteGet> gets) const { return remote_->Get(gets); }
  // Runs `fetch` on a reader thread.
  void Post(std::function<void()> fetch) { readers_->Post(std::move(fetch)); }
  // Runs the fetches posted to their ends and joins the threads. Idempotent.
  void Stop() { readers_.reset(); }

 private:
  RemoteTier* const remote_;
  const ModelLayout* const layout_;
  const Options options_;
  std::unique_ptr<TaskQueue> readers_;
};

}  // namespace cachepawl
