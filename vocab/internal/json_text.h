// JSON text for the vocabulary library's readers (internal): layout files (layout_json.cc) and
// Hugging Face config.json files (layout_from_hf*.cc) parse and read files through these.
//
// ParseJson turns every nlohmann::json exception into InvalidArgument: a syntax error names the
// line and column (of the last character read, i.e. the end of the offending token), number
// overflow and invalid UTF-8 say "invalid JSON". With `reject_duplicate_keys`, a key that
// appears twice in one object is an error naming its path; without, the last one wins (as in
// Python's json module, which transformers reads config.json with).
//
// ParseJson refuses arrays and objects nested deeper than kMaxJsonDepth before parsing, so no
// reader recurses deeply (nlohmann's dump in an error message, our own walks) on a hostile
// document; every other JSON reader (trace lines) calls CheckJsonDepth first.
//
// ReadSmallFile reads a whole file of at most `max_bytes`: NotFound when it does not exist,
// IOError for other failures of the OS, InvalidArgument for a larger file (naming `what`, e.g.
// "a layout file"). Neither function throws.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "vocab/status.h"

namespace cachepawl::json_text {

// How deep arrays and objects may nest in any JSON text Cachepawl reads (config.json files nest
// 3-4 levels, layout files and trace lines 2).
inline constexpr size_t kMaxJsonDepth = 64;

// The offset of the first '[' or '{' (outside strings) that opens a level past `max_depth`, or
// npos. O(size), no allocation.
size_t FindTooDeep(std::string_view text, size_t max_depth);

// "arrays and objects nested deeper than N levels": the text of every depth error.
std::string TooDeepMessage(size_t max_depth);

// InvalidArgument "line L, column C: arrays and objects nested deeper than N levels" at the
// first bracket past `max_depth` (FindTooDeep); OK otherwise, also for text that is not JSON
// (the parser names that).
[[nodiscard]] Status CheckJsonDepth(std::string_view text, size_t max_depth);

[[nodiscard]] StatusOr<nlohmann::json> ParseJson(std::string_view text, bool reject_duplicate_keys);

// A value as it appears in an error message: strings in single quotes, the rest as JSON text,
// cut to 60 characters.
std::string Render(const nlohmann::json& value);

[[nodiscard]] Status ReadSmallFile(const std::string& path, uint64_t max_bytes,
                                   std::string_view what, std::string* out);

}  // namespace cachepawl::json_text
