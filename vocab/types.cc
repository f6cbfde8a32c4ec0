#include "vocab/types.h"

#include <string>

namespace cachepawl {

std::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kKV:
      return "kv";
    case Kind::kMamba:
      return "mamba";
    case Kind::kWindowKV:
      return "window";
  }
  return "unknown-kind";
}

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "device";
    case Tier::kHost:
      return "host";
    case Tier::kDisk:
      return "disk";
    case Tier::kRemote:
      return "remote";
  }
  return "unknown-tier";
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
      return "fp32";
    case DType::kFp16:
      return "fp16";
    case DType::kBf16:
      return "bf16";
    case DType::kFp8E4M3:
      return "fp8_e4m3";
    case DType::kFp8E5M2:
      return "fp8_e5m2";
    case DType::kInt8:
      return "int8";
    case DType::kFp4E2M1:
      return "fp4_e2m1";
  }
  return "unknown-dtype";
}

std::optional<Kind> ParseKind(std::string_view name) {
  if (name == "kv" || name == "KV") return Kind::kKV;
  if (name == "mamba" || name == "Mamba") return Kind::kMamba;
  if (name == "window" || name == "window_kv") return Kind::kWindowKV;
  return std::nullopt;
}

std::optional<DType> ParseDType(std::string_view name) {
  if (name == "fp32" || name == "float32") return DType::kFp32;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kFp16;
  if (name == "bf16" || name == "bfloat16") return DType::kBf16;
  if (name == "fp8_e4m3" || name == "float8_e4m3fn" || name == "fp8") return DType::kFp8E4M3;
  if (name == "fp8_e5m2" || name == "float8_e5m2") return DType::kFp8E5M2;
  if (name == "int8") return DType::kInt8;
  if (name == "fp4_e2m1" || name == "nvfp4" || name == "fp4") return DType::kFp4E2M1;
  return std::nullopt;
}

bool IsValidKind(uint8_t raw) { return raw <= static_cast<uint8_t>(Kind::kWindowKV); }
bool IsValidTier(uint8_t raw) { return raw <= static_cast<uint8_t>(Tier::kDisk); }
bool IsValidDType(uint8_t raw) { return raw <= static_cast<uint8_t>(DType::kFp4E2M1); }

std::optional<uint64_t> DTypeStorageBytes(DType dtype, uint64_t elements) {
  uint64_t width = 0;
  switch (dtype) {
    case DType::kFp32:
      width = 4;
      break;
    case DType::kFp16:
    case DType::kBf16:
      width = 2;
      break;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
    case DType::kInt8:
      width = 1;
      break;
    case DType::kFp4E2M1:
      if (elements % 16 != 0) return std::nullopt;
      // Two values per byte plus one 1-byte scale per 16 values.
      return elements / 2 + elements / 16;
  }
  if (width == 0) return std::nullopt;
  uint64_t out = 0;
  if (__builtin_mul_overflow(elements, width, &out)) return std::nullopt;
  return out;
}

}  // namespace cachepawl
