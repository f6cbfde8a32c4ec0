// The C ABI (capi/cachepawl.h): layouts from Hugging Face config.json files
// (layouts/layout_from_hf.h) and a rank's share of a layout (layouts/layout_tp.h). The string
// arguments name dtypes and the conv convention; each bad one is InvalidArgument naming the
// argument and the value.
#include <string>

#include "capi/cachepawl.h"
#include "capi/cachepawl_c_internal.h"
#include "layouts/layout_from_hf.h"
#include "layouts/layout_tp.h"

namespace cachepawl::capi {
namespace {

constexpr char kDTypeChoices[] = "fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8 or fp4_e2m1";

// A dtype argument: `fallback` for NULL.
StatusOr<DType> DTypeArg(const char* name, const char* value, DType fallback) {
  if (value == nullptr) return fallback;
  auto dtype = ParseDType(value);
  if (!dtype) {
    return Status::InvalidArgument(std::string(name) + ": '" + value +
                                   "' (unknown dtype; expected " + kDTypeChoices + ")");
  }
  return *dtype;
}

// The options of the arguments the two functions share.
StatusOr<HfLayoutOptions> OptionsArgs(const char* cache_dtype, const char* state_dtype,
                                      const char* convention, uint32_t page_size_tokens,
                                      const char* model) {
  HfLayoutOptions o;
  CACHEPAWL_ASSIGN_OR_RETURN(o.cache_dtype, DTypeArg("cache_dtype", cache_dtype, DType::kBf16));
  CACHEPAWL_ASSIGN_OR_RETURN(o.state_dtype, DTypeArg("state_dtype", state_dtype, DType::kFp32));
  if (convention != nullptr) {
    auto parsed = ParseStateConvention(convention);
    if (!parsed) {
      return Status::InvalidArgument(std::string("convention: '") + convention +
                                     "' (expected transformers or sglang)");
    }
    o.convention = *parsed;
  }
  o.page_size_tokens = page_size_tokens;
  if (model != nullptr) o.model = model;
  CACHEPAWL_RETURN_IF_ERROR(o.Validate());
  return o;
}

}  // namespace
}  // namespace cachepawl::capi

using namespace cachepawl;        // NOLINT(google-build-using-namespace)
using namespace cachepawl::capi;  // NOLINT(google-build-using-namespace)

extern "C" {

cachepawl_status cachepawl_layout_from_hf_config_string(
    const char* json, size_t len, const char* cache_dtype, const char* state_dtype,
    const char* convention, uint32_t page_size_tokens, const char* model, cachepawl_layout** out) {
  ClearOut(out);
  return Guard("cachepawl_layout_from_hf_config_string", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(json, len, "json", "len"));
    CACHEPAWL_ASSIGN_OR_RETURN(HfLayoutOptions o, OptionsArgs(cache_dtype, state_dtype, convention,
                                                              page_size_tokens, model));
    return NewLayout(LayoutFromHfConfig(std::string_view(json == nullptr ? "" : json, len), o),
                     out);
  });
}

cachepawl_status cachepawl_layout_from_hf_config_file(const char* path, const char* cache_dtype,
                                                      const char* state_dtype,
                                                      const char* convention,
                                                      uint32_t page_size_tokens, const char* model,
                                                      cachepawl_layout** out) {
  ClearOut(out);
  return Guard("cachepawl_layout_from_hf_config_file", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(path, "path"));
    CACHEPAWL_ASSIGN_OR_RETURN(HfLayoutOptions o, OptionsArgs(cache_dtype, state_dtype, convention,
                                                              page_size_tokens, model));
    return NewLayout(LayoutFromHfConfigFile(path, o), out);
  });
}

cachepawl_status cachepawl_layout_hf_model_types(char** out) {
  ClearOut(out);
  return Guard("cachepawl_layout_hf_model_types", nullptr, [&] {
    std::string types;
    for (const std::string& t : HfConfigModelTypes()) types += t + "\n";
    return NewString(types, out);
  });
}

cachepawl_status cachepawl_layout_shard(const cachepawl_layout* whole, uint32_t tp_size,
                                        uint32_t tp_rank, cachepawl_layout** out) {
  ClearOut(out);
  return Guard("cachepawl_layout_shard", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(whole, "whole"));
    return NewLayout(ShardLayout(whole->layout, tp_size, tp_rank), out);
  });
}

cachepawl_status cachepawl_layout_tp(const cachepawl_layout* layout, uint32_t* tp_size,
                                     uint32_t* tp_rank) {
  return Guard("cachepawl_layout_tp", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(layout, "layout"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(tp_size, "tp_size"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(tp_rank, "tp_rank"));
    *tp_size = layout->layout.tp_size;
    *tp_rank = layout->layout.tp_rank;
    return Status::OK();
  });
}

}  // extern "C"
