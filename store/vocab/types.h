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

// Where bytes live, fastest first.
// kRemote (a Redis Cluster shared by several stores, tiers/remote_tier.h) is reported by Lookup
// but not tracked by the prefix index: kNumTiers counts the tiers the index holds locations of.
enum class Tier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2, kRemote = 3 };
inline constexpr int kNumTiers = 3;
inline constexpr int kReportedTiers = 4;  // every tier a Lookup may report, kRemote included

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
std::optional<Tier> ParseTier(std::string_view name);
std::optional<DType> ParseDType(std::string_view name);  // also accepts "float16", "bfloat16"...
bool IsValidKind(uint8_t raw);
bool IsValidTier(uint8_t raw);
bool IsValidDType(uint8_t raw);

// Bytes that `elements` elements of `dtype` occupy, scales included for packed fp4 (whose
// element count must be a multiple of 16; returns nullopt otherwise or on overflow).
std::optional<uint64_t> DTypeStorageBytes(DType dtype, uint64_t elements);

}  // namespace cachepawl
