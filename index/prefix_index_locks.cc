// PrefixIndex: engine locks (Lock, Unlock) and transfer pins (PinForTransfer, Unpin): what keeps
// an entry from being evicted (see index/prefix_index_internal.h for the layout).
#include <span>
#include <string>
#include <vector>

#include "index/prefix_index.h"
#include "index/prefix_index_internal.h"

namespace cachepawl {

using namespace prefix_index_internal;  // NOLINT(google-build-using-namespace): its internals

// ===== locks and pins ========================================================================

Status PrefixIndex::Lock(const PageHash& node) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  uint32_t n;
  CACHEPAWL_RETURN_IF_ERROR(m.FindKnown(node, &n));
  m.path.clear();
  for (uint32_t i = n; i != kNone; i = m.hot[i].parent) {
    if (m.cold[i].kv_locks == kMaxCount) {
      ++m.errors.err_overflow;
      return Status::FailedPrecondition(Describe(m.hot[i].hash) + ": lock count at limit");
    }
    m.path.push_back(i);
  }
  if (m.cold[n].state_locks == kMaxCount) {
    ++m.errors.err_overflow;
    return Status::FailedPrecondition(Describe(node) + ": lock count at limit");
  }
  // window_locks <= kv_locks (a subset of the same locks), so it cannot overflow either.
  for (size_t k = 0; k < m.path.size(); ++k) {
    const uint32_t i = m.path[k];
    ColdEntry& ec = m.cold[i];
    const bool in_window = k < m.options.window_pages;  // `node` is in i's window range
    if (ec.kv_locks != 0 && i != n && !in_window) {  // already locked: evictability does not change
      ++ec.kv_locks;
      continue;
    }
    const Impl::Before before = m.Snapshot(i);
    if (ec.kv_locks++ == 0) ++m.locked_entries;
    if (i == n) ++ec.state_locks;
    if (in_window) ++m.win[i].locks;
    m.After(i, before);
  }
  return Status::OK();
}

Status PrefixIndex::Unlock(const PageHash& node) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  uint32_t n;
  CACHEPAWL_RETURN_IF_ERROR(m.FindKnown(node, &n));
  if (m.cold[n].state_locks == 0) {
    ++m.errors.err_not_locked;
    return Status::FailedPrecondition(Describe(node) + ": not locked (double unlock?)");
  }
  // kv_locks of each ancestor >= state_locks of `node` >= 1 (invariant), so no check fails
  // past this point.
  uint32_t k = 0;
  for (uint32_t i = n; i != kNone; i = m.hot[i].parent, ++k) {
    ColdEntry& ec = m.cold[i];
    const bool in_window = k < m.options.window_pages;
    if (ec.kv_locks > 1 && i != n && !in_window) {  // stays locked: evictability does not change
      --ec.kv_locks;
      continue;
    }
    const Impl::Before before = m.Snapshot(i);
    if (--ec.kv_locks == 0) --m.locked_entries;
    if (i == n) --ec.state_locks;
    if (in_window) --m.win[i].locks;
    m.After(i, before);
  }
  return Status::OK();
}

Status Core::PinOne(const PageHash& hash, int k, int t, bool pin) {
  uint32_t i;
  CACHEPAWL_RETURN_IF_ERROR(FindKnown(hash, &i));
  HotEntry& e = hot[i];
  ColdEntry& ec = cold[i];
  const Kind kind = static_cast<Kind>(k);
  const Tier tier = static_cast<Tier>(t);
  uint16_t* count = nullptr;
  if (k == kKv) {
    if (e.kv_mask & Bit(t)) count = &ec.kv_pins[t];
  } else if (State* s = Record(k, i); s != nullptr && (s->mask & Bit(t))) {
    count = &s->pins[t];
  }
  if (pin) {
    if (count == nullptr) {
      ++errors.err_not_located;
      return Status::NotFound(Describe(hash) + ": no " + Where(kind, tier) + " to pin");
    }
    if (*count == kMaxPins) {
      ++errors.err_overflow;
      return Status::FailedPrecondition(Describe(hash) + ": " + Where(kind, tier) +
                                        " pin count at limit");
    }
  } else if (count == nullptr || *count == 0) {
    ++errors.err_not_pinned;
    return Status::FailedPrecondition(Describe(hash) + ": " + Where(kind, tier) + " is not pinned");
  }
  const Before before = Snapshot(i);
  if (pin) {
    ++*count;
  } else {
    --*count;
  }
  After(i, before);
  return Status::OK();
}

namespace {

template <typename PinFn>
Status PinAll(std::span<const PageHash> hashes, PinFn&& pin_one) {
  for (size_t i = 0; i < hashes.size(); ++i) {
    Status s = pin_one(hashes[i], /*forward=*/true);
    if (!s.ok()) {
      // The reverse of a step that succeeded cannot fail.
      for (size_t j = i; j-- > 0;) (void)pin_one(hashes[j], /*forward=*/false);
      return s;
    }
  }
  return Status::OK();
}

}  // namespace

Status PrefixIndex::PinForTransfer(std::span<const PageHash> hashes, Kind kind, Tier tier) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckEnums(kind, tier));
  CACHEPAWL_RETURN_IF_ERROR(
      m.RefuseWithoutWindow(hashes.empty() ? PageHash::Zero() : hashes[0], kind));
  const int k = static_cast<int>(kind), t = static_cast<int>(tier);
  return PinAll(hashes,
                [&](const PageHash& h, bool forward) { return m.PinOne(h, k, t, forward); });
}

Status PrefixIndex::PinForTransfer(const PageHash& hash, Kind kind, Tier tier) {
  return PinForTransfer(std::span<const PageHash>(&hash, 1), kind, tier);
}

Status PrefixIndex::Unpin(std::span<const PageHash> hashes, Kind kind, Tier tier) {
  Impl& m = *impl_;
  Impl::Exclusive section(m);
  CACHEPAWL_RETURN_IF_ERROR(m.CheckEnums(kind, tier));
  const int k = static_cast<int>(kind), t = static_cast<int>(tier);
  return PinAll(hashes,
                [&](const PageHash& h, bool forward) { return m.PinOne(h, k, t, !forward); });
}

Status PrefixIndex::Unpin(const PageHash& hash, Kind kind, Tier tier) {
  return Unpin(std::span<const PageHash>(&hash, 1), kind, tier);
}

}  // namespace cachepawl
