// JSON text for the vocabulary library's readers (internal): layout files (layout_json.cc) and
// Hugging Face config.json files (layout_from_hf*.cc) parse and read files through these.
//
// ParseJson turns every nlohmann::json exception into InvalidArgument: a syntax error names the
// line and column (of the last character read, i.e. the end of the offending token), number
// overflow and invalid UTF-8 say "invalid JSON". With `reject_duplicate_keys`, a key that
// appears twice in one object is an error naming its path; without, the last one wins (as in
// Python's json module, which transformers reads config.json with).
//
// ReadSmallFile reads a whole file of at most `max_bytes`: NotFound when it does not exist,
// IOError for other failures of the OS, InvalidArgument for a larger file (naming `what`, e.g.
// "a layout file"). Neither function throws.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "store/vocab/status.h"

namespace cachepawl::json_text {

[[nodiscard]] StatusOr<nlohmann::json> ParseJson(std::string_view text, bool reject_duplicate_keys);

// A value as it appears in an error message: strings in single quotes, the rest as JSON text,
// cut to 60 characters.
std::string Render(const nlohmann::json& value);

[[nodiscard]] Status ReadSmallFile(const std::string& path, uint64_t max_bytes,
                                   std::string_view what, std::string* out);

}  // namespace cachepawl::json_text
