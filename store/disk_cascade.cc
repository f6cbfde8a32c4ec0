#include "store/disk_cascade.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "tiers/host_memory.h"

namespace cachepawl {

DiskCascade::DiskCascade(DiskMover* disk, PrefixIndex* index, const ModelLayout* layout,
                         std::mutex* mu, Hooks* hooks, const Options& options)
    : disk_(disk),
      index_(index),
      layout_(layout),
      mu_(mu),
      hooks_(hooks),
      options_(options),
      policy_(TierWritePolicy::Make(options.write_policy, options.selective_min_hits)),
      submitter_(std::make_unique<TaskQueue>()) {}

void DiskCascade::SavedLocked(const std::vector<EntryKey>& keys) {
  if (!keys.empty() && policy_->OnSaved()) StartWritesLocked(keys, /*evict_after=*/false);
}

void DiskCascade::HitLocked(const EntryKey& key) {
  if (policy_->OnHit(key)) StartWritesLocked({key}, /*evict_after=*/false);
}

bool DiskCascade::WritesOnEvictLocked(const EntryKey& key, const EntryInfo& e,
                                      const TierLocations& loc, bool useless) {
  // A victim whose removal is pending cannot be written (StartWritesLocked): it is dropped as
  // an unwritten one is.
  return !loc.Has(Tier::kDisk) && policy_->OnEvict() && !evict_unwritten_.count(key) &&
         !removing_.count(key) && !useless && AdmitLocked(e, key.kind);
}

void DiskCascade::AddStatsLocked(StoreStats* stats) const {
  for (int k = 0; k < kNumKinds; ++k) {
    stats->evictions[static_cast<int>(Tier::kDisk)][k] += evictions_[k];
  }
  stats->io_errors += io_errors_;
  stats->no_space_errors += no_space_;
  stats->evict_write_failures += evict_write_failures_;
  stats->disk_admission_refused += admission_refused_;
}

std::vector<EntryKey> DiskCascade::WithPrefixLocked(const std::vector<EntryKey>& keys) const {
  const uint32_t window = layout_->Stores(Kind::kWindowKV) ? layout_->WindowPages() : 0;
  // Hybrid eviction keeps a needed KV page's only copy: the state takes its KV along, or the
  // pages would stay in host memory, unevictable, for as long as the state is on disk.
  const bool with_kv =
      options_.eviction_policy == EvictionPolicy::kHybrid && layout_->Stores(Kind::kKV);
  std::vector<EntryKey> out = keys;
  for (const EntryKey& key : keys) {
    if (key.kind != Kind::kMamba || (window == 0 && !with_kv)) continue;
    // The state's window (its own page and the window - 1 before it) and, with_kv, the KV of
    // the pages of its prefix that host memory holds and the disk does not, up to the first
    // page the disk holds or is writing (disk eviction is leaves first, so what is above it is
    // on disk too, but for failed writes): O(new pages), not O(depth), under mu_.
    bool kv_walk = with_kv;
    std::optional<PageHash> cur = key.hash;
    for (uint32_t i = 0; cur && (i < window || kv_walk); ++i) {
      auto e = index_->Lookup(*cur);
      if (!e) break;
      if (i < window && !e->window.empty()) out.push_back({*cur, Kind::kWindowKV});
      if (kv_walk) {
        if (e->kv.Has(Tier::kDisk) || writing_.count({*cur, Kind::kKV})) {
          kv_walk = false;
        } else if (e->kv.Has(Tier::kHost)) {
          out.push_back({*cur, Kind::kKV});
        }
      }
      cur = e->parent;
    }
  }
  return out;
}

size_t DiskCascade::StartWritesLocked(const std::vector<EntryKey>& state_and_others,
                                      bool evict_after) {
  // A state goes to disk with its window (and, hybrid eviction, its KV): otherwise what it needs
  // stays in host memory, unevictable (needed windowed KV, and under hybrid eviction needed KV,
  // leave a tier only where another tier holds them).
  const std::vector<EntryKey> keys = WithPrefixLocked(state_and_others);
  std::vector<Job> jobs;
  std::vector<DiskWrite> writes;
  for (const EntryKey& key : keys) {
    if (writing_.count(key) || removing_.count(key)) continue;
    auto e = index_->Lookup(key.hash);
    if (!e) continue;
    const TierLocations& loc = LocationsOf(*e, key.kind);
    if (!loc.Has(Tier::kHost) || loc.Has(Tier::kDisk)) continue;
    if (!index_->PinForTransfer(key.hash, key.kind, Tier::kHost).ok()) continue;
    writing_.insert(key);
    if (evict_after) ++evict_writes_in_flight_;
    const HostSlotId slot = *loc.Slot(Tier::kHost);
    writes.push_back(
        {DiskKey{key.kind, key.hash, uint64_t{e->depth_pages} * layout_->page_size_tokens},
         e->parent.value_or(PageHash::Zero()), slot});
    jobs.push_back({key, slot, evict_after});
  }
  if (jobs.empty()) return 0;
  const size_t started = jobs.size();
  hooks_->OperationStarted();
  submitter_->Post([this, jobs = std::move(jobs), writes = std::move(writes)]() mutable {
    Submit(std::move(jobs), std::move(writes), 0);
  });
  return started;
}

void DiskCascade::Submit(std::vector<Job> jobs, std::vector<DiskWrite> writes, int attempt) {
  if (!layout_->Stores(Kind::kKV)) {
    // No full-attention KV records (pure SSM, or every attention layer windowed): a state goes
    // to disk with its chain, which a restart needs to reach it. Walked
    // here, outside mu_: the state's host copy is pinned, so its entry and ancestors stay.
    for (DiskWrite& w : writes) {
      if (w.key.kind != Kind::kMamba) continue;
      if (auto chain = index_->Ancestors(w.key.hash)) w.chain = std::move(*chain);
    }
  }
  DiskOp op = disk_->Save(writes);
  hooks_->WhenDone(op.fence, [this, jobs = std::move(jobs), op, attempt](const Status&) mutable {
    Finish(std::move(jobs), std::move(op), attempt);
  });
}

bool DiskCascade::AdmitLocked(const EntryInfo& e, Kind kind) {
  if (options_.eviction_policy != EvictionPolicy::kHybrid || !layout_->has_ssm()) return true;
  // KV no cached state can use is dropped, never written (the index keeps subtree_states).
  if (kind == Kind::kKV && e.subtree_states == 0) {
    ++admission_refused_;
    return false;
  }
  // A state whose score fell below the level the tiers have been evicting at would be among
  // the disk's next victims: it has not been hit for longer than its value per byte is worth.
  if (kind == Kind::kMamba && e.state_priority < index_->StateScoreFloor()) {
    ++admission_refused_;
    return false;
  }
  return true;
}

std::vector<DiskKey> DiskCascade::TakeVictimsLocked(const std::vector<Job>& jobs,
                                                    std::vector<DiskKey>* to_remote) {
  std::vector<DiskKey> removed;
  auto take = [&](const EvictionStage& stage, size_t count) {
    auto victims = index_->PickVictims(Tier::kDisk, stage.kind, count, stage.cls);
    if (!victims.ok()) return size_t{0};
    size_t taken = 0;
    for (const Victim& v : *victims) {
      auto e = index_->Lookup(v.hash);
      if (!e) continue;
      removed.push_back({v.kind, v.hash, uint64_t{e->depth_pages} * layout_->page_size_tokens});
      if (hooks_->RemoteWantsDiskVictimLocked({v.hash, v.kind}, LocationsOf(*e, v.kind))) {
        to_remote->push_back(removed.back());
      }
      ++evictions_[static_cast<int>(v.kind)];
      removing_.insert({v.hash, v.kind});
      hooks_->ForgetDiskLocked({v.hash, v.kind});
      ++taken;
    }
    return taken;
  };
  if (options_.eviction_policy != EvictionPolicy::kHybrid) {
    for (const EvictionStage& stage : EvictionOrder(options_.eviction_policy)) {
      if (removed.size() >= jobs.size()) break;
      take(stage, jobs.size() - removed.size() + 4);
    }
    return removed;
  }
  // Hybrid: free the bytes the writes need, in the eviction order, except that records of a
  // kind waiting to be written are first made room for by records of that kind (a record is
  // one contiguous extent, which scattered smaller records seldom free): a waiting state by a
  // state (by score), then pages by the order.
  uint64_t need[kNumKinds] = {};
  for (const Job& job : jobs) {
    need[static_cast<int>(job.key.kind)] += RecordSlotBytes(*layout_, job.key.kind);
  }
  if (const uint64_t states = need[static_cast<int>(Kind::kMamba)]; states > 0) {
    const uint64_t unit = RecordSlotBytes(*layout_, Kind::kMamba);
    take({Kind::kMamba, VictimClass::kAny}, static_cast<size_t>(states / unit));
  }
  uint64_t missing = need[static_cast<int>(Kind::kKV)] + need[static_cast<int>(Kind::kWindowKV)];
  for (const EvictionStage& stage : EvictionOrder(options_.eviction_policy)) {
    if (missing == 0) break;
    if (!layout_->Stores(stage.kind)) continue;
    const uint64_t unit = RecordSlotBytes(*layout_, stage.kind);
    const size_t taken = take(stage, static_cast<size_t>((missing + unit - 1) / unit) + 4);
    missing -= std::min(missing, taken * unit);
  }
  return removed;
}

void DiskCascade::Finish(std::vector<Job> jobs, DiskOp op, int attempt) {
  std::vector<Job> retry;
  std::vector<DiskKey> removals, to_remote;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    for (size_t i = 0; i < jobs.size(); ++i) {
      const Job& job = jobs[i];
      const DiskRecordResult& r = op.result->records.at(i);
      if (r.status.ok()) {
        (void)index_->SetLocation(job.key.hash, job.key.kind, Tier::kDisk, r.extent_id);
      } else if (r.status.IsNoSpace() && attempt == 0 && !hooks_->ClosedLocked()) {
        retry.push_back(job);  // stays pinned and in writing_ for the retry
        continue;
      } else {
        if (r.status.IsIOError()) ++io_errors_;
        if (r.status.IsNoSpace()) ++no_space_;
        if (job.evict_after) ++evict_write_failures_;
        spdlog::debug("cachepawl: disk write of {} failed: {}", job.key.hash.ToHex(),
                      r.status.ToString());
      }
      (void)index_->Unpin(job.key.hash, job.key.kind, Tier::kHost);
      writing_.erase(job.key);
      if (job.evict_after) {
        --evict_writes_in_flight_;
        // A write-on-evict victim whose write failed leaves host memory without a disk copy
        // (a cache may forget) at the next eviction, in the index's order, unless it is locked
        // or pinned by then.
        if (!r.status.ok()) evict_unwritten_.insert(job.key);
      }
    }
    if (!retry.empty()) removals = TakeVictimsLocked(retry, &to_remote);
    hooks_->SpaceChangedLocked();
  }
  if (!retry.empty()) {
    hooks_->OperationStarted();
    submitter_->Post([this, retry = std::move(retry), removals = std::move(removals),
                      to_remote = std::move(to_remote)]() mutable {
      // Remote write-on-evict: the victims whose only copy is this one are read first.
      if (!to_remote.empty()) hooks_->CopyDiskVictimsToRemote(to_remote);
      // One catalog batch. A record being read goes at once and its extent when the read
      // ends; one being written cannot be a victim (the index names only committed records).
      // A removal that fails (the catalog) leaves the record on disk unnamed by the index
      // until the next open.
      const std::vector<Status> removed = disk_->tier().Remove(removals);
      for (size_t i = 0; i < removed.size(); ++i) {
        if (!removed[i].ok() && !removed[i].IsNotFound()) {
          spdlog::debug("cachepawl: removing disk victim {} failed: {}", removals[i].ToString(),
                        removed[i].ToString());
        }
      }
      std::vector<DiskWrite> writes;
      {
        std::lock_guard<std::mutex> lock(*mu_);
        for (const DiskKey& k : removals) removing_.erase({k.hash, k.kind});
        for (const Job& job : retry) {
          auto e = index_->Lookup(job.key.hash);
          writes.push_back({DiskKey{job.key.kind, job.key.hash,
                                    e ? uint64_t{e->depth_pages} * layout_->page_size_tokens : 0},
                            e && e->parent ? *e->parent : PageHash::Zero(), job.slot});
        }
      }
      Submit(std::move(retry), std::move(writes), 1);
    });
  }
  hooks_->OperationFinished();
}

}  // namespace cachepawl
