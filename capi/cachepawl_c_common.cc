// The C ABI (capi/cachepawl.h): versions, error messages, strings, the shared argument
// checks of cachepawl_c_internal.h, and layout handles.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "capi/cachepawl.h"
#include "capi/cachepawl_c_internal.h"
#include "layouts/layout_presets.h"

#if !defined(CACHEPAWL_VERSION_MAJOR) || !defined(CACHEPAWL_VERSION_MINOR) || \
    !defined(CACHEPAWL_VERSION_PATCH)
#error "store/CMakeLists.txt passes CACHEPAWL_VERSION_{MAJOR,MINOR,PATCH} from project()"
#endif

namespace cachepawl::capi {
namespace {

#define CACHEPAWL_STR_INNER(x) #x
#define CACHEPAWL_STR(x) CACHEPAWL_STR_INNER(x)
constexpr const char kVersion[] = CACHEPAWL_STR(CACHEPAWL_VERSION_MAJOR) "." CACHEPAWL_STR(
    CACHEPAWL_VERSION_MINOR) "." CACHEPAWL_STR(CACHEPAWL_VERSION_PATCH);

// The C codes are Status::Code's values.
#define CACHEPAWL_SAME_CODE(c, k) static_assert(c == static_cast<int>(Status::Code::k))
CACHEPAWL_SAME_CODE(CACHEPAWL_OK, kOk);
CACHEPAWL_SAME_CODE(CACHEPAWL_INVALID_ARGUMENT, kInvalidArgument);
CACHEPAWL_SAME_CODE(CACHEPAWL_NOT_FOUND, kNotFound);
CACHEPAWL_SAME_CODE(CACHEPAWL_CORRUPTION, kCorruption);
CACHEPAWL_SAME_CODE(CACHEPAWL_IO_ERROR, kIOError);
CACHEPAWL_SAME_CODE(CACHEPAWL_NO_SPACE, kNoSpace);
CACHEPAWL_SAME_CODE(CACHEPAWL_BUSY, kBusy);
CACHEPAWL_SAME_CODE(CACHEPAWL_UNAVAILABLE, kUnavailable);
CACHEPAWL_SAME_CODE(CACHEPAWL_FAILED_PRECONDITION, kFailedPrecondition);
CACHEPAWL_SAME_CODE(CACHEPAWL_TIMED_OUT, kTimedOut);
CACHEPAWL_SAME_CODE(CACHEPAWL_ABORTED, kAborted);
CACHEPAWL_SAME_CODE(CACHEPAWL_INTERNAL, kInternal);
CACHEPAWL_SAME_CODE(CACHEPAWL_INCOMPATIBLE, kIncompatible);
static_assert(CACHEPAWL_KIND_KV == static_cast<int>(Kind::kKV));
static_assert(CACHEPAWL_KIND_STATE == static_cast<int>(Kind::kMamba));
static_assert(CACHEPAWL_KIND_WINDOW_KV == static_cast<int>(Kind::kWindowKV));
static_assert(CACHEPAWL_TIER_DEVICE == static_cast<int>(Tier::kDevice));
static_assert(CACHEPAWL_TIER_HOST == static_cast<int>(Tier::kHost));
static_assert(CACHEPAWL_TIER_DISK == static_cast<int>(Tier::kDisk));
static_assert(CACHEPAWL_TIER_REMOTE == static_cast<int>(Tier::kRemote));
static_assert(CACHEPAWL_HASH_BYTES == sizeof(PageHash));

// The thread's last error; `t_fallback` (a static string) when even that could not be stored.
thread_local std::string t_error;
thread_local const char* t_fallback = nullptr;

void RecordForStore(StoreState* store, const char* msg) noexcept {
  if (store == nullptr) return;
  try {
    std::lock_guard<std::mutex> g(store->error_mu);
    store->last_error = msg;
  } catch (...) {
    // Out of memory: the store keeps its previous message; the thread's says why.
  }
}

}  // namespace

cachepawl_status Record(const Status& status, StoreState* store) noexcept {
  try {
    t_error = status.message();
    t_fallback = nullptr;
  } catch (...) {
    t_fallback = "out of memory while recording an error";
  }
  RecordForStore(store, t_fallback != nullptr ? t_fallback : t_error.c_str());
  return static_cast<cachepawl_status>(status.code());
}

cachepawl_status RecordOutOfMemory(const char* fn, StoreState* store) noexcept {
  try {
    t_error = std::string(fn) + ": out of memory";
    t_fallback = nullptr;
  } catch (...) {
    t_fallback = "out of memory";
  }
  RecordForStore(store, t_fallback != nullptr ? t_fallback : t_error.c_str());
  return CACHEPAWL_OUT_OF_MEMORY;
}

Status NeedHandle(const void* p, const char* name) {
  if (p != nullptr) return Status::OK();
  return Status::InvalidArgument(std::string(name) + ": null");
}

Status NeedSpan(const void* p, size_t len, const char* name, const char* len_name) {
  if (p != nullptr || len == 0) return Status::OK();
  return Status::InvalidArgument(std::string(name) + ": null with " + len_name + " " +
                                 std::to_string(len));
}

StatusOr<Kind> ToKind(cachepawl_kind kind) {
  if (kind == CACHEPAWL_KIND_KV) return Kind::kKV;
  if (kind == CACHEPAWL_KIND_STATE) return Kind::kMamba;
  if (kind == CACHEPAWL_KIND_WINDOW_KV) return Kind::kWindowKV;
  return Status::InvalidArgument("kind: " + std::to_string(kind) +
                                 " (expected CACHEPAWL_KIND_KV (0), CACHEPAWL_KIND_STATE (1) or "
                                 "CACHEPAWL_KIND_WINDOW_KV (2))");
}

Status CopyOut(const void* src, size_t n, size_t elem_bytes, void* out, size_t capacity,
               size_t* count, const char* out_name) {
  CACHEPAWL_RETURN_IF_ERROR(NeedHandle(count, "count"));
  *count = n;
  if (out == nullptr && capacity == 0) return Status::OK();  // size query
  CACHEPAWL_RETURN_IF_ERROR(NeedSpan(out, capacity, out_name, "capacity"));
  if (capacity < n) {
    return Status::InvalidArgument("capacity: " + std::to_string(capacity) + " (" + out_name +
                                   " needs " + std::to_string(n) + ")");
  }
  if (n > 0) std::memcpy(out, src, n * elem_bytes);
  return Status::OK();
}

Status NewString(const std::string& s, char** out) {
  CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, s.c_str(), s.size() + 1);
  *out = p;
  return Status::OK();
}

std::vector<PageHash> HashesFromBytes(const uint8_t* bytes, size_t num) {
  std::vector<PageHash> hashes(num);
  if (num > 0) std::memcpy(hashes.data(), bytes, num * sizeof(PageHash));
  return hashes;
}

namespace {

// The layout checks shared by the accessors: a handle, an out pointer, and (for per-layer
// accessors) a layer of that kind.
Status LayoutArgs(const cachepawl_layout* layout, const void* out) {
  CACHEPAWL_RETURN_IF_ERROR(NeedHandle(layout, "layout"));
  return NeedHandle(out, "out");
}

// The layers a kind's per-layer accessors index: every attention layer (kKV), the SSM layers
// (kMamba), or the sliding-window attention layers (kWindowKV), as decoder positions.
std::vector<uint32_t> LayersOfKind(const ModelLayout& l, Kind kind) {
  std::vector<uint32_t> out;
  if (kind == Kind::kMamba) {
    for (const auto& s : l.ssm_layers) out.push_back(s.layer_index);
    return out;
  }
  for (const auto& a : l.attention_layers) {
    if (kind == Kind::kKV || a.sliding_window != 0) out.push_back(a.layer_index);
  }
  return out;
}

const char* LayerWord(Kind kind) {
  switch (kind) {
    case Kind::kKV:
      return " attention";
    case Kind::kMamba:
      return " SSM";
    case Kind::kWindowKV:
      return " sliding-window attention";
  }
  return "";
}

Status LayerArg(const cachepawl_layout* layout, Kind kind, size_t i) {
  const ModelLayout& l = layout->layout;
  const size_t n = LayersOfKind(l, kind).size();
  if (i < n) return Status::OK();
  return Status::InvalidArgument("i: " + std::to_string(i) + " (layout '" + l.model + "' has " +
                                 std::to_string(n) + LayerWord(kind) + " layers)");
}

}  // namespace

Status NewLayout(StatusOr<ModelLayout> made, cachepawl_layout** out) {
  CACHEPAWL_RETURN_IF_ERROR(made.status());
  *out = new cachepawl_layout{std::move(made).value()};
  return Status::OK();
}

}  // namespace cachepawl::capi

using namespace cachepawl;        // NOLINT(google-build-using-namespace)
using namespace cachepawl::capi;  // NOLINT(google-build-using-namespace)

extern "C" {

const char* cachepawl_version(void) { return kVersion; }

uint32_t cachepawl_version_number(void) {
  return CACHEPAWL_VERSION_MAJOR * 10000u + CACHEPAWL_VERSION_MINOR * 100u +
         CACHEPAWL_VERSION_PATCH;
}

uint32_t cachepawl_abi_version(void) { return CACHEPAWL_ABI_VERSION; }

const char* cachepawl_status_name(cachepawl_status status) {
  if (status == CACHEPAWL_OUT_OF_MEMORY) return "OutOfMemory";
  if (status < CACHEPAWL_OK || status > CACHEPAWL_INCOMPATIBLE) return "Unknown";
  return StatusCodeName(static_cast<Status::Code>(status));
}

const char* cachepawl_last_error(void) {
  return t_fallback != nullptr ? t_fallback : t_error.c_str();
}

char* cachepawl_store_last_error(const cachepawl_store* store) {
  if (store == nullptr) return nullptr;
  try {
    std::string copy;
    {
      std::lock_guard<std::mutex> g(store->state->error_mu);
      copy = store->state->last_error;
    }
    char* out = nullptr;
    (void)NewString(copy, &out);
    return out;
  } catch (...) {
    return nullptr;
  }
}

void cachepawl_string_free(char* s) { std::free(s); }

cachepawl_status cachepawl_layout_preset_names(char** out) {
  ClearOut(out);
  return Guard("cachepawl_layout_preset_names", nullptr, [&] {
    std::string names;
    for (const std::string& n : LayoutPresetNames()) names += n + "\n";
    return NewString(names, out);
  });
}

cachepawl_status cachepawl_layout_from_preset(const char* name, uint32_t page_size_tokens,
                                              cachepawl_layout** out) {
  ClearOut(out);
  return Guard("cachepawl_layout_from_preset", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(name, "name"));
    if (page_size_tokens == 0) {
      return Status::InvalidArgument("page_size_tokens: 0 (must be > 0)");
    }
    return NewLayout(LayoutPreset(name, page_size_tokens), out);
  });
}

cachepawl_status cachepawl_layout_from_json_file(const char* path, cachepawl_layout** out) {
  ClearOut(out);
  return Guard("cachepawl_layout_from_json_file", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(path, "path"));
    return NewLayout(LoadLayoutFile(path), out);
  });
}

cachepawl_status cachepawl_layout_from_json_string(const char* json, size_t len,
                                                   cachepawl_layout** out) {
  ClearOut(out);
  return Guard("cachepawl_layout_from_json_string", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(json, len, "json", "len"));
    return NewLayout(ParseLayoutJson(std::string_view(json == nullptr ? "" : json, len)), out);
  });
}

void cachepawl_layout_free(cachepawl_layout* layout) { delete layout; }

cachepawl_status cachepawl_layout_to_json(const cachepawl_layout* layout, char** out) {
  ClearOut(out);
  return Guard("cachepawl_layout_to_json", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    return NewString(LayoutToJson(layout->layout), out);
  });
}

cachepawl_status cachepawl_layout_page_size_tokens(const cachepawl_layout* layout, uint32_t* out) {
  return Guard("cachepawl_layout_page_size_tokens", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    *out = layout->layout.page_size_tokens;
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_record_bytes(const cachepawl_layout* layout, cachepawl_kind kind,
                                               uint64_t* out) {
  return Guard("cachepawl_layout_record_bytes", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    CACHEPAWL_ASSIGN_OR_RETURN(Kind k, ToKind(kind));
    // KV is the whole device page (every attention layer), as it was before windowed layers
    // were kept apart; RecordBytes(kKV) is only the full-attention part.
    *out = k == Kind::kKV ? layout->layout.KvPageBytes() : layout->layout.RecordBytes(k);
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_window_tokens(const cachepawl_layout* layout, uint32_t* out) {
  return Guard("cachepawl_layout_window_tokens", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    *out = layout->layout.WindowTokens();
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_window_pages(const cachepawl_layout* layout, uint32_t* out) {
  return Guard("cachepawl_layout_window_pages", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    *out = layout->layout.WindowPages();
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_num_layers(const cachepawl_layout* layout, uint32_t* out) {
  return Guard("cachepawl_layout_num_layers", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    *out = layout->layout.num_layers;
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_num_layers_of_kind(const cachepawl_layout* layout,
                                                     cachepawl_kind kind, size_t* out) {
  return Guard("cachepawl_layout_num_layers_of_kind", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    CACHEPAWL_ASSIGN_OR_RETURN(Kind k, ToKind(kind));
    *out = LayersOfKind(layout->layout, k).size();
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_layer_index(const cachepawl_layout* layout, cachepawl_kind kind,
                                              size_t i, uint32_t* out) {
  return Guard("cachepawl_layout_layer_index", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    CACHEPAWL_ASSIGN_OR_RETURN(Kind k, ToKind(kind));
    CACHEPAWL_RETURN_IF_ERROR(LayerArg(layout, k, i));
    *out = LayersOfKind(layout->layout, k)[i];
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_k_bytes_per_page(const cachepawl_layout* layout, size_t i,
                                                   uint64_t* out) {
  return Guard("cachepawl_layout_k_bytes_per_page", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    CACHEPAWL_RETURN_IF_ERROR(LayerArg(layout, Kind::kKV, i));
    *out = layout->layout.KBytesPerPage(i);
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_v_bytes_per_page(const cachepawl_layout* layout, size_t i,
                                                   uint64_t* out) {
  return Guard("cachepawl_layout_v_bytes_per_page", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    CACHEPAWL_RETURN_IF_ERROR(LayerArg(layout, Kind::kKV, i));
    *out = layout->layout.VBytesPerPage(i);
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_conv_state_bytes(const cachepawl_layout* layout, size_t i,
                                                   uint64_t* out) {
  return Guard("cachepawl_layout_conv_state_bytes", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    CACHEPAWL_RETURN_IF_ERROR(LayerArg(layout, Kind::kMamba, i));
    *out = layout->layout.ConvStateBytes(i);
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_ssm_state_bytes(const cachepawl_layout* layout, size_t i,
                                                  uint64_t* out) {
  return Guard("cachepawl_layout_ssm_state_bytes", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    CACHEPAWL_RETURN_IF_ERROR(LayerArg(layout, Kind::kMamba, i));
    *out = layout->layout.SsmStateBytes(i);
    return Status::OK();
  });
}

cachepawl_status cachepawl_layout_fingerprint(const cachepawl_layout* layout, uint8_t* out,
                                              size_t capacity) {
  return Guard("cachepawl_layout_fingerprint", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(LayoutArgs(layout, out));
    const std::array<uint8_t, 32> fp = layout->layout.Fingerprint();
    if (capacity < fp.size()) {
      return Status::InvalidArgument("capacity: " + std::to_string(capacity) +
                                     " bytes (the fingerprint has 32)");
    }
    std::memcpy(out, fp.data(), fp.size());
    return Status::OK();
  });
}

}  // extern "C"
