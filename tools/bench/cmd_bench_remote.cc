// cachepawl bench remote --remote redis://host:port[,...] [--records 256K,2M,16M] [--mib M]
//                        [--threads T] [--batch-mib B] [--repeat R] [--json]
//
// The remote tier against raw Redis, in one run, on one server or cluster (--remote):
//   raw   plain hiredis: each record is one value (header block + payload, the same bytes)
//         SET and GET pipelined in batches per node, on one connection per node per thread,
//         routed by the cluster's slot map; nothing checked, nothing copied out of the reply.
//   ours  RemoteTier::Put (the record header with its XXH3-64 checksum, values of at most
//         chunk_bytes, pipelined per node through RedisCluster) and RemoteTier::Get (every part
//         received into its place in the record, header and checksum verified), as the store
//         calls them.
// Both run --threads threads of batches of --batch-mib, over the same number of records of each
// size (--mib in all), raw first in even repetitions and ours first in odd ones; both are
// credited with the same bytes per record (header block + payload, what crosses the wire). Prints
// the median MB/s of each and the median of the paired ratios ours/raw (goal >= 0.85). Every record
// ours reads is compared byte for byte with what was written (outside the timed part); exit 1
// when one differs or fails. The keys are deleted at the end.
#include <hiredis/hiredis.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tiers/host_memory.h"
#include "tiers/remote_tier.h"
#include "tools/bench/bench_median.h"
#include "tools/bench/bench_remote_raw.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "tools/parse_bytes.h"
#include "tools/replay/replay_rng.h"
#include "vocab/model_layout.h"

namespace cachepawl::tools {
namespace {

using Clock = std::chrono::steady_clock;

// A KV-only layout whose page record payload is `bytes` (a multiple of 4 KiB): `bytes / 4096`
// heads of 64 bf16 x 16 tokens, K and V.
ModelLayout RecordLayout(uint64_t bytes) {
  ModelLayout l;
  l.model = "bench/remote-" + std::to_string(bytes);
  l.num_layers = 1;
  l.page_size_tokens = 16;
  l.attention_layers.push_back({0, static_cast<uint32_t>(bytes / 4096), 64, DType::kBf16, 0});
  return l;
}

struct Row {
  std::string op;
  uint64_t record_bytes = 0;
  size_t records = 0;
  std::vector<double> raw_mb_s, ours_mb_s, ratios;
};

// Runs fn(thread, first, last) on `threads` threads over [0, n) in batches of `batch`, each
// thread taking the next batch; returns MB/s for `bytes_per_record`.
template <typename Fn>
double Timed(size_t threads, size_t n, size_t batch, uint64_t bytes_per_record, Fn fn) {
  std::atomic<size_t> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t first; (first = next.fetch_add(batch)) < n;) {
        fn(t, first, std::min(n, first + batch));
      }
    });
  }
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(n) * static_cast<double>(bytes_per_record) / 1e6 / s;
}

int RunBenchRemote(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{"Benchmark the remote tier against raw pipelined hiredis GET/SET", "bench remote"};
  std::string remote, records_text = "256K,2M,16M", user, password_env;
  uint64_t mib = 256, batch_mib = 16;
  size_t threads = 4, repeat = 3;
  bool json = false;
  app.add_option("--remote", remote, "redis://host:port[,host:port...] (a cluster or one server)")
      ->required();
  app.add_option("--records", records_text, "record payload sizes (default 256K,2M,16M)");
  app.add_option("--mib", mib, "MiB written and read per size and side (default 256)");
  app.add_option("--batch-mib", batch_mib, "MiB per batch (default 16)");
  app.add_option("--threads", threads, "threads per side (default 4)");
  app.add_option("--repeat", repeat, "repetitions; medians are printed (default 3)");
  app.add_option("--user", user, "ACL user");
  app.add_option("--password-env", password_env, "the environment variable holding the password");
  app.add_flag("--json", json, "print JSON");
  if (auto code = ParseArgs(app, args, io)) return *code;
  auto usage = [&](const std::string& what) {
    io.err << "bench remote: " << what << "\n";
    return kExitUsage;
  };
  if (threads == 0 || threads > 64)
    return usage("--threads " + std::to_string(threads) + ": 1..64");
  if (repeat == 0 || repeat > 100) return usage("--repeat " + std::to_string(repeat) + ": 1..100");
  if (mib == 0 || batch_mib == 0) return usage("--mib and --batch-mib must be > 0");
  std::vector<uint64_t> sizes;
  for (size_t pos = 0; pos <= records_text.size();) {
    const size_t comma = std::min(records_text.find(',', pos), records_text.size());
    auto bytes = ParseBytes("--records", records_text.substr(pos, comma - pos));
    if (!bytes.ok()) return usage(bytes.status().ToString());
    if (*bytes < 4096 || *bytes % 4096 != 0 || *bytes > (256ull << 20)) {
      return usage("--records '" + records_text.substr(pos, comma - pos) +
                   "': sizes are multiples of 4 KiB up to 256 MiB");
    }
    sizes.push_back(*bytes);
    pos = comma + 1;
  }
  RemoteTierOptions options;
  options.redis.seeds = remote;
  options.redis.user = user;
  if (!password_env.empty()) {
    const char* p = std::getenv(password_env.c_str());
    if (p == nullptr) return usage("--password-env " + password_env + ": not set");
    options.redis.password = p;
  }
  options.redis.connections_per_node = static_cast<uint32_t>(threads);
  options.key_prefix = "cachepawl-bench";
  options.deadline = std::chrono::minutes(2);
  options.redis.io_timeout = std::chrono::seconds(30);
  if (Status s = options.Validate(); !s.ok()) return usage(s.ToString());

  std::vector<Row> rows;
  uint64_t wrong = 0;
  std::atomic<uint64_t> failed{0};
  for (uint64_t size : sizes) {
    const ModelLayout layout = RecordLayout(size);
    auto tier = RemoteTier::Open(options, layout);
    if (!tier.ok()) {
      io.err << "bench remote: " << tier.status().ToString() << "\n";
      return kExitFailure;
    }
    auto raw = RawRedis::Connect(options.redis, threads);
    if (!raw.ok()) {
      io.err << "bench remote: raw: " << raw.status().ToString() << "\n";
      return kExitFailure;
    }
    const uint64_t record = kRecordHeaderBytes + size;
    const size_t n = std::max<size_t>(4, static_cast<size_t>((mib << 20) / record));
    const size_t batch = std::max<size_t>(1, static_cast<size_t>((batch_mib << 20) / record));
    // Sources: header block + payload, random (never zeros); the keys of both sides.
    std::vector<std::vector<std::byte>> source(n), dest(n);
    std::vector<DiskKey> keys(n);
    std::vector<std::string> raw_keys(n);
    SplitMix64 rng(size);
    for (size_t i = 0; i < n; ++i) {
      source[i].resize(record);
      for (auto& b : source[i]) b = static_cast<std::byte>(rng.Next());
      dest[i].assign(record, std::byte{0xA5});
      keys[i].kind = Kind::kKV;
      for (auto& b : keys[i].hash.bytes) b = static_cast<uint8_t>(rng.Next());
      keys[i].depth = 16;
      raw_keys[i] = "cachepawl-bench-raw:" + std::to_string(size) + ":" + std::to_string(i);
    }
    Row w{"write", size, n}, r{"read", size, n};
    for (size_t rep = 0; rep < repeat; ++rep) {
      auto raw_write = [&] {
        return Timed(threads, n, batch, record, [&](size_t t, size_t lo, size_t hi) {
          failed += (*raw)->Set(t, std::span(raw_keys).subspan(lo, hi - lo),
                                std::span(source).subspan(lo, hi - lo));
        });
      };
      auto ours_write = [&] {
        return Timed(threads, n, batch, record, [&](size_t, size_t lo, size_t hi) {
          std::vector<RemotePut> puts;
          for (size_t i = lo; i < hi; ++i) {
            puts.push_back({keys[i], PageHash::Zero(),
                            std::span<const std::byte>(source[i]).subspan(kRecordHeaderBytes)});
          }
          for (const Status& s : (*tier)->Put(puts)) failed += s.ok() ? 0 : 1;
        });
      };
      auto raw_read = [&] {
        return Timed(threads, n, batch, record, [&](size_t t, size_t lo, size_t hi) {
          failed += (*raw)->Get(t, std::span(raw_keys).subspan(lo, hi - lo), record);
        });
      };
      auto ours_read = [&] {
        return Timed(threads, n, batch, record, [&](size_t, size_t lo, size_t hi) {
          std::vector<RemoteGet> gets;
          for (size_t i = lo; i < hi; ++i) gets.push_back({keys[i], dest[i]});
          for (const Status& s : (*tier)->Get(gets)) failed += s.ok() ? 0 : 1;
        });
      };
      double rw, ow, rr, orr;
      if (rep % 2 == 0) {
        rw = raw_write(), ow = ours_write(), rr = raw_read(), orr = ours_read();
      } else {
        ow = ours_write(), rw = raw_write(), orr = ours_read(), rr = raw_read();
      }
      for (size_t i = 0; i < n; ++i) {  // every byte ours read, outside the timed part
        if (std::memcmp(dest[i].data() + kRecordHeaderBytes, source[i].data() + kRecordHeaderBytes,
                        size) != 0) {
          ++wrong;
        }
        std::fill(dest[i].begin(), dest[i].end(), std::byte{0xA5});
      }
      w.raw_mb_s.push_back(rw), w.ours_mb_s.push_back(ow), w.ratios.push_back(ow / rw);
      r.raw_mb_s.push_back(rr), r.ours_mb_s.push_back(orr), r.ratios.push_back(orr / rr);
    }
    (void)(*tier)->Remove(keys);
    failed += (*raw)->Delete(raw_keys);
    rows.push_back(w);
    rows.push_back(r);
  }

  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::localtime(&now));
  nlohmann::json j = {{"remote", remote},
                      {"threads", threads},
                      {"mib_per_size", mib},
                      {"batch_mib", batch_mib},
                      {"repeat", repeat},
                      {"date", date},
                      {"goal_ratio", 0.85},
                      {"wrong_records", wrong},
                      {"failed_records", failed.load()},
                      {"rows", nlohmann::json::array()}};
  for (const Row& row : rows) {
    const auto [lo, hi] = std::minmax_element(row.ratios.begin(), row.ratios.end());
    j["rows"].push_back({{"op", row.op},
                         {"record_bytes", row.record_bytes},
                         {"records", row.records},
                         {"raw_mb_s", Median(row.raw_mb_s)},
                         {"ours_mb_s", Median(row.ours_mb_s)},
                         {"ratio", Median(row.ratios)},
                         {"ratio_min", *lo},
                         {"ratio_max", *hi}});
  }
  if (json) {
    io.out << j.dump(2) << "\n";
  } else {
    io.out << "cachepawl bench remote: " << remote << ", " << date << ", " << threads
           << " threads per side, median of " << repeat << ", raw = pipelined hiredis SET/GET\n\n";
    io.out << std::left << std::setw(7) << "op" << std::right << std::setw(11) << "record"
           << std::setw(9) << "records" << std::setw(11) << "raw MB/s" << std::setw(11)
           << "ours MB/s" << std::setw(10) << "ours/raw" << std::setw(14) << "(min-max)\n";
    for (const auto& row : j["rows"]) {
      io.out << std::left << std::setw(7) << row["op"].get<std::string>() << std::right
             << std::setw(11) << row["record_bytes"].get<uint64_t>() << std::setw(9)
             << row["records"].get<size_t>() << std::fixed << std::setprecision(1) << std::setw(11)
             << row["raw_mb_s"].get<double>() << std::setw(11) << row["ours_mb_s"].get<double>()
             << std::setprecision(2) << std::setw(10) << row["ratio"].get<double>() << "   ("
             << row["ratio_min"].get<double>() << "-" << row["ratio_max"].get<double>() << ")\n";
    }
    io.out << "\ngoal: ours/raw >= 0.85; wrong records: " << wrong
           << ", failed records: " << failed.load() << "\n";
  }
  return wrong == 0 && failed == 0 ? kExitOk : kExitFailure;
}

const CommandRegistration kRegistration("bench remote",
                                        "benchmark the remote tier against raw hiredis GET/SET",
                                        &RunBenchRemote);

}  // namespace
}  // namespace cachepawl::tools
