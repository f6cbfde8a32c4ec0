// `cachepawl bench store`: the host phase of one layout and pool form, and the lookups
// (tools/bench/bench_store_run.h).
#include <algorithm>
#include <functional>

#include "store/store.h"
#include "tools/bench/bench_lookup_load.h"
#include "tools/bench/bench_store_run.h"
#include "vocab/internal/stage_profile.h"

namespace cachepawl::tools::bench_store {

Status LayoutRun::HostPhase(const std::string& pool,
                            const std::vector<std::pair<uint32_t, uint64_t>>& cases) {
  CACHEPAWL_ASSIGN_OR_RETURN(auto store,
                             OpenStore(pool, c_.host_bytes, "", WritePolicy::kWriteThrough));
  const bool owned = pool == "owned";
  auto view = ViewOf(pool, store.get());
  auto peer_view = MakeBenchView(layout_, bench_, owned, c_.gpu, &buffers_);
  CACHEPAWL_RETURN_IF_ERROR(mover_->UsePool(owned ? bench_.block : bench_.layer_first));
  {
    OwnedSlots held(store.get());
    std::vector<uint64_t> probe;
    for (uint64_t i = 0; i < std::min<uint64_t>(16, bench_.num_pages); ++i) {
      if (!owned) {
        probe.push_back(i);
        continue;
      }
      CACHEPAWL_ASSIGN_OR_RETURN(probe.emplace_back(), held.Take(Kind::kKV));
    }
    CACHEPAWL_RETURN_IF_ERROR(FillHostTier(*store, c_.host_bytes, probe));
  }
  for (const auto& [t, p] : cases) {
    if (const std::string why = OutOfTime(); !why.empty()) {
      Skipped(pool, "host", t, p, why);
      continue;
    }
    const auto start = Clock::now();
    Status s = HostCase(*store, *view, *peer_view, pool, t, p);
    Finished(pool, "host", t, p, s, start);
  }
  return store->Close();
}

Status LayoutRun::HostCase(Store& store, PoolView& view, PoolView& peer_view,
                           const std::string& pool, uint32_t threads, uint64_t pages) {
  const bool owned = pool == "owned";
  const uint64_t seed = CaseSeed();
  const uint64_t load_bytes = sizes_.LoadBytes(pages), save_bytes = sizes_.SaveBytes(pages);
  OwnedSlots held(&store);
  CACHEPAWL_ASSIGN_OR_RETURN(auto slots, Slots(owned, &held, threads, pages, seed, true));
  CACHEPAWL_ASSIGN_OR_RETURN(auto peer_slots, Slots(false, nullptr, threads, pages, seed, true));
  PeerSamples peer[3];
  Samples store_samples[3];
  for (int o = 0; o < 3; ++o) {
    for (Samples* s : {&peer[o].mover, &peer[o].limit, &store_samples[o]}) {
      s->threads = threads;
      s->bytes = kOps[o] == Op::kSave ? save_bytes : load_bytes;
      s->save_bytes = save_bytes;
    }
  }
  // The limit (first: it overwrites the bench pool's memory as raw bytes).
  for (int o = 0; o < 3; ++o) {
    Samples warm;
    CACHEPAWL_RETURN_IF_ERROR(limit_->Round(kOps[o], threads, load_bytes, save_bytes, &warm));
    for (int i = 0; i < c_.iters; ++i) {
      CACHEPAWL_RETURN_IF_ERROR(
          limit_->Round(kOps[o], threads, load_bytes, save_bytes, &peer[o].limit));
    }
  }
  CACHEPAWL_RETURN_IF_ERROR(WriteSources(view, slots, sizes_));
  if (owned) CACHEPAWL_RETURN_IF_ERROR(WriteSources(peer_view, peer_slots, sizes_));
  Row rows[3];
  for (int o = 0; o < 3; ++o) {
    rows[o] = MakeRow(pool, "host", kOps[o], threads, pages, c_.iters, {}, nullptr);
  }
  // Saves of fresh prefixes; then the prefixes to load, saved the same way and locked (the
  // loads check their bytes).
  std::vector<Prefix> pre = Prefixes(threads, pages, seed);
  const std::string tag = "host/" + pool + "/" + std::to_string(cases_);
  // --profile-stages: the profile of each op's timed rounds (reset after its warm-up).
  std::optional<StagesPerOp> stages[3], mover_stages[3];
  const uint64_t timed_ops = uint64_t{threads} * static_cast<uint64_t>(c_.iters);
  auto begin_profile = [&] {
    if (c_.profile_stages) profile::Reset();
  };
  auto end_profile = [&](std::optional<StagesPerOp>* into) {
    if (c_.profile_stages) *into = TakeStages(timed_ops);
  };
  Samples warm;
  CACHEPAWL_RETURN_IF_ERROR(SaveRound(store, slots, pre, tag + "/save", &warm));
  begin_profile();
  for (int i = 0; i < c_.iters; ++i) {
    CACHEPAWL_RETURN_IF_ERROR(SaveRound(store, slots, pre, tag + "/save", &store_samples[1]));
  }
  end_profile(&stages[1]);
  Locks locks;
  CACHEPAWL_RETURN_IF_ERROR(SaveAndLock(store, slots, pre, tag + "/load", &locks));
  CACHEPAWL_RETURN_IF_ERROR(LoadRound(store, view, slots, pre, "", false, &warm, &rows[0]));
  begin_profile();
  for (int i = 0; i < c_.iters; ++i) {
    CACHEPAWL_RETURN_IF_ERROR(
        LoadRound(store, view, slots, pre, "", true, &store_samples[0], &rows[0]));
  }
  end_profile(&stages[0]);
  CACHEPAWL_RETURN_IF_ERROR(
      LoadRound(store, view, slots, pre, tag + "/both", false, &warm, &rows[2]));
  begin_profile();
  for (int i = 0; i < c_.iters; ++i) {
    CACHEPAWL_RETURN_IF_ERROR(
        LoadRound(store, view, slots, pre, tag + "/both", true, &store_samples[2], &rows[2]));
  }
  end_profile(&stages[2]);
  if (pool == c_.pools.front() && lookup_pages_[threads] == pages) {
    CACHEPAWL_RETURN_IF_ERROR(Lookups(store, pre, seed));
  }
  for (PrefixLock& l : locks.held) CACHEPAWL_RETURN_IF_ERROR(store.Unlock(l));

  // The mover peer: the same units over its own host arena.
  CACHEPAWL_RETURN_IF_ERROR(mover_->Prepare(peer_slots));
  Row mover_rows[3];
  for (int o = 0; o < 3; ++o) {
    mover_rows[o] =
        MakeRow(pool + " mover", "host", kOps[o], threads, pages, c_.iters, {}, nullptr);
    for (int i = 0; i <= c_.iters; ++i) {
      if (kOps[o] != Op::kSave) {
        CACHEPAWL_RETURN_IF_ERROR(PoisonDestinations(peer_view, peer_slots, sizes_));
      }
      if (i == 1) begin_profile();
      CACHEPAWL_RETURN_IF_ERROR(mover_->Round(kOps[o], i == 0 ? &warm : &peer[o].mover));
      if (i == c_.iters) end_profile(&mover_stages[o]);
      // (The store's loads are checked after every round; the peer's after its last.)
      if (i == c_.iters && kOps[o] != Op::kSave) {
        CACHEPAWL_RETURN_IF_ERROR(
            Check(peer_view, peer_slots, &mover_rows[o], "round " + std::to_string(i)));
      }
    }
    if (kOps[o] != Op::kLoad) {
      CACHEPAWL_ASSIGN_OR_RETURN(std::string bad, mover_->VerifySaved());
      if (!bad.empty()) Mismatch(mover_rows[o].pool + " " + mover_rows[o].op, bad, &mover_rows[o]);
    }
  }
  mover_->Release();
  for (int o = 0; o < 3; ++o) {
    Row r = MakeRow(pool, "host", kOps[o], threads, pages, c_.iters, store_samples[o], &peer[o]);
    r.verified_loads = rows[o].verified_loads;
    r.mismatches = rows[o].mismatches + mover_rows[o].mismatches;
    r.stages = stages[o];
    r.mover_stages = mover_stages[o];
    report_.rows.push_back(r);
    peers_[Key(pool, threads, pages, kOps[o])] = peer[o];
  }
  return Status::OK();
}

Status LayoutRun::Lookups(Store& store, const std::vector<Prefix>& pre, uint64_t seed) {
  const uint32_t threads = static_cast<uint32_t>(pre.size());
  const uint64_t prompt_tokens = kLookupPromptPages * layout_.page_size_tokens;
  std::vector<std::vector<uint32_t>> prompts(threads);
  std::vector<std::vector<PageHash>> hashes(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    prompts[t] = pre[t].tokens;
    prompts[t].resize(std::min<uint64_t>(prompts[t].size(), prompt_tokens));
    for (uint64_t x = RecordSeed(seed, t, 7, Kind::kMamba); prompts[t].size() < prompt_tokens;) {
      prompts[t].push_back(static_cast<uint32_t>((x = RecordSeed(x, t, 3, Kind::kKV)) % 128000));
    }
    hashes[t] = store.HashTokens(pre[t].ns, prompts[t]);
  }
  // --processes: each thread looks up through an attached store of its own (a connection and an
  // owner session each, as separate engine processes have), next to the same calls made in
  // process on the owner; N - 1 other processes look up without pause meanwhile.
  std::vector<std::unique_ptr<Store>> clients;
  std::vector<std::unique_ptr<LookupLoad>> load;
  if (c_.processes > 0) {
    for (uint32_t t = 0; t < threads; ++t) {
      AttachOptions ao;
      ao.socket_path = owner_socket_;
      ao.cuda_device = -1;  // lookups copy nothing
      ao.poll_spin_us = c_.poll_spin_us;
      CACHEPAWL_ASSIGN_OR_RETURN(clients.emplace_back(), Store::Attach(ao));
    }
    for (uint32_t i = 1; i < c_.processes; ++i) {
      CACHEPAWL_ASSIGN_OR_RETURN(load.emplace_back(), LookupLoad::Start(c_.self, owner_socket_));
    }
  }
  struct Way {
    const char* suffix;
    std::function<Store&(uint32_t)> store;
  };
  std::vector<Way> ways;
  if (c_.processes > 0) {
    ways.push_back({" attached", [&](uint32_t t) -> Store& { return *clients[t]; }});
    ways.push_back({" in-process (owner)", [&](uint32_t) -> Store& { return *owner_; }});
  } else {
    ways.push_back({"", [&](uint32_t) -> Store& { return store; }});
  }
  for (const Way& way : ways) {
    for (bool by_hash : {false, true}) {
      std::vector<std::vector<double>> lat(threads);
      std::vector<uint64_t> hits(threads);
      Samples s;
      for (int pass = 0; pass < 2; ++pass) {  // a warm-up of one call each, then the timed calls
        const int calls = pass == 0 ? 1 : c_.lookup_iters;
        s = Samples{};
        if (pass == 1 && c_.profile_stages) profile::Reset();
        CACHEPAWL_RETURN_IF_ERROR(RunRound(
            threads,
            [&](uint32_t t, ThreadTimes& tt) -> Status {
              Store& st = way.store(t);
              lat[t].clear();
              tt.start = Clock::now();
              for (int i = 0; i < calls; ++i) {
                const auto t0 = Clock::now();
                auto m = by_hash ? st.LookupHashes(hashes[t]) : st.Lookup(pre[t].ns, prompts[t]);
                const auto t1 = Clock::now();
                if (!m.ok()) return m.status();
                lat[t].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
                hits[t] = m->reusable_pages;
              }
              tt.load_end = Clock::now();
              tt.load = true;
              return Status::OK();
            },
            &s));
      }
      LookupRow r;
      r.layout = name_;
      r.op = std::string(by_hash ? "lookup_hashes" : "lookup") + way.suffix;
      r.threads = threads;
      r.prompt_pages = kLookupPromptPages;
      r.hit_pages = *std::min_element(hits.begin(), hits.end());
      std::vector<double> all;
      for (const auto& v : lat) all.insert(all.end(), v.begin(), v.end());
      r.calls = all.size();
      r.p50_us = Percentile(all, 50);
      r.p99_us = Percentile(all, 99);
      r.calls_per_s = s.round_s.empty() || s.round_s[0] <= 0
                          ? 0
                          : static_cast<double>(all.size()) / s.round_s[0];
      if (c_.profile_stages) r.stages = TakeStages(all.size());
      report_.lookups.push_back(r);
    }
  }
  for (auto& c : clients) CACHEPAWL_RETURN_IF_ERROR(c->Close());
  return Status::OK();
}

}  // namespace cachepawl::tools::bench_store
