// The built-in model layouts (layouts/layout_presets.cc; docs/MODELS.md says where every number
// came from), and the name an engine or a tool gives a layout: a preset, or a JSON layout file.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl {

// Names of the built-in presets, sorted.
std::vector<std::string> LayoutPresetNames();
// The named preset with the given page size; NotFound naming the preset otherwise.
StatusOr<ModelLayout> LayoutPreset(std::string_view name, uint32_t page_size_tokens = 16);

// A preset name or, when no preset has that name, a path to a JSON layout file. Presets get
// `page_size_tokens`; a file keeps its own "page_size_tokens" and gets `page_size_tokens` only
// when it has none. NotFound naming both attempts when it is neither.
StatusOr<ModelLayout> ResolveLayout(std::string_view preset_or_path,
                                    uint32_t page_size_tokens = 16);

}  // namespace cachepawl
