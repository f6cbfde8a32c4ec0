// StoreOptions: everything Store::Open needs, with defaults and Validate().
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl {

// When a page or state saved to host memory is also written to disk.
enum class WritePolicy : uint8_t {
  kWriteThrough = 0,           // every entry is written to disk once, right after it reaches host
  kWriteThroughSelective = 1,  // written to disk once it has been hit `selective_min_hits` times
  kWriteBack = 2,              // written to disk only when it is evicted from host memory
};
const char* WritePolicyName(WritePolicy p);

// Which entries leave a full tier first (docs/DESIGN.md, "Eviction and admission").
enum class EvictionPolicy : uint8_t {
  // Per kind, least recently used first: Mamba states, then windowed KV, then KV pages
  // (leaves first). Kept for comparison: under the hybrid rule it strands KV whose states are
  // gone and states whose KV is gone.
  kLru = 0,
  // Prefix units: KV and windowed KV that no cached state can use go first; KV a cached state
  // needs leaves a tier only where another tier holds it too; states go by value per byte
  // (prefill FLOPs saved at their depth over the bytes they occupy, times their hits, aged:
  // GreedyDual-Size-Frequency). A state is written to disk only when it would not be the
  // disk's next victim (admission by observed reuse).
  kHybrid = 1,
};
const char* EvictionPolicyName(EvictionPolicy p);

// When entries are written to the remote tier (StoreOptions::remote).
enum class RemoteWritePolicy : uint8_t {
  kNone = 0,          // read only: this store uses what other stores wrote, writes nothing
  kWriteThrough = 1,  // every saved entry, once, after it reaches host memory
  kSelective = 2,     // once it has been hit `selective_min_hits` times
  // When it leaves the last local tier: a host victim with no disk copy (no disk tier, or one
  // the disk did not take) stays in host memory until written; a disk victim with no host copy
  // is read back (verified) before its removal and written from memory.
  kOnEvict = 3,
};

// The remote tier: a Redis Cluster (or one Redis server) that several stores share, below disk
// (tiers/remote_tier.h; docs/DESIGN.md, "The remote tier"). Writes are asynchronous and never
// block Save, Load or Lookup; Lookup asks which pages past the local match the cluster holds
// (one round trip, at most lookup_deadline_ms), and Load and StartPrefetch fetch them into host
// memory, verified.
struct RemoteOptions {
  // "redis://host:port[,host:port...]": seed nodes. Empty: no remote tier.
  std::string seeds;
  std::string user;                      // ACL user (empty: AUTH with the password only, or none)
  std::string password;                  // empty: no AUTH
  std::string key_prefix = "cachepawl";  // 1..64 of A-Z a-z 0-9 _ . -
  uint64_t chunk_bytes = 8ull << 20;     // a larger record is cut into values of this size
  uint32_t deadline_ms = 2000;           // one batch of reads or writes
  uint32_t lookup_deadline_ms = 20;      // the existence check of one Lookup
  uint32_t ttl_seconds = 0;              // expiry of written values; 0: none
  RemoteWritePolicy write_policy = RemoteWritePolicy::kWriteThrough;
  uint32_t selective_min_hits = 2;
  // Writes waiting for the remote tier beyond this are dropped (counted): a slow cluster costs
  // remote copies, never host memory.
  uint32_t max_queued_writes = 4096;
  // Threads that fetch for Load and StartPrefetch (each fetch of one call runs on one of
  // them; calls fetch in parallel). In [1, 64].
  uint32_t reader_threads = 4;

  bool enabled() const { return !seeds.empty(); }
};

inline constexpr uint64_t kDefaultMaxPromptTokens = 1ull << 24;

struct StoreOptions {
  // ---- Model: `layout` when set, else `layout_name` (a preset or a JSON file path). ----
  std::optional<ModelLayout> layout;
  std::string layout_name;
  uint32_t page_size_tokens = 16;  // used with a preset name

  // ---- Host tier (pinned memory). ----
  uint64_t host_bytes = 1ull << 30;
  // Evict ahead: when an allocation leaves fewer free host bytes than this, a store thread
  // evicts (in the usual order, in small batches) until this many are free again, so that Save
  // and Load find room without evicting on the engine's thread. Unset: host_bytes / 16, at
  // most 1 GiB, for host tiers of 1 GiB or more (none below). 0: evict only on demand. At most
  // host_bytes / 2.
  std::optional<uint64_t> host_free_target_bytes;
  uint64_t host_free_target() const {
    if (host_free_target_bytes) return *host_free_target_bytes;
    return host_bytes >= (1ull << 30) ? std::min<uint64_t>(host_bytes / 16, 1ull << 30) : 0;
  }

  // ---- Disk tier (optional: a host-only store is valid). ----
  // Folder for the catalog (RocksDB) and, unless `disk_data_paths` is set, the data file.
  std::string disk_dir;
  // Data files to stripe over (one per drive). Empty: one file in disk_dir.
  std::vector<std::string> disk_data_paths;
  uint64_t disk_bytes = 0;  // 0 disables the disk tier
  uint32_t disk_queue_depth = 32;
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  uint32_t selective_min_hits = 2;
  // Which entries leave a full tier first, and which states the disk admits.
  EvictionPolicy eviction_policy = EvictionPolicy::kHybrid;
  // On open, when the disk catalog was written for another layout: false -> Open fails with
  // Incompatible; true -> the disk tier is wiped and starts empty.
  bool wipe_on_layout_mismatch = false;
  // On open, when the disk catalog cannot be read (a damaged database): false -> Open fails
  // naming it; true -> the catalog is removed and the disk tier starts empty. A folder that
  // cannot be written is never wiped.
  bool wipe_unreadable_catalog = false;

  // ---- Remote tier (optional). ----
  RemoteOptions remote;

  // ---- Device side. ----
  // -1: CPU mode always (device pools are host memory). >= 0: the CUDA device to use when a GPU
  // is present; without one the store falls back to CPU mode.
  int cuda_device = 0;
  // A store-owned device pool (for engines that delegate L1, and for tools and tests) of this
  // many bytes of VRAM (host memory in CPU mode), holding KV pages and Mamba states under one
  // budget. 0: the engine registers its own pool (Store::RegisterDevicePool).
  uint64_t device_pool_bytes = 0;
  int load_stream_priority = 0;  // CUDA stream priorities in [-1000, 1000] (lower runs first)
  int write_stream_priority = 0;
  uint64_t staging_bytes = 256ull << 20;  // device staging per direction (DeviceMoverOptions)
  // GPU mode, a copy's end seen without a sleeping thread's wake-up (DeviceMoverOptions): the
  // device mover's completion threads poll an operation's end up to completion_spin_us, a Load's
  // or Save's Fence::Wait polls up to wait_spin_us, before they sleep; each in [0, 1000000]
  // (a core each while polling; 0: sleep at once). inline_dispatch: a Load or Save enqueues its
  // copies on the calling thread when nothing of its direction is queued.
  uint32_t completion_spin_us = 20000;
  uint32_t wait_spin_us = 2000;
  bool inline_dispatch = true;

  // ---- Save pipeline. ----
  // A Save of more entries than this moves them as several transfer operations of at most this
  // many: the first crosses the link while the next ones get their host slots, and each one's
  // locations are published while the next ones copy. >= 1.
  uint32_t save_chunk_entries = 256;

  // ---- Requests. ----
  // The longest prompt a call names: Lookup's and Save's tokens, or their hashes' pages times
  // page_size_tokens. A longer one is refused with InvalidArgument naming this option, before
  // any hashing or allocation (a 717M-token request used to end in std::bad_alloc). The default,
  // 16M tokens, is above every model's context window. >= page_size_tokens.
  uint64_t max_prompt_tokens = kDefaultMaxPromptTokens;

  // ---- Index. ----
  // The checkpoint hint is rounded down to this many pages (0: one page).
  uint32_t track_interval_pages = 0;

  // ---- Waits: every wait inside a Store call, and inside a Load fence's StreamWait, is
  // bounded by one of these (each at most 86,400,000 ms, a day). ----
  // Save and Load, when the host tier is full and what could be evicted is still in flight
  // (disk or remote writes of write-on-evict victims, loads holding host slots): how long they
  // wait for room (without the store's lock) before NoSpace. 0: NoSpace at once.
  uint32_t host_space_wait_ms = 30000;
  // Save and Load while the host tier is still being pinned (large tiers pin in the background
  // after Open): how long they wait for the chunk they need before failing with the pinning's
  // error or TimedOut.
  uint32_t host_pinning_wait_ms = 60000;
  // StreamWait on the fence of a Load that reads from disk or the remote tier first blocks the
  // calling thread until the host->device copies are enqueued (a stream wait is never enqueued
  // ahead of its producer): at most this long, then it returns TimedOut and enqueues nothing
  // (the engine may still Fence::Wait on the CPU). 0: TimedOut unless already enqueued.
  uint32_t stream_wait_ms = 60000;
  // Tensor-parallel group stores (a layout with tp_size > 1): an entry some ranks saved and
  // others did not is no hit and holds a host slot; untouched this long with no copy in flight
  // (a rank died, or never saves that page) it is dropped at the next Save. > 0.
  uint32_t tp_partial_timeout_ms = 30000;

  // InvalidArgument naming the field and value at fault.
  Status Validate() const;
};

}  // namespace cachepawl
