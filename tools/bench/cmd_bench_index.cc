// cachepawl bench index [--pages N] [--chain-pages L] [--seconds S] [--json]
//
// The prefix index at scale, against a plain std::unordered_map index of the same pages in the
// same run (the peer: one node per page holding its parent hash, depth and three slots):
//   insert    InsertKv of N pages (default 1,000,000) as N/L chains of L pages (default 2,048),
//             interleaved round-robin so that a chain's entries are spread as in a long-lived
//             index; also InsertChain (one call per chain) and SetLocation (host slot per page,
//             a Mamba state every 16 pages: the index the Match figures use)
//   memory    heap bytes per indexed page, measured by mallinfo2() (plus the index's own
//             huge-page mappings) around building the index, and Stats().memory_bytes
//   match     Match of one whole L-page chain (all pages located, the state at the last page):
//             median and p99 per call over random chains (cold caches) and one chain (warm);
//             hashing excluded (hashes are precomputed)
//   threads   Match calls per second with 1 and 2 threads on random chains, and the ratio
// Goals (issue 3): Match of a 2,048-page chain in a 1,000,000-page index <= 50 us, >= 5 M
// inserted pages/s on one core, <= 128 bytes per page. docs/PERFORMANCE.md ("Index") has the
// JSON keys and measured figures.
#include <malloc.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "index/huge_page_allocator.h"
#include "index/prefix_index.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "tools/replay/replay_rng.h"

namespace cachepawl::tools {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU seconds of the calling thread: on a shared machine, what the work itself cost.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double LoadAverage1m() {
  double load = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

// malloc's in-use and mmapped bytes plus the blocks the index maps itself (2 MiB-aligned for
// huge pages, see index/huge_page_allocator.h; malloc does not see them).
uint64_t HeapBytes() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd + index_internal::MappedHugeBytes();
}

constexpr uint32_t kStateEvery = 16;

// Chain c's page i is hashes[c * chain_pages + i].
struct Workload {
  size_t chains = 0;
  size_t chain_pages = 0;
  std::vector<PageHash> hashes;

  const PageHash* Chain(size_t c) const { return hashes.data() + c * chain_pages; }
  std::optional<PageHash> Parent(size_t c, size_t i) const {
    if (i == 0) return std::nullopt;
    return Chain(c)[i - 1];
  }
  // Round-robin over chains, page by page: the order of the interleaved inserts.
  template <typename Fn>
  void ForEachInterleaved(Fn&& fn) const {
    for (size_t i = 0; i < chain_pages; ++i) {
      for (size_t c = 0; c < chains; ++c) fn(c, i);
    }
  }
};

// The peer: what a first version would write.
struct NaiveEntry {
  PageHash parent;
  uint32_t depth = 0;
  uint8_t mask = 0;
  uint64_t slot[kNumLocalTiers] = {};
  bool has_state = false;
};
using NaiveIndex = std::unordered_map<PageHash, NaiveEntry, PageHashHasher>;

size_t NaiveMatch(const NaiveIndex& index, const PageHash* hashes, size_t n,
                  std::vector<TierLocations>* pages) {
  pages->clear();
  const PageHash* prev = nullptr;
  size_t reusable = 0;
  for (size_t i = 0; i < n; ++i) {
    auto it = index.find(hashes[i]);
    if (it == index.end()) break;
    const NaiveEntry& e = it->second;
    if (prev == nullptr ? !e.parent.IsZero() : e.parent != *prev) break;
    if (e.mask == 0) break;
    TierLocations& loc = pages->emplace_back();
    loc.mask = e.mask;
    for (int t = 0; t < kNumLocalTiers; ++t) loc.slot[t] = e.slot[t];
    if (e.has_state) reusable = i + 1;
    prev = &hashes[i];
  }
  return reusable;
}

struct Percentiles {
  double median_us = 0;
  double p99_us = 0;
  double median_cpu_us = 0;  // the same calls in thread CPU time
};

template <typename Fn>
Percentiles TimeCalls(size_t calls, Fn&& fn) {
  std::vector<double> us(calls), cpu_us(calls);
  for (size_t k = 0; k < calls; ++k) {
    const double c0 = ThreadCpuSeconds();
    const auto t0 = Clock::now();
    fn(k);
    us[k] = Seconds(t0, Clock::now()) * 1e6;
    cpu_us[k] = (ThreadCpuSeconds() - c0) * 1e6;
  }
  std::sort(us.begin(), us.end());
  std::sort(cpu_us.begin(), cpu_us.end());
  return Percentiles{us[calls / 2], us[std::min(calls - 1, calls * 99 / 100)], cpu_us[calls / 2]};
}

// A host slot for every page and a Mamba state every kStateEvery pages, set in the
// interleaved order; *seconds: the time the KV SetLocation calls took.
Status Locate(const Workload& w, PrefixIndex& index, double* seconds) {
  Status failed;
  const auto t0 = Clock::now();
  w.ForEachInterleaved([&](size_t c, size_t i) {
    Status s = index.SetLocation(w.Chain(c)[i], Kind::kKV, Tier::kHost, c * w.chain_pages + i);
    if (!s.ok() && failed.ok()) failed = s;
  });
  *seconds = Seconds(t0, Clock::now());
  for (size_t c = 0; c < w.chains; ++c) {
    for (size_t i = kStateEvery - 1; i < w.chain_pages; i += kStateEvery) {
      Status s = index.SetLocation(w.Chain(c)[i], Kind::kMamba, Tier::kHost, c * 1000 + i);
      if (!s.ok() && failed.ok()) failed = s;
    }
  }
  return failed.WithContext("SetLocation");
}

// Pre-sized, as a store knows its capacity.
StatusOr<std::unique_ptr<PrefixIndex>> NewIndex(uint64_t expected_pages) {
  IndexOptions o;
  o.expected_pages = expected_pages;
  o.require_mamba = true;
  o.track_interval_pages = kStateEvery;
  return PrefixIndex::Create(o);
}

int Fail(CommandIo& io, const std::string& what) {
  io.err << "cachepawl bench index: " << what << "\n";
  return kExitFailure;
}

int RunBenchIndex(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{"Benchmarks the prefix index against a std::unordered_map index of the same pages.",
               "cachepawl bench index"};
  uint64_t pages = 1'000'000;
  uint64_t chain_pages = 2048;
  double seconds = 1.0;
  bool json = false;
  app.add_option("--pages", pages, "pages in the index (default 1000000)");
  app.add_option("--chain-pages", chain_pages, "pages per chain and per Match (default 2048)");
  app.add_option("--seconds", seconds, "seconds per throughput run (default 1)");
  app.add_flag("--json", json, "print one JSON object instead of the table");
  if (auto exit = ParseArgs(app, args, io)) return *exit;
  if (chain_pages < kStateEvery || chain_pages % kStateEvery != 0 || chain_pages > (1u << 20)) {
    io.err << "cachepawl bench index: --chain-pages: " << chain_pages
           << " (must be a multiple of 16 in 16..1048576)\n";
    return kExitUsage;
  }
  if (pages < chain_pages || pages > 100'000'000) {
    io.err << "cachepawl bench index: --pages: " << pages << " (must be in --chain-pages ("
           << chain_pages << ")..100000000)\n";
    return kExitUsage;
  }
  if (!(seconds >= 0.05 && seconds <= 60)) {
    io.err << "cachepawl bench index: --seconds: " << seconds << " (must be in 0.05..60)\n";
    return kExitUsage;
  }

  Workload w;
  w.chain_pages = chain_pages;
  w.chains = pages / chain_pages;
  const size_t n = w.chains * w.chain_pages;
  w.hashes.resize(n);
  SplitMix64 rng(20261122);
  for (PageHash& h : w.hashes) {
    for (size_t b = 0; b < 32; b += 8) {
      const uint64_t v = rng.Next();
      std::memcpy(h.bytes.data() + b, &v, 8);
    }
  }

  // ----- insert + memory: ours ----------------------------------------------------------------
  std::unique_ptr<PrefixIndex> index;
  double insert_s = 1e30;
  double insert_cpu_s = 1e30;
  uint64_t heap_bytes = 0;
  for (int rep = 0; rep < 3; ++rep) {
    index.reset();
    malloc_trim(0);
    const uint64_t heap0 = HeapBytes();
    auto created = NewIndex(n);
    if (!created.ok()) return Fail(io, created.status().ToString());
    index = std::move(created).value();
    Status failed;
    const double c0 = ThreadCpuSeconds();
    const auto t0 = Clock::now();
    w.ForEachInterleaved([&](size_t c, size_t i) {
      Status s = index->InsertKv(w.Parent(c, i), w.Chain(c)[i]);
      if (!s.ok() && failed.ok()) failed = s;
    });
    insert_s = std::min(insert_s, Seconds(t0, Clock::now()));
    insert_cpu_s = std::min(insert_cpu_s, ThreadCpuSeconds() - c0);
    if (!failed.ok()) return Fail(io, "InsertKv: " + failed.ToString());
    heap_bytes = HeapBytes() - heap0;
  }
  // Locations and states, as a loaded cache has them; memory measured again with them.
  const uint64_t heap_before_locate = HeapBytes();
  double locate_s;
  if (Status s = Locate(w, *index, &locate_s); !s.ok()) return Fail(io, s.ToString());
  const uint64_t heap_located = heap_bytes + (HeapBytes() - heap_before_locate);
  const IndexStats stats = index->Stats();

  // InsertChain: one call per chain, into a fresh index, whose chains are then contiguous.
  double insert_chain_s;
  std::unique_ptr<PrefixIndex> chained;
  {
    auto created = NewIndex(n);
    if (!created.ok()) return Fail(io, created.status().ToString());
    chained = std::move(created).value();
    const auto t0 = Clock::now();
    for (size_t c = 0; c < w.chains; ++c) {
      Status s = chained->InsertChain(std::nullopt, {w.Chain(c), w.chain_pages});
      if (!s.ok()) return Fail(io, "InsertChain: " + s.ToString());
    }
    insert_chain_s = Seconds(t0, Clock::now());
    double unused;
    if (Status s = Locate(w, *chained, &unused); !s.ok()) return Fail(io, s.ToString());
  }

  // ----- insert + memory: the peer --------------------------------------------------------------
  NaiveIndex naive;
  double naive_insert_s = 1e30;
  uint64_t naive_heap_bytes = 0;
  for (int rep = 0; rep < 3; ++rep) {
    NaiveIndex().swap(naive);
    malloc_trim(0);
    const uint64_t heap0 = HeapBytes();
    naive.reserve(n);
    bool ok = true;
    const auto t0 = Clock::now();
    w.ForEachInterleaved([&](size_t c, size_t i) {
      const PageHash parent = i == 0 ? PageHash::Zero() : w.Chain(c)[i - 1];
      uint32_t depth = 1;
      if (i > 0) {
        auto p = naive.find(parent);
        if (p == naive.end()) {
          ok = false;
          return;
        }
        depth = p->second.depth + 1;
      }
      naive.try_emplace(w.Chain(c)[i], NaiveEntry{parent, depth});
    });
    naive_insert_s = std::min(naive_insert_s, Seconds(t0, Clock::now()));
    if (!ok) return Fail(io, "the peer lost a parent");
    naive_heap_bytes = HeapBytes() - heap0;
  }
  w.ForEachInterleaved([&](size_t c, size_t i) {
    NaiveEntry& e = naive[w.Chain(c)[i]];
    e.mask = 1u << static_cast<int>(Tier::kHost);
    e.slot[static_cast<int>(Tier::kHost)] = c * w.chain_pages + i;
    e.has_state = (i + 1) % kStateEvery == 0;
  });

  // ----- Match
  // ------------------------------------------------------------------------------------ Check the
  // answers before timing anything.
  MatchResult r;
  std::vector<TierLocations> naive_pages;
  for (size_t c : {size_t{0}, w.chains - 1}) {
    index->Match({w.Chain(c), w.chain_pages}, &r);
    const size_t naive_reusable = NaiveMatch(naive, w.Chain(c), w.chain_pages, &naive_pages);
    if (r.reusable_pages != w.chain_pages || r.kv_only_pages != w.chain_pages || r.state.empty() ||
        naive_reusable != w.chain_pages || r.pages != naive_pages) {
      return Fail(io, "Match of chain " + std::to_string(c) + " is wrong: reusable " +
                          std::to_string(r.reusable_pages) + ", peer " +
                          std::to_string(naive_reusable) + " of " + std::to_string(w.chain_pages));
    }
  }
  const size_t calls = std::max<size_t>(200, std::min<size_t>(2000, 4 * w.chains));
  SplitMix64 pick(12345);
  std::vector<size_t> order(calls);
  for (size_t& c : order) c = pick.Next() % w.chains;
  const Percentiles cold = TimeCalls(calls, [&](size_t k) {
    index->Match({w.Chain(order[k]), w.chain_pages}, &r);
  });
  const Percentiles warm = TimeCalls(calls, [&](size_t) {
    index->Match({w.Chain(0), w.chain_pages}, &r);
  });
  const Percentiles contiguous = TimeCalls(calls, [&](size_t k) {
    chained->Match({w.Chain(order[k]), w.chain_pages}, &r);
  });
  chained.reset();
  const Percentiles naive_cold = TimeCalls(
      calls, [&](size_t k) { NaiveMatch(naive, w.Chain(order[k]), w.chain_pages, &naive_pages); });

  // ----- Match throughput with 1 and 2 threads
  // -----------------------------------------------------
  // Calls per second of `match(chain, scratch)` from `threads` threads on random chains.
  auto throughput = [&](int threads, auto match) {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> total{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        MatchResult mine;
        SplitMix64 mine_rng(777 + t);
        uint64_t count = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          match(mine_rng.Next() % w.chains, &mine);
          ++count;
        }
        total.fetch_add(count);
      });
    }
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop.store(true);
    for (std::thread& th : pool) th.join();
    return static_cast<double>(total.load()) / Seconds(t0, Clock::now());
  };
  auto ours = [&](size_t c, MatchResult* mine) { index->Match({w.Chain(c), w.chain_pages}, mine); };
  // The peer takes no lock at all: its scaling is what the machine allows.
  auto peer = [&](size_t c, MatchResult* mine) {
    NaiveMatch(naive, w.Chain(c), w.chain_pages, &mine->pages);
  };
  const double match_1t = throughput(1, ours);
  const double match_2t = throughput(2, ours);
  const double naive_1t = throughput(1, peer);
  const double naive_2t = throughput(2, peer);

  const double dn = static_cast<double>(n);
  nlohmann::json j = {
      {"pages", n},
      {"chains", w.chains},
      {"chain_pages", w.chain_pages},
      {"load_average_1m", LoadAverage1m()},
      {"insert_pages_per_second", dn / insert_s},
      {"insert_pages_per_second_cpu", dn / insert_cpu_s},
      {"insert_chain_pages_per_second", dn / insert_chain_s},
      {"naive_insert_pages_per_second", dn / naive_insert_s},
      {"ratio_insert_to_naive", naive_insert_s / insert_s},
      {"set_location_per_second", dn / locate_s},
      {"memory_bytes_per_page", static_cast<double>(heap_bytes) / dn},
      {"memory_bytes_per_page_located", static_cast<double>(heap_located) / dn},
      {"memory_bytes_per_page_self_reported", static_cast<double>(stats.memory_bytes) / dn},
      {"naive_memory_bytes_per_page", static_cast<double>(naive_heap_bytes) / dn},
      {"match_us_median_cold", cold.median_us},
      {"match_us_p99_cold", cold.p99_us},
      {"match_us_median_cold_cpu", cold.median_cpu_us},
      {"match_us_median_contiguous", contiguous.median_us},
      {"match_us_median_contiguous_cpu", contiguous.median_cpu_us},
      {"match_us_median_warm", warm.median_us},
      {"match_us_median_warm_cpu", warm.median_cpu_us},
      {"naive_match_us_median_cold", naive_cold.median_us},
      {"ratio_match_to_naive", naive_cold.median_us / cold.median_us},
      {"match_per_second_1_thread", match_1t},
      {"match_per_second_2_threads", match_2t},
      {"match_scaling_2_threads", match_2t / match_1t},
      {"naive_match_scaling_2_threads", naive_2t / naive_1t},
  };
  if (json) {
    io.out << j.dump(2) << "\n";
    return kExitOk;
  }
  io.out << "index of " << n << " pages (" << w.chains << " chains of " << w.chain_pages
         << " pages, inserted interleaved; load average " << LoadAverage1m() << ")\n"
         << "  insert (InsertKv)       " << dn / insert_s / 1e6 << " M pages/s   peer "
         << dn / naive_insert_s / 1e6 << " M pages/s   ratio " << naive_insert_s / insert_s
         << "   (goal >= 5 M pages/s; " << dn / insert_cpu_s / 1e6 << " in CPU time)\n"
         << "  insert (InsertChain)    " << dn / insert_chain_s / 1e6 << " M pages/s\n"
         << "  SetLocation             " << dn / locate_s / 1e6 << " M calls/s\n"
         << "  memory                  " << static_cast<double>(heap_bytes) / dn
         << " bytes/page measured, " << static_cast<double>(heap_located) / dn
         << " with locations and states, " << static_cast<double>(stats.memory_bytes) / dn
         << " self-reported   peer " << static_cast<double>(naive_heap_bytes) / dn
         << "   (goal <= 128)\n"
         << "  Match of " << w.chain_pages << " pages   median " << cold.median_us
         << " us cold (p99 " << cold.p99_us << "), " << contiguous.median_us
         << " us cold on chains inserted whole, " << warm.median_us << " us warm   peer "
         << naive_cold.median_us << " us cold   ratio " << naive_cold.median_us / cold.median_us
         << "   (goal <= 50 us; " << cold.median_cpu_us << " us cold in CPU time)\n"
         << "  Match throughput        " << match_1t << " /s with 1 thread, " << match_2t
         << " /s with 2 threads   scaling " << match_2t / match_1t << "   peer (no lock) scaling "
         << naive_2t / naive_1t << "\n";
  return kExitOk;
}

const CommandRegistration kRegistration("bench index",
                                        "benchmark the prefix index against std::unordered_map",
                                        &RunBenchIndex);

}  // namespace
}  // namespace cachepawl::tools
