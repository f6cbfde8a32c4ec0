#include "tools/replay_engine.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>

#include "tools/replay_content.h"

namespace cachepawl::tools {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::micro>(end - start).count();
}

std::string PageKey(const PageHash& h) {
  return std::string(1, 'p') + std::string(reinterpret_cast<const char*>(h.bytes.data()), 32);
}

std::string StateKey(const PageHash& last_page, uint64_t depth) {
  std::string key(1, 's');
  key.append(reinterpret_cast<const char*>(last_page.bytes.data()), 32);
  key.append(reinterpret_cast<const char*>(&depth), sizeof(depth));
  return key;
}

}  // namespace

Status ReplayEngineOptions::Validate(uint32_t page_size_tokens) const {
  CACHEPAWL_RETURN_IF_ERROR(ValidateBlockAndPageSize(block_size_tokens, page_size_tokens));
  if (chunk_pages == 0) return Status::InvalidArgument("chunk_pages: 0 (must be > 0)");
  return Status::OK();
}

struct ReplayEngine::Entry {
  std::string key;
  Kind kind = Kind::kKV;
  uint64_t slot = 0;
  int pins = 0;
};

struct ReplayEngine::Pending {
  Fence fence;
  Clock::time_point start;
  std::shared_ptr<std::atomic<int64_t>> done_ns;  // steady-clock time the fence fired
  std::vector<EntryIt> pinned;
};

// The steps of one request (see the header). Holds the request's state; the engine holds L1.
class ReplayEngine::RequestRun {
 public:
  RequestRun(ReplayEngine* engine, ReplayTotals* totals)
      : e_(*engine), store_(*engine->store_), totals_(*totals) {}

  Status Go(const TraceRequest& request) {
    Status s = Steps(request);
    // 5. Collect the saves (their slots stay pinned until then), unlock.
    while (!pending_.empty()) CollectOldest();
    if (lock_.has_value()) {
      Status u = store_.Unlock(*lock_);
      if (!u.ok()) totals_.AddError("Unlock: " + u.ToString());
    }
    return s;
  }

 private:
  Status Steps(const TraceRequest& request) {
    AppendPromptTokens(request, e_.options_.block_size_tokens, &tokens_);
    hashes_ = store_.HashTokens(e_.options_.ns, tokens_);
    n_ = hashes_.size();
    ++totals_.requests;
    totals_.prompt_tokens += tokens_.size();
    totals_.pages += n_;

    // 1. What L1 serves under the hybrid rule.
    size_t l1_kv = 0;
    const size_t l1_hit = L1Hit(n_, &l1_kv);

    // 2. What the store serves.
    PrefixMatch match;
    const auto t0 = Clock::now();
    auto looked_up = store_.Lookup(e_.options_.ns, tokens_);
    totals_.lookup_us.Add(MicrosSince(t0, Clock::now()));
    if (!looked_up.ok()) {
      totals_.AddError("Lookup: " + looked_up.status().ToString());
    } else if (looked_up->hashes != hashes_ || looked_up->reusable_pages > n_ ||
               looked_up->page_size_tokens != e_.page_size_) {
      totals_.AddError("Lookup returned " + std::to_string(looked_up->hashes.size()) +
                       " hashes (reusable " + std::to_string(looked_up->reusable_pages) +
                       ") that differ from HashTokens' " + std::to_string(n_));
    } else {
      match = std::move(looked_up).value();
    }
    const size_t m = match.reusable_pages;

    // 3. Reuse: from L1, or from L1 up to `from_l1` and the rest (with the state) from the store.
    size_t reuse = l1_hit;
    if (m > l1_hit) {
      // At least one page is loaded with the state.
      const size_t from_l1 = std::min(l1_kv, e_.hybrid_ ? m - 1 : m);
      const size_t counted = UseL1Pages(0, from_l1);
      auto locked = store_.Lock(match, m);
      if (locked.ok()) {
        lock_ = std::move(locked).value();
        CACHEPAWL_ASSIGN_OR_RETURN(const bool loaded, LoadFromStore(match, from_l1, m));
        if (loaded) reuse = m;
      } else {
        CountFailure("Lock", locked.status());
      }
      if (reuse != m) {
        // The store could not deliver: fall back to what L1 still holds.
        reuse = std::min(L1Hit(n_, &l1_kv), l1_hit);
        if (reuse > from_l1) UseL1Pages(from_l1, reuse);
        if (reuse < from_l1) {
          totals_.hit_pages[static_cast<int>(Tier::kDevice)] -= std::min(counted, from_l1 - reuse);
        }
        if (reuse > 0) UseL1State(reuse);
      }
    } else {
      UseL1Pages(0, l1_hit);
      if (l1_hit > 0) UseL1State(l1_hit);
    }

    // 4. Pages that L1 served but the store lacks go back to the store (with L1's state).
    if (reuse != m && match.kv_only_pages < reuse) {
      CACHEPAWL_RETURN_IF_ERROR(SaveFromL1(match.kv_only_pages, reuse));
    }
    //    The rest is computed and saved, chunk by chunk, a state at every checkpoint.
    Status s = Compute(reuse);
    // Like vLLM's prefix cache, free a request's pages tail first: the shared head of a prefix
    // is the last of its pages L1 evicts.
    for (size_t i = n_; i-- > 0;) {
      if (auto it = e_.l1_.find(PageKey(hashes_[i])); it != e_.l1_.end()) Touch(it->second);
    }
    return s;
  }

  // The longest prefix of `limit` pages L1 holds (with the state at its depth when hybrid);
  // `*kv` gets the longest prefix of pages alone.
  size_t L1Hit(size_t limit, size_t* kv) const {
    size_t pages = 0;
    while (pages < limit && e_.l1_.contains(PageKey(hashes_[pages]))) ++pages;
    *kv = pages;
    if (e_.hybrid_) {
      while (pages > 0 && !e_.l1_.contains(StateKey(hashes_[pages - 1], Depth(pages)))) --pages;
    }
    return pages;
  }

  uint64_t Depth(size_t pages) const { return uint64_t{pages} * e_.page_size_; }
  bool IsCheckpoint(size_t pages) const {
    const uint32_t t = e_.options_.track_interval_pages;
    return pages == n_ || (t != 0 && pages % t == 0);
  }

  // A failed store call: NotFound after a Lookup hit is a lost race, NoSpace and Busy are the
  // store refusing for now; both are misses. Anything else is an error.
  void CountFailure(const char* call, const Status& s) {
    if (s.IsNotFound()) {
      ++totals_.lost_races;
    } else if (s.IsNoSpace() || s.IsBusy()) {
      ++totals_.refused;
      if (totals_.refusals_seen.size() < 3) {
        totals_.refusals_seen.push_back(std::string(call) + ": " + s.ToString());
      }
    } else {
      totals_.AddError(std::string(call) + ": " + s.ToString());
    }
  }

  // ---- L1 ----

  void Touch(EntryIt it) {
    auto& lru = e_.lru_[static_cast<int>(it->kind)];
    lru.splice(lru.begin(), lru, it);
  }

  void Drop(EntryIt it) {
    Status s = store_.FreeDeviceSlot(it->kind, it->slot);
    if (!s.ok()) totals_.AddError("FreeDeviceSlot: " + s.ToString());
    e_.l1_.erase(it->key);
    e_.lru_[static_cast<int>(it->kind)].erase(it);
  }

  // Unpins an entry whose slot no longer holds its key's content, and drops it from L1.
  void Forget(EntryIt it) {
    Unpin(it);
    if (it->pins == 0) Drop(it);
  }

  // Evicts the least recently used unpinned entry, of `kind` first. False when none is left.
  bool EvictOne(Kind kind) {
    for (Kind k : {kind, kind == Kind::kKV ? Kind::kMamba : Kind::kKV}) {
      auto& lru = e_.lru_[static_cast<int>(k)];
      for (auto it = lru.end(); it != lru.begin();) {
        --it;
        if (it->pins == 0) {
          ++totals_.l1_evictions[static_cast<int>(k)];
          Drop(it);
          return true;
        }
      }
    }
    return false;
  }

  // The L1 entry for `key`, pinned and most recent; allocated (evicting, or collecting pending
  // saves to unpin slots) when absent. NoSpace when nothing can be freed.
  StatusOr<EntryIt> Acquire(Kind kind, const std::string& key) {
    if (auto found = e_.l1_.find(key); found != e_.l1_.end()) {
      ++found->second->pins;
      Touch(found->second);
      return found->second;
    }
    for (;;) {
      auto slot = store_.AllocateDeviceSlot(kind);
      if (slot.ok()) {
        auto& lru = e_.lru_[static_cast<int>(kind)];
        lru.push_front(Entry{key, kind, *slot, 1});
        e_.l1_[key] = lru.begin();
        return lru.begin();
      }
      if (!slot.status().IsNoSpace()) return slot.status();
      if (EvictOne(kind)) continue;
      if (pending_.empty()) return slot.status();
      CollectOldest();
    }
  }

  void Unpin(EntryIt it) { --it->pins; }

  // ---- content ----

  std::span<std::byte> Buffer(Kind kind) {
    buffer_.resize(kind == Kind::kKV ? e_.page_bytes_ : e_.state_bytes_);
    return buffer_;
  }

  // Reads a slot back and compares every byte with its key's content. False when wrong (or
  // unreadable), in which case the entry has been dropped from L1.
  bool Verify(EntryIt it, const PageHash& hash, std::optional<uint64_t> state_depth) {
    auto record = Buffer(it->kind);
    Status read = store_.ReadDeviceRecord(it->kind, it->slot, record);
    if (!read.ok()) {
      totals_.AddError("ReadDeviceRecord: " + read.ToString());
      Forget(it);
      return false;
    }
    const uint64_t seed =
        state_depth.has_value() ? StateContentSeed(hash, *state_depth) : PageContentSeed(hash);
    uint64_t first = 0;
    const uint64_t wrong = CountWrongBytes(seed, record, &first);
    ++totals_.verified_records;
    totals_.verified_bytes += record.size();
    if (wrong == 0) return true;
    ++totals_.wrong_records;
    totals_.wrong_bytes += wrong;
    if (totals_.wrong_records_seen.size() < 10) {
      totals_.wrong_records_seen.push_back(
          (state_depth.has_value()
               ? "mamba state " + hash.ToHex() + " at depth " + std::to_string(*state_depth)
               : "kv page " + hash.ToHex()) +
          ": " + std::to_string(wrong) + " of " + std::to_string(record.size()) +
          " bytes wrong, first at offset " + std::to_string(first));
    }
    Forget(it);
    return false;
  }

  void VerifyL1(EntryIt it, const PageHash& hash, std::optional<uint64_t> state_depth) {
    Touch(it);
    if (!e_.options_.verify_l1_hits) return;
    ++it->pins;
    if (Verify(it, hash, state_depth)) Unpin(it);
  }

  bool Write(EntryIt it, uint64_t seed) {
    auto record = Buffer(it->kind);
    FillContent(seed, record);
    Status s = store_.WriteDeviceRecord(it->kind, it->slot, record);
    if (s.ok()) return true;
    totals_.AddError("WriteDeviceRecord: " + s.ToString());
    Forget(it);
    return false;
  }

  // Counts and verifies pages [begin, end) served by L1 (skipping any a failed check dropped).
  // Returns how many were counted.
  size_t UseL1Pages(size_t begin, size_t end) {
    size_t counted = 0;
    for (size_t i = begin; i < end; ++i) {
      auto it = e_.l1_.find(PageKey(hashes_[i]));
      if (it == e_.l1_.end()) continue;
      ++counted;
      VerifyL1(it->second, hashes_[i], std::nullopt);
    }
    totals_.hit_pages[static_cast<int>(Tier::kDevice)] += counted;
    return counted;
  }

  void UseL1State(size_t pages) {
    if (!e_.hybrid_) return;
    auto it = e_.l1_.find(StateKey(hashes_[pages - 1], Depth(pages)));
    if (it == e_.l1_.end()) return;
    ++totals_.hit_states[static_cast<int>(Tier::kDevice)];
    VerifyL1(it->second, hashes_[pages - 1], Depth(pages));
  }

  // ---- store ----

  // Loads pages [begin, m) and the state at m. False (after counting why) when the store could
  // not deliver; pages already loaded stay in L1.
  StatusOr<bool> LoadFromStore(const PrefixMatch& match, size_t begin, size_t m) {
    const size_t chunk = e_.options_.chunk_pages;
    // The state's slot first: a state needs a whole group of the pool, which pages pinned by a
    // chunk could otherwise leave no room for. It goes with the last chunk.
    std::optional<EntryIt> state;
    if (e_.hybrid_) {
      auto it = Acquire(Kind::kMamba, StateKey(hashes_[m - 1], Depth(m)));
      if (!it.ok()) return PoolTooSmall(it.status());
      state = *it;
    }
    // Hits count only once the whole prefix has arrived.
    std::array<uint64_t, kNumTiers> page_hits{}, state_hits{};
    for (size_t start = begin; start < m;) {
      const size_t want_end = std::min(m, start + chunk);
      std::vector<EntryIt> pages;
      std::vector<uint64_t> slots;
      for (size_t i = start; i < want_end; ++i) {
        auto it = Acquire(Kind::kKV, PageKey(hashes_[i]));
        if (!it.ok()) {
          if (it.status().IsNoSpace() && !pages.empty()) break;
          for (EntryIt p : pages) Forget(p);
          if (state.has_value()) Forget(*state);
          return PoolTooSmall(it.status());
        }
        pages.push_back(*it);
        slots.push_back((*it)->slot);
      }
      const size_t end = start + pages.size();
      const bool with_state = end == m && state.has_value();
      LoadOptions options;
      options.first_page = start;
      const auto t0 = Clock::now();
      auto fence =
          store_.Load(match, slots,
                      with_state ? std::optional<uint64_t>((*state)->slot) : std::nullopt, options);
      Status done = fence.ok() ? fence->Wait() : fence.status();
      totals_.load_us.Add(MicrosSince(t0, Clock::now()));
      if (!done.ok()) {
        // The slots hold nothing usable: forget them.
        for (EntryIt it : pages) Forget(it);
        if (state.has_value()) Forget(*state);
        CountFailure("Load", done);
        return false;
      }
      for (size_t k = 0; k < pages.size(); ++k) {
        const size_t i = start + k;
        const Tier tier = i < match.page_tiers.size() ? match.page_tiers[i] : Tier::kHost;
        ++page_hits[static_cast<int>(tier)];
        ++totals_.loaded_pages;
        totals_.loaded_bytes += e_.page_bytes_;
        if (Verify(pages[k], hashes_[i], std::nullopt)) Unpin(pages[k]);
      }
      if (with_state) {
        const Tier tier = match.state_tier.value_or(Tier::kHost);
        ++state_hits[static_cast<int>(tier)];
        ++totals_.loaded_states;
        totals_.loaded_bytes += e_.state_bytes_;
        if (Verify(*state, hashes_[m - 1], Depth(m))) Unpin(*state);
      }
      start = end;
    }
    for (int t = 0; t < kNumTiers; ++t) {
      totals_.hit_pages[t] += page_hits[t];
      totals_.hit_states[t] += state_hits[t];
    }
    return true;
  }

  Status PoolTooSmall(const Status& cause) {
    return Status::NoSpace("the device pool cannot hold one chunk of this request (" +
                           cause.ToString() + "): raise --device-bytes");
  }

  // Hands pages [begin, end) (already in device slots `pages`, pinned) and optionally a state to
  // Store::Save; the entries stay pinned until the fence is collected.
  void Save(size_t begin, std::vector<EntryIt> pages, std::optional<EntryIt> state) {
    std::vector<uint64_t> slots;
    for (EntryIt it : pages) slots.push_back(it->slot);
    const size_t end = begin + pages.size();
    SaveRequest request;
    request.ns = e_.options_.ns;
    request.tokens = std::span<const uint32_t>(tokens_).first(Depth(end));
    request.first_page = begin;
    request.device_pages = slots;
    if (state.has_value()) {
      request.device_state_slot = (*state)->slot;
      request.state_depth_tokens = Depth(end);
      pages.push_back(*state);
    }
    Pending p;
    p.start = Clock::now();
    auto fence = store_.Save(request);
    if (!fence.ok()) {
      CountFailure("Save", fence.status());
      for (EntryIt it : pages) Unpin(it);
      return;
    }
    totals_.saved_pages += slots.size();
    totals_.saved_bytes += slots.size() * e_.page_bytes_;
    if (state.has_value()) {
      ++totals_.saved_states;
      totals_.saved_bytes += e_.state_bytes_;
    }
    p.fence = *fence;
    p.done_ns = std::make_shared<std::atomic<int64_t>>(0);
    p.fence.OnComplete([done = p.done_ns](const Status&) {
      done->store(Clock::now().time_since_epoch().count());
    });
    p.pinned = std::move(pages);
    pending_.push_back(std::move(p));
  }

  void CollectOldest() {
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    Status s = p.fence.Wait();
    const int64_t done = p.done_ns->load();
    const auto end = done != 0 ? Clock::time_point(Clock::duration(done)) : Clock::now();
    totals_.save_us.Add(MicrosSince(p.start, end));
    if (!s.ok()) CountFailure("Save fence", s);
    for (EntryIt it : p.pinned) Unpin(it);
  }

  Status SaveFromL1(size_t begin, size_t end) {
    const size_t chunk = e_.options_.chunk_pages;
    for (size_t start = begin; start < end;) {
      const size_t stop = std::min(end, start + chunk);
      std::vector<EntryIt> pages;
      for (size_t i = start; i < stop; ++i) {
        auto it = e_.l1_.find(PageKey(hashes_[i]));
        if (it == e_.l1_.end()) break;  // dropped after a failed check
        ++it->second->pins;
        pages.push_back(it->second);
      }
      if (pages.empty()) return Status::OK();
      std::optional<EntryIt> state;
      const size_t saved_end = start + pages.size();
      if (saved_end == end && e_.hybrid_) {
        auto it = e_.l1_.find(StateKey(hashes_[end - 1], Depth(end)));
        if (it != e_.l1_.end()) {
          ++it->second->pins;
          state = it->second;
        }
      }
      Save(start, std::move(pages), state);
      if (saved_end != stop) return Status::OK();
      start = stop;
    }
    return Status::OK();
  }

  Status Compute(size_t reuse) {
    const size_t chunk = e_.options_.chunk_pages;
    // The slot of the next checkpoint's state, taken before the pages of the chunk that ends
    // there (see LoadFromStore), and kept while chunks cut short by a full pool get there.
    std::optional<EntryIt> state;
    size_t state_depth = 0;  // in pages
    auto drop_state = [&] {
      if (state.has_value()) Forget(*state);
      state.reset();
    };
    for (size_t start = reuse; start < n_;) {
      size_t want_end = std::min(n_, start + chunk);
      if (e_.hybrid_) {
        size_t next = start + 1;
        while (next < want_end && !IsCheckpoint(next)) ++next;
        want_end = next;
        if (IsCheckpoint(want_end) && state_depth != want_end) {
          drop_state();
          auto it = Acquire(Kind::kMamba, StateKey(hashes_[want_end - 1], Depth(want_end)));
          if (!it.ok()) return PoolTooSmall(it.status());
          state = *it;
          state_depth = want_end;
        }
      }
      std::vector<EntryIt> pages;
      for (size_t i = start; i < want_end; ++i) {
        auto it = Acquire(Kind::kKV, PageKey(hashes_[i]));
        if (!it.ok()) {
          if (it.status().IsNoSpace() && !pages.empty()) break;
          drop_state();
          return PoolTooSmall(it.status());
        }
        if (!Write(*it, PageContentSeed(hashes_[i]))) break;
        pages.push_back(*it);
      }
      const size_t end = start + pages.size();
      totals_.computed_pages += pages.size();
      if (pages.empty()) {
        // The first page could not be written: give up on the rest of the prompt.
        drop_state();
        return Status::OK();
      }
      std::optional<EntryIt> saved_state;
      if (state.has_value() && end == state_depth) {
        if (Write(*state, StateContentSeed(hashes_[end - 1], Depth(end)))) {
          saved_state = state;
          ++totals_.computed_states;
        }
        state.reset();
        state_depth = 0;
      }
      Save(start, std::move(pages), saved_state);
      start = end;
    }
    drop_state();
    return Status::OK();
  }

  ReplayEngine& e_;
  Store& store_;
  ReplayTotals& totals_;
  std::vector<uint32_t> tokens_;
  std::vector<PageHash> hashes_;
  size_t n_ = 0;
  std::vector<std::byte> buffer_;
  std::deque<Pending> pending_;
  std::optional<PrefixLock> lock_;
};

ReplayEngine::ReplayEngine(Store* store, const ReplayEngineOptions& options)
    : store_(store), options_(options) {
  const ModelLayout& layout = store->layout();
  page_size_ = layout.page_size_tokens;
  hybrid_ = layout.has_ssm();
  page_bytes_ = layout.has_attention() ? layout.KvPageBytes() : 0;
  state_bytes_ = hybrid_ ? layout.MambaSlotBytes() : 0;
}

ReplayEngine::~ReplayEngine() = default;

StatusOr<std::unique_ptr<ReplayEngine>> ReplayEngine::Create(Store* store,
                                                             const ReplayEngineOptions& options) {
  if (store == nullptr) return Status::InvalidArgument("store: null");
  const ModelLayout& layout = store->layout();
  CACHEPAWL_RETURN_IF_ERROR(options.Validate(layout.page_size_tokens));
  if (!layout.has_attention()) {
    return Status::InvalidArgument("layout '" + layout.model +
                                   "': has no attention layers (the replay needs KV pages)");
  }
  return std::unique_ptr<ReplayEngine>(new ReplayEngine(store, options));
}

Status ReplayEngine::Run(const TraceRequest& request, ReplayTotals* totals) {
  RequestRun run(this, totals);
  return run.Go(request);
}

uint64_t ReplayEngine::l1_resident(Kind kind) const { return lru_[static_cast<int>(kind)].size(); }

}  // namespace cachepawl::tools
