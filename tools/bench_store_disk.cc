// `cachepawl bench store`: the disk phase of one case (tools/bench_store_run.h).
#include <algorithm>
#include <filesystem>
#include <thread>

#include "tools/bench_store_run.h"

namespace cachepawl::tools::bench_store {

Status LayoutRun::DiskCase(const std::string& pool, uint32_t threads, uint64_t pages) {
  const bool owned = pool == "owned";
  const uint64_t seed = CaseSeed();
  const uint64_t bytes = sizes_.RequestBytes(pages);
  const uint64_t tier = DiskPhaseTierNeed(sizes_, threads, pages);
  const std::string dir = work_ + "/tier";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create '" + dir + "': " + ec.message());
  std::vector<Prefix> pre = Prefixes(threads, pages, seed);
  const std::string tag = "disk/" + pool + "/" + std::to_string(cases_);
  Samples save, load;
  save.threads = load.threads = threads;
  save.bytes = load.bytes = bytes;
  Row load_row = MakeRow(pool, "disk", Op::kLoad, threads, pages, c_.disk_iters, {}, nullptr);
  // Rounds of Saves through a write-through store, each until every record is on disk; as many
  // as the disk tier holds without evicting (the last round's prefixes are loaded below).
  const uint64_t round_bytes = uint64_t{threads} * sizes_.RequestSlotBytes(pages);
  const uint64_t usable =
      c_.disk_bytes / 100 * 95 - std::min<uint64_t>(c_.disk_bytes / 2, 64ull << 20);
  const int save_rounds = static_cast<int>(
      std::clamp<uint64_t>(usable / std::max<uint64_t>(round_bytes, 1), 1, c_.disk_iters));
  {
    CACHEPAWL_ASSIGN_OR_RETURN(auto store, OpenStore(pool, tier, dir, WritePolicy::kWriteThrough));
    {
      OwnedSlots held(store.get());
      auto view = ViewOf(pool, store.get());
      CACHEPAWL_ASSIGN_OR_RETURN(auto slots, Slots(owned, &held, threads, pages, seed, true));
      CACHEPAWL_RETURN_IF_ERROR(WriteSources(*view, slots, sizes_.page_record));
      for (int k = 0; k < save_rounds; ++k) {
        Samples fence_times;
        std::vector<ThreadTimes> times;
        CACHEPAWL_RETURN_IF_ERROR(
            SaveRound(*store, slots, pre, tag + "/save", &fence_times, &times));
        // The Save fences have fired; the write-through disk writes they started are the
        // store's operations still in flight.
        const auto deadline = Clock::now() + std::chrono::minutes(10);
        while (store->Stats().in_flight_operations > 0) {
          if (Clock::now() > deadline) return Status::TimedOut("write-through: 10 minutes");
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        const auto end = Clock::now();
        auto first = times[0].start;
        for (const ThreadTimes& tt : times) {
          first = std::min(first, tt.start);
          save.latency_us.push_back(
              std::chrono::duration<double, std::micro>(end - tt.start).count());
        }
        save.round_s.push_back(std::chrono::duration<double>(end - first).count());
        save.d2h_s.push_back(save.round_s.back());
      }
      const StoreStats st = store->Stats();
      if (st.io_errors > 0 || st.no_space_errors > 0 || st.failed_operations > 0) {
        return Status::IOError("write-through: " + std::to_string(st.io_errors) + " I/O errors, " +
                               std::to_string(st.no_space_errors) + " no-space errors, " +
                               std::to_string(st.failed_operations) + " failed operations");
      }
    }
    CACHEPAWL_RETURN_IF_ERROR(store->Close());
  }
  // Loads: each from a reopened store whose host tier is full of other prefixes.
  for (int k = 0; k < c_.disk_iters; ++k) {
    CACHEPAWL_ASSIGN_OR_RETURN(auto store,
                               OpenStore(pool, tier, dir, WritePolicy::kWriteThroughSelective));
    {
      OwnedSlots held(store.get());
      auto view = ViewOf(pool, store.get());
      CACHEPAWL_ASSIGN_OR_RETURN(auto slots, Slots(owned, &held, threads, pages, seed, false));
      Locks locks;
      CACHEPAWL_RETURN_IF_ERROR(LookupAndLock(*store, pre, pages, Tier::kDisk, &locks));
      CACHEPAWL_RETURN_IF_ERROR(FillHostTier(*store, tier, slots[0].dst_pages));
      CACHEPAWL_RETURN_IF_ERROR(LoadRound(*store, *view, slots, pre, "", true, &load, &load_row));
      for (PrefixLock& l : locks.held) CACHEPAWL_RETURN_IF_ERROR(store->Unlock(l));
    }
    CACHEPAWL_RETURN_IF_ERROR(store->Close());
  }
  std::filesystem::remove_all(dir, ec);
  Row s = MakeRow(pool, "disk", Op::kSave, threads, pages, save_rounds, save,
                  &peers_[Key(pool, threads, pages, Op::kSave)]);
  Row l = MakeRow(pool, "disk", Op::kLoad, threads, pages, c_.disk_iters, load,
                  &peers_[Key(pool, threads, pages, Op::kLoad)]);
  l.verified_loads = load_row.verified_loads;
  l.mismatches = load_row.mismatches;
  report_.rows.push_back(l);
  report_.rows.push_back(s);
  return Status::OK();
}

}  // namespace cachepawl::tools::bench_store
