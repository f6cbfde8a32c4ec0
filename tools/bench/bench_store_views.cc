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
      : store_(store), layout_(layout), buffers_(buffers) {
    // A store-owned device slot of kind kv is a whole KV page (Store::WriteDeviceRecord): with
    // windowed layers the kKV and kWindowKV records are both pieces of it.
    if (!layout.has_window()) return;
    for (size_t a = 0; a < layout.attention_layers.size(); ++a) {
      auto& pieces = pieces_[static_cast<int>(layout.AttentionKind(a))];
      pieces.push_back(
          {layout.KSegment(a).offset, layout.KRecordSegment(a).offset, layout.KSegment(a).bytes});
      pieces.push_back(
          {layout.VSegment(a).offset, layout.VRecordSegment(a).offset, layout.VSegment(a).bytes});
    }
  }
  Status Write(Kind kind, std::span<const uint64_t> slots,
               std::span<const uint64_t> seeds) override {
    const uint64_t n = layout_.RecordBytes(kind);
    HostBuffers::Lease lease(buffers_), page_lease(buffers_);
    CACHEPAWL_ASSIGN_OR_RETURN(std::byte * rec, lease.Get(n));
    for (size_t i = 0; i < slots.size(); ++i) {
      FillRecord(seeds[i], {rec, n});
      CACHEPAWL_RETURN_IF_ERROR(Put(kind, slots[i], rec, page_lease));
    }
    return Status::OK();
  }
  Status Poison(Kind kind, std::span<const uint64_t> slots) override {
    const uint64_t n = layout_.RecordBytes(kind);
    HostBuffers::Lease lease(buffers_), page_lease(buffers_);
    CACHEPAWL_ASSIGN_OR_RETURN(std::byte * rec, lease.Get(n));
    std::memset(rec, kPoison, n);
    for (uint64_t s : slots) CACHEPAWL_RETURN_IF_ERROR(Put(kind, s, rec, page_lease));
    return Status::OK();
  }
  StatusOr<std::string> Verify(Kind kind, std::span<const uint64_t> slots,
                               std::span<const uint64_t> seeds) override {
    const uint64_t n = layout_.RecordBytes(kind);
    HostBuffers::Lease lease(buffers_), page_lease(buffers_);
    CACHEPAWL_ASSIGN_OR_RETURN(std::byte * rec, lease.Get(n));
    for (size_t i = 0; i < slots.size(); ++i) {
      CACHEPAWL_RETURN_IF_ERROR(Get(kind, slots[i], rec, page_lease));
      const size_t bad = FirstMismatch(seeds[i], {rec, n});
      if (bad != std::string::npos) return Describe(kind, slots[i], bad, rec[bad], seeds[i]);
    }
    return std::string();
  }

 private:
  struct Piece {
    uint64_t page_offset, record_offset, bytes;
  };
  bool Whole(Kind kind) const { return kind == Kind::kMamba || !layout_.has_window(); }
  // The record of `kind` (RecordBytes(kind) at `rec`) into device slot `slot`.
  Status Put(Kind kind, uint64_t slot, const std::byte* rec, HostBuffers::Lease& page_lease) {
    if (Whole(kind)) {
      return store_->WriteDeviceRecord(kind, slot, {rec, layout_.RecordBytes(kind)});
    }
    const uint64_t n = layout_.KvPageBytes();
    CACHEPAWL_ASSIGN_OR_RETURN(std::byte * page, page_lease.Get(n));
    // Read, modify, write: the bench's workers write a page's two kinds concurrently.
    std::lock_guard<std::mutex> lock(put_mu_);
    CACHEPAWL_RETURN_IF_ERROR(store_->ReadDeviceRecord(Kind::kKV, slot, {page, n}));
    for (const Piece& p : pieces_[static_cast<int>(kind)]) {
      std::memcpy(page + p.page_offset, rec + p.record_offset, p.bytes);
    }
    return store_->WriteDeviceRecord(Kind::kKV, slot, {page, n});
  }
  Status Get(Kind kind, uint64_t slot, std::byte* rec, HostBuffers::Lease& page_lease) {
    if (Whole(kind)) {
      return store_->ReadDeviceRecord(kind, slot, {rec, layout_.RecordBytes(kind)});
    }
    const uint64_t n = layout_.KvPageBytes();
    CACHEPAWL_ASSIGN_OR_RETURN(std::byte * page, page_lease.Get(n));
    CACHEPAWL_RETURN_IF_ERROR(store_->ReadDeviceRecord(Kind::kKV, slot, {page, n}));
    for (const Piece& p : pieces_[static_cast<int>(kind)]) {
      std::memcpy(rec + p.record_offset, page + p.page_offset, p.bytes);
    }
    return Status::OK();
  }

  Store* const store_;
  const ModelLayout layout_;
  HostBuffers* const buffers_;
  std::vector<Piece> pieces_[kNumKinds];  // windowed layouts: each kind's pieces of a KV page
  std::mutex put_mu_;                     // one read-modify-write of a page at a time
};

// Straight to bench memory: one segment per tensor a record is split over (layer-first) or the
// whole record (block). Runs of consecutive slots move as one copy per segment in GPU mode.
class BenchView final : public PoolView {
 public:
  BenchView(const ModelLayout& layout, const BenchPool& pool, bool block, bool gpu,
            HostBuffers* buffers)
      : layout_(layout), gpu_(gpu), buffers_(buffers) {
    const DevicePoolDescription& d = block ? pool.block : pool.layer_first;
    auto& st = segs_[static_cast<int>(Kind::kMamba)];
    // Each attention layer's K and V go to the record of its kind (kKV, or kWindowKV for a
    // windowed layer), at their record offsets.
    auto add_layer = [&](size_t a, std::byte* k, uint64_t k_stride, std::byte* v,
                         uint64_t v_stride) {
      auto& kind = segs_[static_cast<int>(layout.AttentionKind(a))];
      kind.push_back(
          {k, k_stride, layout.KRecordSegment(a).offset, layout.KRecordSegment(a).bytes});
      kind.push_back(
          {v, v_stride, layout.VRecordSegment(a).offset, layout.VRecordSegment(a).bytes});
    };
    if (block) {
      if (!d.attention.empty()) {
        std::byte* page = d.K(0, 0) - layout.KSegment(0).offset;
        const uint64_t stride = layout.KvPageBytes();
        if (!layout.has_window()) {
          // The whole page is the kKV record: one segment.
          segs_[static_cast<int>(Kind::kKV)].push_back({page, stride, 0, stride});
        } else {
          for (size_t a = 0; a < d.attention.size(); ++a) {
            add_layer(a, page + layout.KSegment(a).offset, stride, page + layout.VSegment(a).offset,
                      stride);
          }
        }
      }
      if (!d.ssm.empty()) {
        st.push_back({d.Conv(0, 0) - layout.ConvSegment(0).offset, layout.MambaSlotBytes(), 0,
                      layout.MambaSlotBytes()});
      }
      return;
    }
    for (size_t a = 0; a < d.attention.size(); ++a) {
      add_layer(a, d.attention[a].k_base, d.attention[a].k_page_stride, d.attention[a].v_base,
                d.attention[a].v_page_stride);
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
// is a piece of its own), so that one thread's request is checked by several workers: every
// page's kKV record, the windowed records (of every page; `loaded_window_only`: of the pages a
// Load brings them to, the last Sizes::LoadedWindowPages), the state.
std::vector<SlotPiece> Pieces(const std::vector<ThreadSlots>& all, const Sizes& sizes, bool sources,
                              bool loaded_window_only) {
  const size_t per = std::max<uint64_t>(1, kPieceBytes / std::max<uint64_t>(sizes.page_record, 1));
  std::vector<SlotPiece> out;
  for (size_t t = 0; t < all.size(); ++t) {
    const ThreadSlots& s = all[t];
    std::span<const uint64_t> pages = sources ? s.src_pages : s.dst_pages;
    auto add = [&](Kind kind, size_t from, std::span<const uint64_t> seeds) {
      for (size_t i = from; i < pages.size(); i += per) {
        const size_t n = std::min(per, pages.size() - i);
        out.push_back({t, kind, pages.subspan(i, n), seeds.subspan(i, n)});
      }
    };
    if (sizes.kv_record > 0) add(Kind::kKV, 0, s.page_seeds);
    if (sizes.window_record > 0) {
      add(Kind::kWindowKV,
          loaded_window_only ? pages.size() - sizes.LoadedWindowPages(pages.size()) : 0,
          s.window_seeds);
    }
    const std::optional<uint64_t>& state = sources ? s.src_state : s.dst_state;
    if (state) out.push_back({t, Kind::kMamba, {&*state, 1}, {&s.state_seed, 1}});
  }
  return out;
}

}  // namespace

Status WriteSources(PoolView& view, const std::vector<ThreadSlots>& all, const Sizes& sizes) {
  const auto pieces = Pieces(all, sizes, true, false);
  return ParallelFor(pieces.size(), [&](size_t i) {
    return view.Write(pieces[i].kind, pieces[i].slots, pieces[i].seeds);
  });
}

Status PoisonDestinations(PoolView& view, const std::vector<ThreadSlots>& all, const Sizes& sizes) {
  const auto pieces = Pieces(all, sizes, false, false);
  return ParallelFor(pieces.size(),
                     [&](size_t i) { return view.Poison(pieces[i].kind, pieces[i].slots); });
}

StatusOr<std::vector<std::string>> VerifyDestinations(PoolView& view,
                                                      const std::vector<ThreadSlots>& all,
                                                      const Sizes& sizes) {
  // A Load leaves the windowed records of the pages before the window alone (still poisoned).
  const auto pieces = Pieces(all, sizes, false, true);
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
