// StressWorker: the random operations (tools/stress/stress_worker.h). Loads, their verification and
// the fence waits are in stress_worker_load.cc.
#include "tools/stress/stress_worker.h"

#include <algorithm>
#include <thread>

#include "tools/replay/replay_content.h"

namespace cachepawl::tools {
namespace {

constexpr std::byte kPoison{0xA5};

}  // namespace

StressShape StressShape::Of(const ModelLayout& layout, uint64_t host_bytes, uint64_t disk_bytes) {
  StressShape s;
  s.host_bytes = host_bytes;
  s.disk_bytes = disk_bytes;
  s.page_size = layout.page_size_tokens;
  s.kv = layout.has_attention();
  s.ssm = layout.has_ssm();
  s.window_pages = layout.Stores(Kind::kWindowKV) ? layout.WindowPages() : 0;
  s.page_bytes = s.kv ? layout.KvPageBytes() : 0;
  s.state_bytes = s.ssm ? layout.MambaSlotBytes() : 0;
  s.attention_layers = layout.attention_layers.size();
  for (size_t a = 0; a < layout.attention_layers.size(); ++a) {
    if (layout.AttentionKind(a) != Kind::kWindowKV) continue;
    s.window_ranges.push_back(layout.KSegment(a));
    s.window_ranges.push_back(layout.VSegment(a));
  }
  return s;
}

void StressTotals::Merge(const StressTotals& o) {
  load_misses += o.load_misses;
  strict_locked_loads += o.strict_locked_loads;
  for (const auto& [key, n] : o.allowed_errors) allowed_errors[key] += n;
  unexpected_errors += o.unexpected_errors;
  for (const std::string& s : o.unexpected_seen) {
    if (unexpected_seen.size() < 10) unexpected_seen.push_back(s);
  }
  records_verified += o.records_verified;
  bytes_verified += o.bytes_verified;
  wrong_records += o.wrong_records;
  wrong_bytes += o.wrong_bytes;
  for (const std::string& s : o.wrong_seen) {
    if (wrong_seen.size() < 10) wrong_seen.push_back(s);
  }
}

StressWorker::StressWorker(Store* store, const StressPrompts* prompts, const StressShape* shape,
                           uint32_t id, uint64_t seed, StressHeartbeat* beat)
    : store_(*store),
      prompts_(*prompts),
      shape_(*shape),
      id_(id),
      rng_(seed * 0x9E3779B97F4A7C15ull + id + 1),
      beat_(*beat) {}

StressWorker::~StressWorker() = default;

Status StressWorker::Init(uint32_t max_pages, bool gpu) {
  CACHEPAWL_RETURN_IF_ERROR(stream_.Open(gpu));
  auto too_small = [&](const Status& s) {
    return Status::NoSpace("--device-bytes: the device pool cannot give thread " +
                           std::to_string(id_) + " its " + std::to_string(max_pages) +
                           " pages and a state (" + s.ToString() + ")");
  };
  for (uint32_t i = 0; shape_.kv && i < max_pages; ++i) {
    auto slot = store_.AllocateDeviceSlot(Kind::kKV);
    if (!slot.ok()) return too_small(slot.status());
    page_slots_.push_back(*slot);
  }
  if (shape_.ssm) {
    auto slot = store_.AllocateDeviceSlot(Kind::kMamba);
    if (!slot.ok()) return too_small(slot.status());
    state_slot_ = *slot;
  }
  poison_page_.assign(shape_.page_bytes, kPoison);
  poison_state_.assign(shape_.state_bytes, kPoison);
  return Status::OK();
}

void StressWorker::Run(const std::atomic<bool>& stop, uint64_t max_ops, bool stuck_first) {
  if (stuck_first) {
    beat_.Begin(StressOp::kStuck);
    beat_.Step("waiting for the run to end (test hook)");
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    beat_.End();
  }
  for (uint64_t done = 0; !stop.load(std::memory_order_relaxed) && (max_ops == 0 || done < max_ops);
       ++done) {
    Step();
  }
}

void StressWorker::Step() {
  // lookup, lock, unlock, load, save, prefetch, cancel, fence wait, stats
  static const std::vector<double> kWeights = {16, 8, 8, 22, 22, 8, 4, 8, 2};
  auto op = static_cast<StressOp>(rng_.Weighted(kWeights));
  if (op == StressOp::kLock && locks_.size() >= kMaxLocks) op = StressOp::kUnlock;
  if (op == StressOp::kUnlock && locks_.empty()) op = StressOp::kLock;
  if (op == StressOp::kCancel && prefetches_.empty()) op = StressOp::kPrefetch;
  if (op == StressOp::kFenceWait && prefetches_.empty() && !pending_save_) op = StressOp::kLookup;
  beat_.Begin(op);
  switch (op) {
    case StressOp::kLookup:
      DoLookup();
      break;
    case StressOp::kLock:
      DoLock();
      break;
    case StressOp::kUnlock:
      DoUnlock();
      break;
    case StressOp::kLoad:
      DoLoad();
      break;
    case StressOp::kSave:
      DoSave();
      break;
    case StressOp::kPrefetch:
      DoPrefetch();
      break;
    case StressOp::kCancel:
      DoCancel();
      break;
    case StressOp::kFenceWait:
      DoFenceWait();
      break;
    default:
      DoStats();
      break;
  }
  beat_.End();
}

void StressWorker::Finish() {
  beat_.Begin(StressOp::kFinish);
  beat_.Step("pending save");
  CollectSave();
  beat_.Step("prefetches");
  for (size_t i = 0; i < prefetches_.size(); ++i) {
    if (rng_.Between(0, 1) == 0) {
      prefetches_[i].prefetch->Cancel();
      prefetches_[i].cancelled = true;
    }
  }
  while (!prefetches_.empty()) WaitPrefetch(0);
  beat_.Step("unlock");
  for (HeldLock& held : locks_) UnlockChecked(held);
  locks_.clear();
  beat_.Step("free device slots");
  for (uint64_t slot : page_slots_) {
    if (Status s = store_.FreeDeviceSlot(Kind::kKV, slot); !s.ok()) {
      Unexpected("FreeDeviceSlot: " + s.ToString());
    }
  }
  page_slots_.clear();
  if (state_slot_) {
    if (Status s = store_.FreeDeviceSlot(Kind::kMamba, *state_slot_); !s.ok()) {
      Unexpected("FreeDeviceSlot: " + s.ToString());
    }
    state_slot_.reset();
  }
  beat_.End();
}

// ---- errors ----

void StressWorker::Refused(const char* call, const Status& status, bool allowed) {
  if (allowed) {
    ++totals_.allowed_errors[std::string(call) + ": " + StatusCodeName(status.code())];
  } else {
    Unexpected(std::string(call) + ": " + status.ToString());
  }
}

void StressWorker::Unexpected(const std::string& what) {
  ++totals_.unexpected_errors;
  if (totals_.unexpected_seen.size() < 10) {
    totals_.unexpected_seen.push_back("thread " + std::to_string(id_) + ": " + what);
  }
}

// ---- lookup, lock, unlock ----

std::optional<PrefixMatch> StressWorker::LookupChecked(const StressPrompt& prompt, size_t pages) {
  beat_.Step("Lookup");
  const std::span<const PageHash> want(prompt.hashes.data(), pages);
  auto found =
      rng_.Between(0, 3) == 0
          ? store_.LookupHashes(want)
          : store_.Lookup(prompt.ns,
                          std::span<const uint32_t>(prompt.tokens).first(pages * shape_.page_size));
  if (!found.ok()) {
    Refused("Lookup", found.status(), false);
    return std::nullopt;
  }
  const PrefixMatch& m = *found;
  std::string wrong;
  if (!std::equal(m.hashes.begin(), m.hashes.end(), want.begin(), want.end())) {
    wrong = "hashes differ from the prompt's";
  } else if (m.page_size_tokens != shape_.page_size) {
    wrong = "page_size_tokens " + std::to_string(m.page_size_tokens);
  } else if (m.reusable_pages > pages || m.kv_only_pages > pages) {
    wrong = "more pages than asked for";
  } else if (shape_.kv &&
             (m.reusable_pages > m.kv_only_pages || m.page_tiers.size() != m.kv_only_pages)) {
    wrong = "reusable_pages > kv_only_pages, or page_tiers not one per kv_only page";
  } else if (!shape_.kv && !m.page_tiers.empty()) {
    wrong = "page_tiers for a layout without KV";
  } else if (shape_.ssm && m.state_tier.has_value() != (m.reusable_pages > 0)) {
    wrong = "state_tier present iff reusable_pages > 0 is broken";
  } else if (!m.window_tiers.empty() &&
             m.window_tiers.size() != m.reusable_pages - m.window_first_page) {
    wrong = "window_tiers do not cover [window_first_page, reusable_pages)";
  }
  if (!wrong.empty()) {
    Unexpected("Lookup of " + std::to_string(pages) + " pages (reusable " +
               std::to_string(m.reusable_pages) + ", kv_only " + std::to_string(m.kv_only_pages) +
               "): " + wrong);
    return std::nullopt;
  }
  return std::move(found).value();
}

std::optional<StressWorker::HeldLock> StressWorker::LockChecked(const PrefixMatch& match,
                                                                size_t pages) {
  beat_.Step("Lock");
  auto locked = store_.Lock(match, pages);
  if (!locked.ok()) {
    // The pages went between the Lookup and the Lock.
    Refused("Lock", locked.status(), locked.status().IsNotFound());
    return std::nullopt;
  }
  HeldLock held;
  held.lock = std::move(locked).value();
  beat_.Step("Lookup after Lock");
  auto again = store_.LookupHashes(std::span<const PageHash>(match.hashes).first(pages));
  if (!again.ok()) {
    Refused("Lookup after Lock", again.status(), false);
  } else {
    held.match = std::move(again).value();
    held.strict = held.match.reusable_pages == pages;
  }
  return held;
}

void StressWorker::UnlockChecked(HeldLock& held) {
  beat_.Step("Unlock");
  if (Status s = store_.Unlock(held.lock); !s.ok()) {
    Refused("Unlock", s, false);
    return;
  }
  if (rng_.Between(0, 9) == 0) {
    Status again = store_.Unlock(held.lock);
    if (again.code() != Status::Code::kFailedPrecondition) {
      Unexpected("a second Unlock of one lock: " + again.ToString() +
                 " (expected FailedPrecondition)");
    }
  }
}

void StressWorker::DoLookup() {
  const StressPrompt& p = prompts_.Pick(rng_);
  (void)LookupChecked(p, rng_.Between(1, p.hashes.size()));
}

void StressWorker::DoLock() {
  const StressPrompt& p = prompts_.Pick(rng_);
  auto match = LookupChecked(p, rng_.Between(1, p.hashes.size()));
  if (!match) return;
  const size_t m = match->reusable_pages, k = shape_.kv ? match->kv_only_pages : m;
  if (k == 0) {
    ++totals_.load_misses;
    return;
  }
  // The whole hit mostly; some cached pages short of it now and then (a lock without state).
  const size_t pages = m > 0 && rng_.Between(0, 9) < 7 ? m : rng_.Between(1, k);
  if (auto held = LockChecked(*match, pages)) locks_.push_back(std::move(*held));
}

void StressWorker::DoUnlock() {
  const size_t i = rng_.Between(0, locks_.size() - 1);
  UnlockChecked(locks_[i]);
  locks_.erase(locks_.begin() + static_cast<long>(i));
}

void StressWorker::DoLoad() {
  CollectSave();  // the Save's device slots are the Load's destination
  const uint64_t how = rng_.Between(0, 9);
  if (how < 4 && !locks_.empty()) {
    const HeldLock& held = locks_[rng_.Between(0, locks_.size() - 1)];
    if (held.match.kv_only_pages > 0 || held.match.reusable_pages > 0) {
      LoadAndVerify(held.match, held.strict);
      return;
    }
  }
  const StressPrompt& p = prompts_.Pick(rng_);
  auto match = LookupChecked(p, rng_.Between(1, p.hashes.size()));
  if (!match) return;
  const size_t m = match->reusable_pages;
  if (m == 0 && (!shape_.kv || match->kv_only_pages == 0)) {
    ++totals_.load_misses;
    return;
  }
  if (how < 7 && m > 0) {  // locked for the Load, as an engine does
    auto held = LockChecked(*match, m);
    if (!held) return;
    LoadAndVerify(held->strict ? held->match : *match, held->strict);
    UnlockChecked(*held);
    return;
  }
  LoadAndVerify(*match, false);
}

// ---- save ----

void StressWorker::DoSave() {
  CollectSave();
  const StressPrompt& p = prompts_.Pick(rng_);
  const size_t depth = rng_.Between(1, p.hashes.size());
  size_t first = 0;
  if (shape_.kv) {
    const uint64_t how = rng_.Between(0, 3);
    if (how < 2) {  // what an engine does after a prefill: from the first page the store lacks
      auto match = LookupChecked(p, depth);
      if (!match) return;
      first = std::min(match->kv_only_pages, depth - 1);
    } else if (how == 2) {
      first = rng_.Between(0, depth - 1);
    }
  }
  const bool with_state = shape_.ssm && (!shape_.kv || rng_.Between(0, 4) > 0);
  const size_t count = shape_.kv ? depth - first : 0;
  if (count == 0 && !with_state) return;
  beat_.Step("write device records");
  for (size_t j = 0; j < count; ++j) {
    record_.resize(shape_.page_bytes);
    FillContent(PageContentSeed(p.hashes[first + j]), record_);
    if (Status s = store_.WriteDeviceRecord(Kind::kKV, page_slots_[j], record_); !s.ok()) {
      return Refused("WriteDeviceRecord", s, false);
    }
  }
  const uint64_t depth_tokens = uint64_t{depth} * shape_.page_size;
  if (with_state) {
    record_.resize(shape_.state_bytes);
    FillContent(StateContentSeed(p.hashes[depth - 1], depth_tokens), record_);
    if (Status s = store_.WriteDeviceRecord(Kind::kMamba, *state_slot_, record_); !s.ok()) {
      return Refused("WriteDeviceRecord", s, false);
    }
  }
  SaveRequest req;
  req.ns = p.ns;
  if (rng_.Between(0, 1) == 0) {
    req.hashes = std::span<const PageHash>(p.hashes).first(depth);
  } else {
    req.tokens = std::span<const uint32_t>(p.tokens).first(depth_tokens);
  }
  req.first_page = first;
  req.device_pages = std::span<const uint64_t>(page_slots_).first(count);
  if (with_state) {
    req.device_state_slot = state_slot_;
    req.state_depth_tokens = depth_tokens;
  }
  beat_.Step("Save");
  auto fence = store_.Save(req);
  if (!fence.ok()) {
    // The host tier is full of locked and pinned entries.
    return Refused("Save", fence.status(), fence.status().IsNoSpace());
  }
  pending_save_ = *fence;
  if (rng_.Between(0, 1) == 0) CollectSave();
}

void StressWorker::CollectSave() {
  if (!pending_save_) return;
  const Fence fence = *pending_save_;
  pending_save_.reset();
  beat_.Step("Save fence wait");
  // NoSpace: a Save of more than save_chunk_entries entries runs as several operations, and a
  // later one found the host tier full of locked and pinned entries.
  if (Status s = WaitFence(fence, true); !s.ok()) Refused("Save fence", s, s.IsNoSpace());
}

// ---- prefetch, cancel, fence waits, stats ----

void StressWorker::DoPrefetch() {
  if (prefetches_.size() >= kMaxPrefetches) WaitPrefetch(0);
  const StressPrompt& p = prompts_.Pick(rng_);
  auto match = LookupChecked(p, rng_.Between(1, p.hashes.size()));
  if (!match) return;
  if (match->kv_only_pages == 0 && match->reusable_pages == 0) {
    ++totals_.load_misses;
    return;
  }
  beat_.Step("StartPrefetch");
  auto prefetch = store_.StartPrefetch(*match);
  if (!prefetch.ok()) {
    return Refused("StartPrefetch", prefetch.status(), prefetch.status().IsNoSpace());
  }
  PendingPrefetch pending{*prefetch, std::move(match).value(), false};
  if (rng_.Between(0, 4) == 0) {
    pending.prefetch->Cancel();
    pending.cancelled = true;
  }
  prefetches_.push_back(std::move(pending));
}

void StressWorker::DoCancel() {
  PendingPrefetch& p = prefetches_[rng_.Between(0, prefetches_.size() - 1)];
  p.prefetch->Cancel();
  p.cancelled = true;
}

void StressWorker::DoFenceWait() {
  if (pending_save_ && (prefetches_.empty() || rng_.Between(0, 2) == 0)) {
    CollectSave();
    return;
  }
  WaitPrefetch(rng_.Between(0, prefetches_.size() - 1));
}

void StressWorker::WaitPrefetch(size_t i) {
  PendingPrefetch p = std::move(prefetches_[i]);
  prefetches_.erase(prefetches_.begin() + static_cast<long>(i));
  beat_.Step("prefetch fence wait");
  const Status s = WaitFence(p.prefetch->fence(), false);
  if (!s.ok()) {
    // A cancelled prefetch ends Aborted; records evicted meanwhile are a miss.
    Refused("Prefetch fence", s, s.IsNotFound() || (p.cancelled && s.IsAborted()));
    return;
  }
  if (rng_.Between(0, 1) == 0 && beat_.current() != StressOp::kFinish) {
    CollectSave();
    beat_.Step("Load after prefetch");
    LoadAndVerify(p.match, false);
  }
}

void StressWorker::DoStats() {
  beat_.Step("Stats");
  const StoreStats stats = store_.Stats();
  // No tier holds more than its budget.
  const std::pair<Tier, uint64_t> budgets[] = {{Tier::kHost, shape_.host_bytes},
                                               {Tier::kDisk, shape_.disk_bytes}};
  for (const auto& [tier, budget] : budgets) {
    uint64_t resident = 0;
    for (uint64_t b : stats.resident_bytes[static_cast<int>(tier)]) resident += b;
    if (resident > budget) {
      Unexpected("Stats: " + std::string(TierName(tier)) + " tier holds " +
                 std::to_string(resident) + " bytes, over its budget of " + std::to_string(budget));
    }
  }
}

}  // namespace cachepawl::tools
