#include <string>

#include "cuda/gpu_runtime.h"
#include "vocab/device_pool.h"

namespace cachepawl {

namespace {

// One strided tensor of a pool: `count` pieces of `bytes` at base + i * stride.
struct StridedTensor {
  std::string name;  // "device_pool.attention[3].k"
  int kind = 0;
  uintptr_t base = 0;
  uint64_t stride = 0;
  uint64_t bytes = 0;
  uint64_t count = 0;
  uint64_t span() const { return (count - 1) * stride + bytes; }
};

Status CheckTensor(const StridedTensor& t, const char* stride_field) {
  if (t.base == 0) return Status::InvalidArgument(t.name + "_base: null");
  if (t.count > 1 && t.stride < t.bytes) {
    return Status::InvalidArgument(t.name + "_" + stride_field + ": " + std::to_string(t.stride) +
                                   " (smaller than the " + std::to_string(t.bytes) +
                                   " bytes of one slot: slots would overlap)");
  }
  if (t.count > 1 && t.stride > (UINT64_MAX - t.bytes) / (t.count - 1)) {
    return Status::InvalidArgument(t.name + "_" + stride_field + ": " + std::to_string(t.stride) +
                                   " (the tensor's span overflows 64 bits)");
  }
  if (t.span() > UINTPTR_MAX - t.base) {
    return Status::InvalidArgument(t.name + "_base: the tensor's end wraps the address space");
  }
  return Status::OK();
}

// True when no byte of `a` can be a byte of `b`. Exact for disjoint spans; for overlapping spans
// with equal strides, checks that the two tensors occupy disjoint residues modulo the stride;
// otherwise (overlapping spans, different strides) conservatively reports an overlap.
bool Disjoint(const StridedTensor& a, const StridedTensor& b) {
  if (a.base + a.span() <= b.base || b.base + b.span() <= a.base) return true;
  const StridedTensor& lo = a.base <= b.base ? a : b;
  const StridedTensor& hi = a.base <= b.base ? b : a;
  if (lo.stride != hi.stride || lo.stride == 0 || lo.count == 1 || hi.count == 1) return false;
  const uint64_t d = (hi.base - lo.base) % lo.stride;
  return d >= lo.bytes && d + hi.bytes <= lo.stride;
}

}  // namespace

Status DevicePoolDescription::Validate(const ModelLayout& layout) const {
  if (device < -1) {
    return Status::InvalidArgument("device_pool.device: " + std::to_string(device) +
                                   " (must be a GPU index, or -1 for host memory)");
  }
  if (num_pages > 0 && !layout.has_attention()) {
    return Status::InvalidArgument("device_pool.num_pages: " + std::to_string(num_pages) +
                                   " (the layout has no attention layers, so no KV pages: a pure "
                                   "SSM pool has 0 and state slots only)");
  }
  if (num_state_slots > 0 && !layout.has_ssm()) {
    return Status::InvalidArgument(
        "device_pool.num_state_slots: " + std::to_string(num_state_slots) +
        " (the layout has no SSM layers)");
  }
  if (num_pages > 0 && attention.size() != layout.attention_layers.size()) {
    return Status::InvalidArgument(
        "device_pool.attention: " + std::to_string(attention.size()) + " entries (the layout has " +
        std::to_string(layout.attention_layers.size()) + " attention layers)");
  }
  if (num_state_slots > 0 && ssm.size() != layout.ssm_layers.size()) {
    return Status::InvalidArgument("device_pool.ssm: " + std::to_string(ssm.size()) +
                                   " entries (the layout has " +
                                   std::to_string(layout.ssm_layers.size()) + " SSM layers)");
  }
  if (num_pages == 0 && num_state_slots == 0) {
    return Status::InvalidArgument("device_pool: num_pages and num_state_slots are both 0");
  }
  // Every tensor of the pool, named as its fields are: K and V of each attention layer, then
  // conv and SSM state of each SSM layer (a shortconv layer has no SSM tensor: its base and
  // stride are not read and may be null / 0).
  std::vector<StridedTensor> tensors;
  const auto add = [&](Kind kind, const std::vector<LayerSegment>& segments, uint64_t count) {
    const bool kv = kind != Kind::kMamba;
    for (const PoolTensor& t : Tensors(kind, segments)) {
      const std::string name =
          std::string(kv ? "device_pool.attention[" : "device_pool.ssm[") +
          std::to_string(t.segment.layer) + "]." +
          (kv ? (t.segment.second ? "v" : "k") : (t.segment.second ? "ssm" : "conv"));
      tensors.push_back({name, kv ? 0 : 1, reinterpret_cast<uintptr_t>(t.base), t.stride,
                         t.segment.segment.bytes, count});
    }
  };
  if (num_pages > 0) add(Kind::kKV, layout.KvPageSegments(), num_pages);
  if (num_state_slots > 0) {
    add(Kind::kMamba, layout.RecordSegments(Kind::kMamba), num_state_slots);
  }
  for (const StridedTensor& t : tensors) {
    CACHEPAWL_RETURN_IF_ERROR(CheckTensor(t, t.kind == 0 ? "page_stride" : "slot_stride"));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (size_t j = i + 1; j < tensors.size(); ++j) {
      if (kinds_share_memory && tensors[i].kind != tensors[j].kind) continue;
      if (!Disjoint(tensors[i], tensors[j])) {
        return Status::InvalidArgument(tensors[i].name + " overlaps " + tensors[j].name);
      }
    }
  }
  if (device >= 0) {
    if (!cuda::GpuAvailable()) {
      return Status::InvalidArgument("device_pool.device: " + std::to_string(device) +
                                     " but no GPU is usable (" + cuda::DescribeDevice(device) +
                                     "); use -1 for a host-memory pool");
    }
    for (const StridedTensor& t : tensors) {
      CACHEPAWL_RETURN_IF_ERROR(
          cuda::CheckDevicePointer(reinterpret_cast<const void*>(t.base), device, t.name));
      CACHEPAWL_RETURN_IF_ERROR(cuda::CheckDevicePointer(
          reinterpret_cast<const void*>(t.base + t.span() - 1), device, t.name + " (last byte)"));
    }
  }
  return Status::OK();
}

}  // namespace cachepawl
