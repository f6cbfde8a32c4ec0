// The C ABI (capi/cachepawl.h): page hashing, lookups and their match handles, and locks.
#include <span>
#include <string>
#include <string_view>

#include "capi/cachepawl.h"
#include "capi/cachepawl_c_internal.h"

namespace cachepawl::capi {
namespace {

// The (ns, ns_len) and (tokens, num_tokens) pairs every token call takes.
StatusOr<std::string_view> Namespace(const char* ns, size_t ns_len) {
  CACHEPAWL_RETURN_IF_ERROR(NeedSpan(ns, ns_len, "ns", "ns_len"));
  return ns == nullptr ? std::string_view() : std::string_view(ns, ns_len);
}

StatusOr<std::span<const uint32_t>> Tokens(const uint32_t* tokens, size_t num_tokens) {
  CACHEPAWL_RETURN_IF_ERROR(NeedSpan(tokens, num_tokens, "tokens", "num_tokens"));
  return std::span<const uint32_t>(tokens, num_tokens);
}

Status NewMatch(StatusOr<PrefixMatch> m, cachepawl_match** out) {
  CACHEPAWL_RETURN_IF_ERROR(m.status());
  *out = new cachepawl_match{std::move(m).value()};
  return Status::OK();
}

// Runs `get` on the match after checking the handle and the out pointer.
template <typename Get>
cachepawl_status MatchGetter(const char* fn, const cachepawl_match* match, const void* out,
                             Get&& get) noexcept {
  return Guard(fn, nullptr, [&]() -> Status {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(match, "match"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    get(match->match);
    return Status::OK();
  });
}

template <typename Get>
cachepawl_status LockGetter(const char* fn, const cachepawl_lock* lock, const void* out,
                            Get&& get) noexcept {
  return Guard(fn, nullptr, [&]() -> Status {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(lock, "lock"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    std::lock_guard<std::mutex> g(lock->mu);
    get(*lock);
    return Status::OK();
  });
}

}  // namespace
}  // namespace cachepawl::capi

using namespace cachepawl;        // NOLINT(google-build-using-namespace)
using namespace cachepawl::capi;  // NOLINT(google-build-using-namespace)

extern "C" {

cachepawl_status cachepawl_store_hash_tokens(const cachepawl_store* store, const char* ns,
                                             size_t ns_len, const uint32_t* tokens,
                                             size_t num_tokens, uint8_t* out, size_t capacity,
                                             size_t* count) {
  return StoreCall("cachepawl_store_hash_tokens", store, [&](Store& s) {
    CACHEPAWL_ASSIGN_OR_RETURN(std::string_view n, Namespace(ns, ns_len));
    CACHEPAWL_ASSIGN_OR_RETURN(auto t, Tokens(tokens, num_tokens));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(count, "count"));
    // Hash only into a buffer that holds the answer (a size query costs nothing).
    const size_t n_hashes = num_tokens / s.layout().page_size_tokens;
    const bool fits = out != nullptr && capacity >= n_hashes;
    std::vector<PageHash> hashes;
    if (fits) hashes = s.HashTokens(n, t);
    return CopyOut(hashes.data(), n_hashes, sizeof(PageHash), out, capacity, count, "out");
  });
}

cachepawl_status cachepawl_store_lookup(cachepawl_store* store, const char* ns, size_t ns_len,
                                        const uint32_t* tokens, size_t num_tokens,
                                        cachepawl_match** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_lookup", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_ASSIGN_OR_RETURN(std::string_view n, Namespace(ns, ns_len));
    CACHEPAWL_ASSIGN_OR_RETURN(auto t, Tokens(tokens, num_tokens));
    return NewMatch(s.Lookup(n, t), out);
  });
}

cachepawl_status cachepawl_store_lookup_hashes(cachepawl_store* store, const uint8_t* hashes,
                                               size_t num_hashes, cachepawl_match** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_lookup_hashes", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedSpan(hashes, num_hashes, "hashes", "num_hashes"));
    return NewMatch(s.LookupHashes(HashesFromBytes(hashes, num_hashes)), out);
  });
}

void cachepawl_match_free(cachepawl_match* match) { delete match; }

cachepawl_status cachepawl_match_num_pages(const cachepawl_match* match, size_t* out) {
  return MatchGetter("cachepawl_match_num_pages", match, out,
                     [&](const PrefixMatch& m) { *out = m.hashes.size(); });
}

cachepawl_status cachepawl_match_page_size_tokens(const cachepawl_match* match, uint32_t* out) {
  return MatchGetter("cachepawl_match_page_size_tokens", match, out,
                     [&](const PrefixMatch& m) { *out = m.page_size_tokens; });
}

cachepawl_status cachepawl_match_reusable_pages(const cachepawl_match* match, size_t* out) {
  return MatchGetter("cachepawl_match_reusable_pages", match, out,
                     [&](const PrefixMatch& m) { *out = m.reusable_pages; });
}

cachepawl_status cachepawl_match_kv_only_pages(const cachepawl_match* match, size_t* out) {
  return MatchGetter("cachepawl_match_kv_only_pages", match, out,
                     [&](const PrefixMatch& m) { *out = m.kv_only_pages; });
}

cachepawl_status cachepawl_match_checkpoint_hint_pages(const cachepawl_match* match, size_t* out) {
  return MatchGetter("cachepawl_match_checkpoint_hint_pages", match, out,
                     [&](const PrefixMatch& m) { *out = m.checkpoint_hint_pages; });
}

cachepawl_status cachepawl_match_page_tiers(const cachepawl_match* match, cachepawl_tier* out,
                                            size_t capacity, size_t* count) {
  return Guard("cachepawl_match_page_tiers", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(match, "match"));
    std::vector<cachepawl_tier> tiers;
    for (Tier t : match->match.page_tiers) tiers.push_back(static_cast<cachepawl_tier>(t));
    return CopyOut(tiers.data(), tiers.size(), sizeof(cachepawl_tier), out, capacity, count, "out");
  });
}

cachepawl_status cachepawl_match_window_first_page(const cachepawl_match* match, size_t* out) {
  return MatchGetter("cachepawl_match_window_first_page", match, out,
                     [&](const PrefixMatch& m) { *out = m.window_first_page; });
}

cachepawl_status cachepawl_match_window_tiers(const cachepawl_match* match, cachepawl_tier* out,
                                              size_t capacity, size_t* count) {
  return Guard("cachepawl_match_window_tiers", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(match, "match"));
    std::vector<cachepawl_tier> tiers;
    for (Tier t : match->match.window_tiers) tiers.push_back(static_cast<cachepawl_tier>(t));
    return CopyOut(tiers.data(), tiers.size(), sizeof(cachepawl_tier), out, capacity, count, "out");
  });
}

cachepawl_status cachepawl_match_state_tier(const cachepawl_match* match, cachepawl_tier* out) {
  return MatchGetter("cachepawl_match_state_tier", match, out, [&](const PrefixMatch& m) {
    *out = m.state_tier ? static_cast<cachepawl_tier>(*m.state_tier) : CACHEPAWL_TIER_NONE;
  });
}

cachepawl_status cachepawl_match_hashes(const cachepawl_match* match, uint8_t* out, size_t capacity,
                                        size_t* count) {
  return Guard("cachepawl_match_hashes", nullptr, [&] {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(match, "match"));
    const std::vector<PageHash>& h = match->match.hashes;
    return CopyOut(h.data(), h.size(), sizeof(PageHash), out, capacity, count, "out");
  });
}

cachepawl_status cachepawl_store_lock(cachepawl_store* store, const cachepawl_match* match,
                                      size_t pages, cachepawl_lock** out) {
  ClearOut(out);
  return StoreCall("cachepawl_store_lock", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(out, "out"));
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(match, "match"));
    CACHEPAWL_ASSIGN_OR_RETURN(PrefixLock l, s.Lock(match->match, pages));
    auto* lock = new cachepawl_lock();
    lock->state = store->state;
    lock->lock = std::move(l);
    *out = lock;
    return Status::OK();
  });
}

cachepawl_status cachepawl_store_unlock(cachepawl_store* store, cachepawl_lock* lock) {
  return StoreCall("cachepawl_store_unlock", store, [&](Store& s) {
    CACHEPAWL_RETURN_IF_ERROR(NeedHandle(lock, "lock"));
    if (lock->state != store->state) {
      return Status::FailedPrecondition("lock: taken on another store");
    }
    std::lock_guard<std::mutex> g(lock->mu);
    return s.Unlock(lock->lock);
  });
}

void cachepawl_lock_free(cachepawl_lock* lock) {
  if (lock == nullptr) return;
  (void)Guard("cachepawl_lock_free", nullptr, [&] {
    std::lock_guard<std::mutex> g(lock->mu);
    if (lock->lock.released) return Status::OK();
    std::shared_lock<std::shared_mutex> alive(lock->state->mu);
    if (lock->state->store == nullptr) return Status::OK();  // gone with its locks
    return lock->state->store->Unlock(lock->lock);
  });
  delete lock;
}

cachepawl_status cachepawl_lock_pages(const cachepawl_lock* lock, size_t* out) {
  return LockGetter("cachepawl_lock_pages", lock, out,
                    [&](const cachepawl_lock& l) { *out = l.lock.hashes.size(); });
}

cachepawl_status cachepawl_lock_has_state(const cachepawl_lock* lock, int32_t* out) {
  return LockGetter("cachepawl_lock_has_state", lock, out,
                    [&](const cachepawl_lock& l) { *out = l.lock.with_state ? 1 : 0; });
}

}  // extern "C"
