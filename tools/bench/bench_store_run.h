// `cachepawl bench store`: one layout's run through the Store (tools/bench/bench_store.h). The
// LayoutRun's set-up, bookkeeping and rounds are in bench_store_run.cc, the host phase in
// bench_store_host.cc, the disk phase in bench_store_disk.cc.
//
// Host phase (one store per pool form, host tier of --host-bytes, no disk tier): the host tier
// is first filled with other prefixes, so every Save evicts as in a warm engine. Per case
// (threads T, pages P): the limit's rounds; the threads' source slots get random records; Save
// rounds of fresh prefixes; the prefixes to load saved and locked thread by thread (untimed);
// Load rounds into poisoned destinations, every byte compared after each; rounds of a Load and a
// Save at once; for the largest P of each T, Lookup / LookupHashes of a 2,048-page prompt; then
// the mover peer's rounds of the same units.
//
// Disk phase (after the host phases; a fresh disk tier in the work folder per case): Save
// rounds through a write-through store of the first pool form, timed until every record is on
// disk; Close. Then for each pool form, per iteration: reopen
// (the host tier starts empty and the disk catalog is read back), check with Lookup that every
// page and the state are on disk only, Lock, fill the host tier with other prefixes, Load some
// of those (an untimed warm-up), poison, Load (timed), compare every byte, Close.
#pragma once

#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"
#include "tools/bench/bench_store.h"

namespace cachepawl::tools::bench_store {

inline constexpr Op kOps[] = {Op::kLoad, Op::kSave, Op::kBoth};

// Store-owned device slots of one case, freed at the end of it.
class OwnedSlots {
 public:
  explicit OwnedSlots(Store* store) : store_(store) {}
  ~OwnedSlots() {
    for (const auto& [kind, slot] : held_) (void)store_->FreeDeviceSlot(kind, slot);
  }
  OwnedSlots(const OwnedSlots&) = delete;
  OwnedSlots& operator=(const OwnedSlots&) = delete;
  StatusOr<uint64_t> Take(Kind kind) {
    auto s = store_->AllocateDeviceSlot(kind);
    if (s.ok()) held_.emplace_back(kind, *s);
    return s;
  }

 private:
  Store* const store_;
  std::vector<std::pair<Kind, uint64_t>> held_;
};

// Engine locks of one case, released at the end of it.
struct Locks {
  Store* store = nullptr;
  std::vector<PrefixLock> held;
  ~Locks() {
    for (PrefixLock& l : held) {
      if (!l.released) (void)store->Unlock(l);
    }
  }
};

// One thread's prefix: its tokens and the namespace it was saved under last.
struct Prefix {
  std::vector<uint32_t> tokens;
  std::string ns;
  PrefixMatch match;
};

struct PeerSamples {
  Samples mover, limit;
};

class LayoutRun {
 public:
  LayoutRun(const Config& c, size_t index, const std::string& work, Report* report,
            std::ostream& progress)
      : c_(c),
        index_(index),
        name_(c.layout_names[index]),
        layout_(c.layouts[index]),
        sizes_(SizesOf(layout_)),
        work_(work),
        report_(*report),
        progress_(progress),
        buffers_(c.gpu) {}

  Status Run();

 private:
  // ---- bookkeeping ----
  static std::string Key(const std::string& pool, uint32_t t, uint64_t p, Op op);
  std::string What(const std::string& pool, const std::string& tier, uint32_t t, uint64_t p) const;
  void Skipped(const std::string& pool, const std::string& tier, uint32_t t, uint64_t p,
               const std::string& why);
  void Error(const std::string& what, const Status& s);
  void Finished(const std::string& pool, const std::string& tier, uint32_t t, uint64_t p,
                const Status& s, Clock::time_point start);
  // "" while --max-seconds (if any) has not passed; else the reason to skip what is left.
  std::string OutOfTime() const;
  uint64_t CaseSeed();
  void Mismatch(const std::string& what, const std::string& detail, Row* row);

  // ---- store set-up ----
  StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& pool, uint64_t host_bytes,
                                             const std::string& disk_dir, WritePolicy policy);
  std::unique_ptr<PoolView> ViewOf(const std::string& pool, Store* store);
  // Per thread: its device slots (store-owned ones taken from `held`) and record seeds.
  StatusOr<std::vector<ThreadSlots>> Slots(bool owned, OwnedSlots* held, uint32_t threads,
                                           uint64_t pages, uint64_t seed, bool sources);
  std::vector<Prefix> Prefixes(uint32_t threads, uint64_t pages, uint64_t seed) const;
  // Saves fresh prefixes until the host tier (`bytes`) is full of them, from `pages` (cycled);
  // then, when `warm` names device pages, Loads the last of them there (untimed).
  Status FillHostTier(Store& store, uint64_t bytes, std::span<const uint64_t> pages,
                      std::span<const uint64_t> warm = {});

  // ---- rounds through the store ----
  // The Save of prefix `pre` from thread slots `s`'s source pages and state (at `depth` tokens).
  static SaveRequest SaveOf(const Prefix& pre, const ThreadSlots& s, uint64_t depth);
  // The namespace of thread t's prefix in round `round` of the case tagged `tag`.
  static std::string RoundNs(const std::string& tag, size_t t, uint64_t round);
  // One round of Saves of fresh prefixes (`tag` makes the namespace); `names` gets them.
  Status SaveRound(Store& store, const std::vector<ThreadSlots>& slots, std::vector<Prefix>& pre,
                   const std::string& tag, Samples* out, std::vector<ThreadTimes>* times = nullptr);
  // Looks up thread t's prefix, checks that all of it is in `tier`, and locks it.
  Status LookupAndLock(Store& store, size_t t, Prefix& pre, uint64_t pages, Tier tier,
                       Locks* locks);
  // Saves each thread's prefix under `tag` from its sources, one thread after the other, and
  // locks it at once (untimed): concurrent Saves may evict a prefix that is not locked yet (the
  // store evicts Mamba states first, several at a time).
  Status SaveAndLock(Store& store, const std::vector<ThreadSlots>& slots, std::vector<Prefix>& pre,
                     const std::string& tag, Locks* locks);
  // Poisons, runs one round (`issue` returns the Load's fence; `save` adds a Save at once),
  // and compares every loaded byte. Adds the loads verified to `row`.
  Status LoadRound(Store& store, PoolView& view, const std::vector<ThreadSlots>& slots,
                   std::vector<Prefix>& pre, const std::string& save_tag, bool verify, Samples* out,
                   Row* row);
  Status Check(PoolView& view, const std::vector<ThreadSlots>& slots, Row* row,
               const std::string& when);

  Row MakeRow(const std::string& pool, const std::string& tier, Op op, uint32_t t, uint64_t p,
              int iters, const Samples& s, const PeerSamples* peer) const;

  Status HostPhase(const std::string& pool,
                   const std::vector<std::pair<uint32_t, uint64_t>>& cases);
  Status HostCase(Store& store, PoolView& view, PoolView& peer_view, const std::string& pool,
                  uint32_t threads, uint64_t pages);
  Status Lookups(Store& store, const std::vector<Prefix>& pre, uint64_t seed);
  // The disk phase of one case: DiskSave through the first pool form, DiskLoads for each.
  void DiskCase(uint32_t threads, uint64_t pages);
  Status DiskSave(const std::string& pool, const std::string& dir, uint32_t threads, uint64_t pages,
                  uint64_t seed, std::vector<Prefix>& pre, Samples* save, int* rounds);
  Status DiskLoads(const std::string& pool, const std::string& dir, uint32_t threads,
                   uint64_t pages, uint64_t seed, std::vector<Prefix>& pre);

  const Config& c_;
  const size_t index_;
  const std::string name_;
  const ModelLayout layout_;
  const Sizes sizes_;
  const std::string work_;
  Report& report_;
  std::ostream& progress_;
  HostBuffers buffers_;  // before the views that use it are made, after they are gone
  BenchPool bench_;
  std::unique_ptr<MoverPeer> mover_;
  std::unique_ptr<LimitPeer> limit_;
  // --processes: the owner of the store OpenStore last returned (attached to it), and its socket.
  std::unique_ptr<Store> owner_;
  std::string owner_socket_;
  std::map<uint32_t, uint64_t> lookup_pages_;  // threads -> largest P that fits
  std::map<std::string, PeerSamples> peers_;   // Key() -> the host phase's peers
  uint64_t cases_ = 0, rounds_ = 0, probes_ = 0;
};

}  // namespace cachepawl::tools::bench_store
