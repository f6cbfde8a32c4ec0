// Options of a store shared by several processes of one node (docs/EMBEDDING.md, "One store for
// an engine's processes"): ServeOptions for the owner (Store::Serve, `cachepawl serve`), which
// holds the index, the policies, the disk and remote tiers and the host arena in shared memory;
// AttachOptions for the processes that attach to it (Store::Attach).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl {

struct ServeOptions {
  // The owner's Unix domain socket (at most 107 bytes). A stale socket file (no owner listening)
  // is replaced; a live one is refused (AlreadyServing: Busy).
  std::string socket_path;
  // Who may attach. Empty: the owner's Unix user only (socket mode 0600). A group name: that
  // group too (mode 0660, the socket's group set to it); the owner then accepts a peer whose
  // user is the owner's or whose primary group is this one. Anyone else is refused.
  std::string socket_group;
  uint32_t max_clients = 256;
  // Threads that run the attached clients' Load, Save and StartPrefetch calls (they may wait for
  // host room, StoreOptions::host_space_wait_ms). Lookups and locks run on each client's own
  // reader thread.
  uint32_t handler_threads = 8;
  // A client whose connection closed: its locks go at once; the host slots its copies were
  // writing or reading return once its process has exited, and at most this long after the
  // connection closed when the process lives on (its copy engines may still be at work).
  uint32_t dead_client_grace_ms = 10000;
  // A client that reads none of what the owner sends for this long is dropped.
  uint32_t send_timeout_ms = 5000;
  // After answering a call, a session's thread polls for the client's next one this long before
  // it sleeps (yielding its core to any thread that wants it). A wake-up costs tens of
  // microseconds on the next call; a longer poll keeps an engine's back-to-back calls from
  // paying it, for the CPU time of the polling (docs/PERFORMANCE.md has both). At most 100000.
  uint32_t poll_spin_us = 200;
  // While copies the owner sent a client are in flight (a Load's, a Save's), the session's
  // reading thread polls for their CopyDone up to this long before it sleeps, so a Save's end
  // costs no wake-up of the owner. 0: poll_spin_us alone. At most 100000.
  uint32_t inflight_spin_us = 20000;

  // OK, or InvalidArgument naming the field and value at fault.
  Status Validate() const;
};

struct AttachOptions {
  std::string socket_path;  // the owner's (ServeOptions::socket_path)
  // The layout this process expects (optional): `layout`, else `layout_name` (a preset or a JSON
  // file, with page_size_tokens for presets). Attach is refused (Incompatible, naming both) when
  // the owner's differs. Empty: whatever the owner serves (Store::layout() says which).
  std::optional<ModelLayout> layout;
  std::string layout_name;
  uint32_t page_size_tokens = 16;
  // A tensor-parallel group's store (a layout with tp_size > 1): the rank whose shares this
  // process loads and saves (one process, one GPU, one rank). Unset: the expected layout's
  // tp_rank, or 0 without one. Attach fails (InvalidArgument) when it is not < the owner's
  // tp_size, or differs from the expected layout's tp_rank.
  std::optional<uint32_t> tp_rank;
  // -1: CPU mode (device pools in host memory). >= 0: the GPU this process copies with; the
  // shared host arena is registered with CUDA at attach (seconds for hundreds of GiB).
  int cuda_device = 0;
  // A device pool owned by this client (Store::AllocateDeviceSlot); 0: RegisterDevicePool.
  uint64_t device_pool_bytes = 0;
  uint64_t staging_bytes = 256ull << 20;  // this client's device mover (DeviceMoverOptions)
  // This client's device mover, as StoreOptions' fields of the same names.
  uint32_t completion_spin_us = 20000;
  uint32_t wait_spin_us = 2000;
  bool inline_dispatch = true;
  int load_stream_priority = 0;
  int write_stream_priority = 0;
  // The owner's answer to each call: past this, the call fails with Unavailable and the client
  // drops its connection (an owner that does not answer is treated as gone).
  uint32_t call_timeout_ms = 10000;
  // While fences are pending, an owner silent this long (it is pinged at half of it) is gone:
  // every pending fence fails with Unavailable.
  uint32_t owner_timeout_ms = 10000;
  // A Load of at least twice this many device pages is sent as several calls of this many pages
  // (the last also takes the state), one after the other: each piece's copy crosses the link
  // while the owner handles the next piece, instead of after the owner handled them all. The
  // Load's fence fires once every piece landed (with the first error); a piece refused at its
  // call fails the Load once the pieces before it have landed. 0: never split. Not with
  // per-layer fences. At most 1048576.
  uint32_t load_split_pages = 256;
  // StreamWait on the fence of a Load whose pages the owner reads from disk first blocks until
  // the copies are enqueued, at most this long (StoreOptions::stream_wait_ms, for a client).
  uint32_t stream_wait_ms = 60000;
  // A call polls for the owner's answer this long before it sleeps (ServeOptions::poll_spin_us
  // says why). At most 100000.
  uint32_t poll_spin_us = 200;
  // While this process waits for the owner's answer to a call, or has fences pending (whose
  // Copy and FenceDone come unasked), its reading thread polls up to this long before it sleeps,
  // so the end of a Load or Save costs no wake-up. 0: poll_spin_us alone. At most 100000.
  uint32_t inflight_spin_us = 20000;

  // OK, or InvalidArgument naming the field and value at fault.
  Status Validate() const;
};

}  // namespace cachepawl
