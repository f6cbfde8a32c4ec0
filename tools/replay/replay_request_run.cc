// ReplayEngine::RequestRun (tools/replay/replay_engine.h): the steps of one request, from its L1
// prefix and Store lookup through loads, compute and saves to its unlocks; and
// ReplayEngine::Run, which runs them. The engine's set-up is in replay_engine.cc.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>

#include "tools/replay/replay_content.h"
#include "tools/replay/replay_engine.h"

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

struct ReplayEngine::Pending {
  Fence fence;
  Clock::time_point start;
  std::shared_ptr<std::atomic<int64_t>> done_ns;  // steady-clock time the fence fired
  std::vector<ReplayL1::Ref> pinned;
};

// The steps of one request (see the header). Holds the request's state; the engine holds L1.
class ReplayEngine::RequestRun {
 public:
  using Ref = ReplayL1::Ref;

  RequestRun(ReplayEngine* engine, ReplayTotals* totals)
      : e_(*engine), l1_(engine->l1_), store_(*engine->store_), totals_(*totals) {}

  Status Go(const TraceRequest& request) {
    l1_.BeginRequest();
    Status s = Steps(request);
    // 5. Collect the saves (their slots stay pinned until then), unlock.
    while (!pending_.empty()) CollectOldest();
    if (lock_.has_value()) {
      Status u = store_.Unlock(*lock_);
      if (!u.ok()) totals_.AddError("Unlock: " + u.ToString());
    }
    l1_.EndRequest();
    return s;
  }

 private:
  // The prefix of this prompt that L1 holds, pinned so that no other request evicts it before
  // it is used: pages [0, pages.size()) and, when hybrid, the state at depth `hit`, the
  // longest prefix reusable under the hybrid rule. A used or released pin is reset.
  struct L1Prefix {
    std::vector<std::optional<Ref>> pages;
    std::optional<Ref> state;
    size_t hit = 0;
  };

  Status Steps(const TraceRequest& request) {
    AppendPromptTokens(request, e_.options_.block_size_tokens, &tokens_);
    hashes_ = store_.HashTokens(e_.options_.ns, tokens_);
    n_ = hashes_.size();
    page_keys_.reserve(n_);
    for (const PageHash& h : hashes_) page_keys_.push_back(PageKey(h));
    ++totals_.requests;
    totals_.prompt_tokens += tokens_.size();
    totals_.pages += n_;

    // 1. What L1 serves under the hybrid rule.
    L1Prefix l1 = PinL1Prefix();
    const size_t l1_kv = l1.pages.size();
    const size_t l1_hit = l1.hit;

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
      // At least one page is loaded with the state (pure SSM: none, the state is the prefix).
      const size_t from_l1 = !e_.kv_ ? m : std::min(l1_kv, e_.hybrid_ ? m - 1 : m);
      const size_t counted = UseL1Pages(l1, 0, from_l1);
      ReleaseL1Prefix(l1);  // the rest is loaded over, or not used
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
        L1Prefix again = PinL1Prefix();
        reuse = std::min(again.hit, l1_hit);
        if (reuse > from_l1) UseL1Pages(again, from_l1, reuse);
        if (reuse < from_l1) {
          totals_.hit_pages[static_cast<int>(Tier::kDevice)] -= std::min(counted, from_l1 - reuse);
        }
        if (reuse > 0) UseL1State(again, reuse);
        ReleaseL1Prefix(again);
      }
    } else {
      UseL1Pages(l1, 0, l1_hit);
      if (l1_hit > 0) UseL1State(l1, l1_hit);
      ReleaseL1Prefix(l1);
    }

    // 4. Pages that L1 served but the store lacks go back to the store (with L1's state; pure
    //    SSM: the state at `reuse` when the store's deepest one is shallower).
    const size_t store_has = e_.kv_ ? match.kv_only_pages : m;
    if (reuse != m && store_has < reuse) {
      CACHEPAWL_RETURN_IF_ERROR(SaveFromL1(store_has, reuse));
    }
    //    The rest is computed and saved, chunk by chunk, a state at every checkpoint.
    Status s = Compute(reuse);
    // Like vLLM's prefix cache, free a request's pages tail first: the shared head of a prefix
    // is the last of its pages L1 evicts.
    l1_.TouchTailFirst(page_keys_);
    return s;
  }

  L1Prefix PinL1Prefix() {
    L1Prefix prefix;
    if (e_.kv_) {
      for (Ref page : l1_.PinReadyPrefix(page_keys_)) prefix.pages.emplace_back(page);
    } else {
      prefix.pages.resize(n_);  // pure SSM: pages hold no KV; L1 "has" every one of them
    }
    prefix.hit = prefix.pages.size();
    if (e_.hybrid_) {
      for (; prefix.hit > 0; --prefix.hit) {
        prefix.state = l1_.PinReady(StateKey(hashes_[prefix.hit - 1], Depth(prefix.hit)));
        if (prefix.state.has_value()) break;
      }
    }
    return prefix;
  }

  void ReleaseL1Prefix(L1Prefix& prefix) {
    for (std::optional<Ref>& page : prefix.pages) {
      if (page.has_value()) l1_.Unpin(*page, totals_);
      page.reset();
    }
    if (prefix.state.has_value()) l1_.Unpin(*prefix.state, totals_);
    prefix.state.reset();
  }

  uint64_t Depth(size_t pages) const { return uint64_t{pages} * e_.page_size_; }
  bool IsCheckpoint(size_t pages) const {
    const uint32_t t = e_.options_.track_interval_pages;
    return pages == n_ || (t != 0 && pages % t == 0);
  }

  // A failed store call: NotFound after a Lookup hit is a lost race, NoSpace and Busy are the
  // store (or the shared device pool) refusing for now; both are misses. Anything else is an
  // error.
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

  // What ReplayL1::Acquire may do when the pool is full: evict, collect this request's pending
  // saves, and, when the caller holds nothing it could go on with, wait for other requests.
  ReplayL1::SpaceHooks Hooks(bool wait_for_others) {
    ReplayL1::SpaceHooks hooks;
    hooks.totals = &totals_;
    hooks.collect_own = [this] {
      if (pending_.empty()) return false;
      CollectOldest();
      return true;
    };
    hooks.wait_for_others = wait_for_others;
    return hooks;
  }

  Status PoolTooSmall(const Status& cause) {
    return Status::NoSpace("the device pool cannot hold one chunk of this request (" +
                           cause.ToString() + "): raise --device-bytes");
  }

  // Acquire failed with nothing held: Busy (every request in flight waits for another's slots)
  // makes this request give up what it was about to do (a refusal); anything else ends the run.
  Status NoRoom(const Status& cause) {
    if (!cause.IsBusy()) return PoolTooSmall(cause);
    CountFailure("device pool", cause);
    return Status::OK();
  }

  // ---- content ----

  std::span<std::byte> Buffer(Kind kind) {
    buffer_.resize(kind == Kind::kKV ? e_.page_bytes_ : e_.state_bytes_);
    return buffer_;
  }

  // Reads a pinned slot back and compares every byte with its key's content. False when wrong
  // (or unreadable), in which case the entry has been discarded (and unpinned).
  // `window_loaded` false: a page loaded outside the window, whose windowed layers' bytes the
  // load does not write; only its full-attention layers' bytes are compared.
  bool Verify(Ref it, const PageHash& hash, std::optional<uint64_t> state_depth,
              bool window_loaded = true) {
    auto record = Buffer(it->kind);
    Status read = store_.ReadDeviceRecord(it->kind, it->slot, record);
    if (!read.ok()) {
      totals_.AddError("ReadDeviceRecord: " + read.ToString());
      l1_.Discard(it, totals_);
      return false;
    }
    const uint64_t seed =
        state_depth.has_value() ? StateContentSeed(hash, *state_depth) : PageContentSeed(hash);
    uint64_t skipped = 0;
    if (!window_loaded) {
      // What the load did not write is set to what it should be, so it compares equal.
      expected_.resize(record.size());
      FillContent(seed, expected_);
      for (const RecordSegment& r : e_.window_ranges_) {
        std::memcpy(record.data() + r.offset, expected_.data() + r.offset, r.bytes);
        skipped += r.bytes;
      }
    }
    uint64_t first = 0;
    const uint64_t wrong = CountWrongBytes(seed, record, &first);
    ++totals_.verified_records;
    totals_.verified_bytes += record.size() - skipped;
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
    l1_.Discard(it, totals_);
    return false;
  }

  // A pinned L1 hit: most recent, verified, unpinned.
  void VerifyL1(Ref it, const PageHash& hash, std::optional<uint64_t> state_depth) {
    l1_.Touch(it);
    if (!e_.options_.verify_l1_hits || Verify(it, hash, state_depth)) l1_.Unpin(it, totals_);
  }

  // Writes the key's content into a slot this request fills; ready on success, discarded
  // otherwise.
  bool Write(Ref it, uint64_t seed) {
    auto record = Buffer(it->kind);
    FillContent(seed, record);
    Status s = store_.WriteDeviceRecord(it->kind, it->slot, record);
    if (s.ok()) {
      l1_.MarkReady(it);
      return true;
    }
    totals_.AddError("WriteDeviceRecord: " + s.ToString());
    l1_.Discard(it, totals_);
    return false;
  }

  // Counts and verifies pages [begin, end) of `prefix` (pinned). Returns how many were counted.
  size_t UseL1Pages(L1Prefix& prefix, size_t begin, size_t end) {
    size_t counted = 0;
    for (size_t i = begin; i < end && i < prefix.pages.size(); ++i) {
      if (!prefix.pages[i].has_value()) continue;
      ++counted;
      VerifyL1(*prefix.pages[i], hashes_[i], std::nullopt);
      prefix.pages[i].reset();
    }
    totals_.hit_pages[static_cast<int>(Tier::kDevice)] += counted;
    return counted;
  }

  // Counts and verifies the state at depth `pages`: `prefix`'s when it is that one, else the
  // one L1 holds now (if any). Pure SSM: the state also counts for the `pages` pages it stands
  // for (they have no KV of their own to count).
  void UseL1State(L1Prefix& prefix, size_t pages) {
    if (!e_.hybrid_) return;
    std::optional<Ref> state;
    if (prefix.hit == pages && prefix.state.has_value()) {
      state.swap(prefix.state);
    } else {
      state = l1_.PinReady(StateKey(hashes_[pages - 1], Depth(pages)));
    }
    if (!state.has_value()) return;
    ++totals_.hit_states[static_cast<int>(Tier::kDevice)];
    if (!e_.kv_) totals_.hit_pages[static_cast<int>(Tier::kDevice)] += pages;
    VerifyL1(*state, hashes_[pages - 1], Depth(pages));
  }

  // ---- store ----

  // Loads pages [begin, m) and the state at m (pure SSM: begin == m, one Load of the state
  // alone). False (after counting why) when the store could not deliver, or the device pool had
  // no room while other requests held it; pages already loaded stay in L1.
  StatusOr<bool> LoadFromStore(const PrefixMatch& match, size_t begin, size_t m) {
    const size_t chunk = e_.options_.chunk_pages;
    auto no_room = [&](const Status& cause) -> StatusOr<bool> {
      CACHEPAWL_RETURN_IF_ERROR(NoRoom(cause));
      return false;
    };
    // The state's slot first: a state needs a whole group of the pool, which pages pinned by a
    // chunk could otherwise leave no room for. It goes with the last chunk.
    std::optional<Ref> state;
    if (e_.hybrid_) {
      auto acquired = l1_.Acquire(Kind::kMamba, StateKey(hashes_[m - 1], Depth(m)),
                                  ReplayL1::Fill::kLoad, Hooks(true));
      if (!acquired.ok()) return no_room(acquired.status());
      state = acquired->ref;
    }
    auto discard = [&](const std::vector<Ref>& pages) {
      for (Ref p : pages) l1_.Discard(p, totals_);
      if (state.has_value()) l1_.Discard(*state, totals_);
    };
    // Hits count only once the whole prefix has arrived.
    std::array<uint64_t, kNumTiers> page_hits{}, state_hits{};
    size_t start = begin;
    do {
      const size_t want_end = std::min(m, start + chunk);
      std::vector<Ref> pages;
      std::vector<uint64_t> slots;
      for (size_t i = start; i < want_end; ++i) {
        auto acquired =
            l1_.Acquire(Kind::kKV, page_keys_[i], ReplayL1::Fill::kLoad, Hooks(pages.empty()));
        if (!acquired.ok()) {
          if (acquired.status().IsNoSpace() && !pages.empty()) break;
          discard(pages);
          return no_room(acquired.status());
        }
        pages.push_back(acquired->ref);
        slots.push_back(acquired->ref->slot);
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
        discard(pages);
        CountFailure("Load", done);
        return false;
      }
      // Windowed layers' KV arrives only for the pages a model at depth m reads.
      const size_t window_from = m - std::min<size_t>(m, e_.window_pages_);
      for (size_t k = 0; k < pages.size(); ++k) {
        const size_t i = start + k;
        const Tier tier = i < match.page_tiers.size() ? match.page_tiers[i] : Tier::kHost;
        ++page_hits[static_cast<int>(tier)];
        ++totals_.loaded_pages;
        const bool window = e_.window_pages_ == 0 || i >= window_from;
        totals_.loaded_bytes += e_.full_record_bytes_ + (window ? e_.window_record_bytes_ : 0);
        if (window && e_.window_pages_ > 0) ++totals_.loaded_window_pages;
        if (!Verify(pages[k], hashes_[i], std::nullopt, window)) continue;
        // A page without its windowed part serves this request only: L1 keeps whole pages.
        window ? Publish(pages[k]) : l1_.Discard(pages[k], totals_);
      }
      if (with_state) {
        const Tier tier = match.state_tier.value_or(Tier::kHost);
        ++state_hits[static_cast<int>(tier)];
        ++totals_.loaded_states;
        totals_.loaded_bytes += e_.state_bytes_;
        if (!e_.kv_) page_hits[static_cast<int>(tier)] += m;  // the pages it stands for
        if (Verify(*state, hashes_[m - 1], Depth(m))) Publish(*state);
      }
      start = end;
    } while (start < m);
    for (int t = 0; t < kNumTiers; ++t) {
      totals_.hit_pages[t] += page_hits[t];
      totals_.hit_states[t] += state_hits[t];
    }
    return true;
  }

  // A loaded and verified entry: ready for every request, and unpinned.
  void Publish(Ref it) {
    l1_.MarkReady(it);
    l1_.Unpin(it, totals_);
  }

  // Hands pages [begin, end) (ready in device slots `pages`, pinned) and optionally a state to
  // Store::Save; the entries stay pinned until the fence is collected. Pure SSM: no pages, and
  // `begin` is the state's depth.
  void Save(size_t begin, std::vector<Ref> pages, std::optional<Ref> state) {
    std::vector<uint64_t> slots;
    for (Ref it : pages) slots.push_back(it->slot);
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
      for (Ref it : pages) l1_.Unpin(it, totals_);
      return;
    }
    totals_.saved_pages += slots.size();
    // What the store keeps of them (Store::Save): full-attention KV of every page, windowed KV
    // of the last window_pages_ (of every page for attention-only layouts).
    const size_t window_pages =
        !e_.hybrid_ ? slots.size() : std::min<size_t>(slots.size(), e_.window_pages_);
    totals_.saved_bytes += slots.size() * e_.full_record_bytes_ +
                           (e_.window_pages_ > 0 ? window_pages * e_.window_record_bytes_ : 0);
    if (e_.window_pages_ > 0) totals_.saved_window_pages += window_pages;
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
    for (Ref it : p.pinned) l1_.Unpin(it, totals_);
  }

  Status SaveFromL1(size_t begin, size_t end) {
    if (!e_.kv_) {
      std::optional<Ref> state = l1_.PinReady(StateKey(hashes_[end - 1], Depth(end)));
      if (state.has_value()) Save(end, {}, state);
      return Status::OK();
    }
    const size_t chunk = e_.options_.chunk_pages;
    // Sliding-window layers: the state's Save hands the last window_pages_ pages with it (the
    // store saves windowed KV of the last window_pages_ pages a Save is given), so the last
    // chunk starts early enough to hold the state's whole window.
    const size_t last_start =
        e_.hybrid_ && e_.window_pages_ > 0
            ? std::max(begin, end - std::min(end, std::max<size_t>(chunk, e_.window_pages_)))
            : end;
    for (size_t start = begin; start < end;) {
      const size_t stop = start < last_start ? std::min(last_start, start + chunk) : end;
      std::vector<Ref> pages;
      for (size_t i = start; i < stop; ++i) {
        auto page = l1_.PinReady(page_keys_[i]);
        if (!page.has_value()) break;  // dropped after a failed check, or evicted meanwhile
        pages.push_back(*page);
      }
      if (pages.empty()) return Status::OK();
      std::optional<Ref> state;
      const size_t saved_end = start + pages.size();
      if (saved_end == end && e_.hybrid_) {
        state = l1_.PinReady(StateKey(hashes_[end - 1], Depth(end)));
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
    std::optional<Ref> state;
    bool state_must_fill = true;  // false: another request's ready state, used as is
    size_t state_depth = 0;       // in pages
    auto drop_state = [&] {
      if (state.has_value()) l1_.Release(*state, totals_);
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
          auto acquired =
              l1_.Acquire(Kind::kMamba, StateKey(hashes_[want_end - 1], Depth(want_end)),
                          ReplayL1::Fill::kCompute, Hooks(true));
          if (!acquired.ok()) return NoRoom(acquired.status());
          state = acquired->ref;
          state_must_fill = acquired->must_fill;
          state_depth = want_end;
        }
      }
      std::vector<Ref> pages;
      for (size_t i = start; e_.kv_ && i < want_end; ++i) {
        auto acquired =
            l1_.Acquire(Kind::kKV, page_keys_[i], ReplayL1::Fill::kCompute, Hooks(pages.empty()));
        if (!acquired.ok()) {
          if (acquired.status().IsNoSpace() && !pages.empty()) break;
          for (Ref p : pages) l1_.Unpin(p, totals_);
          drop_state();
          return NoRoom(acquired.status());
        }
        if (acquired->must_fill && !Write(acquired->ref, PageContentSeed(hashes_[i]))) break;
        pages.push_back(acquired->ref);
      }
      // Pure SSM: no page to fill, the chunk is computed whole.
      const size_t end = e_.kv_ ? start + pages.size() : want_end;
      totals_.computed_pages += end - start;
      if (end == start) {
        // The first page could not be written: give up on the rest of the prompt.
        drop_state();
        return Status::OK();
      }
      std::optional<Ref> saved_state;
      if (state.has_value() && end == state_depth) {
        if (!state_must_fill || Write(*state, StateContentSeed(hashes_[end - 1], Depth(end)))) {
          saved_state = state;
          ++totals_.computed_states;
        }
        state.reset();
        state_depth = 0;
      }
      if (e_.kv_) {
        Save(start, std::move(pages), saved_state);
      } else if (saved_state.has_value()) {
        Save(end, {}, saved_state);
      }
      start = end;
    }
    drop_state();
    return Status::OK();
  }

  ReplayEngine& e_;
  ReplayL1& l1_;
  Store& store_;
  ReplayTotals& totals_;
  std::vector<uint32_t> tokens_;
  std::vector<PageHash> hashes_;
  std::vector<std::string> page_keys_;
  size_t n_ = 0;
  std::vector<std::byte> buffer_;
  std::vector<std::byte> expected_;  // Verify of a page loaded without its windowed part
  std::deque<Pending> pending_;
  std::optional<PrefixLock> lock_;
};

Status ReplayEngine::Run(const TraceRequest& request, ReplayTotals* totals) {
  RequestRun run(this, totals);
  return run.Go(request);
}

}  // namespace cachepawl::tools
