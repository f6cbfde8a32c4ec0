// DevicePool: where the KV pages and Mamba states of one GPU live, described by base pointers and
// strides. The pool's memory is owned by someone else: the serving engine (its own paged cache
// tensors) or a DevicePoolArena (tiers/device_pool_arena.h, store-owned VRAM). The device
// mover reads and writes pages and states through a description; it never frees the memory.
//
// Device slot numbers (transfer/transfer_unit.h TierSlot): for KV, a page index in
// [0, num_pages); for Mamba, a state slot index in [0, num_state_slots).
//
// For attention layer a (the a-th entry of layout.attention_layers), page p's K is the
// KBytesPerPage(a) contiguous bytes at k_base + p * k_page_stride (the page's
// [page_size_tokens, num_kv_heads, head_dim] block), and V likewise. This covers
//   - layer-first pools with separate K and V tensors, [num_pages, page, heads, dim] each
//     (stride = KBytesPerPage): LayerFirst();
//   - K and V interleaved per page, [num_pages, 2, page, heads, dim] (v_base = k_base + K bytes,
//     stride = 2 * K bytes): LayerFirst(..., interleaved = true);
//   - block-contiguous pools where all layers of a page are adjacent
//     [num_pages, layers, 2, page, heads, dim]: BlockContiguous() (the device mover then moves
//     whole pages with copy engines and no kernel).
// For SSM layer s, state slot i's conv state is ConvStateBytes(s) contiguous bytes at
// conv_base + i * conv_slot_stride, its SSM state SsmStateBytes(s) bytes at
// ssm_base + i * ssm_slot_stride. A layer without an SSM state (shortconv, 0 bytes) has no SSM
// tensor: its ssm_base and ssm_slot_stride are ignored (null / 0 are fine).
//
// Thread safety: a DevicePoolDescription is a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl {

struct KvLayerPool {
  std::byte* k_base = nullptr;
  std::byte* v_base = nullptr;
  uint64_t k_page_stride = 0;  // bytes from page p's K to page p+1's K
  uint64_t v_page_stride = 0;
};

struct SsmLayerPool {
  std::byte* conv_base = nullptr;
  std::byte* ssm_base = nullptr;
  uint64_t conv_slot_stride = 0;
  uint64_t ssm_slot_stride = 0;
};

// One tensor of a pool, for one segment of a record (or of a KV page): slot i's bytes of
// `segment` are the segment.segment.bytes bytes at base + i * stride.
struct PoolTensor {
  LayerSegment segment;
  std::byte* base = nullptr;
  uint64_t stride = 0;
};

struct DevicePoolDescription {
  // The GPU that holds the memory; -1 means host memory (CPU mode, tests).
  int device = 0;
  uint64_t num_pages = 0;              // KV page slots; 0 when the layout has no attention layers
  uint64_t num_state_slots = 0;        // Mamba state slots; 0 when the layout has no SSM layers
  std::vector<KvLayerPool> attention;  // one per layout.attention_layers entry, same order
  std::vector<SsmLayerPool> ssm;       // one per layout.ssm_layers entry, same order
  // Set by owners that allocate KV pages and Mamba states out of the same memory and guarantee
  // that a live page never overlaps a live state (DevicePoolArena). Validate() then checks
  // overlap within each kind only.
  bool kinds_share_memory = false;

  // Checks the description against `layout`: one entry per layer, non-null bases, strides that
  // keep slots from overlapping, no two tensors overlapping, offsets that do not overflow, and,
  // for device >= 0, that every tensor is memory of that GPU. No alignment is required (the
  // device mover moves bytes; 16-byte aligned bases, strides and sizes take the kernels' vector
  // path; block-contiguous records of odd-sized segments are unaligned by nature). Errors:
  // InvalidArgument naming the entry and the value at fault, e.g.
  // "device_pool.attention[3].v_page_stride: 1024 (smaller than the 32768 bytes of one page's V)".
  Status Validate(const ModelLayout& layout) const;

  // Address of page `page`'s K / V of attention layer `a`, and of state `slot`'s conv / SSM
  // state of SSM layer `s` (no range checks).
  std::byte* K(size_t a, uint64_t page) const {
    return attention[a].k_base + page * attention[a].k_page_stride;
  }
  std::byte* V(size_t a, uint64_t page) const {
    return attention[a].v_base + page * attention[a].v_page_stride;
  }
  std::byte* Conv(size_t s, uint64_t slot) const {
    return ssm[s].conv_base + slot * ssm[s].conv_slot_stride;
  }
  std::byte* Ssm(size_t s, uint64_t slot) const {
    return ssm[s].ssm_base + slot * ssm[s].ssm_slot_stride;
  }

  // The tensor that holds each segment of `segments` (layout.RecordSegments(kind), or
  // layout.KvPageSegments() with kind kKV), in order: K / V of attention[segment.layer] for kKV
  // and kWindowKV, conv / SSM state of ssm[segment.layer] for kMamba. A segment of 0 bytes (the
  // SSM state of a shortconv layer) has no tensor and is left out. No range checks: every
  // segment's layer must have an entry.
  std::vector<PoolTensor> Tensors(Kind kind, const std::vector<LayerSegment>& segments) const;

  // Builders. `k_bases[a]` / `v_bases[a]` point at each attention layer's K / V tensor of
  // `num_pages` pages; with `interleaved`, v_bases is ignored and each layer's single tensor
  // is [num_pages, 2, page, heads, dim]. conv/ssm bases likewise with contiguous slots.
  static DevicePoolDescription LayerFirst(const ModelLayout& layout, int device, uint64_t num_pages,
                                          const std::vector<std::byte*>& k_bases,
                                          const std::vector<std::byte*>& v_bases, bool interleaved,
                                          uint64_t num_state_slots,
                                          const std::vector<std::byte*>& conv_bases,
                                          const std::vector<std::byte*>& ssm_bases);
  // All layers of page p are the KvPageBytes() record at kv_base + p * page_stride, in the
  // page-first record order of the layout (K then V per layer); likewise each Mamba state is
  // one record at state_base + i * state_stride. Strides of 0 mean the record size.
  static DevicePoolDescription BlockContiguous(const ModelLayout& layout, int device,
                                               std::byte* kv_base, uint64_t num_pages,
                                               uint64_t page_stride, std::byte* state_base,
                                               uint64_t num_state_slots, uint64_t state_stride);
};

}  // namespace cachepawl
