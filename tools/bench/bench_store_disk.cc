// `cachepawl bench store`: the disk phase of one case (tools/bench/bench_store_run.h). The records
// on disk do not depend on the pool form, so the Save rounds run once, through the first form of
// --pools, and the disk-resident Loads are timed for every form from the same disk tier.
#include <algorithm>
#include <filesystem>
#include <thread>

#include "tiers/disk_folders.h"
#include "tools/bench/bench_store_run.h"
#include "vocab/internal/stage_profile.h"

namespace cachepawl::tools::bench_store {

void LayoutRun::DiskCase(uint32_t threads, uint64_t pages) {
  std::vector<std::string> pools;
  for (const std::string& pool : c_.pools) {
    if (peers_.count(Key(pool, threads, pages, Op::kLoad))) {
      pools.push_back(pool);
    } else {
      Skipped(pool, "disk", threads, pages, "its host case did not run");
    }
  }
  if (pools.empty()) return;
  const std::string dir = work_ + "/tier";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (Status made = CreateFolder(dir); !made.ok()) {  // 0700, as the store makes disk.dir
    Finished(pools[0], "disk", threads, pages, made, Clock::now());
    return;
  }
  const uint64_t seed = CaseSeed();
  std::vector<Prefix> pre = Prefixes(threads, pages, seed);
  auto start = Clock::now();
  Samples save;
  int rounds = 0;
  Status s = DiskSave(pools[0], dir, threads, pages, seed, pre, &save, &rounds);
  if (s.ok()) {
    report_.rows.push_back(MakeRow(pools[0], "disk", Op::kSave, threads, pages, rounds, save,
                                   &peers_[Key(pools[0], threads, pages, Op::kSave)]));
  }
  if (!s.ok()) {
    Finished(pools[0], "disk", threads, pages, s.WithContext("saving"), start);
    for (size_t i = 1; i < pools.size(); ++i) {
      Skipped(pools[i], "disk", threads, pages, "the Saves through " + pools[0] + " failed");
    }
  } else {
    for (const std::string& pool : pools) {
      if (pool != pools[0]) start = Clock::now();
      Finished(pool, "disk", threads, pages, DiskLoads(pool, dir, threads, pages, seed, pre),
               start);
    }
  }
  std::filesystem::remove_all(dir, ec);
}

Status LayoutRun::DiskSave(const std::string& pool, const std::string& dir, uint32_t threads,
                           uint64_t pages, uint64_t seed, std::vector<Prefix>& pre, Samples* save,
                           int* rounds) {
  save->threads = threads;
  save->bytes = sizes_.SaveBytes(pages);
  // As many rounds as the disk tier holds without evicting; each until every record is on disk
  // (the last round's prefixes are the ones loaded).
  const uint64_t round_bytes = uint64_t{threads} * sizes_.RequestSlotBytes(pages);
  const uint64_t usable =
      c_.disk_bytes / 100 * 95 - std::min<uint64_t>(c_.disk_bytes / 2, 64ull << 20);
  *rounds = static_cast<int>(
      std::clamp<uint64_t>(usable / std::max<uint64_t>(round_bytes, 1), 1, c_.disk_iters));
  const std::string tag = "disk/" + std::to_string(cases_);
  CACHEPAWL_ASSIGN_OR_RETURN(auto store, OpenStore(pool, DiskPhaseTierNeed(sizes_, threads, pages),
                                                   dir, WritePolicy::kWriteThrough));
  {
    OwnedSlots held(store.get());
    auto view = ViewOf(pool, store.get());
    CACHEPAWL_ASSIGN_OR_RETURN(auto slots,
                               Slots(pool == "owned", &held, threads, pages, seed, true));
    CACHEPAWL_RETURN_IF_ERROR(WriteSources(*view, slots, sizes_));
    for (int k = 0; k < *rounds; ++k) {
      Samples fence_times;
      std::vector<ThreadTimes> times;
      CACHEPAWL_RETURN_IF_ERROR(SaveRound(*store, slots, pre, tag, &fence_times, &times));
      // The Save fences have fired; the write-through disk writes they started are the store's
      // operations still in flight.
      const auto deadline = Clock::now() + std::chrono::minutes(10);
      while (store->Stats().in_flight_operations > 0) {
        if (Clock::now() > deadline) return Status::TimedOut("write-through: 10 minutes");
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      const auto end = Clock::now();
      auto first = times[0].start;
      for (const ThreadTimes& tt : times) {
        first = std::min(first, tt.start);
        save->latency_us.push_back(
            std::chrono::duration<double, std::micro>(end - tt.start).count());
      }
      save->round_s.push_back(std::chrono::duration<double>(end - first).count());
      save->save_s.push_back(save->round_s.back());
    }
    const StoreStats st = store->Stats();
    if (st.io_errors > 0 || st.no_space_errors > 0 || st.failed_operations > 0) {
      return Status::IOError("write-through: " + std::to_string(st.io_errors) + " I/O errors, " +
                             std::to_string(st.no_space_errors) + " no-space errors, " +
                             std::to_string(st.failed_operations) + " failed operations");
    }
  }
  return store->Close();
}

Status LayoutRun::DiskLoads(const std::string& pool, const std::string& dir, uint32_t threads,
                            uint64_t pages, uint64_t seed, std::vector<Prefix>& pre) {
  const uint64_t tier = DiskPhaseTierNeed(sizes_, threads, pages);
  Samples load;
  load.threads = threads;
  load.bytes = sizes_.LoadBytes(pages);
  Row row = MakeRow(pool, "disk", Op::kLoad, threads, pages, c_.disk_iters, {}, nullptr);
  profile::Totals stages;  // --profile-stages: the timed Loads' stages, summed
  // Each Load from a reopened store (its host tier starts empty) whose host tier is then filled
  // with other prefixes, as a warm serving engine's store's is.
  for (int k = 0; k < c_.disk_iters; ++k) {
    CACHEPAWL_ASSIGN_OR_RETURN(auto store,
                               OpenStore(pool, tier, dir, WritePolicy::kWriteThroughSelective));
    {
      OwnedSlots held(store.get());
      auto view = ViewOf(pool, store.get());
      CACHEPAWL_ASSIGN_OR_RETURN(auto slots,
                                 Slots(pool == "owned", &held, threads, pages, seed, false));
      Locks locks;
      for (size_t t = 0; t < pre.size(); ++t) {
        CACHEPAWL_RETURN_IF_ERROR(LookupAndLock(*store, t, pre[t], pages, Tier::kDisk, &locks));
      }
      CACHEPAWL_RETURN_IF_ERROR(FillHostTier(*store, tier, slots[0].dst_pages, slots[0].dst_pages));
      if (c_.profile_stages) profile::Reset();
      CACHEPAWL_RETURN_IF_ERROR(LoadRound(*store, *view, slots, pre, "", true, &load, &row));
      if (c_.profile_stages) stages += profile::Snapshot();
      for (PrefixLock& l : locks.held) CACHEPAWL_RETURN_IF_ERROR(store->Unlock(l));
    }
    CACHEPAWL_RETURN_IF_ERROR(store->Close());
  }
  Row l = MakeRow(pool, "disk", Op::kLoad, threads, pages, c_.disk_iters, load,
                  &peers_[Key(pool, threads, pages, Op::kLoad)]);
  l.verified_loads = row.verified_loads;
  l.mismatches = row.mismatches;
  if (c_.profile_stages) {
    l.stages = ToStagesPerOp(stages, uint64_t{threads} * static_cast<uint64_t>(c_.disk_iters));
  }
  report_.rows.push_back(l);
  return Status::OK();
}

}  // namespace cachepawl::tools::bench_store
