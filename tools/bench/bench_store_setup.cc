// `cachepawl bench store`: layouts, sizes and budgets, record content, bench-owned memory and the
// views through which the bench fills, poisons and checks a device pool
// (tools/bench/bench_store.h).
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "cuda/cuda_resources.h"
#include "cuda/gpu_runtime.h"
#include "layouts/layout_presets.h"
#include "store/store.h"
#include "tiers/host_memory.h"
#include "tools/bench/bench_store.h"
#include "tools/human_bytes.h"

namespace cachepawl::tools::bench_store {

// ---------------------------------------------------------------------------------------------
// Layouts
// ---------------------------------------------------------------------------------------------

ModelLayout Hybrid128MiBStateLayout() {
  ModelLayout l;
  l.model = std::string("bench/") + kHybrid128Name;
  l.num_layers = 36;
  l.page_size_tokens = 16;
  const uint64_t nheads = 128, head_dim = 64, d_state = 128, ngroups = 1, d_conv = 4;
  for (uint32_t i = 0; i < l.num_layers; ++i) {
    if (i % 9 == 4) {
      l.attention_layers.push_back({i, 8, 128, DType::kBf16, 0});
    } else {
      l.ssm_layers.push_back({i,
                              "mamba2",
                              {nheads * head_dim + 2 * ngroups * d_state, d_conv - 1},
                              DType::kBf16,
                              {nheads, head_dim, d_state},
                              DType::kFp32});
    }
  }
  return l;
}

StatusOr<ModelLayout> ResolveBenchLayout(const std::string& name) {
  ModelLayout l;
  if (name == kHybrid128Name) {
    l = Hybrid128MiBStateLayout();
  } else {
    auto r = ResolveLayout(name, 16);
    if (!r.ok()) {
      return Status::InvalidArgument("--layouts: '" + name + "' (" + r.status().message() +
                                     "; or " + kHybrid128Name + ")");
    }
    l = std::move(r).value();
  }
  if (Status v = l.Validate(); !v.ok()) {
    return Status::InvalidArgument("--layouts: '" + name + "' (" + v.message() + ")");
  }
  if (!l.has_attention()) {
    // Its cases are (threads, pages) Saves and Loads of N KV pages with a state, each against
    // the device mover and the link: without KV every case is the same one-state request.
    return Status::InvalidArgument(
        "--layouts: '" + name +
        "' (a pure SSM layout, without attention layers: bench store measures Saves and Loads of "
        "N KV pages, and its requests move one state and no page; `cachepawl bench transfer "
        "--scenarios mamba-1,mamba-16` measures state transfers, `cachepawl replay --layout " +
        name + "` the store serving them)");
  }
  return l;
}

// ---------------------------------------------------------------------------------------------
// Sizes and budgets
// ---------------------------------------------------------------------------------------------

Sizes SizesOf(const ModelLayout& layout) {
  Sizes s;
  s.ssm = layout.has_ssm();
  s.page_record = layout.KvPageBytes();
  s.kv_record = layout.RecordBytes(Kind::kKV);
  s.page_slot = layout.Stores(Kind::kKV) ? RecordSlotBytes(layout, Kind::kKV) : 0;
  if (layout.Stores(Kind::kWindowKV)) {
    s.window_record = layout.RecordBytes(Kind::kWindowKV);
    s.window_slot = RecordSlotBytes(layout, Kind::kWindowKV);
    s.window_pages = layout.WindowPages();
    s.window_every_page = !layout.has_ssm();
  }
  if (s.ssm) {
    s.state_record = layout.MambaSlotBytes();
    s.state_slot = RecordSlotBytes(layout, Kind::kMamba);
  }
  return s;
}

uint64_t PoolBytes(const Config& c) {
  const uint64_t reserve = c.gpu ? kGpuReserveBytes : 0;
  return c.device_bytes > reserve ? (c.device_bytes - reserve) / 2 : 0;
}

uint64_t HostMemoryNeed(const Config& c) {
  const uint64_t pools = c.gpu ? 1 : 3;
  const uint64_t pool = PoolBytes(c);
  if (c.host_bytes > UINT64_MAX / 4 || pool > UINT64_MAX / 4) return UINT64_MAX;  // saturates
  return 2 * c.host_bytes + pools * pool;
}

namespace {

// 15% for the host arena's waste (a slot never straddles its 1 GiB chunks; best fit leaves
// holes) and 64 MiB.
uint64_t WithArenaWaste(uint64_t bytes) { return bytes + bytes / 100 * 15 + 64 * kMiB; }

// Device bytes the store-owned pool (DevicePoolArena: KV-page units rounded to 256 bytes, a
// state a group of units aligned to its size) needs for 2T requests, and the bench pool.
uint64_t OwnedPoolNeed(const Sizes& s, uint32_t threads, uint64_t pages) {
  const uint64_t unit = (s.page_record + 255) / 256 * 256;
  const uint64_t group = s.ssm ? (s.state_record + unit - 1) / unit : 0;
  return (2 * threads * pages + 2 * threads * group + group) * unit;
}
uint64_t BenchPoolNeed(const Sizes& s, uint32_t threads, uint64_t pages) {
  // Whole KV pages (every layer, windowed ones included) and the states, as MakeBenchPool.
  return 2 * uint64_t{threads} * (pages * s.page_record + s.state_record);
}

}  // namespace

uint64_t HostPhaseTierNeed(const Sizes& s, uint32_t threads, uint64_t pages) {
  return WithArenaWaste(2 * uint64_t{threads} * s.RequestSlotBytes(pages));
}

uint64_t DiskPhaseTierNeed(const Sizes& s, uint32_t threads, uint64_t pages) {
  return WithArenaWaste(uint64_t{threads} * s.RequestSlotBytes(pages));
}

std::string HostCaseFit(const Config& c, const Sizes& s, uint32_t threads, uint64_t pages) {
  const uint64_t pool = PoolBytes(c);
  const bool owned = std::find(c.pools.begin(), c.pools.end(), "owned") != c.pools.end();
  const uint64_t need =
      std::max(BenchPoolNeed(s, threads, pages), owned ? OwnedPoolNeed(s, threads, pages) : 0);
  if (need > pool) {
    return "needs " + HumanBytes(need) + " per device pool (sources and destinations); " +
           "--device-bytes " + HumanBytes(c.device_bytes) + " gives " + HumanBytes(pool) +
           " per pool";
  }
  const uint64_t host = HostPhaseTierNeed(s, threads, pages);
  if (host > c.host_bytes) {
    return "needs " + HumanBytes(host) + " of host tier (a locked prefix and a save per thread); " +
           "--host-bytes " + HumanBytes(c.host_bytes);
  }
  return "";
}

std::string DiskCaseFit(const Config& c, const Sizes& s, uint32_t threads, uint64_t pages) {
  if (c.disk_bytes == 0) return "--disk-bytes 0 (no disk tier)";
  std::string why = HostCaseFit(c, s, threads, pages);
  if (!why.empty()) return why;
  const uint64_t bytes = uint64_t{threads} * s.RequestSlotBytes(pages);
  const uint64_t need = bytes + bytes / 20 + 64 * kMiB;
  if (need > c.disk_bytes) {
    return "needs " + HumanBytes(need) + " of disk tier; --disk-bytes " + HumanBytes(c.disk_bytes);
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Record content
// ---------------------------------------------------------------------------------------------

namespace {

inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

// Word k of a record is Mix(seed + (k + 1) * golden).
void FillRecordAt(uint64_t seed, uint64_t offset, std::span<std::byte> out) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  size_t i = 0;
  const size_t n = out.size();
  while (i < n && (offset + i) % 8 != 0) {
    const uint64_t p = offset + i;
    const uint64_t w = Mix(seed + (p / 8 + 1) * kGolden);
    out[i++] = static_cast<std::byte>(w >> (8 * (p % 8)));
  }
  uint64_t k = (offset + i) / 8;
  for (; i + 8 <= n; i += 8, ++k) {
    const uint64_t w = Mix(seed + (k + 1) * kGolden);
    std::memcpy(out.data() + i, &w, 8);
  }
  if (i < n) {
    const uint64_t w = Mix(seed + (k + 1) * kGolden);
    for (size_t b = 0; i < n; ++i, ++b) out[i] = static_cast<std::byte>(w >> (8 * b));
  }
}

uint64_t RecordSeed(uint64_t case_seed, uint32_t thread, uint64_t index, Kind kind) {
  uint64_t h = Mix(case_seed + 0x1234567ull);
  h = Mix(h ^ (uint64_t{thread} + 1) * 0x9E3779B97F4A7C15ull);
  h = Mix(h ^ (index + 1) * 0xC2B2AE3D27D4EB4Full);
  return Mix(h ^ (static_cast<uint64_t>(kind) + 1));
}

void FillRecord(uint64_t seed, std::span<std::byte> out) { FillRecordAt(seed, 0, out); }

size_t FirstMismatch(uint64_t seed, std::span<const std::byte> got, uint64_t record_offset) {
  constexpr size_t kBlock = 64 << 10;
  std::vector<std::byte> want(std::min(kBlock, got.size()));
  for (size_t at = 0; at < got.size(); at += kBlock) {
    const size_t n = std::min(kBlock, got.size() - at);
    FillRecordAt(seed, record_offset + at, std::span<std::byte>(want.data(), n));
    if (std::memcmp(want.data(), got.data() + at, n) != 0) {
      for (size_t i = 0; i < n; ++i) {
        if (want[i] != got[at + i]) return at + i;
      }
    }
  }
  return std::string::npos;
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Memory>> Memory::Allocate(Where where, bool gpu, uint64_t bytes) {
  std::unique_ptr<Memory> m(new Memory());
  m->bytes_ = std::max<uint64_t>(bytes, 4096);
  if (gpu && where == Where::kDevice) {
    CACHEPAWL_ASSIGN_OR_RETURN(m->device_, cuda::DeviceBuffer::Allocate(0, m->bytes_));
    m->data_ = m->device_.data();
    return m;
  }
  if (gpu) {
    auto pinned = cuda::PinnedBuffer::Allocate(m->bytes_);
    if (!pinned.ok()) return pinned.status().WithContext("pinned " + HumanBytes(m->bytes_));
    m->pinned_ = std::move(pinned).value();
    m->data_ = m->pinned_.data();
    return m;
  }
  void* p = ::mmap(nullptr, m->bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Status::FromErrno("mmap of " + HumanBytes(m->bytes_), errno);
  // No MADV_HUGEPAGE: with THP defrag on `madvise`, faulting these buffers in compacted memory
  // for seconds on a loaded 2-core box (the store's own host arena still asks for huge pages).
  m->mapped_ = true;
  m->data_ = static_cast<std::byte*>(p);
  return m;
}

Memory::~Memory() {
  if (mapped_) ::munmap(data_, bytes_);  // device_ and pinned_ free themselves
}

Status CopyBytes(void* dst, const void* src, uint64_t bytes, bool gpu) {
  if (bytes == 0) return Status::OK();
  if (gpu) return cuda::CopySync(dst, src, bytes);
  std::memcpy(dst, src, bytes);
  return Status::OK();
}

Status FillBytes(void* dst, uint8_t value, uint64_t bytes, bool gpu) {
  if (bytes == 0) return Status::OK();
  if (gpu) return cuda::FillSync(dst, value, bytes);
  std::memset(dst, value, bytes);
  return Status::OK();
}

Status FillRandom(std::byte* dst, uint64_t bytes, bool gpu, uint64_t seed) {
  const uint64_t block = std::min<uint64_t>(bytes, 4 * kMiB);
  std::vector<std::byte> random(block);
  FillRecord(seed, random);
  for (uint64_t at = 0; at < bytes; at += block) {
    CACHEPAWL_RETURN_IF_ERROR(CopyBytes(dst + at, random.data(), std::min(block, bytes - at), gpu));
  }
  return Status::OK();
}

StatusOr<BenchPool> MakeBenchPool(const ModelLayout& layout, bool gpu, uint64_t num_pages,
                                  uint64_t num_states) {
  constexpr uint64_t kAlign = 256;
  auto up = [](uint64_t n) { return RoundUpToAlignment(n, kAlign); };
  const size_t tensors = 2 * layout.attention_layers.size() + 2 * layout.ssm_layers.size();
  const uint64_t bytes = num_pages * layout.KvPageBytes() +
                         (layout.has_ssm() ? num_states * layout.MambaSlotBytes() : 0) +
                         kAlign * (tensors + 2);
  BenchPool p;
  p.num_pages = num_pages;
  p.num_states = layout.has_ssm() ? num_states : 0;
  CACHEPAWL_ASSIGN_OR_RETURN(p.memory, Memory::Allocate(Memory::Where::kDevice, gpu, bytes));
  std::byte* base = p.memory->data();
  const int device = gpu ? 0 : -1;
  // Layer-first: a K and a V tensor per attention layer, a conv and an SSM tensor per SSM layer.
  uint64_t at = 0;
  auto carve = [&](uint64_t n) {
    std::byte* t = base + at;
    at = up(at + n);
    return t;
  };
  std::vector<std::byte*> k, v, conv, ssm;
  for (size_t a = 0; a < layout.attention_layers.size(); ++a) {
    k.push_back(carve(num_pages * layout.KBytesPerPage(a)));
    v.push_back(carve(num_pages * layout.VBytesPerPage(a)));
  }
  for (size_t s = 0; s < layout.ssm_layers.size(); ++s) {
    conv.push_back(carve(p.num_states * layout.ConvStateBytes(s)));
    ssm.push_back(carve(p.num_states * layout.SsmStateBytes(s)));
  }
  p.layer_first = DevicePoolDescription::LayerFirst(layout, device, num_pages, k, v, false,
                                                    p.num_states, conv, ssm);
  // Block-contiguous over the same memory: every page record, then every state record.
  std::byte* states = base + up(num_pages * layout.KvPageBytes());
  p.block = DevicePoolDescription::BlockContiguous(
      layout, device, base, num_pages, layout.KvPageBytes(), p.num_states > 0 ? states : nullptr,
      p.num_states, layout.MambaSlotBytes());
  CACHEPAWL_RETURN_IF_ERROR(p.layer_first.Validate(layout).WithContext("bench pool"));
  CACHEPAWL_RETURN_IF_ERROR(p.block.Validate(layout).WithContext("bench pool (block)"));
  return p;
}

// ---------------------------------------------------------------------------------------------
// Samples
// ---------------------------------------------------------------------------------------------

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size());
  size_t i = rank <= 1 ? 0 : static_cast<size_t>(rank + 0.999999) - 1;
  return v[std::min(i, v.size() - 1)];
}

double Samples::Gbps(bool both) const {
  const double s = Percentile(round_s, 50);
  if (s <= 0) return 0;
  const double per_request =
      static_cast<double>(bytes) + (both ? static_cast<double>(SaveBytes()) : 0);
  return static_cast<double>(threads) * per_request / s / 1e9;
}

double Samples::DirectionGbps(bool load) const {
  const double s = Percentile(load ? load_s : save_s, 50);
  const double per_request = static_cast<double>(load ? bytes : SaveBytes());
  return s > 0 ? static_cast<double>(threads) * per_request / s / 1e9 : 0;
}

}  // namespace cachepawl::tools::bench_store
