// Helpers shared by the transfer suites (CPU and GPU): small layouts, pools in host or device
// memory in every supported form, and record-level reads of a pool for byte comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_resources.h"
#include "cuda/gpu_runtime.h"
#include "tests/common/test_util.h"
#include "tiers/host_arena.h"
#include "transfer/device_mover.h"
#include "vocab/device_pool.h"
#include "vocab/model_layout.h"

namespace cachepawl::testing {

// attention layers of `heads` x `dim` (dtype), SSM layers with conv [conv_dim, 3] bf16 and SSM
// state [ssm_rows, 16] fp32. Odd sizes are allowed (segments need not be 16-byte multiples).
inline ModelLayout MakeHybridLayout(uint32_t page, uint32_t attn_layers, uint32_t heads,
                                    uint32_t dim, DType dtype, uint32_t ssm_layers,
                                    uint64_t conv_dim, uint64_t ssm_rows) {
  ModelLayout l;
  l.model = "test-hybrid";
  l.num_layers = attn_layers + ssm_layers;
  l.page_size_tokens = page;
  uint32_t idx = 0;
  for (uint32_t i = 0; i < attn_layers; ++i)
    l.attention_layers.push_back({idx++, heads, dim, dtype, 0});
  for (uint32_t i = 0; i < ssm_layers; ++i) {
    l.ssm_layers.push_back(
        {idx++, "mamba2", {conv_dim, 3}, DType::kBf16, {ssm_rows, 16}, DType::kFp32});
  }
  return l;
}

// MakeHybridLayout with SSM layer `s` turned into a shortconv layer (a conv state, no SSM state).
inline ModelLayout WithShortConvLayer(ModelLayout l, size_t s) {
  l.model += "-shortconv";
  l.ssm_layers[s].block = "shortconv";
  l.ssm_layers[s].ssm_shape.clear();
  return l;
}

enum class PoolForm { kLayerFirst, kInterleaved, kBlockContiguous, kPaddedBlocks };

inline const char* PoolFormName(PoolForm f) {
  switch (f) {
    case PoolForm::kLayerFirst:
      return "layer-first";
    case PoolForm::kInterleaved:
      return "interleaved";
    case PoolForm::kBlockContiguous:
      return "block-contiguous";
    case PoolForm::kPaddedBlocks:
      return "padded-blocks";
  }
  return "?";
}

// Pool memory owned by the test: host memory for device == -1, cudaMalloc otherwise.
class TestPool {
 public:
  TestPool(const ModelLayout& layout, int device, PoolForm form, uint64_t pages, uint64_t states)
      : device_(device) {
    std::vector<std::byte*> k, v, conv, ssm;
    if (form == PoolForm::kBlockContiguous || form == PoolForm::kPaddedBlocks) {
      const uint64_t pad = form == PoolForm::kPaddedBlocks ? 512 : 0;
      const uint64_t ps = layout.has_attention() ? layout.KvPageBytes() + pad : 0;
      const uint64_t ss = layout.has_ssm() ? layout.MambaSlotBytes() + pad : 0;
      std::byte* kv = pages ? New(ps * pages) : nullptr;
      std::byte* st = states ? New(ss * states) : nullptr;
      desc_ = DevicePoolDescription::BlockContiguous(layout, device, kv, pages, ps, st, states, ss);
      return;
    }
    const bool inter = form == PoolForm::kInterleaved;
    for (size_t a = 0; pages && a < layout.attention_layers.size(); ++a) {
      k.push_back(New(layout.KBytesPerPage(a) * pages * (inter ? 2 : 1)));
      v.push_back(inter ? nullptr : New(layout.KBytesPerPage(a) * pages));
    }
    for (size_t s = 0; states && s < layout.ssm_layers.size(); ++s) {
      conv.push_back(New(layout.ConvStateBytes(s) * states));
      // A shortconv layer has no SSM state: no tensor (a null base, as serving engines pass it).
      ssm.push_back(layout.SsmStateBytes(s) > 0 ? New(layout.SsmStateBytes(s) * states) : nullptr);
    }
    desc_ =
        DevicePoolDescription::LayerFirst(layout, device, pages, k, v, inter, states, conv, ssm);
  }
  ~TestPool() = default;
  TestPool(const TestPool&) = delete;
  TestPool& operator=(const TestPool&) = delete;

  const DevicePoolDescription& desc() const { return desc_; }

  // Fills every buffer with seeded random bytes (never zeros).
  void FillRandom(uint64_t seed) {
    for (auto& [p, n] : buffers_) {
      std::vector<std::byte> tmp(n);
      testing::FillRandom(tmp, seed++);
      Write(p, tmp.data(), n);
    }
  }
  void Poison(uint8_t value) {
    for (auto& [p, n] : buffers_) {
      std::vector<std::byte> tmp(n, static_cast<std::byte>(value));
      Write(p, tmp.data(), n);
    }
  }
  // The page-first record of `slot` of `kind`, read from the pool.
  std::vector<std::byte> ReadRecord(const ModelLayout& l, Kind kind, uint64_t slot) const {
    std::vector<std::byte> rec(l.RecordBytes(kind));
    auto read = [&](RecordSegment seg, const std::byte* src) {
      Read(rec.data() + seg.offset, src, seg.bytes);
    };
    if (kind == Kind::kKV) {
      for (size_t a = 0; a < l.attention_layers.size(); ++a) {
        read(l.KSegment(a), desc_.K(a, slot));
        read(l.VSegment(a), desc_.V(a, slot));
      }
    } else {
      for (size_t s = 0; s < l.ssm_layers.size(); ++s) {
        read(l.ConvSegment(s), desc_.Conv(s, slot));
        read(l.SsmSegment(s), desc_.Ssm(s, slot));
      }
    }
    return rec;
  }
  // K then V of attention layer `a` of page `slot`.
  std::vector<std::byte> ReadLayer(const ModelLayout& l, size_t a, uint64_t slot) const {
    std::vector<std::byte> out(2 * l.KBytesPerPage(a));
    Read(out.data(), desc_.K(a, slot), l.KBytesPerPage(a));
    Read(out.data() + l.KBytesPerPage(a), desc_.V(a, slot), l.KBytesPerPage(a));
    return out;
  }
  // Overwrites the record of `slot` in the pool with `value` (every segment).
  void PoisonRecord(const ModelLayout& l, Kind kind, uint64_t slot, uint8_t value) {
    std::vector<std::byte> tmp(l.RecordBytes(kind), static_cast<std::byte>(value));
    auto write = [&](RecordSegment seg, std::byte* dst) { Write(dst, tmp.data(), seg.bytes); };
    if (kind == Kind::kKV) {
      for (size_t a = 0; a < l.attention_layers.size(); ++a) {
        write(l.KSegment(a), desc_.K(a, slot));
        write(l.VSegment(a), desc_.V(a, slot));
      }
    } else {
      for (size_t s = 0; s < l.ssm_layers.size(); ++s) {
        write(l.ConvSegment(s), desc_.Conv(s, slot));
        write(l.SsmSegment(s), desc_.Ssm(s, slot));
      }
    }
  }
  // The whole memory of the pool (to check that nothing outside the destinations changed).
  std::vector<std::byte> Snapshot() const {
    std::vector<std::byte> all;
    for (auto& [p, n] : buffers_) {
      const size_t at = all.size();
      all.resize(at + n);
      Read(all.data() + at, p, n);
    }
    return all;
  }

 private:
  std::byte* New(uint64_t bytes) {
    std::byte* p;
    if (device_ >= 0) {
      device_memory_.push_back(cuda::DeviceBuffer::Allocate(device_, bytes).value());
      p = device_memory_.back().data();
    } else {
      host_memory_.push_back(std::unique_ptr<std::byte[]>(new std::byte[bytes]));
      p = host_memory_.back().get();
    }
    buffers_.push_back({p, bytes});
    return p;
  }
  void Write(std::byte* dst, const std::byte* src, uint64_t n) const {
    if (n == 0) return;  // an empty segment's address may be null
    if (device_ >= 0) {
      (void)cuda::CopySync(dst, src, n);
    } else {
      std::memcpy(dst, src, n);
    }
  }
  void Read(std::byte* dst, const std::byte* src, uint64_t n) const {
    if (n == 0) return;
    if (device_ >= 0) {
      (void)cuda::CopySync(dst, src, n);
    } else {
      std::memcpy(dst, src, n);
    }
  }

  int device_;
  DevicePoolDescription desc_;
  std::vector<std::pair<std::byte*, uint64_t>> buffers_;   // every buffer, in allocation order
  std::vector<cuda::DeviceBuffer> device_memory_;          // device_ >= 0
  std::vector<std::unique_ptr<std::byte[]>> host_memory_;  // device_ == -1
};

// Picks `n` distinct values in [0, range).
inline std::vector<uint64_t> DistinctSlots(std::mt19937_64& rng, uint64_t range, size_t n) {
  std::vector<uint64_t> all(range);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min<size_t>(n, range));
  return all;
}

// One full round trip through `mover`: random pool bytes; Save of `pages` random KV pages
// and `states` random Mamba states (mixed, shuffled) into freshly allocated, poisoned host slots;
// every payload byte compared with the pool's record and every header byte checked untouched;
// then the pool is poisoned and everything is loaded back to other random slots (Load, with
// per-layer fences when asked); every destination byte compared, and every other pool byte
// checked still poisoned. Host slots are freed at the end.
inline ::testing::AssertionResult RoundTrip(DeviceMover& mover, HostArena& arena, TestPool& pool,
                                            const ModelLayout& l, uint64_t seed, size_t pages,
                                            size_t states, bool per_layer) {
  std::mt19937_64 rng(seed);
  pool.FillRandom(seed * 1000 + 1);
  const auto& d = pool.desc();
  struct Item {
    Kind kind;
    uint64_t src, dst;
    HostSlotId host;
    std::vector<std::byte> record;
  };
  std::vector<Item> items;
  auto src_pages = DistinctSlots(rng, d.num_pages, pages);
  auto dst_pages = DistinctSlots(rng, d.num_pages, pages);
  auto src_states = DistinctSlots(rng, d.num_state_slots, states);
  auto dst_states = DistinctSlots(rng, d.num_state_slots, states);
  for (size_t i = 0; i < src_pages.size(); ++i)
    items.push_back({Kind::kKV, src_pages[i], dst_pages[i], 0, {}});
  for (size_t i = 0; i < src_states.size(); ++i)
    items.push_back({Kind::kMamba, src_states[i], dst_states[i], 0, {}});
  std::shuffle(items.begin(), items.end(), rng);
  auto fail = [&](const std::string& why) {
    for (auto& it : items) (void)arena.Free(it.host);
    return ::testing::AssertionFailure() << why;
  };
  Operation save;
  save.direction = Direction::kSave;
  for (auto& it : items) {
    auto h = arena.Allocate(it.kind);
    if (!h.ok()) return fail("host allocation: " + h.status().ToString());
    it.host = *h;
    std::memset(arena.SlotData(it.host), 0x5A, arena.SlotBytes(it.host));
    it.record = pool.ReadRecord(l, it.kind, it.src);
    save.units.push_back({it.kind, {Tier::kDevice, it.src}, {Tier::kHost, it.host}});
  }
  Status st = mover.Submit(save).Wait(std::chrono::seconds(120));
  if (!st.ok()) return fail("Save: " + st.ToString());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    const std::byte* h = arena.SlotData(it.host);
    for (uint64_t b = 0; b < kRecordHeaderBytes; ++b) {
      if (h[b] != std::byte{0x5A})
        return fail("Save wrote into the header block of unit " + std::to_string(i));
    }
    if (std::memcmp(h + kRecordHeaderBytes, it.record.data(), it.record.size()) != 0) {
      size_t at = 0;
      while (h[kRecordHeaderBytes + at] == it.record[at]) ++at;
      return fail("Save: unit " + std::to_string(i) + " (" + std::string(KindName(it.kind)) +
                  " slot " + std::to_string(it.src) + ") differs at record byte " +
                  std::to_string(at));
    }
  }
  pool.Poison(0xC3);
  Operation load;
  load.direction = Direction::kLoad;
  load.per_layer_fences = per_layer;
  for (auto& it : items)
    load.units.push_back({it.kind, {Tier::kHost, it.host}, {Tier::kDevice, it.dst}});
  Fence f = mover.Submit(load);
  if (per_layer) {
    if (f.num_layers() != l.attention_layers.size())
      return fail("per-layer fence count " + std::to_string(f.num_layers()));
    for (size_t a = 0; a < f.num_layers(); ++a) {
      Status ls = f.WaitLayer(a, std::chrono::seconds(120));
      if (!ls.ok()) return fail("layer " + std::to_string(a) + ": " + ls.ToString());
      // Layer a's K and V of every KV unit, and every Mamba unit, must have landed.
      for (const auto& it : items) {
        if (it.kind == Kind::kMamba) {
          if (pool.ReadRecord(l, it.kind, it.dst) != it.record)
            return fail("layer fence fired before a Mamba unit landed");
          continue;
        }
        const auto now = pool.ReadLayer(l, a, it.dst);
        if (std::memcmp(now.data(), it.record.data() + l.KSegment(a).offset, now.size()) != 0) {
          return fail("layer fence " + std::to_string(a) + " fired before its pages landed");
        }
      }
    }
  }
  st = f.Wait(std::chrono::seconds(120));
  if (!st.ok()) return fail("Load: " + st.ToString());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    if (pool.ReadRecord(l, it.kind, it.dst) != it.record) {
      return fail("Load: unit " + std::to_string(i) + " (" + std::string(KindName(it.kind)) +
                  " slot " + std::to_string(it.dst) + ") differs");
    }
  }
  for (const auto& it : items) pool.PoisonRecord(l, it.kind, it.dst, 0xC3);
  const auto snap = pool.Snapshot();
  for (size_t b = 0; b < snap.size(); ++b) {
    if (snap[b] != std::byte{0xC3})
      return fail("Load wrote outside its destinations (pool byte " + std::to_string(b) + ")");
  }
  for (auto& it : items) {
    Status fs = arena.Free(it.host);
    if (!fs.ok()) return ::testing::AssertionFailure() << fs.ToString();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace cachepawl::testing
