#include "transfer/transfer_plan.h"

#include <algorithm>

#include "tiers/host_memory.h"

namespace cachepawl::internal {

namespace {
constexpr uint64_t kStagingAlignment = 256;
uint64_t AlignStaging(uint64_t n) { return RoundUpToAlignment(n, kStagingAlignment); }
}  // namespace

RecordMap RecordMap::Build(const ModelLayout& layout, const DevicePoolDescription& pool, Kind kind,
                           uint64_t tile_bytes) {
  RecordMap m;
  m.kind = kind;
  if (!layout.Stores(kind)) return m;
  m.record_bytes = layout.RecordBytes(kind);
  const bool attention = kind != Kind::kMamba;
  m.num_slots = attention ? pool.num_pages : pool.num_state_slots;
  if (m.num_slots == 0) return m;
  // The layers of this kind only (full-attention or windowed, at their record offsets; the
  // device side is where the serving engine's page of all layers keeps them), or the SSM layers.
  // An empty segment (the SSM state of a shortconv layer) has no tensor: it moves nothing (no
  // segment, no tile, no copy) and its (unused) base and stride take no part in the
  // direct-record detection.
  for (const PoolTensor& t : pool.Tensors(kind, layout.RecordSegments(kind))) {
    m.segments.push_back({t.segment.segment.offset, t.segment.segment.bytes,
                          reinterpret_cast<uintptr_t>(t.base), t.stride,
                          attention ? static_cast<int>(t.segment.layer) : -1});
  }
  // layer_tiles has an entry for every attention layer, an empty range for a layer of the
  // other attention kind.
  size_t next_layer = 0;
  for (uint32_t i = 0; i < m.segments.size(); ++i) {
    const Segment& s = m.segments[i];
    while (s.attention_layer >= 0 && next_layer <= static_cast<size_t>(s.attention_layer)) {
      m.layer_tiles.push_back(static_cast<uint32_t>(m.tiles.size()));
      ++next_layer;
    }
    for (uint64_t off = 0; off < s.bytes; off += tile_bytes) {
      m.tiles.push_back({i, off, std::min(tile_bytes, s.bytes - off)});
      m.tile_offset.push_back(s.record_offset + off);
    }
  }
  m.tile_offset.push_back(m.record_bytes);
  if (attention) {
    while (next_layer <= layout.attention_layers.size()) {
      m.layer_tiles.push_back(static_cast<uint32_t>(m.tiles.size()));
      ++next_layer;
    }
  }
  // Direct: every segment at the same stride, placed as in the record.
  m.direct = true;
  const Segment& s0 = m.segments[0];
  for (const Segment& s : m.segments) {
    if (s.device_stride != s0.device_stride ||
        s.device_base - s0.device_base != s.record_offset - s0.record_offset) {
      m.direct = false;
      break;
    }
  }
  if (m.direct) {
    m.direct_base = s0.device_base - s0.record_offset;
    m.direct_stride = s0.device_stride;
  }
  return m;
}

void AppendCopy(std::vector<CopyRun>& runs, std::byte* host, int host_region, uint64_t other,
                uint64_t bytes) {
  if (!runs.empty() && runs.back().host_region == host_region) {
    CopyRun& r = runs.back();
    if (r.height == 1 && r.host + r.width == host && r.other + r.width == other) {
      r.width += bytes;
      return;
    }
    if (bytes == r.width) {
      if (r.height == 1) {
        if (host > r.host && other > r.other && static_cast<uint64_t>(host - r.host) >= r.width &&
            other - r.other >= r.width) {
          r.host_pitch = static_cast<uint64_t>(host - r.host);
          r.other_pitch = other - r.other;
          r.height = 2;
          return;
        }
      } else if (host == r.host + r.height * r.host_pitch &&
                 other == r.other + r.height * r.other_pitch) {
        ++r.height;
        return;
      }
    }
  }
  runs.push_back({host, host_region, 0, other, 0, bytes, 1});
}

void PlanOperation(const Operation& op, const std::vector<HostPlacement>& host_slots,
                   const RecordMap* const maps[kNumKinds], uint64_t chunk_bytes,
                   PlannedOperation* out) {
  out->direction = op.direction;
  const bool saving = op.direction == Direction::kSave;
  StagedChunk* chunk = nullptr;
  auto new_chunk = [&] {
    out->chunks.emplace_back();
    chunk = &out->chunks.back();
  };
  for (size_t i = 0; i < op.units.size(); ++i) {
    const CacheTransferUnit& u = op.units[i];
    const RecordMap& m = *maps[static_cast<int>(u.kind)];
    const uint64_t slot = saving ? u.src.slot : u.dst.slot;
    std::byte* host = host_slots[i].payload;
    const int region = host_slots[i].region;
    ++out->units;
    out->bytes += m.record_bytes;
    if (m.direct) {
      AppendCopy(out->direct, host, region, m.direct_base + slot * m.direct_stride, m.record_bytes);
      continue;
    }
    const uint32_t ntiles = static_cast<uint32_t>(m.tiles.size());
    uint32_t t = 0;
    while (t < ntiles) {
      if (chunk == nullptr) new_chunk();
      const uint64_t room = chunk_bytes - chunk->staging_bytes;
      // The last tile end e with tile_offset[e] - tile_offset[t] <= room.
      auto it = std::upper_bound(m.tile_offset.begin() + t + 1, m.tile_offset.end(),
                                 m.tile_offset[t] + room);
      const uint32_t end = static_cast<uint32_t>(it - m.tile_offset.begin()) - 1;
      if (end == t) {  // not even one tile fits: next half
        new_chunk();
        continue;
      }
      const uint64_t bytes = m.tile_offset[end] - m.tile_offset[t];
      const uint64_t at = chunk->staging_bytes;
      chunk->jobs[static_cast<int>(u.kind)].push_back(
          {slot, t, end - t, static_cast<int64_t>(at) - static_cast<int64_t>(m.tile_offset[t])});
      AppendCopy(chunk->copies, host + m.tile_offset[t], region, at, bytes);
      chunk->staging_bytes = std::min(chunk_bytes, AlignStaging(at + bytes));
      t = end;
    }
  }
}

std::vector<KernelJob> RestrictJobs(const std::vector<KernelJob>& jobs, uint32_t tile_lo,
                                    uint32_t tile_hi) {
  std::vector<KernelJob> out;
  for (const KernelJob& j : jobs) {
    const uint32_t lo = std::max(j.tile_begin, tile_lo);
    const uint32_t hi = std::min(j.tile_begin + j.tile_count, tile_hi);
    if (lo < hi) out.push_back({j.slot, lo, hi - lo, j.staging_record_base});
  }
  return out;
}

}  // namespace cachepawl::internal
