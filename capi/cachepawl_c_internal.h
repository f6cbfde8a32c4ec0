// The C ABI's internals (capi/cachepawl.h): the structs behind the opaque handles and the
// error plumbing every cachepawl_c_*.cc file shares.
//
// Every exported function body runs inside Guard(), which turns a non-OK Status and every C++
// exception into a cachepawl_status and records the message (prefixed with the function's
// name) as the calling thread's last error and, when given, the store's. Argument checks
// (Need*, Span, CopyOut) produce InvalidArgument naming the argument and value.
//
// Lifetime: a store handle and its lock handles share a StoreState; freeing the store closes
// and destroys the C++ Store at once (under the state's write lock), and later lock calls see
// it gone. Fence and prefetch handles hold only self-contained objects (vocab/fence.h, the
// prefetch's fence and flag) and outlive the store without it.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <vector>

#include "capi/cachepawl.h"
#include "store/store.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/store_options.h"

namespace cachepawl::capi {

// What a store handle and its locks share.
struct StoreState {
  std::shared_mutex mu;          // write-locked only to destroy `store`
  std::unique_ptr<Store> store;  // null once the store handle was freed
  std::mutex error_mu;
  std::string last_error;  // guarded by error_mu
};

// Records `status` (not OK) as the thread's (and the store's) last error; returns its code.
cachepawl_status Record(const Status& status, StoreState* store) noexcept;
// Records "<fn>: out of memory" without allocating when it cannot; returns OUT_OF_MEMORY.
cachepawl_status RecordOutOfMemory(const char* fn, StoreState* store) noexcept;

// Runs `body` (returning Status) with every exception turned into a code. `fn` names the C
// function in the message.
template <typename Body>
cachepawl_status Guard(const char* fn, StoreState* store, Body&& body) noexcept {
  try {
    Status s = body();
    if (s.ok()) return CACHEPAWL_OK;
    return Record(s.WithContext(fn), store);
  } catch (const std::bad_alloc&) {
    return RecordOutOfMemory(fn, store);
  } catch (const std::exception& e) {
    return Record(Status::Internal(std::string(fn) + ": uncaught exception: " + e.what()), store);
  } catch (...) {
    return Record(Status::Internal(std::string(fn) + ": uncaught non-standard exception"), store);
  }
}

// InvalidArgument "<name>: null" unless `p` is set.
Status NeedHandle(const void* p, const char* name);
// InvalidArgument "<name>: null with <len_name> <len>" for a null pointer with a nonzero length.
Status NeedSpan(const void* p, size_t len, const char* name, const char* len_name);
// InvalidArgument for a kind other than KV or STATE.
StatusOr<Kind> ToKind(cachepawl_kind kind);

// Array-convention output (see cachepawl.h): sets *count = n; copies `n` elements of
// `elem_bytes` from `src` into `out` when it holds them.
Status CopyOut(const void* src, size_t n, size_t elem_bytes, void* out, size_t capacity,
               size_t* count, const char* out_name);

// Sets a handle or string result to NULL before a call that may fail (cachepawl.h: "on failure
// *out is NULL"). A null `out` is left for the call's own check.
template <typename T>
void ClearOut(T** out) noexcept {
  if (out != nullptr) *out = nullptr;
}

// A new malloc'ed copy of `s` for a `char**` result (freed by cachepawl_string_free).
Status NewString(const std::string& s, char** out);

// A new layout handle of `made` into *out, or made's error.
Status NewLayout(StatusOr<ModelLayout> made, cachepawl_layout** out);

// StoreOptions::Validate, with a C-side message when no layout was set.
Status ValidateOptions(const cachepawl_options& options);

// Page hashes from caller bytes (num * 32).
std::vector<PageHash> HashesFromBytes(const uint8_t* bytes, size_t num);

// Guard() for a call on a store: checks the handle, records errors for the store too, and
// passes body the C++ Store.
template <typename Body>
cachepawl_status StoreCall(const char* fn, const cachepawl_store* store, Body&& body) noexcept;

}  // namespace cachepawl::capi

struct cachepawl_layout {
  cachepawl::ModelLayout layout;
};

struct cachepawl_options {
  cachepawl::StoreOptions options;
};

struct cachepawl_store {
  std::shared_ptr<cachepawl::capi::StoreState> state;
  cachepawl::Store& store() const { return *state->store; }
};

struct cachepawl_match {
  cachepawl::PrefixMatch match;
};

struct cachepawl_lock {
  std::shared_ptr<cachepawl::capi::StoreState> state;
  mutable std::mutex mu;
  cachepawl::PrefixLock lock;  // guarded by mu
};

struct cachepawl_fence {
  cachepawl::Fence fence;
};

struct cachepawl_prefetch {
  std::shared_ptr<cachepawl::Store::Prefetch> prefetch;
};

struct cachepawl_pool {
  struct KvLayer {
    bool set = false;
    bool interleaved = false;  // v_base / v_page_stride unused
    std::byte* k_base = nullptr;
    std::byte* v_base = nullptr;
    uint64_t k_page_stride = 0;  // 0: packed
    uint64_t v_page_stride = 0;
  };
  struct SsmLayer {
    bool set = false;
    std::byte* conv_base = nullptr;
    std::byte* ssm_base = nullptr;
    uint64_t conv_slot_stride = 0;
    uint64_t ssm_slot_stride = 0;
  };
  int device = 0;
  uint64_t num_pages = 0;
  uint64_t num_state_slots = 0;
  std::vector<KvLayer> kv;
  std::vector<SsmLayer> ssm;
  bool block_contiguous = false;
  std::byte* kv_base = nullptr;
  std::byte* state_base = nullptr;
  uint64_t page_stride = 0;
  uint64_t state_stride = 0;
};

template <typename Body>
cachepawl_status cachepawl::capi::StoreCall(const char* fn, const cachepawl_store* store,
                                            Body&& body) noexcept {
  if (store == nullptr) {
    return Guard(fn, nullptr, [] { return Status::InvalidArgument("store: null"); });
  }
  return Guard(fn, store->state.get(), [&] { return body(store->store()); });
}
