// Store: the API a serving engine links against (docs/DESIGN.md, "The life of a prefix").
//
//   auto store = Store::Open(options);                         // host (+ disk) tiers, transfers
//   auto match = store->Lookup(ns, tokens);                    // hybrid-rule prefix match
//   auto lock  = store->Lock(*match);                          // keep it from eviction
//   auto fence = store->Load(*match, device_pages, state_slot); // disk->host->device, one fence
//   fence->StreamWait(engine_stream);                          // no CPU thread blocks
//   ... prefill the rest ...
//   store->Save({ns, tokens, new_device_pages, state_slot, depth});  // device->host(->disk)
//   store->Unlock(*lock);
//
// Thread safety: every method may be called from several engine threads at once. Fences fire
// on the store's own threads. Errors: every method returns a Status naming the argument and
// value at fault; no method throws. A miss is not an error (reusable_pages == 0).
//
// Tensor-parallel groups (a layout with tp_size N > 1): one store holds every rank's share of an
// entry in one record; Save and Load move one rank's share (the rank of the layout the store was
// opened or attached with, layout().tp_rank, unless SaveRequest::tp_rank or LoadOptions::tp_rank
// names another); an entry is a hit (and evictable, and written on) only once every rank's share
// was saved (docs/DESIGN.md, "Tensor-parallel entries"). Ranks that hold equal bytes of a kind
// (MLA latent KV, KV heads replicated across ranks: ModelLayout::TpShares) share one copy of it
// in the tiers: the first of them to save it copies it there (the others' Saves of it copy
// nothing, but count; the last rank copies again when no copy would be in flight to publish the
// entry), and each of them loads it from there. A process
// attached with rank r's layout moves rank r's shares only (one process, one GPU, one rank, as
// the engines run).
//
// Pure SSM layouts (no attention layers, e.g. Mamba-2). The page hash chain still names every
// prefix, but a page holds no KV: an entry is a link of the chain, and a prefix of n pages is
// reusable when a state of depth exactly n * page_size exists (the chain leading to it always
// does: a state never stays without its chain, and a chain goes with its last state). The
// engine passes no device pages anywhere: Save takes `tokens` (or `hashes`) covering at least
// the state's depth, an empty `device_pages`, the state slot and `state_depth_tokens`; Load takes
// the match, an empty `device_pages` and the state slot, and loads the state at
// match.reusable_pages (see Load for how a depth is asked for and refused).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/attach_options.h"
#include "vocab/fence.h"
#include "vocab/page_hash.h"
#include "vocab/status.h"
#include "vocab/store_options.h"
#include "vocab/store_stats.h"

namespace cachepawl {

struct DevicePoolDescription;  // vocab/device_pool.h

// The answer to a Lookup. Valid until the entries it names are evicted: Lock() it, or Load()
// it at once (Load re-checks and fails with NotFound when something has gone meanwhile).
struct PrefixMatch {
  std::vector<PageHash> hashes;  // every full page of the lookup, in order
  uint32_t page_size_tokens = 0;
  // Pages reusable under the hybrid rule: KV pages 0..n-1 in some tier and (layouts with SSM
  // layers) a Mamba state of depth exactly n * page_size_tokens in some tier. Pure SSM: the
  // depth of the deepest state along the lookup's chain.
  size_t reusable_pages = 0;
  // Longest prefix whose KV pages exist, state or not. Pure SSM (no KV): the longest prefix the
  // store knows (pages leading to a cached state, maybe beyond reusable_pages where prompts
  // branched), so kv_only_pages > reusable_pages says where saving a state would have helped.
  size_t kv_only_pages = 0;
  size_t checkpoint_hint_pages = 0;  // kv_only_pages rounded down to the track interval
  // Fastest tier of each of the first kv_only_pages pages; empty for pure SSM (no page is held).
  // Tier::kRemote for pages only the remote tier holds (Load and StartPrefetch fetch them).
  std::vector<Tier> page_tiers;
  std::optional<Tier> state_tier;  // fastest tier of the state at reusable_pages (if any)
  // Layouts with sliding-window layers: their KV is needed only for the last
  // layout.WindowPages() pages before a reused depth. window_tiers[i] is the fastest tier of
  // the windowed KV of page window_first_page + i; the pages [window_first_page,
  // reusable_pages) are all there is (empty without windowed layers or without a hit).
  size_t window_first_page = 0;
  std::vector<Tier> window_tiers;

  uint64_t reusable_tokens() const { return uint64_t{reusable_pages} * page_size_tokens; }
};

// An engine lock on the first `pages` pages of a match (and the state at that depth, and the
// windowed KV of the last layout.WindowPages() pages before it).
struct PrefixLock {
  std::vector<PageHash> hashes;
  bool with_state = false;
  bool released = false;
};

struct LoadOptions {
  // The engine already holds pages [0, first_page). Pure SSM: the depth in pages of the state
  // the engine asks for (0: the match's, reusable_pages); see Store::Load.
  size_t first_page = 0;
  bool per_layer_fences = false;  // one sub-fence per attention layer (GPU mode; none: 0)
  // Tensor-parallel group stores (layout tp_size > 1): the rank whose share this Load copies
  // into the device pool (< tp_size). Unset: the store's own, layout().tp_rank.
  std::optional<uint32_t> tp_rank;
};

struct SaveRequest {
  std::string_view ns;                     // namespace (tenant); part of the hash chain
  std::span<const uint32_t> tokens;        // the prompt so far; or, instead, `hashes`
  std::span<const PageHash> hashes;        // precomputed page hashes (engine-computed chain)
  size_t first_page = 0;                   // pages [first_page, first_page + device_pages.size())
  std::span<const uint64_t> device_pages;  // empty for a pure SSM layout (no KV)
  std::optional<uint64_t> device_state_slot;  // a Mamba state to save, taken at...
  uint64_t state_depth_tokens = 0;            // ...this depth (a multiple of the page size)
  // Tensor-parallel group stores (layout tp_size > 1): the rank whose share this Save copies
  // (< tp_size). Unset: the store's own, layout().tp_rank. An entry becomes a hit once every
  // rank saved its share.
  std::optional<uint32_t> tp_rank;
};

class Store {
 public:
  // Opens (or creates) a store. Disk tier: reopens the catalog and serves its records again.
  static StatusOr<std::unique_ptr<Store>> Open(const StoreOptions& options);
  // Opens a store as Open does, as the owner of a store other processes of the node attach to
  // (docs/EMBEDDING.md, "One store for an engine's processes"): the host tier in shared memory,
  // a server on serve.socket_path. This process uses the store as an Open one; Close ends the
  // attached processes' sessions first. Errors: Open's, serve's fields (InvalidArgument), Busy
  // when an owner already serves on the socket.
  static StatusOr<std::unique_ptr<Store>> Serve(const StoreOptions& options,
                                                const ServeOptions& serve);
  // Attaches to the owner serving on options.socket_path: the same API, the owner's index and
  // tiers, this process's copy engines (see the header of ipc/attached_store.h for what happens
  // when the owner goes). Errors: Unavailable (no owner there, or it does not answer),
  // FailedPrecondition (refused: another Unix user), Incompatible (refused: another build's
  // protocol, or another layout than options' expected one), InvalidArgument (options).
  static StatusOr<std::unique_ptr<Store>> Attach(const AttachOptions& options);
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual const ModelLayout& layout() const = 0;
  // True when transfers use a GPU; false in CPU mode (device pools in host memory). Before a
  // device pool is registered: whether one on a GPU would be used as such.
  virtual bool gpu_mode() const = 0;

  // Page hashes of every full page of `tokens` under namespace `ns`.
  virtual std::vector<PageHash> HashTokens(std::string_view ns,
                                           std::span<const uint32_t> tokens) const = 0;

  // The longest reusable prefix (see PrefixMatch). Refreshes recency along the path.
  virtual StatusOr<PrefixMatch> Lookup(std::string_view ns, std::span<const uint32_t> tokens) = 0;
  virtual StatusOr<PrefixMatch> LookupHashes(std::span<const PageHash> hashes) = 0;

  // Keeps the first `pages` pages of `match` (and, when `pages == match.reusable_pages` and
  // the layout has SSM layers, the state at that depth) from eviction until Unlock. With a
  // remote tier (StoreOptions::remote), pages at the end that this store does not hold (the
  // match found them in the remote tier) are not locked: `PrefixLock::hashes` names the pages
  // held, and Load fetches the rest.
  virtual StatusOr<PrefixLock> Lock(const PrefixMatch& match, size_t pages) = 0;
  virtual Status Unlock(PrefixLock& lock) = 0;

  // Loads pages [opts.first_page, opts.first_page + device_pages.size()) of `match` into the
  // device pool's pages `device_pages`, and, when `device_state_slot` is given, the state at
  // depth (first_page + device_pages.size()) * page_size, which must equal
  // match.reusable_pages. Sliding-window layers: their KV is written only into the pages of
  // [D - layout.WindowPages(), D), D = max(match.reusable_pages, the load's end); the windowed
  // layers' part of the other pages is left as it was (a model at depth D never reads it). Disk
  // hits are read into host memory first (they stay cached there). One fence for everything; the
  // engine may use the device pages once it fires OK. fence.StreamWait(stream) makes the engine's
  // stream wait on the GPU. When some pages come from disk, the host->device copies are enqueued
  // only after the disk reads, and StreamWait blocks the calling thread until then (a GPU wait must
  // not be queued ahead of the copies it waits for), at most StoreOptions::stream_wait_ms (then
  // TimedOut, nothing enqueued; Fence::Wait still works): an engine whose threads must never wait
  // on the disk calls StartPrefetch at admission and Loads once the prefetch fence is Ready()
  // (everything is then in host memory). Pure SSM layouts: `device_pages` must be empty and
  // `device_state_slot` given; the same rule names the depth, (first_page + 0) pages, with
  // first_page 0 standing for match.reusable_pages. So Load(match, {}, slot) loads the state at the
  // match's depth, and a first_page naming another depth is refused (InvalidArgument naming both
  // depths), as is a match without a reusable state. Errors: InvalidArgument (the argument and
  // value at fault); NotFound when something of the match is no longer cached (a miss: recompute);
  // Busy when another Load or Prefetch is reading one of these pages from disk right now (retry
  // once that one's fence fired); NoSpace when the host tier cannot hold the disk hits (everything
  // else locked, or still in flight after StoreOptions::host_space_wait_ms). Waits (for host room,
  // for host pinning) are bounded by StoreOptions::host_space_wait_ms and host_pinning_wait_ms.
  virtual StatusOr<Fence> Load(const PrefixMatch& match, std::span<const uint64_t> device_pages,
                               std::optional<uint64_t> device_state_slot,
                               const LoadOptions& opts = {}) = 0;

  // Brings the disk- and remote-resident pages and state of `match` into host memory ahead of
  // Load (remote records are verified and join the index).
  // Cancel() stops what has not started; the fence fires either way.
  class Prefetch {
   public:
    virtual ~Prefetch() = default;
    virtual Fence fence() const = 0;
    virtual void Cancel() = 0;
  };
  virtual StatusOr<std::shared_ptr<Prefetch>> StartPrefetch(const PrefixMatch& match) = 0;

  // Copies new pages (and optionally a state) from the device pool into host memory (and disk
  // by policy). Pages already cached are only refreshed. The engine may reuse the device slots
  // once the fence fires. Pure SSM layouts: `device_pages` must be empty (InvalidArgument
  // otherwise); the state's chain, pages [0, state_depth_tokens / page_size), is recorded with
  // it, and a request without a state saves nothing. Waits for host room at most
  // StoreOptions::host_space_wait_ms (then NoSpace naming it).
  virtual StatusOr<Fence> Save(const SaveRequest& request) = 0;

  // The engine's own device pool (its paged KV tensors and Mamba state tensors), described by
  // base pointers and strides (vocab/device_pool.h). Call before Load or Save when the store
  // was opened without a store-owned pool. InvalidArgument when the description does not fit
  // the layout; FailedPrecondition when a pool is already registered (UnregisterDevicePool
  // first to replace it).
  virtual Status RegisterDevicePool(const DevicePoolDescription& pool) = 0;

  // Stops using the registered device pool, so that the engine may free or resize its tensors
  // (a sleep mode that releases GPU memory, a KV cache rebuilt at another size): Load and Save
  // fail with FailedPrecondition from the call on; the call returns once every operation in
  // flight that copies to or from the pool has fired its fence (OK or not), and after it no
  // byte of the pool is touched. What the host and disk tiers hold stays; RegisterDevicePool
  // may then register a new pool. FailedPrecondition when no pool is registered, the pool is
  // store-owned, a Register/Unregister is at work on another thread, or the store is closed.
  virtual Status UnregisterDevicePool() = 0;

  // Store-owned device pool (StoreOptions::device_pool_bytes): hands out and
  // takes back device slots (KV page indices, Mamba state slot indices) for engines that
  // delegate L1, and for tools and tests. NoSpace when the pool is full; FailedPrecondition
  // when the store has no store-owned pool.
  virtual StatusOr<uint64_t> AllocateDeviceSlot(Kind kind) = 0;
  virtual Status FreeDeviceSlot(Kind kind, uint64_t slot) = 0;

  // Store-owned device pool (StoreOptions::device_pool_bytes): reads or writes
  // one page or state slot in record form (ModelLayout's page-first layout). For tools, tests
  // and engines that delegate L1.
  virtual Status WriteDeviceRecord(Kind kind, uint64_t slot, std::span<const std::byte> record) = 0;
  virtual Status ReadDeviceRecord(Kind kind, uint64_t slot, std::span<std::byte> record) = 0;

  virtual StoreStats Stats() const = 0;

  // Drains in-flight operations (their fences fire), persists the catalog, releases memory.
  // Every later call fails with FailedPrecondition, except Unlock (it still releases its lock, so
  // an engine's clean-up path needs no special case) and Close itself. Idempotent.
  virtual Status Close() = 0;

 protected:
  Store() = default;
};

}  // namespace cachepawl
