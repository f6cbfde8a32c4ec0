// `cachepawl bench store`: LayoutRun's set-up, bookkeeping and the rounds it runs through the
// Store (tools/bench/bench_store_run.h).
#include "tools/bench/bench_store_run.h"

#include <algorithm>
#include <ostream>
#include <sstream>

namespace cachepawl::tools::bench_store {

Status LayoutRun::Run() {
  std::vector<std::pair<uint32_t, uint64_t>> cases;
  for (uint32_t t : c_.threads) {
    for (uint64_t p : c_.pages) {
      const std::string why = HostCaseFit(c_, sizes_, t, p);
      if (why.empty()) {
        cases.emplace_back(t, p);
        lookup_pages_[t] = std::max(lookup_pages_[t], p);
        continue;
      }
      for (const std::string& pool : c_.pools) {
        for (const char* tier : {"host", "disk"}) Skipped(pool, tier, t, p, why);
      }
    }
  }
  if (cases.empty()) return Status::OK();
  if (const std::string why = OutOfTime(); !why.empty()) {
    for (const auto& [t, p] : cases) {
      for (const std::string& pool : c_.pools) {
        for (const char* tier : {"host", "disk"}) Skipped(pool, tier, t, p, why);
      }
    }
    return Status::OK();
  }
  uint64_t pages = 0, states = 0, limit = 0, arena = 0;
  uint32_t threads = 0;
  for (const auto& [t, p] : cases) {
    pages = std::max(pages, 2 * uint64_t{t} * p);
    states = std::max(states, sizes_.ssm ? 2 * uint64_t{t} : 0);
    limit = std::max(limit, 2 * uint64_t{t} * sizes_.RequestBytes(p));
    arena = std::max(arena, HostPhaseTierNeed(sizes_, t, p));
    threads = std::max(threads, t);
  }
  CACHEPAWL_ASSIGN_OR_RETURN(bench_, MakeBenchPool(layout_, c_.gpu, pages, states));
  CACHEPAWL_ASSIGN_OR_RETURN(mover_, MoverPeer::Create(layout_, arena, c_.gpu, c_.mover_polling));
  CACHEPAWL_ASSIGN_OR_RETURN(limit_, LimitPeer::Create(c_.gpu, bench_.memory->data(),
                                                       bench_.memory->size(), limit, threads));
  for (const std::string& pool : c_.pools) {
    if (Status s = HostPhase(pool, cases); !s.ok()) Error(pool + " host phase", s);
  }
  for (const auto& [t, p] : cases) {
    std::string why = DiskCaseFit(c_, sizes_, t, p);
    if (why.empty()) why = OutOfTime();
    if (!why.empty()) {
      for (const std::string& pool : c_.pools) Skipped(pool, "disk", t, p, why);
      continue;
    }
    DiskCase(t, p);
  }
  return Status::OK();
}

std::string LayoutRun::Key(const std::string& pool, uint32_t t, uint64_t p, Op op) {
  return pool + "/" + std::to_string(t) + "/" + std::to_string(p) + "/" + OpName(op);
}

std::string LayoutRun::What(const std::string& pool, const std::string& tier, uint32_t t,
                            uint64_t p) const {
  return name_ + " " + pool + " " + tier + " " + std::to_string(p) + " pages x " +
         std::to_string(t) + " threads";
}

void LayoutRun::Skipped(const std::string& pool, const std::string& tier, uint32_t t, uint64_t p,
                        const std::string& why) {
  report_.skips.push_back({name_, pool, tier, p, t, why});
}

void LayoutRun::Error(const std::string& what, const Status& s) {
  report_.errors.push_back(name_ + " " + what + ": " + s.ToString());
}

void LayoutRun::Finished(const std::string& pool, const std::string& tier, uint32_t t, uint64_t p,
                         const Status& s, Clock::time_point start) {
  if (s.IsNoSpace()) {
    Skipped(pool, tier, t, p, "the store ran out of room: " + s.ToString());
  } else if (!s.ok()) {
    report_.errors.push_back(What(pool, tier, t, p) + ": " + s.ToString());
  }
  if (!c_.json) {
    progress_ << "[bench store] " << What(pool, tier, t, p) << ": "
              << (s.ok() ? "done" : s.ToString()) << " ("
              << std::chrono::duration<double>(Clock::now() - start).count() << " s)\n";
  }
}

std::string LayoutRun::OutOfTime() const {
  if (c_.max_seconds <= 0) return "";
  const double s = std::chrono::duration<double>(Clock::now() - c_.started).count();
  if (s < c_.max_seconds) return "";
  std::ostringstream o;
  o << "--max-seconds " << c_.max_seconds << " reached (" << static_cast<int>(s) << " s)";
  return o.str();
}

uint64_t LayoutRun::CaseSeed() {
  return RecordSeed(c_.seed, static_cast<uint32_t>(index_), ++cases_, Kind::kKV);
}

void LayoutRun::Mismatch(const std::string& what, const std::string& detail, Row* row) {
  ++row->mismatches;
  report_.mismatches.push_back(name_ + " " + what + ": " + detail);
}

StatusOr<std::unique_ptr<Store>> LayoutRun::OpenStore(const std::string& pool, uint64_t host_bytes,
                                                      const std::string& disk_dir,
                                                      WritePolicy policy) {
  StoreOptions o;
  o.layout = layout_;
  o.host_bytes = (host_bytes + 4095) / 4096 * 4096;
  if (c_.host_free_target) o.host_free_target_bytes = *c_.host_free_target;
  if (!disk_dir.empty()) {
    o.disk_dir = disk_dir;
    o.disk_bytes = c_.disk_bytes;
    o.write_policy = policy;
    o.selective_min_hits = UINT32_MAX;  // (selective: what Loads touch is never rewritten)
  }
  o.cuda_device = c_.gpu ? 0 : -1;
  o.device_pool_bytes = pool == "owned" ? PoolBytes(c_) : 0;
  if (!c_.mover_polling) {
    o.completion_spin_us = 0;
    o.wait_spin_us = 0;
    o.inline_dispatch = false;
  }
  std::unique_ptr<Store> store;
  if (c_.processes > 0) {
    // The previous store's owner goes first (its client was closed by the phase that used it):
    // a reopen on the same disk folder needs its catalog.
    if (owner_) CACHEPAWL_RETURN_IF_ERROR(owner_->Close());
    owner_.reset();
    owner_socket_ = work_ + "/owner.sock";
    StoreOptions owner_options = o;
    owner_options.device_pool_bytes = 0;  // the pools are the client's
    owner_options.cuda_device = -1;       // the owner copies nothing to a GPU: no pinning
    ServeOptions so;
    so.socket_path = owner_socket_;
    so.poll_spin_us = c_.poll_spin_us;
    CACHEPAWL_ASSIGN_OR_RETURN(owner_, Store::Serve(owner_options, so));
    AttachOptions ao;
    ao.socket_path = owner_socket_;
    ao.layout = layout_;
    ao.cuda_device = o.cuda_device;
    ao.device_pool_bytes = o.device_pool_bytes;
    ao.poll_spin_us = c_.poll_spin_us;
    ao.load_split_pages = c_.load_split_pages;
    ao.completion_spin_us = o.completion_spin_us;
    ao.wait_spin_us = o.wait_spin_us;
    ao.inline_dispatch = o.inline_dispatch;
    ao.call_timeout_ms = 60000;  // (a Load waits up to host_space_wait_ms in the owner)
    ao.owner_timeout_ms = 60000;
    CACHEPAWL_ASSIGN_OR_RETURN(store, Store::Attach(ao));
  } else {
    CACHEPAWL_ASSIGN_OR_RETURN(store, Store::Open(o));
  }
  if (pool != "owned") CACHEPAWL_RETURN_IF_ERROR(store->RegisterDevicePool(bench_.layer_first));
  return store;
}

std::unique_ptr<PoolView> LayoutRun::ViewOf(const std::string& pool, Store* store) {
  return pool == "owned" ? MakeOwnedView(store, layout_, &buffers_)
                         : MakeBenchView(layout_, bench_, false, c_.gpu, &buffers_);
}

StatusOr<std::vector<ThreadSlots>> LayoutRun::Slots(bool owned, OwnedSlots* held, uint32_t threads,
                                                    uint64_t pages, uint64_t seed, bool sources) {
  std::vector<ThreadSlots> all;
  for (uint32_t t = 0; t < threads; ++t) {
    ThreadSlots s = BenchSlots(t, pages, sizes_.ssm);
    if (owned) {
      s = ThreadSlots{};
      for (uint64_t i = 0; i < pages; ++i) {
        if (sources) {
          CACHEPAWL_ASSIGN_OR_RETURN(s.src_pages.emplace_back(), held->Take(Kind::kKV));
        }
        CACHEPAWL_ASSIGN_OR_RETURN(s.dst_pages.emplace_back(), held->Take(Kind::kKV));
      }
      if (sizes_.ssm && sources) {
        CACHEPAWL_ASSIGN_OR_RETURN(s.src_state, held->Take(Kind::kMamba));
      }
      if (sizes_.ssm) {
        CACHEPAWL_ASSIGN_OR_RETURN(s.dst_state, held->Take(Kind::kMamba));
      }
    }
    for (uint64_t i = 0; i < pages; ++i) {
      s.page_seeds.push_back(RecordSeed(seed, t, i, Kind::kKV));
      s.window_seeds.push_back(RecordSeed(seed, t, i, Kind::kWindowKV));
    }
    s.state_seed = RecordSeed(seed, t, pages, Kind::kMamba);
    all.push_back(std::move(s));
  }
  return all;
}

std::vector<Prefix> LayoutRun::Prefixes(uint32_t threads, uint64_t pages, uint64_t seed) const {
  std::vector<Prefix> all(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    all[t].tokens.resize(pages * layout_.page_size_tokens);
    uint64_t x = RecordSeed(seed, t, 0, Kind::kMamba);
    for (uint32_t& tok : all[t].tokens)
      tok = static_cast<uint32_t>((x = RecordSeed(x, t, 1, Kind::kKV)) % 128000);
  }
  return all;
}

Status LayoutRun::FillHostTier(Store& store, uint64_t bytes, std::span<const uint64_t> pages,
                               std::span<const uint64_t> warm) {
  // A page of a probe Save (no state) leaves its kKV record and its windowed record: a Save
  // keeps every page's without state layers, with them its last window_pages' (so a batch is no
  // longer than that).
  uint64_t per_page = sizes_.page_slot, max_batch = 1024;
  if (sizes_.window_record > 0) {
    per_page += sizes_.window_slot;
    if (!sizes_.window_every_page) max_batch = std::clamp<uint64_t>(sizes_.window_pages, 1, 1024);
  }
  const uint64_t total = bytes / std::max<uint64_t>(per_page, 1) + 1;
  const uint64_t batch = std::clamp<uint64_t>(total / 4, 1, max_batch);
  std::vector<uint64_t> device(batch);
  std::vector<uint32_t> tokens(batch * layout_.page_size_tokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  std::string ns;
  size_t last = 0;
  for (uint64_t done = 0, b = 0; done < total; done += batch, ++b) {
    for (uint64_t i = 0; i < batch; ++i) device[i] = pages[(done + i) % pages.size()];
    ns = "probe/" + std::to_string(++probes_) + "/" + std::to_string(b);
    SaveRequest r;
    r.ns = ns;
    r.device_pages = std::span<const uint64_t>(device).first(std::min(batch, total - done));
    last = r.device_pages.size();
    r.tokens = std::span<const uint32_t>(tokens).first(last * layout_.page_size_tokens);
    CACHEPAWL_ASSIGN_OR_RETURN(Fence f, store.Save(r));
    CACHEPAWL_RETURN_IF_ERROR(f.Wait().WithContext("filling the host tier"));
  }
  if (warm.empty()) return Status::OK();
  // One untimed Load of the last pages saved (host-resident), as the host phase's warm-up
  // rounds do: the store's device mover is new after a reopen.
  CACHEPAWL_ASSIGN_OR_RETURN(
      PrefixMatch m,
      store.Lookup(ns, std::span<const uint32_t>(tokens).first(last * layout_.page_size_tokens)));
  const size_t n = std::min(warm.size(), m.kv_only_pages);
  if (n == 0) return Status::OK();
  CACHEPAWL_ASSIGN_OR_RETURN(Fence f, store.Load(m, warm.first(n), std::nullopt));
  return f.Wait().WithContext("warm-up load");
}

SaveRequest LayoutRun::SaveOf(const Prefix& pre, const ThreadSlots& s, uint64_t depth) {
  SaveRequest r;
  r.ns = pre.ns;
  r.tokens = pre.tokens;
  r.device_pages = s.src_pages;
  r.device_state_slot = s.src_state;
  if (r.device_state_slot) r.state_depth_tokens = depth;
  return r;
}

std::string LayoutRun::RoundNs(const std::string& tag, size_t t, uint64_t round) {
  return tag + "/t" + std::to_string(t) + "/r" + std::to_string(round);
}

Status LayoutRun::SaveRound(Store& store, const std::vector<ThreadSlots>& slots,
                            std::vector<Prefix>& pre, const std::string& tag, Samples* out,
                            std::vector<ThreadTimes>* times) {
  const uint64_t depth = slots[0].dst_pages.size() * layout_.page_size_tokens;
  const uint64_t round = ++rounds_;
  return RunRound(
      static_cast<uint32_t>(slots.size()),
      [&](uint32_t t, ThreadTimes& tt) -> Status {
        pre[t].ns = RoundNs(tag, t, round);
        const SaveRequest r = SaveOf(pre[t], slots[t], depth);
        tt.start = Clock::now();
        CACHEPAWL_ASSIGN_OR_RETURN(Fence f, store.Save(r));
        CACHEPAWL_ASSIGN_OR_RETURN(tt.save_end, WaitStamped(f));
        tt.save = true;
        return Status::OK();
      },
      out, times);
}

Status LayoutRun::LookupAndLock(Store& store, size_t t, Prefix& pre, uint64_t pages, Tier tier,
                                Locks* locks) {
  locks->store = &store;
  CACHEPAWL_ASSIGN_OR_RETURN(pre.match, store.Lookup(pre.ns, pre.tokens));
  const PrefixMatch& m = pre.match;
  const bool all_there =
      m.reusable_pages == pages &&
      std::all_of(m.page_tiers.begin(), m.page_tiers.end(), [&](Tier x) { return x == tier; }) &&
      std::all_of(m.window_tiers.begin(), m.window_tiers.end(),
                  [&](Tier x) { return x == tier; }) &&
      m.window_tiers.size() == sizes_.LoadedWindowPages(pages) &&
      (!sizes_.ssm || m.state_tier == tier);
  if (!all_there) {
    return Status::Internal("thread " + std::to_string(t) + "'s prefix is not all in the " +
                            std::string(TierName(tier)) +
                            " tier: " + std::to_string(m.reusable_pages) + " of " +
                            std::to_string(pages) + " pages reusable, windowed KV of " +
                            std::to_string(m.window_tiers.size()) + " (state in " +
                            (m.state_tier ? std::string(TierName(*m.state_tier)) : "none") + ")");
  }
  CACHEPAWL_ASSIGN_OR_RETURN(locks->held.emplace_back(), store.Lock(m, pages));
  return Status::OK();
}

Status LayoutRun::SaveAndLock(Store& store, const std::vector<ThreadSlots>& slots,
                              std::vector<Prefix>& pre, const std::string& tag, Locks* locks) {
  for (size_t t = 0; t < slots.size(); ++t) {
    pre[t].ns = tag + "/t" + std::to_string(t);
    const SaveRequest r =
        SaveOf(pre[t], slots[t], slots[t].src_pages.size() * layout_.page_size_tokens);
    CACHEPAWL_ASSIGN_OR_RETURN(Fence f, store.Save(r));
    CACHEPAWL_RETURN_IF_ERROR(f.Wait());
    CACHEPAWL_RETURN_IF_ERROR(
        LookupAndLock(store, t, pre[t], slots[t].src_pages.size(), Tier::kHost, locks));
  }
  return Status::OK();
}

Status LayoutRun::LoadRound(Store& store, PoolView& view, const std::vector<ThreadSlots>& slots,
                            std::vector<Prefix>& pre, const std::string& save_tag, bool verify,
                            Samples* out, Row* row) {
  const uint32_t n = static_cast<uint32_t>(slots.size());
  CACHEPAWL_RETURN_IF_ERROR(PoisonDestinations(view, slots, sizes_));
  std::vector<Prefix> fresh = pre;
  const uint64_t round = ++rounds_;
  CACHEPAWL_RETURN_IF_ERROR(RunRound(
      n,
      [&](uint32_t t, ThreadTimes& tt) -> Status {
        const uint64_t depth = slots[t].dst_pages.size() * layout_.page_size_tokens;
        SaveRequest r;
        if (!save_tag.empty()) {
          fresh[t].ns = RoundNs(save_tag, t, round);
          r = SaveOf(fresh[t], slots[t], depth);
        }
        tt.start = Clock::now();
        CACHEPAWL_ASSIGN_OR_RETURN(
            Fence load, store.Load(pre[t].match, slots[t].dst_pages, slots[t].dst_state));
        Fence save;
        if (!save_tag.empty()) {
          CACHEPAWL_ASSIGN_OR_RETURN(save, store.Save(r));
        }
        CACHEPAWL_ASSIGN_OR_RETURN(tt.load_end, WaitStamped(load));
        tt.load = true;
        if (!save_tag.empty()) {
          CACHEPAWL_ASSIGN_OR_RETURN(tt.save_end, WaitStamped(save));
          tt.save = true;
        }
        return Status::OK();
      },
      out));
  if (verify) CACHEPAWL_RETURN_IF_ERROR(Check(view, slots, row, "round " + std::to_string(round)));
  return Status::OK();
}

Status LayoutRun::Check(PoolView& view, const std::vector<ThreadSlots>& slots, Row* row,
                        const std::string& when) {
  CACHEPAWL_ASSIGN_OR_RETURN(const std::vector<std::string> bad,
                             VerifyDestinations(view, slots, sizes_));
  for (size_t t = 0; t < bad.size(); ++t) {
    ++row->verified_loads;
    if (!bad[t].empty()) {
      Mismatch(row->pool + " " + row->tier + " " + row->op + " " + std::to_string(row->pages) +
                   " pages x " + std::to_string(row->threads) + " threads, " + when + ", thread " +
                   std::to_string(t),
               bad[t], row);
    }
  }
  return Status::OK();
}

Row LayoutRun::MakeRow(const std::string& pool, const std::string& tier, Op op, uint32_t t,
                       uint64_t p, int iters, const Samples& s, const PeerSamples* peer) const {
  Row r;
  r.layout = name_;
  r.pool = pool;
  r.tier = tier;
  r.op = OpName(op);
  r.pages = p;
  r.threads = t;
  r.state = sizes_.ssm;
  r.bytes = op == Op::kSave ? sizes_.SaveBytes(p) : sizes_.LoadBytes(p);
  r.iters = iters;
  r.p50_us = Percentile(s.latency_us, 50);
  r.p99_us = Percentile(s.latency_us, 99);
  const bool both = op == Op::kBoth;
  r.gbps = s.Gbps(both);
  r.load_gbps = both ? s.DirectionGbps(true) : op == Op::kLoad ? r.gbps : 0;
  r.save_gbps = both ? s.DirectionGbps(false) : op == Op::kSave ? r.gbps : 0;
  if (peer != nullptr) {
    r.mover_p50_us = Percentile(peer->mover.latency_us, 50);
    r.mover_gbps = peer->mover.Gbps(both);
    r.limit_gbps = peer->limit.Gbps(both);
  }
  return r;
}

Status RunLayout(const Config& c, size_t index, const std::string& work_dir, Report* report,
                 std::ostream& progress) {
  LayoutRun run(c, index, work_dir, report, progress);
  return run.Run();
}

}  // namespace cachepawl::tools::bench_store
