#include "index/page_hasher.h"

#include <openssl/evp.h>

#include <cstring>
#include <string>
#include <utility>

namespace cachepawl {
namespace {

constexpr std::string_view kNamespaceTag = "cachepawl-namespace";

struct CtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// One digest context per thread, reused across calls (EVP_DigestInit_ex2 resets it).
EVP_MD_CTX* ThreadContext() {
  thread_local std::unique_ptr<EVP_MD_CTX, CtxDeleter> ctx(EVP_MD_CTX_new());
  return ctx.get();
}

bool IsLittleEndian() {
  const uint16_t probe = 1;
  uint8_t first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

}  // namespace

struct PageHasher::Impl {
  EVP_MD* md = nullptr;  // fetched once; owned
  ~Impl() { EVP_MD_free(md); }
};

PageHasher::PageHasher(uint32_t page_size, std::unique_ptr<Impl> impl)
    : page_size_(page_size), impl_(std::move(impl)) {}
PageHasher::PageHasher(PageHasher&&) noexcept = default;
PageHasher& PageHasher::operator=(PageHasher&&) noexcept = default;
PageHasher::~PageHasher() = default;

StatusOr<PageHasher> PageHasher::Create(uint32_t page_size_tokens) {
  if (page_size_tokens == 0) {
    return Status::InvalidArgument("page_size_tokens: 0 (must be > 0)");
  }
  if (!IsLittleEndian()) {
    return Status::Unavailable("PageHasher: big-endian hosts are not supported");
  }
  auto impl = std::make_unique<Impl>();
  impl->md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (impl->md == nullptr) return Status::Internal("OpenSSL: EVP_MD_fetch(SHA256) failed");
  return PageHasher(page_size_tokens, std::move(impl));
}

PageHash PageHasher::Sha256(std::span<const uint8_t> bytes) const {
  EVP_MD_CTX* ctx = ThreadContext();
  PageHash out;
  unsigned int len = 0;
  // These calls fail only on allocation failure inside OpenSSL; the digest is then all zero,
  // which no real chain produces, and the caller's lookups simply miss.
  if (EVP_DigestInit_ex2(ctx, impl_->md, nullptr) != 1 ||
      EVP_DigestUpdate(ctx, bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(ctx, out.bytes.data(), &len) != 1) {
    return PageHash::Zero();
  }
  return out;
}

std::optional<PageHash> PageHasher::ChainStart(std::string_view ns) const {
  if (ns.empty()) return std::nullopt;
  std::string buf(kNamespaceTag);
  buf.append(ns);
  return Sha256({reinterpret_cast<const uint8_t*>(buf.data()), buf.size()});
}

size_t PageHasher::Extend(const std::optional<PageHash>& parent, std::span<const uint32_t> tokens,
                          std::vector<PageHash>* out) const {
  const size_t pages = tokens.size() / page_size_;
  if (pages == 0) return 0;
  out->reserve(out->size() + pages);
  EVP_MD_CTX* ctx = ThreadContext();
  const size_t page_bytes = static_cast<size_t>(page_size_) * sizeof(uint32_t);
  const PageHash* prev = parent ? &*parent : nullptr;
  PageHash prev_copy;
  for (size_t i = 0; i < pages; ++i) {
    PageHash h;
    unsigned int len = 0;
    bool ok = EVP_DigestInit_ex2(ctx, impl_->md, nullptr) == 1;
    if (ok && prev != nullptr) ok = EVP_DigestUpdate(ctx, prev->bytes.data(), 32) == 1;
    // Tokens are little-endian uint32 in memory on the hosts we support (checked in Create).
    ok = ok && EVP_DigestUpdate(ctx, tokens.data() + i * page_size_, page_bytes) == 1;
    ok = ok && EVP_DigestFinal_ex(ctx, h.bytes.data(), &len) == 1;
    if (!ok) h = PageHash::Zero();
    out->push_back(h);
    prev_copy = h;
    prev = &prev_copy;
  }
  return pages;
}

std::vector<PageHash> PageHasher::HashTokens(std::string_view ns,
                                             std::span<const uint32_t> tokens) const {
  std::vector<PageHash> out;
  Extend(ChainStart(ns), tokens, &out);
  return out;
}

}  // namespace cachepawl
