// EntryKey: one cached entry inside the Store: a page hash and a kind (the KV page of that hash,
// its windowed KV, or the Mamba state at the depth of that page). Hashable for unordered
// containers.
#pragma once

#include <cstddef>
#include <string>

#include "index/index_types.h"
#include "vocab/page_hash.h"
#include "vocab/types.h"

namespace cachepawl {

struct EntryKey {
  PageHash hash;
  Kind kind = Kind::kKV;
  friend bool operator==(const EntryKey&, const EntryKey&) = default;
};

// Where an index entry holds `kind`: its KV page, its windowed KV, or the state after it.
inline const TierLocations& LocationsOf(const EntryInfo& e, Kind kind) {
  switch (kind) {
    case Kind::kKV:
      return e.kv;
    case Kind::kWindowKV:
      return e.window;
    case Kind::kMamba:
      break;
  }
  return e.state;
}

// How a message names `kind` of page `page`: "page 3", "windowed KV of page 3", "state at page 3".
inline std::string EntryName(Kind kind, size_t page) {
  const std::string p = std::to_string(page);
  switch (kind) {
    case Kind::kKV:
      return "page " + p;
    case Kind::kWindowKV:
      return "windowed KV of page " + p;
    case Kind::kMamba:
      break;
  }
  return "state at page " + p;
}

struct EntryKeyHasher {
  size_t operator()(const EntryKey& k) const noexcept {
    return PageHashHasher()(k.hash) ^ static_cast<size_t>(k.kind);
  }
};

}  // namespace cachepawl
