// Helpers for the disk tier's tests: a small hybrid layout, a HostMemory over aligned memory,
// and keys and payloads derived deterministically from a number (the crash tests' oracle).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/common/test_util.h"
#include "tiers/disk_catalog.h"
#include "tiers/disk_record.h"
#include "tiers/host_memory.h"
#include "vocab/model_layout.h"
#include "vocab/page_hash.h"

namespace cachepawl::testing {

// One attention layer (KV record 8 KiB -> 12 KiB slot) and one Mamba layer (8.4 KiB state
// -> 16 KiB slot): small, so tests move thousands of records quickly.
inline ModelLayout SmallHybridLayout(const std::string& model = "test/small-hybrid") {
  ModelLayout l;
  l.model = model;
  l.num_layers = 2;
  l.page_size_tokens = 16;
  l.attention_layers.push_back({0, 2, 64, DType::kBf16, 0});
  l.ssm_layers.push_back({1, "mamba2", {64, 3}, DType::kBf16, {2, 64, 16}, DType::kFp32});
  return l;
}

// A HostMemory over plain 4 KiB-aligned memory: `slot_bytes[i]` is the size of slot i; the
// slots are spread over `num_regions` regions. Slot ids are 0..n-1.
class TestHostMemory final : public HostMemory {
 public:
  explicit TestHostMemory(std::vector<uint64_t> slot_bytes, size_t num_regions = 2)
      : slot_bytes_(std::move(slot_bytes)) {
    num_regions = std::max<size_t>(1, std::min(num_regions, slot_bytes_.size()));
    const size_t per_region = (slot_bytes_.size() + num_regions - 1) / num_regions;
    for (size_t first = 0; first < slot_bytes_.size(); first += per_region) {
      const size_t last = std::min(slot_bytes_.size(), first + per_region);
      uint64_t bytes = 0;
      for (size_t i = first; i < last; ++i) bytes += slot_bytes_[i];
      void* p = std::aligned_alloc(kDirectIoAlignment, bytes);
      if (p == nullptr) throw std::bad_alloc();
      std::memset(p, 0xA5, bytes);
      regions_.push_back({static_cast<std::byte*>(p), bytes});
      uint64_t off = 0;
      for (size_t i = first; i < last; ++i) {
        slot_data_.push_back(static_cast<std::byte*>(p) + off);
        slot_region_.push_back(static_cast<int>(regions_.size() - 1));
        off += slot_bytes_[i];
      }
    }
  }
  // `n_kv` KV slots then `n_mamba` Mamba slots of `layout`.
  static std::unique_ptr<TestHostMemory> ForLayout(const ModelLayout& layout, size_t n_kv,
                                                   size_t n_mamba, size_t num_regions = 2) {
    std::vector<uint64_t> sizes(n_kv, RecordSlotBytes(layout, Kind::kKV));
    sizes.insert(sizes.end(), n_mamba, RecordSlotBytes(layout, Kind::kMamba));
    return std::make_unique<TestHostMemory>(std::move(sizes), num_regions);
  }
  ~TestHostMemory() override {
    for (auto& r : regions_) std::free(r.data());
  }

  std::byte* SlotData(HostSlotId slot) override { return slot_data_.at(slot); }
  uint64_t SlotBytes(HostSlotId slot) const override { return slot_bytes_.at(slot); }
  std::vector<std::span<std::byte>> Regions() const override { return regions_; }
  int RegionOf(HostSlotId slot) const override { return slot_region_.at(slot); }
  size_t size() const { return slot_bytes_.size(); }

 private:
  std::vector<uint64_t> slot_bytes_;
  std::vector<std::span<std::byte>> regions_;
  std::vector<std::byte*> slot_data_;
  std::vector<int> slot_region_;
};

// The key of record number `n`: a hash derived from n (and the kind), depth n*16.
inline DiskKey TestKey(Kind kind, uint64_t n) {
  DiskKey k;
  k.kind = kind;
  FillRandom(std::span<std::byte>(reinterpret_cast<std::byte*>(k.hash.bytes.data()), 32),
             n * 2 + (kind == Kind::kMamba ? 1 : 0) + 0x5eed);
  k.depth = (n + 1) * 16;
  return k;
}

inline PageHash TestParent(Kind kind, uint64_t n) {
  return n == 0 ? PageHash::Zero() : TestKey(kind, n - 1).hash;
}

// The payload written for `key`: bytes derived from the key alone.
inline void FillPayloadForKey(const DiskKey& key, std::span<std::byte> payload) {
  uint64_t seed = key.depth * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(key.kind);
  for (size_t i = 0; i < 32; i += 8) {
    uint64_t v;
    std::memcpy(&v, key.hash.bytes.data() + i, 8);
    seed ^= v + (seed << 6) + (seed >> 2);
  }
  FillRandom(payload, seed);
}

// True when `payload` is exactly what FillPayloadForKey writes for `key`.
inline bool PayloadMatchesKey(const DiskKey& key, std::span<const std::byte> payload) {
  std::vector<std::byte> want(payload.size());
  FillPayloadForKey(key, want);
  return std::memcmp(want.data(), payload.data(), payload.size()) == 0;
}

// A catalog record of TestKey(kind, n), its fields derived from n (extent in file n % 3).
inline CatalogRecord TestCatalogRecord(Kind kind, uint64_t n) {
  CatalogRecord r;
  r.key = TestKey(kind, n);
  r.parent = TestKey(kind, n + 100).hash;
  r.extent = {static_cast<uint32_t>(n % 3), n * 8192, 8192};
  r.checksum = 0x1234567890abcdefull ^ n;
  r.fingerprint.fill(static_cast<uint8_t>(n));
  r.stamp = 1000 + n;
  return r;
}

}  // namespace cachepawl::testing
