// StoreImpl and the remote tier (see store_impl.h): Lookup's look past the local match, Lock of
// a match that reaches into the remote tier, the fetch of remote records into host memory for
// Load and StartPrefetch. The writes: store_remote_writes.cc.
#include <algorithm>

#include "store/store_impl.h"

namespace cachepawl {

Status StoreImpl::OpenRemote() {
  if (!options_.remote.enabled()) return Status::OK();
  auto remote = RemoteTier::Open(ToRemoteTierOptions(options_.remote), layout_);
  if (!remote.ok()) return remote.status().WithContext("StoreOptions.remote");
  remote_ = std::move(remote).value();
  remote_reader_ = std::make_unique<TaskQueue>(options_.remote.reader_threads);
  remote_policy_ =
      TierWritePolicy::Make(options_.remote.write_policy, options_.remote.selective_min_hits);
  if (remote_policy_ != nullptr) {
    RemoteWriter::Options wo;
    wo.max_queued_writes = options_.remote.max_queued_writes;
    wo.on_evict = remote_policy_->OnEvict();
    remote_writer_ = std::make_unique<RemoteWriter>(
        remote_.get(), index_.get(), host_.get(), &layout_, &mu_,
        [this] { host_space_->NotifyLocked(); }, wo);
  }
  return Status::OK();
}

void StoreImpl::CloseRemote() {
  if (remote_writer_) remote_writer_->Stop(std::chrono::milliseconds(options_.remote.deadline_ms));
  remote_reader_.reset();
}

// ------------------------------------------------------------------------------------------
// Lookup
// ------------------------------------------------------------------------------------------

void StoreImpl::ExtendMatchFromRemote(PrefixMatch& m) {
  const size_t n = m.hashes.size();
  if (!remote_ || n == 0 || m.reusable_pages == n) return;
  const uint64_t page_tokens = layout_.page_size_tokens;
  const bool full_kv = layout_.Stores(Kind::kKV);
  const size_t window = layout_.Stores(Kind::kWindowKV) ? layout_.WindowPages() : 0;
  const bool ssm = layout_.has_ssm();
  const size_t local_kv = full_kv ? m.kv_only_pages : m.reusable_pages;

  // Local tiers of the windowed KV and states the match may use past its local depth.
  auto local_fastest = [&](size_t page, Kind kind) -> std::optional<Tier> {
    auto e = index_->Lookup(m.hashes[page]);
    if (!e) return std::nullopt;
    return LocationsOf(*e, kind).Fastest();
  };
  // One existence batch: KV pages past the local match, windowed KV and states not held here.
  std::vector<DiskKey> keys;
  struct Asked {
    size_t page;
    Kind kind;
  };
  std::vector<Asked> asked;
  std::vector<std::optional<Tier>> window_tier(n), state_tier(n);
  auto ask = [&](size_t page, Kind kind) {
    keys.push_back(DiskKey{kind, m.hashes[page], (page + 1) * page_tokens});
    asked.push_back({page, kind});
  };
  if (full_kv) {
    for (size_t p = local_kv; p < n; ++p) ask(p, Kind::kKV);
  }
  const size_t window_from = m.reusable_pages - std::min(m.reusable_pages, window);
  for (size_t p = window > 0 ? window_from : n; p < n; ++p) {
    window_tier[p] = local_fastest(p, Kind::kWindowKV);
    if (!window_tier[p]) ask(p, Kind::kWindowKV);
  }
  for (size_t p = ssm ? m.reusable_pages : n; p < n; ++p) {
    state_tier[p] = local_fastest(p, Kind::kMamba);
    if (!state_tier[p]) ask(p, Kind::kMamba);
  }
  if (keys.empty()) return;
  const std::vector<bool> there =
      remote_->Exists(keys, std::chrono::milliseconds(options_.remote.lookup_deadline_ms));
  std::vector<bool> kv_remote(n, false);
  for (size_t i = 0; i < asked.size(); ++i) {
    if (!there[i]) continue;
    const auto [page, kind] = asked[i];
    if (kind == Kind::kKV) kv_remote[page] = true;
    if (kind == Kind::kWindowKV) window_tier[page] = Tier::kRemote;
    if (kind == Kind::kMamba) state_tier[page] = Tier::kRemote;
  }
  size_t kv_end = local_kv;
  if (full_kv) {
    while (kv_end < n && kv_remote[kv_end]) ++kv_end;
  } else {
    kv_end = n;  // pages without KV: the chain is all they need
  }
  // The deepest depth past the local one with a state (SSM layouts) and its window.
  size_t reusable = m.reusable_pages;
  for (size_t d = kv_end; d > m.reusable_pages; --d) {
    if (ssm && !state_tier[d - 1]) continue;
    bool window_ok = true;
    for (size_t p = d - std::min(d, window); p < d && window_ok; ++p) {
      window_ok = window_tier[p].has_value();
    }
    if (window_ok) {
      reusable = d;
      break;
    }
  }
  if (reusable == m.reusable_pages && kv_end <= m.kv_only_pages) return;
  counters_.CountRemoteLookupPages(reusable - m.reusable_pages);
  if (full_kv) {
    for (size_t p = m.kv_only_pages; p < kv_end; ++p) m.page_tiers.push_back(Tier::kRemote);
    m.kv_only_pages = kv_end;
  } else {
    m.kv_only_pages = std::max(m.kv_only_pages, reusable);
  }
  const size_t track = std::max<uint32_t>(1, options_.track_interval_pages);
  m.checkpoint_hint_pages = m.kv_only_pages / track * track;
  if (reusable > m.reusable_pages) {
    m.reusable_pages = reusable;
    m.state_tier = ssm ? state_tier[reusable - 1] : std::nullopt;
    if (window > 0) {
      m.window_first_page = reusable - std::min(reusable, window);
      m.window_tiers.clear();
      for (size_t p = m.window_first_page; p < reusable; ++p) {
        m.window_tiers.push_back(*window_tier[p]);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------
// Reads into host memory
// ------------------------------------------------------------------------------------------

Tier StoreImpl::MatchTier(const PrefixMatch& match, const EntryKey& key, size_t page) {
  switch (key.kind) {
    case Kind::kKV:
      return page < match.page_tiers.size() ? match.page_tiers[page] : Tier::kDevice;
    case Kind::kWindowKV:
      if (page >= match.window_first_page &&
          page - match.window_first_page < match.window_tiers.size()) {
        return match.window_tiers[page - match.window_first_page];
      }
      return Tier::kDevice;
    case Kind::kMamba:
      return match.state_tier.value_or(Tier::kDevice);
  }
  return Tier::kDevice;
}

Status StoreImpl::FetchRemoteFills(std::span<const PageHash> hashes,
                                   const std::vector<HostFill>& fills,
                                   std::vector<size_t>* failed) {
  std::vector<RemoteGet> gets;
  gets.reserve(fills.size());
  for (const HostFill& f : fills) {
    gets.push_back({DiskKey{f.key.kind, f.key.hash, f.depth_tokens},
                    std::span<std::byte>(host_->SlotData(f.slot), host_->slot_bytes(f.key.kind))});
  }
  const std::vector<Status> results = remote_->Get(gets);
  Status first_error;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < fills.size(); ++i) {
    const HostFill& f = fills[i];
    filling_.erase(f.key);
    Status s = results[i];
    if (s.ok()) {
      // The pages leading to it (the chain up to its own page) join the index first.
      s = index_->InsertChain(std::nullopt, hashes.first(f.page + 1));
      if (s.ok()) s = index_->SetLocation(f.key.hash, f.key.kind, Tier::kHost, f.slot);
      if (s.ok()) s = index_->PinForTransfer(f.key.hash, f.key.kind, Tier::kHost);
    }
    if (s.ok()) {
      counters_.CountRemoteLoadLocked(true);
      continue;
    }
    counters_.CountRemoteLoadLocked(false);
    if (s.IsCorruption()) counters_.CountReadErrorLocked(s);
    if (first_error.ok()) first_error = s.WithContext(EntryName(f.key.kind, f.page));
    failed->push_back(i);
    (void)host_->Free(f.slot);
    PruneLocked(f.key.hash);
  }
  host_space_->NotifyLocked();
  return first_error;
}

RemoteStats StoreImpl::RemoteStatsLocked() const {
  if (!remote_) return RemoteStats{};
  RemoteStats r;
  r.enabled = true;
  counters_.AddRemoteLocked(&r);
  if (remote_writer_) remote_writer_->AddStatsLocked(&r);
  const RemoteTierStats t = remote_->stats();
  r.put_bytes = t.put_bytes;
  r.get_bytes = t.get_bytes;
  r.missing_parts = t.missing_parts;
  r.wrong_size = t.wrong_size;
  r.header_mismatches = t.header_mismatches;
  r.checksum_failures = t.checksum_failures;
  r.transport_errors = t.transport_errors;
  r.deleted_bad = t.deleted_bad;
  return r;
}

}  // namespace cachepawl
