// Fuzz target: layout files (vocab/layout_json.cc, ParseLayoutJson), what a user's JSON file
// or the C ABI's layout text hands in.
//
// Input: the JSON text. Properties: no crash, no exception out of the parser, no overflow in the
// sizes a validated layout derives (every accessor is called); a layout that parses writes
// (LayoutToJson) a text that parses back to the same fingerprint.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/fuzz_layout_checks.h"
#include "tests/fuzz/fuzz_util.h"
#include "vocab/model_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachepawl;  // NOLINT(google-build-using-namespace)
  auto layout = ParseLayoutJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!layout.ok()) {
    fuzz::Check(layout.status().IsInvalidArgument(), "a bad layout that is not InvalidArgument");
    return 0;
  }
  fuzz::CheckLayout(*layout);
  return 0;
}
