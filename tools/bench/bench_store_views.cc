// `cachepawl bench store`: the views through which the bench writes, poisons and checks the
// records of a device pool, store-owned (through the Store API) or its own
// (tools/bench/bench_store.h).
#include <algorithm>
#include <cstring>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "store/store.h"
#include "tools/bench/bench_store.h"

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

class OwnedView final : public PoolView {
 public:
  OwnedView(Store* store, const ModelLayout& layout, HostBuffers* buffers)
      : store_(store), layout_(layout), buffers_(buffers) {}
  Status Write(Kind kind, std::span<const uint64_t> slots,
               std::span<const uint64_t> seeds) override {
    const uint64_t n = layout_.RecordBytes(kind);
    HostBuffers::Lease lease(buffers_);
    CACHEPAWL_ASSIGN_OR_RETURN(std::byte * rec, lease.Get(n));
    for (size_t i = 0; i < slots.size(); ++i) {
      FillRecord(seeds[i], {rec, n});
      CACHEPAWL_RETURN_IF_ERROR(store_->WriteDeviceRecord(kind, slots[i], {rec, n}));
    }
    return Status::OK();
  }
  Status Poison(Kind kind, std::span<const uint64_t> slots) override {
    const uint64_t n = layout_.RecordBytes(kind);
    HostBuffers::Lease lease(buffers_);
    CACHEPAWL_ASSIGN_OR_RETURN(std::byte * rec, lease.Get(n));
    std::memset(rec, kPoison, n);
    for (uint64_t s : slots)
      CACHEPAWL_RETURN_IF_ERROR(store_->WriteDeviceRecord(kind, s, {rec, n}));
    return Status::OK();
  }
  StatusOr<std::string> Verify(Kind kind, std::span<const uint64_t> slots,
                               std::span<const uint64_t> seeds) override {
    const uint64_t n = layout_.RecordBytes(kind);
    HostBuffers::Lease lease(buffers_);
    CACHEPAWL_ASSIGN_OR_RETURN(std::byte * rec, lease.Get(n));
    for (size_t i = 0; i < slots.size(); ++i) {
      CACHEPAWL_RETURN_IF_ERROR(store_->ReadDeviceRecord(kind, slots[i], {rec, n}));
      const size_t bad = FirstMismatch(seeds[i], {rec, n});
      if (bad != std::string::npos) return Describe(kind, slots[i], bad, rec[bad], seeds[i]);
    }
    return std::string();
  }

 private:
  Store* const store_;
  const ModelLayout layout_;
  HostBuffers* const buffers_;
};

// Straight to bench memory: one segment per tensor a record is split over (layer-first) or the
// whole record (block). Runs of consecutive slots move as one copy per segment in GPU mode.
class BenchView final : public PoolView {
 public:
  BenchView(const ModelLayout& layout, const BenchPool& pool, bool block, bool gpu,
            HostBuffers* buffers)
      : layout_(layout), gpu_(gpu), buffers_(buffers) {
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
      if (layout.SsmSegment(s).bytes == 0) continue;  // shortconv: no SSM tensor to copy
      st.push_back({d.ssm[s].ssm_base, d.ssm[s].ssm_slot_stride, layout.SsmSegment(s).offset,
                    layout.SsmSegment(s).bytes});
    }
  }

  Status Write(Kind kind, std::span<const uint64_t> slots,
               std::span<const uint64_t> seeds) override {
    const uint64_t rec = layout_.RecordBytes(kind);
    HostBuffers::Lease recs_lease(buffers_), stage_lease(buffers_);
    return ForRuns(kind, slots, [&](size_t i, size_t m) -> Status {
      CACHEPAWL_ASSIGN_OR_RETURN(std::byte * recs, recs_lease.Get(m * rec));
      for (size_t r = 0; r < m; ++r) FillRecord(seeds[i + r], {recs + r * rec, rec});
      for (const Seg& g : segs_[static_cast<int>(kind)]) {
        std::byte* dev = g.base + slots[i] * g.stride;
        if (gpu_ && g.stride == g.bytes) {
          CACHEPAWL_ASSIGN_OR_RETURN(std::byte * stage, stage_lease.Get(m * g.bytes));
          for (size_t r = 0; r < m; ++r) {
            std::memcpy(stage + r * g.bytes, recs + r * rec + g.offset, g.bytes);
          }
          CACHEPAWL_RETURN_IF_ERROR(CopyBytes(dev, stage, m * g.bytes, gpu_));
        } else {
          for (size_t r = 0; r < m; ++r) {
            CACHEPAWL_RETURN_IF_ERROR(
                CopyBytes(dev + r * g.stride, recs + r * rec + g.offset, g.bytes, gpu_));
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
    HostBuffers::Lease stage_lease(buffers_);
    std::string bad;
    Status s = ForRuns(kind, slots, [&](size_t i, size_t m) -> Status {
      if (!bad.empty()) return Status::OK();
      for (const Seg& g : segs_[static_cast<int>(kind)]) {
        const std::byte* dev = g.base + slots[i] * g.stride;
        const bool one_copy = g.stride == g.bytes;
        std::byte* stage = nullptr;
        if (gpu_) {
          CACHEPAWL_ASSIGN_OR_RETURN(stage, stage_lease.Get(one_copy ? m * g.bytes : g.bytes));
        }
        if (gpu_ && one_copy) CACHEPAWL_RETURN_IF_ERROR(CopyBytes(stage, dev, m * g.bytes, gpu_));
        for (size_t r = 0; r < m && bad.empty(); ++r) {
          const std::byte* piece = dev + r * g.stride;
          if (gpu_ && one_copy) {
            piece = stage + r * g.bytes;
          } else if (gpu_) {
            CACHEPAWL_RETURN_IF_ERROR(CopyBytes(stage, piece, g.bytes, gpu_));
            piece = stage;
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
  // Calls fn(first, count) for runs of consecutive slots of at most kPieceBytes of records.
  template <typename Fn>
  Status ForRuns(Kind kind, std::span<const uint64_t> slots, Fn fn) {
    const uint64_t per = std::max<uint64_t>(1, kPieceBytes / layout_.RecordBytes(kind));
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
  HostBuffers* const buffers_;
  std::vector<Seg> segs_[kNumKinds];
};

}  // namespace

std::unique_ptr<PoolView> MakeOwnedView(Store* store, const ModelLayout& layout,
                                        HostBuffers* buffers) {
  return std::make_unique<OwnedView>(store, layout, buffers);
}

std::unique_ptr<PoolView> MakeBenchView(const ModelLayout& layout, const BenchPool& pool,
                                        bool block, bool gpu, HostBuffers* buffers) {
  return std::make_unique<BenchView>(layout, pool, block, gpu, buffers);
}

// ---------------------------------------------------------------------------------------------
// Host buffers
// ---------------------------------------------------------------------------------------------

HostBuffers::~HostBuffers() = default;

StatusOr<std::byte*> HostBuffers::Lease::Get(uint64_t bytes) {
  if (memory_ != nullptr && memory_->size() >= bytes) return memory_->data();
  if (memory_ != nullptr) owner_->Give(std::move(memory_));
  CACHEPAWL_ASSIGN_OR_RETURN(memory_, owner_->Take(bytes));
  return memory_->data();
}

HostBuffers::Lease::~Lease() {
  if (memory_ != nullptr) owner_->Give(std::move(memory_));
}

StatusOr<std::unique_ptr<Memory>> HostBuffers::Take(uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest free buffer that is large enough.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if ((*it)->size() >= bytes && (best == free_.end() || (*it)->size() < (*best)->size())) {
        best = it;
      }
    }
    if (best != free_.end()) {
      std::unique_ptr<Memory> m = std::move(*best);
      free_.erase(best);
      return m;
    }
  }
  return Memory::Allocate(Memory::Where::kHost, gpu_, std::max<uint64_t>(bytes, kMiB));
}

void HostBuffers::Give(std::unique_ptr<Memory> m) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(std::move(m));
}

// ---------------------------------------------------------------------------------------------
// Thread slots, in pieces
// ---------------------------------------------------------------------------------------------

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

namespace {

struct SlotPiece {
  size_t thread;
  Kind kind;
  std::span<const uint64_t> slots, seeds;
};

// Every thread's sources or destinations, in pieces of at most kPieceBytes of records (a state
// is a piece of its own), so that one thread's request is checked by several workers.
std::vector<SlotPiece> Pieces(const std::vector<ThreadSlots>& all, uint64_t page_bytes,
                              bool sources) {
  const size_t per = std::max<uint64_t>(1, kPieceBytes / std::max<uint64_t>(page_bytes, 1));
  std::vector<SlotPiece> out;
  for (size_t t = 0; t < all.size(); ++t) {
    const ThreadSlots& s = all[t];
    std::span<const uint64_t> pages = sources ? s.src_pages : s.dst_pages;
    for (size_t i = 0; i < pages.size(); i += per) {
      const size_t n = std::min(per, pages.size() - i);
      out.push_back({t, Kind::kKV, pages.subspan(i, n),
                     std::span<const uint64_t>(s.page_seeds).subspan(i, n)});
    }
    const std::optional<uint64_t>& state = sources ? s.src_state : s.dst_state;
    if (state) out.push_back({t, Kind::kMamba, {&*state, 1}, {&s.state_seed, 1}});
  }
  return out;
}

}  // namespace

Status WriteSources(PoolView& view, const std::vector<ThreadSlots>& all, uint64_t page_bytes) {
  const auto pieces = Pieces(all, page_bytes, true);
  return ParallelFor(pieces.size(), [&](size_t i) {
    return view.Write(pieces[i].kind, pieces[i].slots, pieces[i].seeds);
  });
}

Status PoisonDestinations(PoolView& view, const std::vector<ThreadSlots>& all,
                          uint64_t page_bytes) {
  const auto pieces = Pieces(all, page_bytes, false);
  return ParallelFor(pieces.size(),
                     [&](size_t i) { return view.Poison(pieces[i].kind, pieces[i].slots); });
}

StatusOr<std::vector<std::string>> VerifyDestinations(PoolView& view,
                                                      const std::vector<ThreadSlots>& all,
                                                      uint64_t page_bytes) {
  const auto pieces = Pieces(all, page_bytes, false);
  std::vector<std::string> bad(pieces.size());
  CACHEPAWL_RETURN_IF_ERROR(ParallelFor(pieces.size(), [&](size_t i) -> Status {
    CACHEPAWL_ASSIGN_OR_RETURN(bad[i],
                               view.Verify(pieces[i].kind, pieces[i].slots, pieces[i].seeds));
    return Status::OK();
  }));
  std::vector<std::string> per_thread(all.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string& first = per_thread[pieces[i].thread];
    if (first.empty()) first = bad[i];
  }
  return per_thread;
}

}  // namespace cachepawl::tools::bench_store
