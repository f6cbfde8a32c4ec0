// The C ABI (capi/cachepawl.h): opening and closing stores, the store's layout and stats,
// device pool descriptions and registration, and the store-owned pool's slots and records.
#include <span>
#include <string>

#include "capi/cachepawl.h"
#include "capi/cachepawl_c_internal.h"
#include "vocab/device_pool.h"

namespace cachepawl::capi {
namespace {

// Per-layer setters index layers up to this (a bound on the description's size, not a limit
// of any real model).
constexpr size_t kMaxLayers = 65536;

template <typename Set>
cachepawl_status PoolSetter(const char* fn, cachepawl_pool* pool, Set&& set) noexcept {
  return Guard(fn, nullptr, [&]() -> Status {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(pool, "pool"));
    return set(*pool);
  });
}

// The checks every per-layer setter makes: a layer index in range, no block-contiguous form.
Status PerLayerArgs(const cachepawl_pool& pool, size_t i) {
  if (pool.block_contiguous) {
    return Status::FailedPrecondition(
        "pool: already block-contiguous (cachepawl_pool_set_block_contiguous); per-layer "
        "setters describe the other forms");
  }
  if (i >= kMaxLayers) {
    return Status::InvalidArgument("i: " + std::to_string(i) + " (at most " +
                                   std::to_string(kMaxLayers) + " layers)");
  }
  return Status::OK();
}

template <typename Layer>
Layer& LayerAt(std::vector<Layer>& layers, size_t i) {
  if (layers.size() <= i) layers.resize(i + 1);
  return layers[i];
}

// The i-th layer description must be set for every layer of the layout, and no other.
template <typename Layer>
Status AllLayersSet(const std::vector<Layer>& layers, size_t n, const char* what,
                    const char* setter, const ModelLayout& l) {
  const auto count = " (layout '" + l.model + "' has " + std::to_string(n) + " " + what +
                     " layers; call " + setter + " for each)";
  if (layers.size() > n) {
    return Status::InvalidArgument("pool: " + std::string(what) + " layer " +
                                   std::to_string(layers.size() - 1) + " set" + count);
  }
  for (size_t i = 0; i < n; ++i) {
    if (i >= layers.size() || !layers[i].set) {
      return Status::InvalidArgument("pool: " + std::string(what) + " layer " + std::to_string(i) +
                                     " not set" + count);
    }
  }
  return Status::OK();
}

StatusOr<DevicePoolDescription> Describe(const cachepawl_pool& p, const ModelLayout& l) {
  if (p.block_contiguous) {
    return DevicePoolDescription::BlockContiguous(l, p.device, p.kv_base, p.num_pages,
                                                  p.page_stride, p.state_base, p.num_state_slots,
                                                  p.state_stride);
  }
  CACHEPAWL_RETURN_IF_ERROR(AllLayersSet(p.kv, l.attention_layers.size(), "attention",
                                         "cachepawl_pool_set_kv_layer(_interleaved)", l));
  CACHEPAWL_RETURN_IF_ERROR(
      AllLayersSet(p.ssm, l.ssm_layers.size(), "SSM", "cachepawl_pool_set_ssm_layer", l));
  DevicePoolDescription d;
  d.device = p.device;
  d.num_pages = p.num_pages;
  d.num_state_slots = p.num_state_slots;
  for (size_t a = 0; a < p.kv.size(); ++a) {
    const cachepawl_pool::KvLayer& k = p.kv[a];
    const uint64_t kb = l.KBytesPerPage(a);
    if (k.interleaved) {
      const uint64_t stride = k.k_page_stride != 0 ? k.k_page_stride : kb + l.VBytesPerPage(a);
      d.attention.push_back({k.k_base, k.k_base + kb, stride, stride});
    } else {
      d.attention.push_back({k.k_base, k.v_base, k.k_page_stride != 0 ? k.k_page_stride : kb,
                             k.v_page_stride != 0 ? k.v_page_stride : l.VBytesPerPage(a)});
    }
  }
  for (size_t s = 0; s < p.ssm.size(); ++s) {
    const cachepawl_pool::SsmLayer& m = p.ssm[s];
    d.ssm.push_back({m.conv_base, m.ssm_base,
                     m.conv_slot_stride != 0 ? m.conv_slot_stride : l.ConvStateBytes(s),
                     m.ssm_slot_stride != 0 ? m.ssm_slot_stride : l.SsmStateBytes(s)});
  }
  return d;
}

}  // namespace
}  // namespace cachepawl::capi

using namespace cachepawl;        // NOLINT(google-build-using-namespace)
using namespace cachepawl::capi;  // NOLINT(google-build-using-namespace)

extern "C" {

cachepawl_status cachepawl_store_open(const cachepawl_options* options, cachepawl_store** out) {
  ClearOut(out);
  return Guard("cachepawl_store_open", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(options, "options"));
    CACHEPAWL_RETURN_IF_ERROR(ValidateOptions(*options));
    auto state = std::make_shared<StoreState>();
    CACHEPAWL_ASSIGN_OR_RETURN(state->store, Store::Open(options->options));
    *out = new cachepawl_store{std::move(state)};
    return Status::OK();
  });
}

cachepawl_status cachepawl_store_serve(const cachepawl_options* options, const char* socket_path,
                                       const char* socket_group, cachepawl_store** out) {
  ClearOut(out);
  return Guard("cachepawl_store_serve", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(options, "options"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(socket_path, "socket_path"));
    CACHEPAWL_RETURN_IF_ERROR(ValidateOptions(*options));
    ServeOptions serve;
    serve.socket_path = socket_path;
    if (socket_group != nullptr) serve.socket_group = socket_group;
    auto state = std::make_shared<StoreState>();
    CACHEPAWL_ASSIGN_OR_RETURN(state->store, Store::Serve(options->options, serve));
    *out = new cachepawl_store{std::move(state)};
    return Status::OK();
  });
}

cachepawl_status cachepawl_store_attach(const char* socket_path,
                                        const cachepawl_layout* expected_layout,
                                        int32_t cuda_device, uint64_t device_pool_bytes,
                                        uint32_t call_timeout_ms, cachepawl_store** out) {
  ClearOut(out);
  return Guard("cachepawl_store_attach", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(socket_path, "socket_path"));
    AttachOptions ao;
    ao.socket_path = socket_path;
    if (expected_layout != nullptr) ao.layout = expected_layout->layout;
    ao.cuda_device = cuda_device;
    ao.device_pool_bytes = device_pool_bytes;
    if (call_timeout_ms != 0) ao.call_timeout_ms = ao.owner_timeout_ms = call_timeout_ms;
    auto state = std::make_shared<StoreState>();
    CACHEPAWL_ASSIGN_OR_RETURN(state->store, Store::Attach(ao));
    *out = new cachepawl_store{std::move(state)};
    return Status::OK();
  });
}

cachepawl_status cachepawl_store_close(cachepawl_store* store) {
  return StoreCall("cachepawl_store_close", store, [&](Store& s) { return s.Close(); });
}

void cachepawl_store_free(cachepawl_store* store) {
  if (store == nullptr) return;
  (void)Guard("cachepawl_store_free", nullptr, [&] {
    Status closed = store->store().Close();
    std::unique_lock<std::shared_mutex> g(store->state->mu);
    store->state->store.reset();  // lock handles see it gone
    return closed;
  });
  delete store;
}

cachepawl_status cachepawl_store_layout(const cachepawl_store* store, cachepawl_layout** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_layout", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    *out = new cachepawl_layout{s.layout()};
    return Status::OK();
  });
}

cachepawl_status cachepawl_store_gpu_mode(const cachepawl_store* store, int32_t* out) {
  return StoreCall("cachepawl_store_gpu_mode", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    *out = s.gpu_mode() ? 1 : 0;
    return Status::OK();
  });
}

cachepawl_status cachepawl_store_stats_json(const cachepawl_store* store, char** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_stats_json", store,
                   [&](Store& s) { return NewString(s.Stats().ToJson(), out); });
}

cachepawl_status cachepawl_store_stats_prometheus(const cachepawl_store* store, char** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_stats_prometheus", store,
                   [&](Store& s) { return NewString(s.Stats().ToPrometheus(), out); });
}

cachepawl_status cachepawl_pool_new(int32_t device, uint64_t num_pages, uint64_t num_state_slots,
                                    cachepawl_pool** out) {
  ClearOut(out);
  return Guard("cachepawl_pool_new", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    if (device < -1) {
      return Status::InvalidArgument("device: " + std::to_string(device) +
                                     " (must be -1 (host memory) or a CUDA device >= 0)");
    }
    auto* pool = new cachepawl_pool();
    pool->device = device;
    pool->num_pages = num_pages;
    pool->num_state_slots = num_state_slots;
    *out = pool;
    return Status::OK();
  });
}

void cachepawl_pool_free(cachepawl_pool* pool) { delete pool; }

cachepawl_status cachepawl_pool_set_kv_layer(cachepawl_pool* pool, size_t i, void* k_base,
                                             uint64_t k_page_stride, void* v_base,
                                             uint64_t v_page_stride) {
  return PoolSetter("cachepawl_pool_set_kv_layer", pool, [&](cachepawl_pool& p) {
    CACHEPAWL_RETURN_IF_ERROR(PerLayerArgs(p, i));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(k_base, "k_base"));
    // v_base may be NULL (an MLA layer has no V); registration refuses it for any other layer.
    LayerAt(p.kv, i) = {true,
                        false,
                        static_cast<std::byte*>(k_base),
                        static_cast<std::byte*>(v_base),
                        k_page_stride,
                        v_page_stride};
    return Status::OK();
  });
}

cachepawl_status cachepawl_pool_set_kv_layer_interleaved(cachepawl_pool* pool, size_t i, void* base,
                                                         uint64_t page_stride) {
  return PoolSetter("cachepawl_pool_set_kv_layer_interleaved", pool, [&](cachepawl_pool& p) {
    CACHEPAWL_RETURN_IF_ERROR(PerLayerArgs(p, i));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(base, "base"));
    LayerAt(p.kv, i) = {true, true, static_cast<std::byte*>(base), nullptr, page_stride, 0};
    return Status::OK();
  });
}

cachepawl_status cachepawl_pool_set_ssm_layer(cachepawl_pool* pool, size_t i, void* conv_base,
                                              uint64_t conv_slot_stride, void* ssm_base,
                                              uint64_t ssm_slot_stride) {
  return PoolSetter("cachepawl_pool_set_ssm_layer", pool, [&](cachepawl_pool& p) {
    CACHEPAWL_RETURN_IF_ERROR(PerLayerArgs(p, i));
    // ssm_base may be NULL: a shortconv layer has no SSM state; conv_base too: a lightning layer
    // has no conv state. A layer with one is checked against the layout at registration
    // ("device_pool.ssm[i].ssm_base: null").
    LayerAt(p.ssm, i) = {true, static_cast<std::byte*>(conv_base),
                         static_cast<std::byte*>(ssm_base), conv_slot_stride, ssm_slot_stride};
    return Status::OK();
  });
}

cachepawl_status cachepawl_pool_set_block_contiguous(cachepawl_pool* pool, void* kv_base,
                                                     uint64_t page_stride, void* state_base,
                                                     uint64_t state_stride) {
  return PoolSetter("cachepawl_pool_set_block_contiguous", pool, [&](cachepawl_pool& p) {
    if (!p.kv.empty() || !p.ssm.empty()) {
      return Status::FailedPrecondition(
          "pool: per-layer entries are set (cachepawl_pool_set_kv_layer/_ssm_layer); a pool "
          "is either per-layer or block-contiguous");
    }
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(kv_base, p.num_pages, "kv_base", "num_pages"));
    CACHEPAWL_RETURN_IF_ERROR(
        NeedSpan(state_base, p.num_state_slots, "state_base", "num_state_slots"));
    p.block_contiguous = true;
    p.kv_base = static_cast<std::byte*>(kv_base);
    p.page_stride = page_stride;
    p.state_base = static_cast<std::byte*>(state_base);
    p.state_stride = state_stride;
    return Status::OK();
  });
}

cachepawl_status cachepawl_store_register_device_pool(cachepawl_store* store,
                                                      const cachepawl_pool* pool) {
  return StoreCall("cachepawl_store_register_device_pool", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(pool, "pool"));
    CACHEPAWL_ASSIGN_OR_RETURN(DevicePoolDescription d, Describe(*pool, s.layout()));
    return s.RegisterDevicePool(d);
  });
}

cachepawl_status cachepawl_store_unregister_device_pool(cachepawl_store* store) {
  return StoreCall("cachepawl_store_unregister_device_pool", store,
                   [&](Store& s) { return s.UnregisterDevicePool(); });
}

cachepawl_status cachepawl_store_allocate_device_slot(cachepawl_store* store, cachepawl_kind kind,
                                                      uint64_t* out) {
  return StoreCall("cachepawl_store_allocate_device_slot", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_ASSIGN_OR_RETURN(Kind k, ToKind(kind));
    CACHEPAWL_ASSIGN_OR_RETURN(*out, s.AllocateDeviceSlot(k));
    return Status::OK();
  });
}

cachepawl_status cachepawl_store_free_device_slot(cachepawl_store* store, cachepawl_kind kind,
                                                  uint64_t slot) {
  return StoreCall("cachepawl_store_free_device_slot", store, [&](Store& s) {
    CACHEPAWL_ASSIGN_OR_RETURN(Kind k, ToKind(kind));
    return s.FreeDeviceSlot(k, slot);
  });
}

cachepawl_status cachepawl_store_write_device_record(cachepawl_store* store, cachepawl_kind kind,
                                                     uint64_t slot, const void* record,
                                                     size_t bytes) {
  return StoreCall("cachepawl_store_write_device_record", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(record, bytes, "record", "bytes"));
    CACHEPAWL_ASSIGN_OR_RETURN(Kind k, ToKind(kind));
    return s.WriteDeviceRecord(k, slot, {static_cast<const std::byte*>(record), bytes});
  });
}

cachepawl_status cachepawl_store_read_device_record(cachepawl_store* store, cachepawl_kind kind,
                                                    uint64_t slot, void* record, size_t bytes) {
  return StoreCall("cachepawl_store_read_device_record", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(record, bytes, "record", "bytes"));
    CACHEPAWL_ASSIGN_OR_RETURN(Kind k, ToKind(kind));
    return s.ReadDeviceRecord(k, slot, {static_cast<std::byte*>(record), bytes});
  });
}

}  // extern "C"
