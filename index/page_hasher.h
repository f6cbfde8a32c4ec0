// PageHasher: the SHA-256 chain that names pages of tokens (docs/DESIGN.md, "The life of a
// prefix").
//
//   h0 = SHA256(seed || tokens[0, P)),  hi = SHA256(h(i-1) || tokens[iP, (i+1)P))
//
// Tokens are 4-byte little-endian unsigned integers. `seed` is empty for the empty namespace
// (the chain SGLang's HiCache uses for its storage keys) and
// SHA256("cachepawl-namespace" || namespace bytes) otherwise. Only full pages are hashed: a
// trailing partial page is ignored.
//
// Thread safety: a PageHasher is immutable after Create(); its methods may be called from any
// number of threads at once (each thread reuses its own OpenSSL digest context).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "vocab/page_hash.h"
#include "vocab/status.h"

namespace cachepawl {

class PageHasher {
 public:
  // Fetches SHA-256 once. InvalidArgument when page_size_tokens is 0; Internal when OpenSSL
  // has no SHA-256.
  static StatusOr<PageHasher> Create(uint32_t page_size_tokens);

  PageHasher(PageHasher&&) noexcept;
  PageHasher& operator=(PageHasher&&) noexcept;
  PageHasher(const PageHasher&) = delete;
  PageHasher& operator=(const PageHasher&) = delete;
  ~PageHasher();

  uint32_t page_size_tokens() const { return page_size_; }

  // The value that stands before the first page: nullopt for the empty namespace, else
  // SHA256("cachepawl-namespace" || ns).
  std::optional<PageHash> ChainStart(std::string_view ns) const;

  // Appends one hash per full page of `tokens` to `out`, chained from `parent` (a ChainStart()
  // value or the hash of the page just before `tokens`). Returns the number of pages hashed.
  size_t Extend(const std::optional<PageHash>& parent, std::span<const uint32_t> tokens,
                std::vector<PageHash>* out) const;

  // The hashes of every full page of `tokens` under namespace `ns`.
  std::vector<PageHash> HashTokens(std::string_view ns, std::span<const uint32_t> tokens) const;

  // SHA-256 of arbitrary bytes with the fetched digest (used for namespace seeds and tests).
  PageHash Sha256(std::span<const uint8_t> bytes) const;

 private:
  struct Impl;
  explicit PageHasher(uint32_t page_size, std::unique_ptr<Impl> impl);
  uint32_t page_size_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cachepawl
