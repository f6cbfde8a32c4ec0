// cachepawl bench disk [--dir D] [--json] [--queue-depth Q] [--mib M] [--repeat R] [--records ...]
//
// The disk tier against the drive's limit, in one run, on one file system (--dir):
//   raw   plain io_uring (IoUringRing: the same queue depth, the same host memory registered as
//         fixed buffers), O_DIRECT, one request per record, into a preallocated file: no header,
//         no checksum, no catalog. The most this drive and kernel give for these I/Os.
//   ours  DiskMover: Save (header + XXH3-64 over the record, extent allocation, io_uring
//         write, RocksDB catalog put after the write) and Load (pin, read, verify header and
//         checksum), through the public API with fences.
// For each record shape: sequential write and read of the same number of records, then random
// record reads at queue depth 1 and at --queue-depth (32). Raw and ours run back to back phase by
// phase (raw first in even repetitions, ours first in odd ones: the drive drifts), --repeat times
// on fresh files; at queue depth 1 they take turns every 8 records within the phase. Prints the
// median MB/s of each and the median of the paired ratios ours/raw, with their range (goal >= 0.90
// for records >= 64 KiB). Exit 1 when a read of ours fails verification.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "layouts/layout_presets.h"
#include "tiers/host_arena.h"
#include "tools/bench/bench_median.h"
#include "tools/cli_args.h"
#include "tools/command.h"
#include "tools/replay/replay_rng.h"
#include "tools/stall_watchdog.h"
#include "transfer/disk_mover.h"
#include "transfer/io_uring_ring.h"
#include "vocab/internal/stage_profile.h"
#include "vocab/model_layout.h"

namespace cachepawl::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Records per turn of raw and ours in the queue-depth-1 phase.
constexpr size_t kQd1Chunk = 8;

struct Shape {
  std::string name;  // as printed and in JSON
  ModelLayout layout;
  Kind kind;
};

// A KV-only layout whose page record is `heads` x 64 x bf16 x 16 tokens x K,V.
ModelLayout SyntheticKv(const std::string& name, uint32_t heads) {
  ModelLayout l;
  l.model = "bench/" + name;
  l.num_layers = 1;
  l.page_size_tokens = 16;
  l.attention_layers.push_back({0, heads, 64, DType::kBf16, 0});
  return l;
}

StatusOr<std::vector<Shape>> Shapes(const std::vector<std::string>& names) {
  std::vector<Shape> out;
  for (const std::string& n : names) {
    if (n == "kv-16k") {
      out.push_back({n, SyntheticKv(n, 4), Kind::kKV});  // 16 KiB payload, 20 KiB record
    } else if (n == "kv-64k") {
      out.push_back({n, SyntheticKv(n, 15), Kind::kKV});  // 60 KiB payload, 64 KiB record
    } else if (n == "llama-3.1-8b-kv") {
      CACHEPAWL_ASSIGN_OR_RETURN(auto l, LayoutPreset("llama-3.1-8b"));
      out.push_back({n, l, Kind::kKV});
    } else if (n == "jamba-v0.1-mamba") {
      CACHEPAWL_ASSIGN_OR_RETURN(auto l, LayoutPreset("jamba-v0.1"));
      out.push_back({n, l, Kind::kMamba});
    } else {
      return Status::InvalidArgument("--records: '" + n +
                                     "' (known: kv-16k, kv-64k, llama-3.1-8b-kv, "
                                     "jamba-v0.1-mamba)");
    }
  }
  return out;
}

DiskKey BenchKey(Kind kind, uint64_t n) {
  DiskKey k;
  k.kind = kind;
  SplitMix64 rng(n * 2 + static_cast<uint64_t>(kind));
  for (size_t i = 0; i < 32; i += 8) {
    const uint64_t v = rng.Next();
    std::memcpy(k.hash.bytes.data() + i, &v, 8);
  }
  k.depth = (n + 1) * 16;
  return k;
}

std::string FileSystemName(const std::string& dir) {
  struct statfs s;
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x01021994:
      return "tmpfs";
    case 0x65735546:
      return "fuse";
    case 0x6969:
      return "nfs";
    default: {
      std::ostringstream o;
      o << "0x" << std::hex << s.f_type;
      return o.str();
    }
  }
}

// The raw side: one preallocated O_DIRECT file and the ring.
class RawDisk {
 public:
  static StatusOr<std::unique_ptr<RawDisk>> Open(const std::string& path, uint64_t bytes,
                                                 uint32_t queue_depth, HostMemory& host) {
    std::unique_ptr<RawDisk> r(new RawDisk());
    r->path_ = path;
    r->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
    if (r->fd_ < 0) return Status::FromErrno("open '" + path + "'", errno);
    const int err = ::posix_fallocate(r->fd_, 0, static_cast<off_t>(bytes));
    if (err != 0) return Status::FromErrno("fallocate '" + path + "'", err);
    IoUringOptions o;
    o.queue_depth = queue_depth;
    CACHEPAWL_ASSIGN_OR_RETURN(r->ring_, IoUringRing::Open(o));
    r->ring_->SetCompletionHandler([p = r.get()](std::span<const BlockIoCompletion> c) {
      // --profile-stages at queue depth 1: submit -> this handler, per request.
      if (const uint64_t at = p->submitted_at_.exchange(0); at != 0) {
        const uint64_t now = profile::Now();
        if (now > at) {
          p->wait_ns_.fetch_add(now - at);
          p->waits_.fetch_add(1);
        }
      }
      std::lock_guard<std::mutex> lock(p->mu_);
      for (const auto& x : c) {
        if (x.result < 0 || static_cast<uint64_t>(x.result) != p->expect_) ++p->errors_;
      }
      p->done_ += c.size();
      p->cv_.notify_all();
    });
    CACHEPAWL_RETURN_IF_ERROR(r->ring_->RegisterBuffers(host.Regions()));
    return r;
  }
  ~RawDisk() {
    ring_.reset();
    if (fd_ >= 0) ::close(fd_);
    std::filesystem::remove(path_);
  }

  // Runs `reqs` (all of `len` bytes) with at most `window` outstanding; returns seconds.
  StatusOr<double> Run(std::vector<BlockIoRequest> reqs, size_t window) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = 0;
      errors_ = 0;
      expect_ = reqs.empty() ? 0 : reqs[0].len;
    }
    for (auto& r : reqs) r.fd = fd_;
    const auto t0 = Clock::now();
    size_t submitted = 0;
    while (submitted < reqs.size()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return submitted - done_ < window; });
      const size_t n = std::min(reqs.size() - submitted, window - (submitted - done_));
      lock.unlock();
      if (window == 1) submitted_at_.store(profile::Now());
      ring_->Submit(std::span<const BlockIoRequest>(reqs.data() + submitted, n));
      submitted += n;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ == reqs.size(); });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (errors_ != 0) return Status::IOError(std::to_string(errors_) + " raw I/Os failed");
    return s;
  }

  // --profile-stages: the summed submit -> completion-handler time of queue-depth-1 requests
  // since the last call, and how many; then starts over.
  std::pair<uint64_t, uint64_t> TakeWaits() { return {wait_ns_.exchange(0), waits_.exchange(0)}; }

 private:
  RawDisk() = default;
  std::string path_;
  int fd_ = -1;
  std::unique_ptr<IoUringRing> ring_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t done_ = 0;      // guarded by mu_
  size_t errors_ = 0;    // guarded by mu_
  uint64_t expect_ = 0;  // guarded by mu_
  std::atomic<uint64_t> submitted_at_{0}, wait_ns_{0}, waits_{0};
};

// Runs batches through the mover with at most `window` records outstanding, taking host
// slots from `pool`; returns seconds. Counts records that failed.
template <typename Item, typename MakeOp>
double RunWindowed(const std::vector<Item>& items, size_t batch, size_t window,
                   std::vector<HostSlotId> pool, MakeOp make_op, size_t* failed) {
  std::mutex mu;
  std::condition_variable cv;
  size_t outstanding = 0;
  size_t fails = 0;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < items.size(); i += batch) {
    const size_t n = std::min(batch, items.size() - i);
    std::vector<Item> b(items.begin() + i, items.begin() + i + n);
    std::vector<HostSlotId> slots;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return outstanding + n <= window && pool.size() >= n; });
      outstanding += n;
      slots.assign(pool.end() - n, pool.end());
      pool.resize(pool.size() - n);
    }
    for (size_t j = 0; j < n; ++j) b[j].slot = slots[j];
    DiskOp op = make_op(b);
    op.fence.OnComplete([&, slots, n, result = op.result](const Status&) {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& r : result->records) fails += !r.status.ok();
      pool.insert(pool.end(), slots.begin(), slots.end());
      outstanding -= n;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return outstanding == 0; });
  *failed += fails;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Row {
  std::string shape;
  uint64_t record_bytes = 0;
  std::string op;
  uint32_t queue_depth = 0;
  size_t records = 0;
  std::vector<double> raw_mb_s, ours_mb_s, ratios;  // one per repetition (a pair)
  std::vector<double> raw_cpu_us, ours_cpu_us;      // process CPU time per record
  // --profile-stages: ours' stages (vocab/internal/stage_profile.h), summed over the
  // repetitions.
  profile::Totals stages;
  uint64_t profiled_records = 0;
  uint64_t raw_wait_ns = 0, raw_waits = 0;  // raw at queue depth 1: submit -> handler
};

// CPU seconds used by this process (all threads) so far.
double ProcessCpuSeconds() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int RunBenchDisk(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{"Benchmarks the disk tier against plain io_uring O_DIRECT on the same file system.",
               "cachepawl bench disk"};
  std::string dir = "/var/tmp";
  uint32_t qd = 32;
  uint64_t mib = 1024;
  int repeat = 5;
  bool json = false;
  std::vector<std::string> record_names = {"kv-16k", "kv-64k", "llama-3.1-8b-kv",
                                           "jamba-v0.1-mamba"};
  app.add_option("--dir", dir, "folder on the file system to measure (default /var/tmp)");
  app.add_option("--queue-depth", qd, "requests in flight at the drive (default 32)")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--mib", mib, "MiB written and read per record shape (default 1024)")
      ->check(CLI::Range(uint64_t{16}, uint64_t{1} << 20));
  app.add_option("--repeat", repeat, "repetitions, medians reported (default 5)")
      ->check(CLI::Range(1, 100));
  app.add_option("--records", record_names,
                 "record shapes: kv-16k kv-64k llama-3.1-8b-kv jamba-v0.1-mamba");
  app.add_flag("--json", json, "print one JSON object instead of the table");
  std::string watchdog_text = kWatchdogDefault;
  app.add_option("--watchdog", watchdog_text, kWatchdogHelp);
  bool profile_stages = false;
  app.add_flag("--profile-stages", profile_stages,
               "time the disk mover's read stages (vocab/internal/stage_profile.h) and "
               "print them per "
               "record for every row");
  if (auto exit = ParseArgs(app, args, io)) return *exit;
  const auto watchdog_limit = ParseWatchdogLimit(watchdog_text);
  if (!watchdog_limit.ok()) {
    io.err << "cachepawl bench disk: " << watchdog_limit.status().message() << "\n";
    return kExitUsage;
  }
  if (profile_stages) profile::SetEnabled(true);
  auto shapes = Shapes(record_names);
  if (!shapes.ok()) {
    io.err << "cachepawl bench disk: " << shapes.status().ToString() << "\n";
    return kExitUsage;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    io.err << "cachepawl bench disk: --dir: '" << dir << "' is not a folder\n";
    return kExitUsage;
  }
  char tmpl_buf[4096];
  std::snprintf(tmpl_buf, sizeof(tmpl_buf), "%s/cachepawl-bench-disk-XXXXXX", dir.c_str());
  if (::mkdtemp(tmpl_buf) == nullptr) {
    io.err << "cachepawl bench disk: cannot create a folder in '" << dir
           << "': " << std::strerror(errno) << "\n";
    return kExitUsage;
  }
  const std::string work = tmpl_buf;
  auto fail = [&](const std::string& what, const Status& s) {
    io.err << "cachepawl bench disk: " << what << ": " << s.ToString() << "\n";
    std::filesystem::remove_all(work, ec);
    return s.IsUnavailable() || s.IsInvalidArgument() ? kExitUsage : kExitFailure;
  };

  std::optional<StallWatchdog> watchdog;
  if (*watchdog_limit > 0) watchdog.emplace("cachepawl bench disk", *watchdog_limit);
  std::vector<Row> rows;
  size_t failed_reads = 0;
  for (const Shape& shape : *shapes) {
    const uint64_t rec = RecordSlotBytes(shape.layout, shape.kind);
    const size_t n = std::max<size_t>(64, (mib << 20) / rec);
    const size_t batch = rec < (1u << 20) ? 8 : rec < (8u << 20) ? 2 : 1;
    // Both sides keep `window` records outstanding at their API; both rings cap the device at
    // `qd`, the rest waits in the ring's queue so the drive never idles for a wake-up.
    const size_t extra = std::max<size_t>(batch, std::min<size_t>(qd, (256u << 20) / rec));
    const size_t window = qd + extra;
    const size_t rand1 = std::max<size_t>(64, n / 8), rand32 = std::max<size_t>(256, n / 2);
    HostArenaOptions ao;
    ao.bytes = (window + 1) * rec;
    auto arena = HostArena::Open(shape.layout, ao);
    if (!arena.ok()) return fail("host arena", arena.status());
    if (Status s = (*arena)->WaitUntilPinned(); !s.ok()) return fail("host arena", s);
    std::vector<HostSlotId> pool;
    for (size_t i = 0; i < window; ++i) {
      auto slot = (*arena)->Allocate(shape.kind);
      if (!slot.ok()) return fail("host arena", slot.status());
      pool.push_back(*slot);
      // Random payload (checksums are computed over real-looking bytes).
      SplitMix64 fill(i);
      auto* p = reinterpret_cast<uint64_t*>((*arena)->SlotData(*slot));
      for (uint64_t j = 0; j < rec / 8; ++j) p[j] = fill.Next();
    }
    SplitMix64 rng(7);
    std::vector<size_t> order1(rand1), order32(rand32);
    for (auto& x : order1) x = rng.Next() % n;
    for (auto& x : order32) x = rng.Next() % n;
    Row w{shape.name, rec, "write_seq", qd, n}, r{shape.name, rec, "read_seq", qd, n};
    Row q1{shape.name, rec, "read_random", 1, rand1},
        q32{shape.name, rec, "read_random", qd, rand32};
    for (int rep = 0; rep < repeat; ++rep) {
      Progress("a repetition of bench disk");
      auto raw = RawDisk::Open(work + "/raw.data", n * rec, qd, **arena);
      if (!raw.ok()) return fail("raw file", raw.status());
      DiskMoverOptions eo;
      eo.tier.dir = work + "/tier";
      eo.tier.capacity_bytes = n * rec;
      eo.queue_depth = qd;
      std::filesystem::remove_all(eo.tier.dir, ec);
      auto mover = DiskMover::Open(eo, shape.layout, arena->get());
      if (!mover.ok()) return fail("disk tier", mover.status());
      DiskMover& e = **mover;
      auto raw_reqs = [&](BlockIoOp op, const std::vector<size_t>& which) {
        std::vector<BlockIoRequest> v;
        for (size_t i = 0; i < which.size(); ++i) {
          v.push_back({op, -1, which[i] * rec, (*arena)->SlotData(pool[i % pool.size()]),
                       static_cast<uint32_t>(rec), i});
        }
        return v;
      };
      std::vector<size_t> seq(n);
      for (size_t i = 0; i < n; ++i) seq[i] = i;
      const double mb = static_cast<double>(rec) / 1e6;
      // Runs one phase of raw and ours in chunks of `chunk` records: the two sides alternate
      // chunk by chunk, raw first in even chunks of even repetitions and ours first otherwise
      // (the drive drifts), and each side's time and CPU are the sums over its chunks. The
      // functions run records [lo, hi) of the phase.
      using RangeFn = std::function<StatusOr<double>(size_t lo, size_t hi)>;
      auto pair = [&](Row& row, const RangeFn& raw_fn, const RangeFn& ours_fn,
                      size_t chunk) -> Status {
        double raw_s = 0, ours_s = 0, raw_cpu = 0, ours_cpu = 0;
        profile::Reset();  // only ours records stages
        (void)(*raw)->TakeWaits();
        auto run = [](const RangeFn& fn, size_t lo, size_t hi, double* secs,
                      double* cpu) -> Status {
          const double c0 = ProcessCpuSeconds();
          CACHEPAWL_ASSIGN_OR_RETURN(const double t, fn(lo, hi));
          *cpu += ProcessCpuSeconds() - c0;
          *secs += t;
          return Status::OK();
        };
        for (size_t lo = 0; lo < row.records; lo += chunk) {
          const size_t hi = std::min(row.records, lo + chunk);
          if ((rep + lo / chunk) % 2 == 0) {
            CACHEPAWL_RETURN_IF_ERROR(run(raw_fn, lo, hi, &raw_s, &raw_cpu));
            CACHEPAWL_RETURN_IF_ERROR(run(ours_fn, lo, hi, &ours_s, &ours_cpu));
          } else {
            CACHEPAWL_RETURN_IF_ERROR(run(ours_fn, lo, hi, &ours_s, &ours_cpu));
            CACHEPAWL_RETURN_IF_ERROR(run(raw_fn, lo, hi, &raw_s, &raw_cpu));
          }
        }
        if (profile::Enabled()) {
          row.stages += profile::Snapshot();
          row.profiled_records += row.records;
          const auto [wait_ns, waits] = (*raw)->TakeWaits();
          row.raw_wait_ns += wait_ns;
          row.raw_waits += waits;
        }
        row.raw_cpu_us.push_back(raw_cpu * 1e6 / row.records);
        row.ours_cpu_us.push_back(ours_cpu * 1e6 / row.records);
        const double raw_mb = mb * row.records / raw_s, ours_mb = mb * row.records / ours_s;
        row.raw_mb_s.push_back(raw_mb);
        row.ours_mb_s.push_back(ours_mb);
        row.ratios.push_back(ours_mb / raw_mb);
        return Status::OK();
      };
      auto part = [](const auto& v, size_t lo, size_t hi) {
        return std::vector(v.begin() + static_cast<ptrdiff_t>(lo),
                           v.begin() + static_cast<ptrdiff_t>(hi));
      };
      auto reads_of = [&](const std::vector<size_t>& which) {
        std::vector<DiskRead> v;
        for (size_t i : which) v.push_back({BenchKey(shape.kind, i), 0});
        return v;
      };
      auto load = [&](const std::vector<DiskRead>& b) { return e.Load(b); };
      std::vector<DiskWrite> writes(n);
      for (size_t i = 0; i < n; ++i) writes[i] = {BenchKey(shape.kind, i), PageHash::Zero(), 0};
      size_t write_failed = 0;
      Status s = pair(
          w, [&](size_t, size_t) { return (*raw)->Run(raw_reqs(BlockIoOp::kWrite, seq), window); },
          [&](size_t, size_t) -> StatusOr<double> {
            return RunWindowed(
                writes, batch, window, pool,
                [&](const std::vector<DiskWrite>& b) { return e.Save(b); }, &write_failed);
          },
          n);
      if (s.ok() && write_failed != 0) {
        s = Status::IOError(std::to_string(write_failed) + " records failed to write");
      }
      if (!s.ok()) return fail("write", s);
      const auto seq_reads = reads_of(seq), reads1 = reads_of(order1), reads32 = reads_of(order32);
      s = pair(
          r, [&](size_t, size_t) { return (*raw)->Run(raw_reqs(BlockIoOp::kRead, seq), window); },
          [&](size_t, size_t) -> StatusOr<double> {
            return RunWindowed(seq_reads, batch, window, pool, load, &failed_reads);
          },
          n);
      if (!s.ok()) return fail("sequential read", s);
      // Random reads, queue depth 1 and qd (one record per operation). At queue depth 1 each
      // record waits for the previous one, so the phase is long in time and short in records:
      // the sides alternate every kQd1Chunk records, not once per phase.
      s = pair(
          q1,
          [&](size_t lo, size_t hi) {
            return (*raw)->Run(raw_reqs(BlockIoOp::kRead, part(order1, lo, hi)), 1);
          },
          [&](size_t lo, size_t hi) -> StatusOr<double> {
            return RunWindowed(part(reads1, lo, hi), 1, 1, pool, load, &failed_reads);
          },
          kQd1Chunk);
      if (!s.ok()) return fail("random read", s);
      s = pair(
          q32,
          [&](size_t, size_t) { return (*raw)->Run(raw_reqs(BlockIoOp::kRead, order32), window); },
          [&](size_t, size_t) -> StatusOr<double> {
            return RunWindowed(reads32, 1, window, pool, load, &failed_reads);
          },
          rand32);
      if (!s.ok()) return fail("random read", s);
      if (Status s = e.Close(); !s.ok()) return fail("close", s);
    }
    rows.push_back(w);
    rows.push_back(r);
    rows.push_back(q1);
    rows.push_back(q32);
  }
  std::filesystem::remove_all(work, ec);

  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::localtime(&now));
  nlohmann::json j = {{"dir", dir},
                      {"file_system", FileSystemName(dir)},
                      {"queue_depth", qd},
                      {"mib_per_shape", mib},
                      {"repeat", repeat},
                      {"date", date},
                      {"goal_ratio", 0.90},
                      {"failed_reads", failed_reads},
                      {"rows", nlohmann::json::array()}};
  for (const Row& row : rows) {
    const double raw = Median(row.raw_mb_s), ours = Median(row.ours_mb_s);
    const auto [lo, hi] = std::minmax_element(row.ratios.begin(), row.ratios.end());
    j["rows"].push_back({{"record", row.shape},
                         {"record_bytes", row.record_bytes},
                         {"op", row.op},
                         {"queue_depth", row.queue_depth},
                         {"records", row.records},
                         {"raw_mb_s", raw},
                         {"ours_mb_s", ours},
                         {"ratio", Median(row.ratios)},
                         {"raw_cpu_us_per_record", Median(row.raw_cpu_us)},
                         {"ours_cpu_us_per_record", Median(row.ours_cpu_us)},
                         {"ratio_min", *lo},
                         {"ratio_max", *hi}});
    if (row.profiled_records > 0) {
      nlohmann::json us = nlohmann::json::object();
      for (size_t i = 0; i < row.stages.stages.size(); ++i) {
        if (row.stages.stages[i].count == 0) continue;
        us[std::string(profile::StageName(static_cast<profile::Stage>(i)))] =
            static_cast<double>(row.stages.stages[i].nanos) / 1e3 /
            static_cast<double>(row.profiled_records);
      }
      if (row.raw_waits > 0) {
        us["raw.read_wait"] =
            static_cast<double>(row.raw_wait_ns) / 1e3 / static_cast<double>(row.raw_waits);
      }
      j["rows"].back()["stages_us_per_record"] = us;
    }
  }
  if (json) {
    io.out << j.dump(2) << "\n";
  } else {
    io.out << "cachepawl bench disk: " << dir << " (" << j["file_system"].get<std::string>()
           << "), " << date << ", median of " << repeat << ", raw = plain io_uring O_DIRECT\n\n";
    io.out << std::left << std::setw(18) << "record" << std::right << std::setw(10) << "bytes"
           << "  " << std::left << std::setw(12) << "op" << std::right << std::setw(4) << "qd"
           << std::setw(9) << "records" << std::setw(11) << "raw MB/s" << std::setw(11)
           << "ours MB/s" << std::setw(10) << "ours/raw" << std::setw(14) << "(min-max)"
           << std::setw(16) << "CPU us/rec raw" << std::setw(6) << "ours\n";
    for (const auto& row : j["rows"]) {
      io.out << std::left << std::setw(18) << row["record"].get<std::string>() << std::right
             << std::setw(10) << row["record_bytes"].get<uint64_t>() << "  " << std::left
             << std::setw(12) << row["op"].get<std::string>() << std::right << std::setw(4)
             << row["queue_depth"].get<uint32_t>() << std::setw(9) << row["records"].get<size_t>()
             << std::fixed << std::setprecision(1) << std::setw(11) << row["raw_mb_s"].get<double>()
             << std::setw(11) << row["ours_mb_s"].get<double>() << std::setprecision(2)
             << std::setw(10) << row["ratio"].get<double>() << "   ("
             << row["ratio_min"].get<double>() << "-" << row["ratio_max"].get<double>() << ")"
             << std::setprecision(1) << std::setw(13) << row["raw_cpu_us_per_record"].get<double>()
             << std::setw(9) << row["ours_cpu_us_per_record"].get<double>() << "\n";
      if (row.contains("stages_us_per_record")) {
        io.out << "    ours per record:";
        for (const auto& [name, us] : row["stages_us_per_record"].items()) {
          io.out << " " << name << " " << us.get<double>() << "us";
        }
        io.out << "\n";
      }
    }
    io.out << "\ngoal: ours/raw >= 0.90 for records >= 64 KiB; failed reads: " << failed_reads
           << "\n";
  }
  return failed_reads == 0 ? kExitOk : kExitFailure;
}

const CommandRegistration kRegistration("bench disk",
                                        "benchmark the disk tier against plain io_uring O_DIRECT",
                                        &RunBenchDisk);

}  // namespace
}  // namespace cachepawl::tools
