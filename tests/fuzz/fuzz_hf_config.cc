// Fuzz target: Hugging Face config.json files (layouts/layout_from_hf.h, LayoutFromHfConfig),
// what `cachepawl layout --hf-config`, the C ABI and the Python package hand in from a model
// folder.
//
// Input: one byte choosing the options (cache and state dtypes, the conv convention, the page
// size), then the config text. Properties: no crash, no exception, errors are InvalidArgument;
// a layout that comes out passes fuzz_layout_checks.h's checks.
#include <cstddef>
#include <cstdint>

#include "layouts/layout_from_hf.h"
#include "tests/fuzz/fuzz_layout_checks.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachepawl;  // NOLINT(google-build-using-namespace)
  fuzz::FuzzInput in(data, size);
  const uint8_t choice = in.Byte();
  constexpr DType kDTypes[] = {DType::kBf16,    DType::kFp16, DType::kFp32,    DType::kFp8E4M3,
                               DType::kFp4E2M1, DType::kInt8, DType::kFp8E5M2, DType::kBf16};
  HfLayoutOptions options;
  options.cache_dtype = kDTypes[choice & 7];
  options.state_dtype = (choice & 8) != 0 ? DType::kBf16 : DType::kFp32;
  options.convention =
      (choice & 16) != 0 ? StateConvention::kSglang : StateConvention::kTransformers;
  options.page_size_tokens = (choice & 32) != 0 ? 1 : 16;
  if ((choice & 64) != 0) options.model = "fuzz/model";
  auto layout = LayoutFromHfConfig(in.Rest(), options);
  if (!layout.ok()) {
    fuzz::Check(layout.status().IsInvalidArgument(), "a bad config that is not InvalidArgument");
    return 0;
  }
  fuzz::CheckLayout(*layout);
  return 0;
}
