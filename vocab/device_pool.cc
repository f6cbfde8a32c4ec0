// DevicePoolDescription's builders (vocab/device_pool.h). Its Validate, which asks the
// CUDA runtime about each tensor, is in tiers/device_pool_validate.cc.
#include "vocab/device_pool.h"

namespace cachepawl {

std::vector<PoolTensor> DevicePoolDescription::Tensors(
    Kind kind, const std::vector<LayerSegment>& segments) const {
  std::vector<PoolTensor> out;
  out.reserve(segments.size());
  for (const LayerSegment& ls : segments) {
    if (ls.segment.bytes == 0) continue;
    if (kind == Kind::kMamba) {
      const SsmLayerPool& p = ssm[ls.layer];
      out.push_back({ls, ls.second ? p.ssm_base : p.conv_base,
                     ls.second ? p.ssm_slot_stride : p.conv_slot_stride});
    } else {
      const KvLayerPool& p = attention[ls.layer];
      out.push_back(
          {ls, ls.second ? p.v_base : p.k_base, ls.second ? p.v_page_stride : p.k_page_stride});
    }
  }
  return out;
}

DevicePoolDescription DevicePoolDescription::LayerFirst(const ModelLayout& layout, int device,
                                                        uint64_t num_pages,
                                                        const std::vector<std::byte*>& k_bases,
                                                        const std::vector<std::byte*>& v_bases,
                                                        bool interleaved, uint64_t num_state_slots,
                                                        const std::vector<std::byte*>& conv_bases,
                                                        const std::vector<std::byte*>& ssm_bases) {
  DevicePoolDescription d;
  d.device = device;
  d.num_pages = num_pages;
  d.num_state_slots = num_state_slots;
  if (num_pages > 0) {
    for (size_t a = 0; a < k_bases.size(); ++a) {
      const uint64_t kb = layout.KBytesPerPage(a), vb = layout.VBytesPerPage(a);
      KvLayerPool p;
      p.k_base = k_bases[a];
      if (interleaved) {
        p.v_base = k_bases[a] + kb;
        p.k_page_stride = p.v_page_stride = kb + vb;
      } else {
        p.v_base = a < v_bases.size() ? v_bases[a] : nullptr;
        p.k_page_stride = kb;
        p.v_page_stride = vb;
      }
      d.attention.push_back(p);
    }
  }
  if (num_state_slots > 0) {
    for (size_t s = 0; s < conv_bases.size(); ++s) {
      SsmLayerPool p;
      p.conv_base = conv_bases[s];
      p.ssm_base = s < ssm_bases.size() ? ssm_bases[s] : nullptr;
      p.conv_slot_stride = layout.ConvStateBytes(s);
      p.ssm_slot_stride = layout.SsmStateBytes(s);
      d.ssm.push_back(p);
    }
  }
  return d;
}

DevicePoolDescription DevicePoolDescription::BlockContiguous(
    const ModelLayout& layout, int device, std::byte* kv_base, uint64_t num_pages,
    uint64_t page_stride, std::byte* state_base, uint64_t num_state_slots, uint64_t state_stride) {
  DevicePoolDescription d;
  d.device = device;
  d.num_pages = num_pages;
  d.num_state_slots = num_state_slots;
  if (num_pages > 0) {
    if (page_stride == 0) page_stride = layout.KvPageBytes();
    const std::vector<LayerSegment> segs = layout.KvPageSegments();  // K, V of each layer
    for (size_t i = 0; i + 1 < segs.size(); i += 2) {
      d.attention.push_back({kv_base + segs[i].segment.offset, kv_base + segs[i + 1].segment.offset,
                             page_stride, page_stride});
    }
  }
  if (num_state_slots > 0) {
    if (state_stride == 0) state_stride = layout.MambaSlotBytes();
    const std::vector<LayerSegment> segs = layout.RecordSegments(Kind::kMamba);  // conv, SSM
    for (size_t i = 0; i + 1 < segs.size(); i += 2) {
      d.ssm.push_back({state_base + segs[i].segment.offset, state_base + segs[i + 1].segment.offset,
                       state_stride, state_stride});
    }
  }
  return d;
}

}  // namespace cachepawl
