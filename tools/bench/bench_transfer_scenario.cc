#include "tools/bench/bench_transfer_scenario.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <utility>

#include "cuda/cuda_status.h"
#include "layouts/layout_presets.h"

namespace cachepawl::tools {

namespace {

constexpr uint8_t kHostPoison = 0xA5;
constexpr uint8_t kDevicePoison = 0x5A;

void FillRandom(std::byte* p, uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<std::byte>(rng());
}

ModelLayout MambaLayout(uint64_t mib) {
  // 32 SSM layers (8 for 1 MiB) of conv [C, 3] bf16 + state [R, 16] fp32 summing to `mib` MiB.
  ModelLayout l;
  const uint32_t layers = mib == 1 ? 8 : 32;
  l.model = "bench-mamba-" + std::to_string(mib) + "MiB";
  l.num_layers = layers;
  const uint64_t per_layer = (mib << 20) / layers;
  const uint64_t conv_dim = per_layer / 8 / 6 / 8 * 8;  // conv takes ~1/8 of the layer
  const uint64_t conv_bytes = conv_dim * 3 * 2;
  const uint64_t rows = (per_layer - conv_bytes) / 64;
  for (uint32_t i = 0; i < layers; ++i) {
    l.ssm_layers.push_back({i, "mamba2", {conv_dim, 3}, DType::kBf16, {rows, 16}, DType::kFp32});
  }
  return l;
}

// Device memory of `bytes` on the current GPU.
StatusOr<cuda::DeviceBuffer> AllocateHere(uint64_t bytes, const char* what) {
  int device = 0;
  CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  auto buffer = cuda::DeviceBuffer::Allocate(device, bytes);
  if (!buffer.ok()) return buffer.status().WithContext(what);
  return buffer;
}

}  // namespace

std::vector<ScenarioSpec> AllScenarios() {
  std::vector<ScenarioSpec> s;
  s.push_back({"llama-3.1-8b kv", LayoutPreset("llama-3.1-8b", 16).value(), Kind::kKV, 256, 1024});
  ModelLayout jamba_kv = LayoutPreset("jamba-v0.1", 16).value();
  jamba_kv.ssm_layers.clear();  // its KV pages alone (its states: the Mamba scenarios)
  s.push_back({"jamba-v0.1 kv", jamba_kv, Kind::kKV, 2048, 8192});
  s.push_back({"mamba 1MiB", MambaLayout(1), Kind::kMamba, 512, 1024});
  s.push_back({"mamba 16MiB", MambaLayout(16), Kind::kMamba, 32, 64});
  s.push_back({"mamba 128MiB", MambaLayout(128), Kind::kMamba, 4, 8});
  return s;
}

Scenario::Scenario(const ScenarioSpec& spec)
    : spec_(spec), l_(spec.layout), rec_(l_.RecordBytes(spec.kind)) {}

Scenario::~Scenario() {
  mover_.reset();
  mover_block_.reset();
}

StatusOr<std::unique_ptr<Scenario>> Scenario::Create(const ScenarioSpec& spec,
                                                     const DeviceMoverOptions& mover_options,
                                                     uint64_t seed) {
  std::unique_ptr<Scenario> s(new Scenario(spec));
  CACHEPAWL_RETURN_IF_ERROR(s->Init(mover_options, seed));
  return s;
}

Status Scenario::Init(const DeviceMoverOptions& mover_options, uint64_t seed) {
  const ScenarioSpec& spec = spec_;
  const uint64_t n = spec.pool_slots;
  // Layer-first pool: one tensor per segment kind per layer.
  segs_ = l_.RecordSegments(spec.kind);
  std::vector<std::byte*> k, v, conv, ssm;
  for (size_t i = 0; i < segs_.size(); ++i) {
    CACHEPAWL_ASSIGN_OR_RETURN(cuda::DeviceBuffer t,
                               AllocateHere(segs_[i].segment.bytes * n, "pool"));
    (i % 2 == 0 ? (spec.kind == Kind::kKV ? k : conv) : (spec.kind == Kind::kKV ? v : ssm))
        .push_back(t.data());
    tensors_.push_back(std::move(t));
  }
  const bool kv = spec.kind == Kind::kKV;
  layer_first_desc_ =
      DevicePoolDescription::LayerFirst(l_, 0, kv ? n : 0, k, v, false, kv ? 0 : n, conv, ssm);
  CACHEPAWL_ASSIGN_OR_RETURN(block_, AllocateHere(rec_ * n, "block pool"));
  std::byte* const b = block_.data();
  block_desc_ = DevicePoolDescription::BlockContiguous(l_, 0, kv ? b : nullptr, kv ? n : 0, 0,
                                                       kv ? nullptr : b, kv ? 0 : n, 0);
  // Random lower halves (sources), mirrored on the host for the checks.
  for (size_t i = 0; i < tensors_.size(); ++i) {
    mirrors_.emplace_back(segs_[i].segment.bytes * (n / 2));
    FillRandom(mirrors_.back().data(), mirrors_.back().size(), seed + i);
    CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaMemcpy(tensors_[i].data(), mirrors_.back().data(),
                                              mirrors_.back().size(), cudaMemcpyHostToDevice));
  }
  block_mirror_.resize(rec_ * (n / 2));
  FillRandom(block_mirror_.data(), block_mirror_.size(), seed + 999);
  CACHEPAWL_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(b, block_mirror_.data(), block_mirror_.size(), cudaMemcpyHostToDevice));
  // Units: random distinct sources and destinations.
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> lo(n / 2), hi(n / 2);
  for (uint64_t i = 0; i < n / 2; ++i) lo[i] = i, hi[i] = n / 2 + i;
  std::shuffle(lo.begin(), lo.end(), rng);
  std::shuffle(hi.begin(), hi.end(), rng);
  src_.assign(lo.begin(), lo.begin() + spec.units);
  dst_.assign(hi.begin(), hi.begin() + spec.units);
  // Pinned host slots: W (Save destinations) and R (Load sources, random).
  HostArenaOptions ho;
  ho.bytes = 2 * spec.units * RecordSlotBytes(l_, spec.kind) + (64 << 20);
  ho.pin = HostArenaOptions::Pin::kOn;
  CACHEPAWL_ASSIGN_OR_RETURN(arena_, HostArena::Open(l_, ho));
  CACHEPAWL_RETURN_IF_ERROR(arena_->WaitUntilPinned().WithContext("pinning the host arena"));
  pin_seconds_ = arena_->pin_seconds();
  for (uint64_t i = 0; i < spec.units; ++i) {
    CACHEPAWL_ASSIGN_OR_RETURN(HostSlotId w, arena_->Allocate(spec.kind));
    w_.push_back(w);
  }
  for (uint64_t i = 0; i < spec.units; ++i) {
    CACHEPAWL_ASSIGN_OR_RETURN(HostSlotId r, arena_->Allocate(spec.kind));
    r_.push_back(r);
    FillRandom(arena_->SlotPayload(r), rec_, seed * 7 + i);
  }
  CACHEPAWL_ASSIGN_OR_RETURN(
      mover_, DeviceMover::Create(l_, layer_first_desc_, arena_.get(), mover_options));
  CACHEPAWL_ASSIGN_OR_RETURN(mover_block_,
                             DeviceMover::Create(l_, block_desc_, arena_.get(), mover_options));
  // Pieces for the per-piece baselines (the same bytes, the same host record positions).
  for (uint64_t i = 0; i < spec.units; ++i) {
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const RecordSegment& seg = segs_[t].segment;
      save_pieces_.push_back({tensors_[t].data() + src_[i] * seg.bytes,
                              arena_->SlotPayload(w_[i]) + seg.offset, seg.bytes});
      load_pieces_.push_back({tensors_[t].data() + dst_[i] * seg.bytes,
                              arena_->SlotPayload(r_[i]) + seg.offset, seg.bytes});
    }
  }
  // Contiguous limit buffers.
  const uint64_t total = rec_ * spec.units;
  CACHEPAWL_ASSIGN_OR_RETURN(contig_dev_, AllocateHere(2 * total, "contiguous"));
  auto host = cuda::PinnedBuffer::Allocate(2 * total);
  if (!host.ok()) return host.status().WithContext("contiguous");
  contig_host_ = std::move(host).value();
  FillRandom(contig_host_.data() + total, total, seed + 5);  // h2d source
  std::vector<std::byte> tmp(total);
  FillRandom(tmp.data(), total, seed + 6);
  contig_d2h_expected_ = tmp;
  CACHEPAWL_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(contig_dev_.data(), tmp.data(), total, cudaMemcpyHostToDevice));
  CACHEPAWL_ASSIGN_OR_RETURN(s_d2h_, cuda::Stream::Create());
  CACHEPAWL_ASSIGN_OR_RETURN(s_h2d_, cuda::Stream::Create());
  return Status::OK();
}

Status Scenario::Poison(const std::string& path, bool d2h, bool h2d) {
  if (path == "contiguous") {
    if (d2h) std::memset(contig_host_.data(), kHostPoison, bytes());
    if (h2d) {
      CACHEPAWL_CUDA_RETURN_IF_ERROR(
          cudaMemset(contig_dev_.data() + bytes(), kDevicePoison, bytes()));
    }
  } else {
    if (d2h) {
      for (HostSlotId w : w_) std::memset(arena_->SlotPayload(w), kHostPoison, rec_);
    }
    if (h2d) {
      const uint64_t n = spec_.pool_slots;
      if (path == "ours_block") {
        CACHEPAWL_CUDA_RETURN_IF_ERROR(
            cudaMemset(block_.data() + rec_ * (n / 2), kDevicePoison, rec_ * (n - n / 2)));
      } else {
        for (size_t t = 0; t < tensors_.size(); ++t) {
          const uint64_t sb = segs_[t].segment.bytes;
          CACHEPAWL_CUDA_RETURN_IF_ERROR(
              cudaMemset(tensors_[t].data() + sb * (n / 2), kDevicePoison, sb * (n - n / 2)));
        }
      }
    }
  }
  return cuda::CheckCuda(cudaDeviceSynchronize(), "poison sync");
}

Status Scenario::InFlight::Wait() {
  CACHEPAWL_RETURN_IF_ERROR(fw_.Wait().WithContext("ours d2h"));
  CACHEPAWL_RETURN_IF_ERROR(fl_.Wait().WithContext("ours h2d"));
  for (const cuda::Event* e : events_) {
    if (e != nullptr) CACHEPAWL_RETURN_IF_ERROR(e->Synchronize());
  }
  return Status::OK();
}

StatusOr<Scenario::InFlight> Scenario::Start(const std::string& path, bool d2h, bool h2d) {
  InFlight f;
  if (path == "ours" || path == "ours_block") {
    DeviceMover& e = path == "ours" ? *mover_ : *mover_block_;
    if (d2h) f.fw_ = e.Submit(Op(Direction::kSave));
    if (h2d) f.fl_ = e.Submit(Op(Direction::kLoad));
    return f;
  }
  CACHEPAWL_RETURN_IF_ERROR(StartCopies(path, d2h, h2d));
  // Events of the last two iterations alternate: at most two are in flight.
  cuda::Event* ev = events_[next_events_];
  next_events_ ^= 1;
  for (int i = 0; i < 2; ++i) {
    if (!ev[i]) {
      CACHEPAWL_ASSIGN_OR_RETURN(ev[i], cuda::Event::Create());
    }
  }
  CACHEPAWL_RETURN_IF_ERROR(ev[0].Record(s_d2h_));
  CACHEPAWL_RETURN_IF_ERROR(ev[1].Record(s_h2d_));
  f.events_[0] = &ev[0];
  f.events_[1] = &ev[1];
  return f;
}

Status Scenario::StartCopies(const std::string& path, bool d2h, bool h2d) {
  if (path == "memcpy_piece") {
    if (d2h) {
      for (const Piece& p : save_pieces_) {
        CACHEPAWL_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(p.host, p.dev, p.bytes, cudaMemcpyDeviceToHost, s_d2h_.get()));
      }
    }
    if (h2d) {
      for (const Piece& p : load_pieces_) {
        CACHEPAWL_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(p.dev, p.host, p.bytes, cudaMemcpyHostToDevice, s_h2d_.get()));
      }
    }
    return Status::OK();
  }
  if (path == "memcpy_batch") {
    auto batch = [&](const std::vector<Piece>& pieces, bool to_host, cudaStream_t s) -> Status {
      std::vector<void*> dsts;
      std::vector<const void*> srcs;
      std::vector<size_t> sizes;
      for (const Piece& p : pieces) {
        dsts.push_back(to_host ? static_cast<void*>(p.host) : static_cast<void*>(p.dev));
        srcs.push_back(to_host ? static_cast<const void*>(p.dev)
                               : static_cast<const void*>(p.host));
        sizes.push_back(p.bytes);
      }
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      size_t idx = 0;
      return cuda::CheckCuda(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(),
                                                  dsts.size(), &attr, &idx, 1, s),
                             "cudaMemcpyBatchAsync");
    };
    if (d2h) CACHEPAWL_RETURN_IF_ERROR(batch(save_pieces_, true, s_d2h_.get()));
    if (h2d) CACHEPAWL_RETURN_IF_ERROR(batch(load_pieces_, false, s_h2d_.get()));
    return Status::OK();
  }
  // contiguous
  if (d2h) {
    CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(contig_host_.data(), contig_dev_.data(), bytes(),
                                                   cudaMemcpyDeviceToHost, s_d2h_.get()));
  }
  if (h2d) {
    CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(contig_dev_.data() + bytes(),
                                                   contig_host_.data() + bytes(), bytes(),
                                                   cudaMemcpyHostToDevice, s_h2d_.get()));
  }
  return Status::OK();
}

StatusOr<double> Scenario::Run(const std::string& path, bool d2h, bool h2d) {
  const auto t0 = std::chrono::steady_clock::now();
  CACHEPAWL_ASSIGN_OR_RETURN(InFlight f, Start(path, d2h, h2d));
  CACHEPAWL_RETURN_IF_ERROR(f.Wait());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

StatusOr<std::string> Scenario::Verify(const std::string& path, bool d2h, bool h2d) {
  if (path != "contiguous") return VerifyPools(path, d2h, h2d);
  if (d2h && std::memcmp(contig_host_.data(), contig_d2h_expected_.data(), bytes()) != 0) {
    return std::string("contiguous d2h");
  }
  if (h2d) {
    std::vector<std::byte> got(bytes());
    CACHEPAWL_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(got.data(), contig_dev_.data() + bytes(), bytes(), cudaMemcpyDeviceToHost));
    if (std::memcmp(got.data(), contig_host_.data() + bytes(), bytes()) != 0) {
      return std::string("contiguous h2d");
    }
  }
  return std::string();
}

StatusOr<std::string> Scenario::VerifyPools(const std::string& path, bool d2h, bool h2d) {
  const uint64_t n = spec_.pool_slots;
  const bool block = path == "ours_block";
  if (d2h) {
    std::vector<std::byte> expect(rec_);
    for (uint64_t i = 0; i < spec_.units; ++i) {
      if (block) {
        std::memcpy(expect.data(), block_mirror_.data() + src_[i] * rec_, rec_);
      } else {
        for (size_t t = 0; t < segs_.size(); ++t) {
          const RecordSegment& seg = segs_[t].segment;
          std::memcpy(expect.data() + seg.offset, mirrors_[t].data() + src_[i] * seg.bytes,
                      seg.bytes);
        }
      }
      if (std::memcmp(arena_->SlotPayload(w_[i]), expect.data(), rec_) != 0) {
        return path + " d2h: unit " + std::to_string(i) + " differs";
      }
    }
  }
  if (h2d) {
    const uint64_t half = n - n / 2;
    if (block) {
      std::vector<std::byte> got(rec_ * half), expect(rec_ * half, std::byte{kDevicePoison});
      CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaMemcpy(got.data(), block_.data() + rec_ * (n / 2),
                                                got.size(), cudaMemcpyDeviceToHost));
      for (uint64_t i = 0; i < spec_.units; ++i) {
        std::memcpy(expect.data() + (dst_[i] - n / 2) * rec_, arena_->SlotPayload(r_[i]), rec_);
      }
      if (got != expect) return path + " h2d differs";
    } else {
      for (size_t t = 0; t < segs_.size(); ++t) {
        const RecordSegment& seg = segs_[t].segment;
        const uint64_t sb = seg.bytes;
        std::vector<std::byte> got(sb * half), expect(sb * half, std::byte{kDevicePoison});
        CACHEPAWL_CUDA_RETURN_IF_ERROR(cudaMemcpy(got.data(), tensors_[t].data() + sb * (n / 2),
                                                  got.size(), cudaMemcpyDeviceToHost));
        for (uint64_t i = 0; i < spec_.units; ++i) {
          std::memcpy(expect.data() + (dst_[i] - n / 2) * sb,
                      arena_->SlotPayload(r_[i]) + seg.offset, sb);
        }
        if (got != expect) return path + " h2d: segment " + std::to_string(t) + " differs";
      }
    }
  }
  return std::string();
}

Operation Scenario::Op(Direction d) const {
  Operation op;
  op.direction = d;
  for (uint64_t i = 0; i < spec_.units; ++i) {
    if (d == Direction::kSave) {
      op.units.push_back({spec_.kind, {Tier::kDevice, src_[i]}, {Tier::kHost, w_[i]}});
    } else {
      op.units.push_back({spec_.kind, {Tier::kHost, r_[i]}, {Tier::kDevice, dst_[i]}});
    }
  }
  return op;
}

}  // namespace cachepawl::tools
