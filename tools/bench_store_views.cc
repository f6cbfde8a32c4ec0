// `cachepawl bench store`: the views through which the bench writes, poisons and checks the
// records of a device pool, store-owned (through the Store API) or its own (tools/bench_store.h).
#include <algorithm>
#include <cstring>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "store/store.h"
#include "tools/bench_store.h"

namespace cachepawl::tools::bench_store {

// ---------------------------------------------------------------------------------------------
// Pool views
// ---------------------------------------------------------------------------------------------

namespace {

std::string Describe(Kind kind, uint64_t slot, uint64_t byte, std::byte got, uint64_t seed) {
  std::byte want{};
  FillRecordAt(seed, byte, std::span<std::byte>(&want, 1));
  std::ostringstream o;
  o << KindName(kind) << " slot " << slot << ", byte " << byte << " of the record: got 0x"
    << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(got) << ", want 0x"
    << std::setw(2) << static_cast<int>(want);
  return o.str();
}

// Reused host buffers: records of tens of MiB would otherwise be fresh mappings (page faults)
// on every call.
class Scratch {
 public:
  class Lease {
   public:
    Lease(Scratch* s, size_t n) : s_(s), v_(s->Take(n)) {}
    ~Lease() { s_->Give(std::move(v_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    std::vector<std::byte>& operator*() { return v_; }
    std::vector<std::byte>* operator->() { return &v_; }

   private:
    Scratch* s_;
    std::vector<std::byte> v_;
  };

 private:
  std::vector<std::byte> Take(size_t n) {
    std::vector<std::byte> v;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        v = std::move(free_.back());
        free_.pop_back();
      }
    }
    v.resize(n);
    return v;
  }
  void Give(std::vector<std::byte> v) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < 32) free_.push_back(std::move(v));
  }
  std::mutex mu_;
  std::vector<std::vector<std::byte>> free_;
};

class OwnedView final : public PoolView {
 public:
  OwnedView(Store* store, const ModelLayout& layout) : store_(store), layout_(layout) {
    for (Kind k : {Kind::kKV, Kind::kMamba}) {
      if (k == Kind::kMamba && !layout.has_ssm()) continue;
      poison_[static_cast<int>(k)].assign(layout.RecordBytes(k), std::byte{kPoison});
    }
  }
  Status Write(Kind kind, std::span<const uint64_t> slots,
               std::span<const uint64_t> seeds) override {
    Scratch::Lease rec(&scratch_, layout_.RecordBytes(kind));
    for (size_t i = 0; i < slots.size(); ++i) {
      FillRecord(seeds[i], *rec);
      CACHEPAWL_RETURN_IF_ERROR(store_->WriteDeviceRecord(kind, slots[i], *rec));
    }
    return Status::OK();
  }
  Status Poison(Kind kind, std::span<const uint64_t> slots) override {
    for (uint64_t s : slots) {
      CACHEPAWL_RETURN_IF_ERROR(
          store_->WriteDeviceRecord(kind, s, poison_[static_cast<int>(kind)]));
    }
    return Status::OK();
  }
  StatusOr<std::string> Verify(Kind kind, std::span<const uint64_t> slots,
                               std::span<const uint64_t> seeds) override {
    Scratch::Lease rec(&scratch_, layout_.RecordBytes(kind));
    for (size_t i = 0; i < slots.size(); ++i) {
      CACHEPAWL_RETURN_IF_ERROR(store_->ReadDeviceRecord(kind, slots[i], *rec));
      const size_t bad = FirstMismatch(seeds[i], *rec);
      if (bad != std::string::npos) return Describe(kind, slots[i], bad, (*rec)[bad], seeds[i]);
    }
    return std::string();
  }

 private:
  Store* const store_;
  const ModelLayout layout_;
  std::vector<std::byte> poison_[kNumKinds];
  Scratch scratch_;
};

// Straight to bench memory: one segment per tensor a record is split over (layer-first) or the
// whole record (block). Runs of consecutive slots move as one copy per segment in GPU mode.
class BenchView final : public PoolView {
 public:
  BenchView(const ModelLayout& layout, const BenchPool& pool, bool block, bool gpu)
      : layout_(layout), gpu_(gpu) {
    const DevicePoolDescription& d = block ? pool.block : pool.layer_first;
    auto& kv = segs_[static_cast<int>(Kind::kKV)];
    auto& st = segs_[static_cast<int>(Kind::kMamba)];
    if (block) {
      if (!d.attention.empty()) {
        kv.push_back(
            {d.K(0, 0) - layout.KSegment(0).offset, layout.KvPageBytes(), 0, layout.KvPageBytes()});
      }
      if (!d.ssm.empty()) {
        st.push_back({d.Conv(0, 0) - layout.ConvSegment(0).offset, layout.MambaSlotBytes(), 0,
                      layout.MambaSlotBytes()});
      }
      return;
    }
    for (size_t a = 0; a < d.attention.size(); ++a) {
      kv.push_back({d.attention[a].k_base, d.attention[a].k_page_stride, layout.KSegment(a).offset,
                    layout.KSegment(a).bytes});
      kv.push_back({d.attention[a].v_base, d.attention[a].v_page_stride, layout.VSegment(a).offset,
                    layout.VSegment(a).bytes});
    }
    for (size_t s = 0; s < d.ssm.size(); ++s) {
      st.push_back({d.ssm[s].conv_base, d.ssm[s].conv_slot_stride, layout.ConvSegment(s).offset,
                    layout.ConvSegment(s).bytes});
      st.push_back({d.ssm[s].ssm_base, d.ssm[s].ssm_slot_stride, layout.SsmSegment(s).offset,
                    layout.SsmSegment(s).bytes});
    }
  }

  Status Write(Kind kind, std::span<const uint64_t> slots,
               std::span<const uint64_t> seeds) override {
    const uint64_t rec = layout_.RecordBytes(kind);
    Scratch::Lease recs_lease(&scratch_, 0), stage_lease(&scratch_, 0);
    std::vector<std::byte>& recs = *recs_lease;
    std::vector<std::byte>& stage = *stage_lease;
    return ForRuns(kind, slots, [&](size_t i, size_t m) -> Status {
      recs.resize(m * rec);
      for (size_t r = 0; r < m; ++r) FillRecord(seeds[i + r], {recs.data() + r * rec, rec});
      for (const Seg& g : segs_[static_cast<int>(kind)]) {
        std::byte* dev = g.base + slots[i] * g.stride;
        if (gpu_ && g.stride == g.bytes) {
          stage.resize(m * g.bytes);
          for (size_t r = 0; r < m; ++r) {
            std::memcpy(stage.data() + r * g.bytes, recs.data() + r * rec + g.offset, g.bytes);
          }
          CACHEPAWL_RETURN_IF_ERROR(CopyBytes(dev, stage.data(), stage.size(), gpu_));
        } else {
          for (size_t r = 0; r < m; ++r) {
            CACHEPAWL_RETURN_IF_ERROR(
                CopyBytes(dev + r * g.stride, recs.data() + r * rec + g.offset, g.bytes, gpu_));
          }
        }
      }
      return Status::OK();
    });
  }

  Status Poison(Kind kind, std::span<const uint64_t> slots) override {
    return ForRuns(kind, slots, [&](size_t i, size_t m) -> Status {
      for (const Seg& g : segs_[static_cast<int>(kind)]) {
        std::byte* dev = g.base + slots[i] * g.stride;
        if (g.stride == g.bytes) {
          CACHEPAWL_RETURN_IF_ERROR(FillBytes(dev, kPoison, m * g.bytes, gpu_));
        } else {
          for (size_t r = 0; r < m; ++r) {
            CACHEPAWL_RETURN_IF_ERROR(FillBytes(dev + r * g.stride, kPoison, g.bytes, gpu_));
          }
        }
      }
      return Status::OK();
    });
  }

  StatusOr<std::string> Verify(Kind kind, std::span<const uint64_t> slots,
                               std::span<const uint64_t> seeds) override {
    Scratch::Lease stage_lease(&scratch_, 0);
    std::vector<std::byte>& stage = *stage_lease;
    std::string bad;
    Status s = ForRuns(kind, slots, [&](size_t i, size_t m) -> Status {
      if (!bad.empty()) return Status::OK();
      for (const Seg& g : segs_[static_cast<int>(kind)]) {
        const std::byte* dev = g.base + slots[i] * g.stride;
        const bool one_copy = g.stride == g.bytes;
        if (gpu_ && one_copy) {
          stage.resize(m * g.bytes);
          CACHEPAWL_RETURN_IF_ERROR(CopyBytes(stage.data(), dev, stage.size(), gpu_));
        }
        for (size_t r = 0; r < m && bad.empty(); ++r) {
          const std::byte* piece = dev + r * g.stride;
          if (gpu_ && one_copy) {
            piece = stage.data() + r * g.bytes;
          } else if (gpu_) {
            stage.resize(g.bytes);
            CACHEPAWL_RETURN_IF_ERROR(CopyBytes(stage.data(), piece, g.bytes, gpu_));
            piece = stage.data();
          }
          const size_t at = FirstMismatch(seeds[i + r], {piece, g.bytes}, g.offset);
          if (at != std::string::npos) {
            bad = Describe(kind, slots[i + r], g.offset + at, piece[at], seeds[i + r]);
          }
        }
        if (!bad.empty()) return Status::OK();
      }
      return Status::OK();
    });
    if (!s.ok()) return s;
    return bad;
  }

 private:
  struct Seg {
    std::byte* base;
    uint64_t stride, offset, bytes;
  };
  // Calls fn(first, count) for runs of consecutive slots of at most ~64 MiB of records.
  template <typename Fn>
  Status ForRuns(Kind kind, std::span<const uint64_t> slots, Fn fn) {
    const uint64_t per = std::max<uint64_t>(1, (64 * kMiB) / layout_.RecordBytes(kind));
    for (size_t i = 0; i < slots.size();) {
      size_t j = i + 1;
      while (j < slots.size() && j - i < per && slots[j] == slots[j - 1] + 1) ++j;
      CACHEPAWL_RETURN_IF_ERROR(fn(i, j - i));
      i = j;
    }
    return Status::OK();
  }

  const ModelLayout layout_;
  const bool gpu_;
  std::vector<Seg> segs_[kNumKinds];
  Scratch scratch_;
};

}  // namespace

std::unique_ptr<PoolView> MakeOwnedView(Store* store, const ModelLayout& layout) {
  return std::make_unique<OwnedView>(store, layout);
}

std::unique_ptr<PoolView> MakeBenchView(const ModelLayout& layout, const BenchPool& pool,
                                        bool block, bool gpu) {
  return std::make_unique<BenchView>(layout, pool, block, gpu);
}

ThreadSlots BenchSlots(uint32_t thread, uint64_t pages, bool ssm) {
  ThreadSlots s;
  const uint64_t first = 2 * uint64_t{thread} * pages;
  for (uint64_t i = 0; i < pages; ++i) {
    s.src_pages.push_back(first + i);
    s.dst_pages.push_back(first + pages + i);
  }
  if (ssm) {
    s.src_state = 2 * uint64_t{thread};
    s.dst_state = 2 * uint64_t{thread} + 1;
  }
  return s;
}

Status PoisonDestinations(PoolView& view, const ThreadSlots& s) {
  CACHEPAWL_RETURN_IF_ERROR(view.Poison(Kind::kKV, s.dst_pages));
  if (s.dst_state) CACHEPAWL_RETURN_IF_ERROR(view.Poison(Kind::kMamba, {&*s.dst_state, 1}));
  return Status::OK();
}

StatusOr<std::string> VerifyDestinations(PoolView& view, const ThreadSlots& s) {
  CACHEPAWL_ASSIGN_OR_RETURN(std::string bad, view.Verify(Kind::kKV, s.dst_pages, s.page_seeds));
  if (bad.empty() && s.dst_state) {
    CACHEPAWL_ASSIGN_OR_RETURN(bad,
                               view.Verify(Kind::kMamba, {&*s.dst_state, 1}, {&s.state_seed, 1}));
  }
  return bad;
}

Status WriteSources(PoolView& view, const ThreadSlots& s) {
  CACHEPAWL_RETURN_IF_ERROR(view.Write(Kind::kKV, s.src_pages, s.page_seeds));
  if (s.src_state) {
    CACHEPAWL_RETURN_IF_ERROR(view.Write(Kind::kMamba, {&*s.src_state, 1}, {&s.state_seed, 1}));
  }
  return Status::OK();
}

}  // namespace cachepawl::tools::bench_store
