// StoreImpl and the remote tier (see store_impl.h): opening and closing its reader and writer,
// Lookup's look past the local match (store/remote_reader.h does the asking), and publishing
// the remote records a Load or StartPrefetch fetched into host memory. The writes:
// store/remote_writer.h.
#include <algorithm>

#include "store/store_impl.h"

namespace cachepawl {

Status StoreImpl::OpenRemote() {
  if (!options_.remote.enabled()) return Status::OK();
  auto remote = RemoteTier::Open(ToRemoteTierOptions(options_.remote), tier_layout_);
  if (!remote.ok()) return remote.status().WithContext("StoreOptions.remote");
  remote_ = std::move(remote).value();
  RemoteReader::Options ro;
  ro.threads = options_.remote.reader_threads;
  ro.lookup_deadline = std::chrono::milliseconds(options_.remote.lookup_deadline_ms);
  ro.track_interval_pages = options_.track_interval_pages;
  remote_reader_ = std::make_unique<RemoteReader>(remote_.get(), &tier_layout_, ro);
  remote_policy_ =
      TierWritePolicy::Make(options_.remote.write_policy, options_.remote.selective_min_hits);
  if (remote_policy_ != nullptr) {
    RemoteWriter::Options wo;
    wo.max_queued_writes = options_.remote.max_queued_writes;
    wo.on_evict = remote_policy_->OnEvict();
    remote_writer_ = std::make_unique<RemoteWriter>(
        remote_.get(), index_.get(), host_.get(), &tier_layout_, &mu_,
        [this] { host_space_->NotifyLocked(); }, wo);
  }
  return Status::OK();
}

void StoreImpl::CloseRemote() {
  if (remote_writer_) remote_writer_->Stop(std::chrono::milliseconds(options_.remote.deadline_ms));
  if (remote_reader_) remote_reader_->Stop();
}

// ------------------------------------------------------------------------------------------
// Lookup
// ------------------------------------------------------------------------------------------

void StoreImpl::ExtendMatchFromRemote(PrefixMatch& m) {
  if (!remote_reader_) return;
  const size_t added = remote_reader_->ExtendMatch(m, [this](const PageHash& hash, Kind kind) {
    auto e = index_->Lookup(hash);
    return e ? LocationsOf(*e, kind).Fastest() : std::nullopt;
  });
  counters_.CountRemoteLookupPages(added);
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
  const std::vector<Status> results = remote_reader_->Get(gets);
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
