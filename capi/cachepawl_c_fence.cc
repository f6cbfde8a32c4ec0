// The C ABI (capi/cachepawl.h): load, save and prefetch, and the fences they return.
// Waits longer than a day are made of day-long waits (chrono arithmetic near the clock's
// limits overflows); CACHEPAWL_WAIT_FOREVER waits until the fence fires.
#include <algorithm>
#include <chrono>
#include <optional>
#include <span>
#include <string>

#include "capi/cachepawl.h"
#include "capi/cachepawl_c_internal.h"

namespace cachepawl::capi {
namespace {

constexpr uint64_t kChunkMs = 24ull * 3600 * 1000;

std::optional<uint64_t> Slot(uint64_t slot) {
  return slot == CACHEPAWL_NO_SLOT ? std::nullopt : std::optional<uint64_t>(slot);
}

Status NewFence(StatusOr<Fence> f, cachepawl_fence** out) {
  CACHEPAWL_RETURN_IF_ERROR(f.status());
  *out = new cachepawl_fence{std::move(f).value()};
  return Status::OK();
}

// The part of a save that does not depend on how the pages are named (tokens or hashes).
Status Save(Store& s, SaveRequest& req, size_t first_page, const uint64_t* device_pages,
            size_t num_device_pages, uint64_t device_state_slot, uint64_t state_depth_tokens,
            cachepawl_fence** out) {
  CACHEPAWL_RETURN_IF_ERROR(
      NeedSpan(device_pages, num_device_pages, "device_pages", "num_device_pages"));
  req.first_page = first_page;
  req.device_pages = {device_pages, num_device_pages};
  req.device_state_slot = Slot(device_state_slot);
  req.state_depth_tokens = state_depth_tokens;
  return NewFence(s.Save(req), out);
}

// Waits for `ready()` in chunks of at most a day; `wait(chunk)` blocks for one chunk.
// Returns true when ready.
template <typename Ready, typename Wait>
bool WaitChunked(uint64_t timeout_ms, Ready&& ready, Wait&& wait) {
  uint64_t left = timeout_ms;
  while (!ready()) {
    if (left == 0) return false;
    const uint64_t chunk = std::min(left, kChunkMs);
    wait(std::chrono::milliseconds(static_cast<int64_t>(chunk)));
    if (timeout_ms != CACHEPAWL_WAIT_FOREVER) left -= chunk;
  }
  return true;
}

Status TimedOut(uint64_t timeout_ms) {
  return Status::TimedOut("fence: not fired within timeout_ms " + std::to_string(timeout_ms));
}

template <typename Body>
cachepawl_status FenceCall(const char* fn, const cachepawl_fence* fence, Body&& body) noexcept {
  return Guard(fn, nullptr, [&]() -> Status {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(fence, "fence"));
    return body(fence->fence);
  });
}

Status LayerArg(const Fence& f, size_t layer) {
  if (layer < f.num_layers()) return Status::OK();
  return Status::InvalidArgument("layer: " + std::to_string(layer) + " (the fence has " +
                                 std::to_string(f.num_layers()) + " per-layer sub-fences)");
}

}  // namespace
}  // namespace cachepawl::capi

using namespace cachepawl;        // NOLINT(google-build-using-namespace)
using namespace cachepawl::capi;  // NOLINT(google-build-using-namespace)

extern "C" {

cachepawl_status cachepawl_store_load(cachepawl_store* store, const cachepawl_match* match,
                                      const uint64_t* device_pages, size_t num_device_pages,
                                      uint64_t device_state_slot, size_t first_page, uint32_t flags,
                                      cachepawl_fence** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_load", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(match, "match"));
    CACHEPAWL_RETURN_IF_ERROR(
        NeedSpan(device_pages, num_device_pages, "device_pages", "num_device_pages"));
    if ((flags & ~CACHEPAWL_LOAD_PER_LAYER_FENCES) != 0) {
      return Status::InvalidArgument("flags: " + std::to_string(flags) +
                                     " (expected 0 or CACHEPAWL_LOAD_PER_LAYER_FENCES)");
    }
    LoadOptions opts;
    opts.first_page = first_page;
    opts.per_layer_fences = (flags & CACHEPAWL_LOAD_PER_LAYER_FENCES) != 0;
    return NewFence(
        s.Load(match->match, {device_pages, num_device_pages}, Slot(device_state_slot), opts), out);
  });
}

cachepawl_status cachepawl_store_save(cachepawl_store* store, const char* ns, size_t ns_len,
                                      const uint32_t* tokens, size_t num_tokens, size_t first_page,
                                      const uint64_t* device_pages, size_t num_device_pages,
                                      uint64_t device_state_slot, uint64_t state_depth_tokens,
                                      cachepawl_fence** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_save", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(ns, ns_len, "ns", "ns_len"));
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(tokens, num_tokens, "tokens", "num_tokens"));
    SaveRequest req;
    if (ns != nullptr) req.ns = std::string_view(ns, ns_len);
    req.tokens = {tokens, num_tokens};
    return Save(s, req, first_page, device_pages, num_device_pages, device_state_slot,
                state_depth_tokens, out);
  });
}

cachepawl_status cachepawl_store_save_hashes(cachepawl_store* store, const uint8_t* hashes,
                                             size_t num_hashes, size_t first_page,
                                             const uint64_t* device_pages, size_t num_device_pages,
                                             uint64_t device_state_slot,
                                             uint64_t state_depth_tokens, cachepawl_fence** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_save_hashes", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(hashes, num_hashes, "hashes", "num_hashes"));
    const std::vector<PageHash> h = HashesFromBytes(hashes, num_hashes);
    SaveRequest req;
    req.hashes = h;
    return Save(s, req, first_page, device_pages, num_device_pages, device_state_slot,
                state_depth_tokens, out);
  });
}

cachepawl_status cachepawl_store_prefetch(cachepawl_store* store, const cachepawl_match* match,
                                          cachepawl_prefetch** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_prefetch", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(match, "match"));
    CACHEPAWL_ASSIGN_OR_RETURN(auto p, s.StartPrefetch(match->match));
    *out = new cachepawl_prefetch{std::move(p)};
    return Status::OK();
  });
}

cachepawl_status cachepawl_prefetch_fence(const cachepawl_prefetch* prefetch,
                                          cachepawl_fence** out) {
  ClearOut(out);
  return Guard("cachepawl_prefetch_fence", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(prefetch, "prefetch"));
    return NewFence(prefetch->prefetch->fence(), out);
  });
}

cachepawl_status cachepawl_prefetch_cancel(cachepawl_prefetch* prefetch) {
  return Guard("cachepawl_prefetch_cancel", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(prefetch, "prefetch"));
    prefetch->prefetch->Cancel();
    return Status::OK();
  });
}

void cachepawl_prefetch_free(cachepawl_prefetch* prefetch) { delete prefetch; }

cachepawl_status cachepawl_fence_ready(const cachepawl_fence* fence, int32_t* out) {
  return FenceCall("cachepawl_fence_ready", fence, [&](const Fence& f) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    *out = f.Ready() ? 1 : 0;
    return Status::OK();
  });
}

cachepawl_status cachepawl_fence_wait(const cachepawl_fence* fence, uint64_t timeout_ms) {
  return FenceCall("cachepawl_fence_wait", fence, [&](const Fence& f) {
    const bool fired = WaitChunked(
        timeout_ms, [&] { return f.Ready(); }, [&](auto chunk) { (void)f.Wait(chunk); });
    return fired ? f.status() : TimedOut(timeout_ms);
  });
}

cachepawl_status cachepawl_fence_result(const cachepawl_fence* fence, cachepawl_status* code,
                                        char** message) {
  ClearOut(message);
  return FenceCall("cachepawl_fence_result", fence, [&](const Fence& f) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(code, "code"));
    if (!f.Ready()) return Status::FailedPrecondition("fence: not fired yet");
    const Status s = f.status();
    if (message != nullptr) CACHEPAWL_RETURN_IF_ERROR(NewString(s.message(), message));
    *code = static_cast<cachepawl_status>(s.code());
    return Status::OK();
  });
}

cachepawl_status cachepawl_fence_num_layers(const cachepawl_fence* fence, size_t* out) {
  return FenceCall("cachepawl_fence_num_layers", fence, [&](const Fence& f) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    *out = f.num_layers();
    return Status::OK();
  });
}

cachepawl_status cachepawl_fence_layer_ready(const cachepawl_fence* fence, size_t layer,
                                             int32_t* out) {
  return FenceCall("cachepawl_fence_layer_ready", fence, [&](const Fence& f) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(LayerArg(f, layer));
    *out = f.LayerReady(layer) ? 1 : 0;
    return Status::OK();
  });
}

cachepawl_status cachepawl_fence_wait_layer(const cachepawl_fence* fence, size_t layer,
                                            uint64_t timeout_ms) {
  return FenceCall("cachepawl_fence_wait_layer", fence, [&](const Fence& f) {
    CACHEPAWL_RETURN_IF_ERROR(LayerArg(f, layer));
    const bool fired = WaitChunked(
        timeout_ms, [&] { return f.LayerReady(layer); },
        [&](auto chunk) { (void)f.WaitLayer(layer, chunk); });
    if (!fired) return TimedOut(timeout_ms);
    return f.WaitLayer(layer, std::chrono::milliseconds(0));
  });
}

cachepawl_status cachepawl_fence_stream_wait(const cachepawl_fence* fence, void* cuda_stream) {
  return FenceCall("cachepawl_fence_stream_wait", fence, [&](const Fence& f) {
    if (cuda_stream == nullptr) {
      // The CPU wait without a day-long limit (Fence::StreamWait(nullptr) waits 24 h).
      (void)WaitChunked(
          CACHEPAWL_WAIT_FOREVER, [&] { return f.Ready(); },
          [&](auto chunk) { (void)f.Wait(chunk); });
      return f.status();
    }
    return f.StreamWait(cuda_stream);
  });
}

cachepawl_status cachepawl_fence_on_complete(const cachepawl_fence* fence,
                                             cachepawl_fence_callback fn, void* user_data) {
  return FenceCall("cachepawl_fence_on_complete", fence, [&](const Fence& f) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(reinterpret_cast<const void*>(fn), "fn"));
    f.OnComplete([fn, user_data](const Status& s) {
      fn(user_data, static_cast<cachepawl_status>(s.code()));
    });
    return Status::OK();
  });
}

void cachepawl_fence_free(cachepawl_fence* fence) { delete fence; }

}  // extern "C"
