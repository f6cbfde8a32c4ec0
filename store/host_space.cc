#include "store/host_space.h"

#include <algorithm>
#include <string>

#include "vocab/internal/stage_profile.h"

namespace cachepawl {

HostSpace::HostSpace(HostArena* host, PrefixIndex* index, std::mutex* mu, Victims* victims,
                     const Options& options)
    : host_(host), index_(index), mu_(mu), victims_(victims), options_(options) {
  if (options_.free_target_bytes > 0) evictor_ = std::make_unique<TaskQueue>();
}

void HostSpace::StopLocked() {
  stopped_ = true;
  space_cv_.notify_all();
}

Status HostSpace::AllocateLocked(Kind kind, size_t count, std::unique_lock<std::mutex>& lock,
                                 std::vector<HostSlotId>* slots, bool* released) {
  Status st = AllocateOnDemandLocked(kind, count, lock, slots, released);
  MaybeEvictAheadLocked();
  return st;
}

Status HostSpace::AllocateOnDemandLocked(Kind kind, size_t count,
                                         std::unique_lock<std::mutex>& lock,
                                         std::vector<HostSlotId>* slots, bool* released) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + options_.space_wait;
  const size_t first = slots->size();
  auto give_back = [&](Status why) {
    for (size_t i = first; i < slots->size(); ++i) (void)host_->Free((*slots)[i]);
    slots->resize(first);
    return why;
  };
  for (;;) {
    const size_t have = slots->size() - first;
    if (have == count) return Status::OK();
    const size_t before = slots->size();
    Status st = host_->AllocateRun(kind, count - have, slots);
    if (profile::Enabled()) {
      size_t runs = 0;
      for (size_t i = before; i < slots->size(); ++i) {
        runs += i == before || host_->SlotPayload((*slots)[i]) !=
                                   host_->SlotPayload((*slots)[i - 1]) + host_->slot_bytes(kind);
      }
      profile::Count(profile::Counter::kHostRunsAllocated, runs);
    }
    if (st.ok()) return Status::OK();
    if (st.IsBusy()) {
      // Only chunks still being pinned could hold it (start-up): wait for them without the mutex.
      if (released != nullptr) *released = true;
      lock.unlock();
      Status pinned = host_->WaitUntilPinned(options_.pinning_wait);
      lock.lock();
      if (!pinned.ok()) return give_back(pinned.WithContext("host tier pinning"));
      if (stopped_) return give_back(Status::FailedPrecondition("store is closed"));
      continue;
    }
    if (!st.IsNoSpace()) return give_back(st);
    // Full: evict, in the order of the eviction policy.
    const uint64_t missing_bytes = (count - (slots->size() - first)) * host_->slot_bytes(kind);
    size_t writes = 0;
    if (EvictForBytesLocked(missing_bytes, kMaxEvictBatch, &writes) > 0) continue;
    if (writes == 0 && victims_->ReclaimLocked(missing_bytes) > 0) continue;
    // Nothing could go at once: wait while something in flight may free or clean an entry.
    const bool in_flight = writes > 0 || victims_->SpaceMayComeLocked();
    if (in_flight && !stopped_ && released != nullptr) *released = true;
    if (in_flight && !stopped_ && space_cv_.wait_until(lock, deadline) != std::cv_status::timeout) {
      continue;
    }
    if (in_flight && !stopped_ && Clock::now() < deadline) continue;
    ++no_space_;
    return give_back(
        Status::NoSpace(std::string("host tier: no room for ") + std::to_string(count) + " " +
                        std::string(KindName(kind)) +
                        " slot(s): every cached entry is locked by the serving engine" +
                        (in_flight ? " or still in flight after StoreOptions.host_space_wait_ms " +
                                         std::to_string(options_.space_wait.count()) + " ms"
                                   : "")));
  }
}

void HostSpace::MaybeEvictAheadLocked() {
  if (evictor_ == nullptr || evict_ahead_pending_ || stopped_) return;
  if (host_->free_bytes() >= options_.free_target_bytes) return;
  evict_ahead_pending_ = true;
  evictor_->Post([this] { EvictAhead(); });
}

void HostSpace::EvictAhead() {
  std::unique_lock<std::mutex> lock(*mu_);
  for (;;) {
    const uint64_t free = host_->free_bytes();
    if (stopped_ || free >= options_.free_target_bytes) break;
    size_t writes = 0;
    const size_t freed =
        EvictForBytesLocked(options_.free_target_bytes - free, kEvictAheadBatch, &writes);
    evicted_ahead_ += freed;
    if (freed == 0) break;  // everything left is locked, pinned or being written
    space_cv_.notify_all();
    lock.unlock();  // let the data path in between batches
    lock.lock();
  }
  evict_ahead_pending_ = false;
}

size_t HostSpace::EvictForBytesLocked(uint64_t missing_bytes, size_t max_victims, size_t* writes) {
  size_t freed = 0;
  for (const EvictionStage& stage : EvictionOrder(options_.policy)) {
    const uint64_t victim_bytes = host_->slot_bytes(stage.kind);
    if (victim_bytes == 0) continue;  // the layout has no such kind
    const size_t wanted = static_cast<size_t>(
        std::clamp<uint64_t>((missing_bytes + victim_bytes - 1) / victim_bytes, 1, max_victims));
    freed += EvictStageLocked(stage, wanted, writes);
    if (freed > 0) break;
  }
  return freed;
}

size_t HostSpace::EvictStageLocked(const EvictionStage& stage, size_t wanted,
                                   size_t* writes_started) {
  profile::ScopedStage evicting(profile::Stage::kHostEvict);
  size_t freed = 0;
  size_t acted = 0;   // victims dropped or given to a write
  size_t passed = 0;  // victims of the last pick kept where they are (kSkip, kKeepForWrite, ...)
  size_t pick = wanted;
  bool dropping = true;  // KV: once a victim stays for its write, its ancestors stay too
  // Victims that stay (being published, waiting for a write) do not count toward `wanted`: the
  // next pick reaches past them, so that an allocation never fails while an evictable entry
  // sits behind them in the queue. A pick returns what the last one kept first (dropped and
  // written victims leave the queue), so each round acts on something new or finds more to
  // pass, or the queue is exhausted: the loop ends.
  for (;;) {
    auto victims = index_->PickVictims(Tier::kHost, stage.kind, pick, stage.cls);
    if (!victims.ok()) break;
    std::vector<EntryKey> to_write;
    const uint64_t writes_in_flight = victims_->EvictWritesInFlightLocked();
    const size_t acted_before = acted;
    size_t kept = 0;
    for (const Victim& v : *victims) {
      if (acted == wanted) break;
      const EntryKey key{v.hash, v.kind};
      auto e = index_->Lookup(v.hash);
      if (!e) continue;
      switch (victims_->DecideLocked(key, *e, writes_started)) {
        case Verdict::kSkip:
          ++kept;
          continue;
        case Verdict::kWriteToDisk:
          // Written first (asynchronously); once on disk it is clean and the next eviction
          // frees it. Later KV victims of this pass may be its ancestors: they keep their host
          // copy until then (a page never leaves a tier before its child).
          if (v.kind == Kind::kKV) dropping = false;
          if (writes_in_flight + to_write.size() < kMaxEvictWrites) {
            to_write.push_back(key);
            ++acted;
          } else {
            ++kept;
          }
          continue;
        case Verdict::kKeepForWrite:
          if (v.kind == Kind::kKV) dropping = false;
          ++kept;
          continue;
        case Verdict::kDrop:
          break;
      }
      if (!dropping) {
        ++kept;
        continue;
      }
      victims_->DropLocked(key);
      ++evictions_[static_cast<int>(v.kind)];
      ++freed;
      ++acted;
    }
    if (!to_write.empty()) *writes_started += victims_->StartEvictWritesLocked(to_write);
    const bool progress = acted > acted_before || kept > passed;
    if (acted == wanted || victims->size() < pick || !progress) break;
    passed = kept;
    pick = std::max(passed + (wanted - acted), 2 * pick);
  }
  return freed;
}

}  // namespace cachepawl
