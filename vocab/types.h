// The small vocabulary every folder shares: kinds of cache, tiers, element types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cachepawl {

// What a cache entry holds:
//   kKV       the K and V of one page of tokens for the full-attention layers (for layouts
//             without sliding-window layers: every attention layer);
//   kMamba    the conv + SSM state of one sequence for all SSM layers at one exact depth;
//   kWindowKV the K and V of one page of tokens for the sliding-window attention layers, kept
//             apart so that a tier can drop it where no cached prefix can use it (only layouts
//             with such layers have it; see ModelLayout::Stores).
enum class Kind : uint8_t { kKV = 0, kMamba = 1, kWindowKV = 2 };
inline constexpr int kNumKinds = 3;
inline constexpr Kind kAllKinds[kNumKinds] = {Kind::kKV, Kind::kMamba, Kind::kWindowKV};

// Where bytes live, fastest first. An array indexed by any Tier has kNumTiers elements.
// kRemote (a Redis Cluster shared by several stores, tiers/remote_tier.h) is reported by Lookup
// but not tracked by the prefix index: arrays of what the index and the store's local counters
// hold per tier have kNumLocalTiers elements (device, host, disk) and are never indexed by
// kRemote (IsLocalTier says which tiers they may be indexed by).
enum class Tier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2, kRemote = 3 };
inline constexpr int kNumTiers = 4;       // every Tier, kRemote included
inline constexpr int kNumLocalTiers = 3;  // the tiers of one store: device, host, disk
constexpr bool IsLocalTier(Tier t) { return static_cast<int>(t) < kNumLocalTiers; }
static_assert(static_cast<int>(Tier::kRemote) == kNumLocalTiers &&
              static_cast<int>(Tier::kRemote) + 1 == kNumTiers);

// Element types of cache tensors. kFp4E2M1 is packed two to a byte with one fp8 (e4m3) scale
// per 16 elements (NVFP4 style): see DTypeStorageBytes().
enum class DType : uint8_t {
  kFp32 = 0,
  kFp16 = 1,
  kBf16 = 2,
  kFp8E4M3 = 3,
  kFp8E5M2 = 4,
  kInt8 = 5,
  kFp4E2M1 = 6,
};

std::string_view KindName(Kind kind);  // "kv", "mamba", "window"
std::string_view TierName(Tier tier);  // "device", "host", "disk", "remote"
std::string_view DTypeName(
    DType dtype);  // "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "fp4_e2m1"
std::optional<Kind> ParseKind(std::string_view name);
std::optional<DType> ParseDType(std::string_view name);  // also accepts "float16", "bfloat16"...
bool IsValidKind(uint8_t raw);
bool IsValidTier(uint8_t raw);
bool IsValidDType(uint8_t raw);

// Bytes that `elements` elements of `dtype` occupy, scales included for packed fp4 (whose
// element count must be a multiple of 16; returns nullopt otherwise or on overflow).
std::optional<uint64_t> DTypeStorageBytes(DType dtype, uint64_t elements);

}  // namespace cachepawl
