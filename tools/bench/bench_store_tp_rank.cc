// The rank process of `bench store --tp-size N` (tools/bench/bench_store_tp.h): attached to the
// owner as one rank, it runs the steps the owner writes to its stdin, one a line, and answers
// each on stdout:
//
//   limit load|limit save   one contiguous copy of the rank's request bytes  -> ok START END
//   save R                  Save of round R's prompt from its own slots       -> ok START END
//   prep R                  poison the Load's slots, LookupHashes (untimed)   -> ok 0 0
//   load R                  Load into the slots prepared for R (timed)       -> ok START END
//   verify                  every loaded byte against what this rank saved    -> ok WRONG_RECORDS
//   stages N                its stage profile since the last, per N Loads      -> ok NAME=US ...
//   quit                                                                      (exits 0)
//
// START and END are CLOCK_MONOTONIC nanoseconds (comparable across the node's processes); a step
// that fails answers "err MESSAGE". Its first line is "ready BYTES" (the request's record bytes).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"
#include "tools/bench/bench_store.h"
#include "tools/bench/bench_store_tp.h"
#include "tools/rank_processes.h"
#include "tools/stall_watchdog.h"

namespace cachepawl::tools::bench_store {
namespace {

struct Spec {
  uint32_t rank = 0, tp_size = 0;
  uint64_t pages = 0, device_bytes = 0, seed = 0;
  bool gpu = false;
  double watchdog_seconds = 0;
  bool profile = false;
  uint32_t load_split_pages = 0;
  std::string socket;
};

// "rank,tp_size,pages,device_bytes,gpu,seed,watchdog_seconds,profile,load_split_pages,socket"
// (the socket last: it may hold commas).
StatusOr<Spec> ParseSpec(const std::string& text) {
  Spec s;
  std::istringstream in(text);
  char c[9] = {};
  int gpu = 0, profile = 0;
  in >> s.rank >> c[0] >> s.tp_size >> c[1] >> s.pages >> c[2] >> s.device_bytes >> c[3] >> gpu >>
      c[4] >> s.seed >> c[5] >> s.watchdog_seconds >> c[6] >> profile >> c[7] >>
      s.load_split_pages >> c[8];
  std::getline(in, s.socket);
  for (char sep : c) {
    if (sep != ',') return Status::InvalidArgument("--tp-rank-worker: '" + text + "'");
  }
  if (!in.eof() && in.fail()) return Status::InvalidArgument("--tp-rank-worker: '" + text + "'");
  if (s.tp_size == 0 || s.rank >= s.tp_size || s.pages == 0 || s.socket.empty()) {
    return Status::InvalidArgument("--tp-rank-worker: '" + text + "'");
  }
  s.gpu = gpu != 0;
  s.profile = profile != 0;
  return s;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::vector<std::byte> RandomRecord(uint64_t bytes, uint64_t seed) {
  std::vector<std::byte> out(bytes);
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < bytes; i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<uint64_t>(8, bytes - i));
  }
  return out;
}

class Rank {
 public:
  explicit Rank(const Spec& spec) : spec_(spec) {}

  Status Setup() {
    AttachOptions ao = RankAttachOptions(spec_.socket, spec_.rank, spec_.gpu, spec_.device_bytes);
    ao.load_split_pages = spec_.load_split_pages;
    CACHEPAWL_ASSIGN_OR_RETURN(store_, Store::Attach(ao));
    const ModelLayout& l = store_->layout();
    kv_bytes_ = l.has_attention() ? l.RecordBytes(Kind::kKV) : 0;
    state_bytes_ = l.has_ssm() ? l.RecordBytes(Kind::kMamba) : 0;
    for (uint64_t i = 0; i < spec_.pages; ++i) {
      CACHEPAWL_ASSIGN_OR_RETURN(src_.emplace_back(), store_->AllocateDeviceSlot(Kind::kKV));
      CACHEPAWL_ASSIGN_OR_RETURN(dst_.emplace_back(), store_->AllocateDeviceSlot(Kind::kKV));
      expected_.push_back(RandomRecord(kv_bytes_, Seed(Kind::kKV, i)));
      CACHEPAWL_RETURN_IF_ERROR(
          store_->WriteDeviceRecord(Kind::kKV, src_.back(), expected_.back()));
    }
    if (state_bytes_ > 0) {
      CACHEPAWL_ASSIGN_OR_RETURN(src_state_, store_->AllocateDeviceSlot(Kind::kMamba));
      CACHEPAWL_ASSIGN_OR_RETURN(dst_state_, store_->AllocateDeviceSlot(Kind::kMamba));
      expected_state_ = RandomRecord(state_bytes_, Seed(Kind::kMamba, spec_.pages));
      CACHEPAWL_RETURN_IF_ERROR(
          store_->WriteDeviceRecord(Kind::kMamba, *src_state_, expected_state_));
    }
    // The limit's buffers: random bytes both sides, never zeros.
    CACHEPAWL_ASSIGN_OR_RETURN(host_, Memory::Allocate(Memory::Where::kHost, spec_.gpu, Bytes()));
    CACHEPAWL_ASSIGN_OR_RETURN(device_,
                               Memory::Allocate(Memory::Where::kDevice, spec_.gpu, Bytes()));
    CACHEPAWL_RETURN_IF_ERROR(FillRandom(host_->data(), Bytes(), false, Seed(Kind::kMamba, ~0ull)));
    return CopyBytes(device_->data(), host_->data(), Bytes(), spec_.gpu);
  }

  uint64_t Bytes() const { return spec_.pages * kv_bytes_ + state_bytes_; }

  Status Limit(bool load, int64_t* start, int64_t* end) {
    *start = NowNs();
    Status s = load ? CopyBytes(device_->data(), host_->data(), Bytes(), spec_.gpu)
                    : CopyBytes(host_->data(), device_->data(), Bytes(), spec_.gpu);
    *end = NowNs();
    return s;
  }

  Status Save(uint64_t round, int64_t* start, int64_t* end) {
    const std::vector<uint32_t> tokens = Tokens(round);
    SaveRequest req;
    req.tokens = tokens;
    req.device_pages = src_;
    req.device_state_slot = src_state_;
    req.state_depth_tokens = src_state_ ? tokens.size() : 0;
    *start = NowNs();
    auto fence = store_->Save(req);
    Status s = fence.ok() ? fence->Wait() : fence.status();
    *end = NowNs();
    return s.WithContext("save of round " + std::to_string(round));
  }

  // A Load's untimed preparation: its destinations poisoned and the round's prompt looked up.
  // The owner sends "prep" to every rank and then "load", so that the ranks' timed Loads start
  // together rather than each after its own preparation (which also crosses the link).
  Status PrepareLoad(uint64_t round) {
    prepared_.reset();
    const std::vector<std::byte> poison(kv_bytes_, std::byte{kPoison});
    for (uint64_t slot : dst_) {
      CACHEPAWL_RETURN_IF_ERROR(store_->WriteDeviceRecord(Kind::kKV, slot, poison));
    }
    if (dst_state_) {
      CACHEPAWL_RETURN_IF_ERROR(store_->WriteDeviceRecord(
          Kind::kMamba, *dst_state_, std::vector<std::byte>(state_bytes_, std::byte{kPoison})));
    }
    const std::vector<PageHash> hashes = store_->HashTokens("", Tokens(round));
    CACHEPAWL_ASSIGN_OR_RETURN(PrefixMatch m, store_->LookupHashes(hashes));
    if (m.reusable_pages != spec_.pages) {
      return Status::NotFound("round " + std::to_string(round) + ": " +
                              std::to_string(m.reusable_pages) + " of " +
                              std::to_string(spec_.pages) + " pages reusable");
    }
    prepared_ = std::make_pair(round, std::move(m));
    return Status::OK();
  }

  Status Load(uint64_t round, int64_t* start, int64_t* end) {
    if (!prepared_ || prepared_->first != round) CACHEPAWL_RETURN_IF_ERROR(PrepareLoad(round));
    const PrefixMatch m = std::move(prepared_->second);
    prepared_.reset();
    *start = NowNs();
    auto fence = store_->Load(m, dst_, dst_state_);
    Status s = fence.ok() ? fence->Wait() : fence.status();
    *end = NowNs();
    return s.WithContext("load of round " + std::to_string(round));
  }

  StatusOr<uint64_t> Verify() {
    uint64_t wrong = 0;
    std::vector<std::byte> got(kv_bytes_);
    for (uint64_t i = 0; i < dst_.size(); ++i) {
      CACHEPAWL_RETURN_IF_ERROR(store_->ReadDeviceRecord(Kind::kKV, dst_[i], got));
      wrong += got != expected_[i];
    }
    if (dst_state_) {
      std::vector<std::byte> state(state_bytes_);
      CACHEPAWL_RETURN_IF_ERROR(store_->ReadDeviceRecord(Kind::kMamba, *dst_state_, state));
      wrong += state != expected_state_;
    }
    return wrong;
  }

 private:
  // Record i's bytes of `kind`: ranks holding the same share of it (MLA latents, replicated KV
  // heads: ModelLayout::TpShareOf) save the same bytes, as an engine's ranks do.
  uint64_t Seed(Kind kind, uint64_t i) const {
    const uint32_t share = store_->layout().TpShareOf(kind, spec_.rank);
    return spec_.seed * 0x9e3779b97f4a7c15ull ^ (uint64_t{share} << 48) ^ i;
  }
  // Round R's prompt: the same on every rank, another for every round.
  std::vector<uint32_t> Tokens(uint64_t round) const {
    const uint64_t n = spec_.pages * store_->layout().page_size_tokens;
    std::vector<uint32_t> t(n);
    for (uint64_t i = 0; i < n; ++i) {
      t[i] = static_cast<uint32_t>((spec_.seed * 1000003 + round) * 2654435761u + i);
    }
    return t;
  }

  const Spec spec_;
  std::unique_ptr<Store> store_;
  uint64_t kv_bytes_ = 0, state_bytes_ = 0;
  std::vector<uint64_t> src_, dst_;
  std::optional<uint64_t> src_state_, dst_state_;
  std::optional<std::pair<uint64_t, PrefixMatch>> prepared_;  // round and match of the next Load
  std::vector<std::vector<std::byte>> expected_;
  std::vector<std::byte> expected_state_;
  std::unique_ptr<Memory> host_, device_;
};

void Answer(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

int RunTpRank(const std::string& spec_text) {
  auto spec = ParseSpec(spec_text);
  if (!spec.ok()) {
    Answer("err " + spec.status().ToString());
    return 2;
  }
  std::unique_ptr<StallWatchdog> watchdog;
  if (spec->watchdog_seconds > 0) {
    watchdog = std::make_unique<StallWatchdog>(
        "cachepawl bench store --tp-rank-worker (rank " + std::to_string(spec->rank) + ")",
        spec->watchdog_seconds);
  }
  if (spec->profile) profile::SetEnabled(true);
  Rank rank(*spec);
  if (Status s = rank.Setup(); !s.ok()) {
    Answer("err " + s.ToString());
    return 1;
  }
  Progress("attached");
  Answer("ready " + std::to_string(rank.Bytes()));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string step, arg;
    in >> step >> arg;
    int64_t start = 0, end = 0;
    Status s;
    if (step == "quit") return 0;
    if (step == "limit") {
      s = rank.Limit(arg == "load", &start, &end);
    } else if (step == "prep") {
      s = rank.PrepareLoad(std::strtoull(arg.c_str(), nullptr, 10));
    } else if (step == "save" || step == "load") {
      const uint64_t round = std::strtoull(arg.c_str(), nullptr, 10);
      s = step == "save" ? rank.Save(round, &start, &end) : rank.Load(round, &start, &end);
    } else if (step == "stages") {
      const StagesPerOp st = TakeStages(std::strtoull(arg.c_str(), nullptr, 10));
      std::string line = "ok";
      for (const auto& [name, us] : st.us) line += " " + name + "=" + std::to_string(us);
      Answer(line);
      continue;
    } else if (step == "verify") {
      auto wrong = rank.Verify();
      Progress("verified");
      Answer(wrong.ok() ? "ok " + std::to_string(*wrong) : "err " + wrong.status().ToString());
      continue;
    } else {
      s = Status::InvalidArgument("step '" + line + "'");
    }
    Progress("step done");
    Answer(s.ok() ? "ok " + std::to_string(start) + " " + std::to_string(end)
                  : "err " + s.ToString());
  }
  return 0;  // the owner closed our stdin: it is done (or gone)
}

}  // namespace cachepawl::tools::bench_store
