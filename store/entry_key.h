// EntryKey: one cached entry inside the Store: a page hash and a kind (the KV page of that hash,
// or the Mamba state at the depth of that page). Hashable for unordered containers.
#pragma once

#include <cstddef>

#include "index/page_hash.h"
#include "store/types.h"

namespace cachepawl {

struct EntryKey {
  PageHash hash;
  Kind kind = Kind::kKV;
  friend bool operator==(const EntryKey&, const EntryKey&) = default;
};

struct EntryKeyHasher {
  size_t operator()(const EntryKey& k) const noexcept {
    return PageHashHasher()(k.hash) ^ static_cast<size_t>(k.kind);
  }
};

}  // namespace cachepawl
