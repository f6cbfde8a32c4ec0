#include "tools/replay/replay_tp.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "layouts/layout_tp.h"
#include "store/store.h"
#include "tools/human_bytes.h"
#include "tools/rank_processes.h"
#include "tools/replay/replay_content.h"
#include "tools/stall_watchdog.h"

namespace cachepawl::tools {
namespace {

// The contents of share `share` of a kind (ModelLayout::TpShareOf): ranks that hold the same
// share write the same bytes, as an engine's ranks do; share 0's are the replay's usual contents.
uint64_t ShareSeed(uint64_t seed, uint32_t share) {
  return seed ^ (uint64_t{share} * 0x9e3779b97f4a7c15ull);
}

// ---- The rank process ----

struct RankSpec {
  uint32_t rank = 0;
  uint64_t device_bytes = 0;
  uint32_t block_pages = 0;
  bool gpu = false;
  std::string socket;
};

// "rank,device_bytes,block_pages,gpu,socket" (the socket last).
StatusOr<RankSpec> ParseRankSpec(const std::string& text) {
  RankSpec s;
  std::istringstream in(text);
  char c[4] = {};
  int gpu = 0;
  in >> s.rank >> c[0] >> s.device_bytes >> c[1] >> s.block_pages >> c[2] >> gpu >> c[3];
  std::getline(in, s.socket);
  const bool bad = std::any_of(std::begin(c), std::end(c), [](char x) { return x != ','; });
  if (bad || s.block_pages == 0 || s.socket.empty()) {
    return Status::InvalidArgument("--tp-rank-worker: '" + text + "'");
  }
  s.gpu = gpu != 0;
  return s;
}

class ReplayRank {
 public:
  explicit ReplayRank(const RankSpec& spec) : spec_(spec) {}

  Status Attach() {
    CACHEPAWL_ASSIGN_OR_RETURN(
        store_,
        Store::Attach(RankAttachOptions(spec_.socket, spec_.rank, spec_.gpu, spec_.device_bytes)));
    return Status::OK();
  }

  // One request's first phase: `reuse` pages of `tokens` to load (the scheduler's depth). The
  // answer: "loaded DEPTH WRONG_BYTES LOADED_BYTES REFUSED" (REFUSED 1: the store had no host room
  // for the Load's disk hits, NoSpace; this rank recomputes the prefix, as the single-process
  // replay counts such a refusal as a miss).
  StatusOr<std::string> Load(const std::vector<uint32_t>& tokens, uint64_t reuse) {
    hashes_ = store_->HashTokens("", tokens);
    reuse_ = reuse;
    CACHEPAWL_ASSIGN_OR_RETURN(PrefixMatch m, store_->LookupHashes(hashes_));
    uint64_t wrong = 0, loaded = 0, refused = 0;
    Slots slots(store_.get());
    if (reuse > 0 && m.reusable_pages == reuse) {
      Status s = LoadPrefix(m, reuse, &slots, &wrong, &loaded);
      if (s.IsNoSpace()) {
        refused = 1;
      } else {
        CACHEPAWL_RETURN_IF_ERROR(s);
      }
    }
    std::ostringstream o;
    o << "loaded " << m.reusable_pages << " " << wrong << " " << loaded << " " << refused;
    return o.str();
  }

  // The second phase, once every rank has loaded (an engine's ranks run the forward pass
  // together: none saves a new page before all of them have their prefix): the pages after the
  // scheduler's depth are saved. The answer: "done SAVED_BYTES".
  StatusOr<std::string> SaveRest() {
    const ModelLayout& l = store_->layout();
    const std::vector<PageHash>& hashes = hashes_;
    const uint64_t reuse = reuse_;
    uint64_t saved = 0;
    Slots slots(store_.get());
    // Save the rest: a chunk of pages up to every block boundary (and the prompt's end), each
    // with the state at its end.
    const uint64_t n = hashes.size();
    std::vector<std::byte> record;
    for (uint64_t from = reuse; from < n;) {
      const uint64_t to = std::min<uint64_t>(n, (from / spec_.block_pages + 1) * spec_.block_pages);
      std::vector<uint64_t> pages;
      if (l.has_attention()) {
        record.resize(l.RecordBytes(Kind::kKV));
        for (uint64_t p = from; p < to; ++p) {
          CACHEPAWL_ASSIGN_OR_RETURN(uint64_t slot, slots.Take(Kind::kKV));
          FillContent(ShareSeed(PageContentSeed(hashes[p]), l.TpShareOf(Kind::kKV, spec_.rank)),
                      record);
          CACHEPAWL_RETURN_IF_ERROR(store_->WriteDeviceRecord(Kind::kKV, slot, record));
          pages.push_back(slot);
        }
      }
      SaveRequest req;
      req.hashes = std::span<const PageHash>(hashes).first(to);
      req.first_page = from;
      req.device_pages = pages;
      if (l.has_ssm()) {
        CACHEPAWL_ASSIGN_OR_RETURN(uint64_t state, slots.Take(Kind::kMamba));
        record.resize(l.RecordBytes(Kind::kMamba));
        FillContent(ShareSeed(StateContentSeed(hashes[to - 1], to * l.page_size_tokens),
                              l.TpShareOf(Kind::kMamba, spec_.rank)),
                    record);
        CACHEPAWL_RETURN_IF_ERROR(store_->WriteDeviceRecord(Kind::kMamba, state, record));
        req.device_state_slot = state;
        req.state_depth_tokens = to * l.page_size_tokens;
      }
      auto fence = store_->Save(req);
      Status s = fence.ok() ? fence->Wait() : fence.status();
      // A full host tier is the store's business (the pages are just not cached); anything else
      // is an error of the run.
      if (!s.ok() && !s.IsNoSpace()) return s.WithContext("save");
      if (s.ok())
        saved += pages.size() * l.RecordBytes(Kind::kKV) + (l.has_ssm() ? record.size() : 0);
      slots.FreeAll();
      from = to;
    }
    return "done " + std::to_string(saved);
  }

 private:
  // Device slots of one request, freed when it ends.
  class Slots {
   public:
    explicit Slots(Store* s) : store_(s) {}
    ~Slots() { FreeAll(); }
    StatusOr<uint64_t> Take(Kind k) {
      CACHEPAWL_ASSIGN_OR_RETURN(uint64_t slot, store_->AllocateDeviceSlot(k));
      held_.emplace_back(k, slot);
      return slot;
    }
    void FreeAll() {
      for (auto [k, slot] : held_) (void)store_->FreeDeviceSlot(k, slot);
      held_.clear();
    }

   private:
    Store* store_;
    std::vector<std::pair<Kind, uint64_t>> held_;
  };

  Status LoadPrefix(const PrefixMatch& m, uint64_t reuse, Slots* slots, uint64_t* wrong,
                    uint64_t* loaded) {
    const ModelLayout& l = store_->layout();
    std::vector<uint64_t> pages;
    std::vector<std::byte> poison;
    if (l.has_attention()) {
      poison.assign(l.RecordBytes(Kind::kKV), std::byte{0x5A});
      for (uint64_t p = 0; p < reuse; ++p) {
        CACHEPAWL_ASSIGN_OR_RETURN(uint64_t slot, slots->Take(Kind::kKV));
        CACHEPAWL_RETURN_IF_ERROR(store_->WriteDeviceRecord(Kind::kKV, slot, poison));
        pages.push_back(slot);
      }
    }
    std::optional<uint64_t> state;
    if (l.has_ssm()) {
      CACHEPAWL_ASSIGN_OR_RETURN(state, slots->Take(Kind::kMamba));
      CACHEPAWL_RETURN_IF_ERROR(store_->WriteDeviceRecord(
          Kind::kMamba, *state,
          std::vector<std::byte>(l.RecordBytes(Kind::kMamba), std::byte{0x5A})));
    }
    LoadOptions lo;
    lo.first_page = l.has_attention() ? 0 : reuse;
    auto fence = store_->Load(m, pages, state, lo);
    Status s = fence.ok() ? fence->Wait() : fence.status();
    if (!s.ok()) return s.WithContext("load");
    std::vector<std::byte> got(l.has_attention() ? l.RecordBytes(Kind::kKV) : 0);
    for (uint64_t p = 0; p < pages.size(); ++p) {
      CACHEPAWL_RETURN_IF_ERROR(store_->ReadDeviceRecord(Kind::kKV, pages[p], got));
      *wrong += CountWrongBytes(
          ShareSeed(PageContentSeed(m.hashes[p]), l.TpShareOf(Kind::kKV, spec_.rank)), got);
      *loaded += got.size();
    }
    if (state) {
      got.resize(l.RecordBytes(Kind::kMamba));
      CACHEPAWL_RETURN_IF_ERROR(store_->ReadDeviceRecord(Kind::kMamba, *state, got));
      *wrong += CountWrongBytes(
          ShareSeed(StateContentSeed(m.hashes[reuse - 1], reuse * l.page_size_tokens),
                    l.TpShareOf(Kind::kMamba, spec_.rank)),
          got);
      *loaded += got.size();
    }
    return Status::OK();
  }

  const RankSpec spec_;
  std::unique_ptr<Store> store_;
  std::vector<PageHash> hashes_;  // the request under way: its pages, and the scheduler's depth
  uint64_t reuse_ = 0;
};

// ---- The scheduler ----

struct Totals {
  uint64_t requests = 0, prompt_tokens = 0, reused_tokens = 0;
  uint64_t depth_mismatches = 0, wrong_bytes = 0, errors = 0;
  uint64_t loaded_bytes = 0, saved_bytes = 0;
  uint64_t refused = 0;  // rank Loads refused for host room (NoSpace): that rank recomputed
  uint64_t kills = 0, killed_requests = 0;
  std::vector<std::string> first_errors;
};

class Scheduler {
 public:
  Scheduler(const TpReplayRun& run, std::ostream& err) : run_(run), err_(err), rng_(run.seed) {}

  int Main(const RequestSource& source, std::ostream& out);

 private:
  Status StartRank(uint32_t r) {
    std::ostringstream spec;
    spec << r << "," << run_.device_bytes << "," << block_pages_ << "," << (run_.gpu ? 1 : 0) << ","
         << socket_;
    CACHEPAWL_RETURN_IF_ERROR(ranks_.Start(r, {run_.self, "replay", "--tp-rank-worker", spec.str()},
                                           run_.gpu ? GpuOfRank(r) : ""));
    CACHEPAWL_ASSIGN_OR_RETURN(std::string line, ranks_.Read(r, 600));
    if (line != "ready") return Status::Internal("rank " + std::to_string(r) + ": " + line);
    return Status::OK();
  }
  void Error(const std::string& what) {
    ++totals_.errors;
    if (totals_.first_errors.size() < 10) totals_.first_errors.push_back(what);
  }
  // Runs one request on every rank; false when the run must end (a rank stalled or could not
  // be started again).
  bool Request(uint64_t index, const std::vector<uint32_t>& tokens, Store* owner);
  // Rank r's answer to request `index`, after the word `want`; nullopt when it has none (the
  // rank was the `victim` killed, failed or stalled: an error is counted unless it was killed,
  // the rank is started again, and *go_on is cleared when that fails or it stalled).
  std::optional<std::istringstream> Answer(uint32_t r, uint64_t index, uint32_t victim,
                                           const std::string& want, bool* go_on);

  const TpReplayRun& run_;
  std::ostream& err_;
  RankProcesses ranks_;
  std::mt19937_64 rng_;
  std::string socket_;
  uint32_t block_pages_ = 1;
  Totals totals_;
  bool stalled_ = false;
};

std::optional<std::istringstream> Scheduler::Answer(uint32_t r, uint64_t index, uint32_t victim,
                                                    const std::string& want, bool* go_on) {
  auto line = r == victim ? StatusOr<std::string>(Status::Unavailable("killed"))
                          : ranks_.Read(r, run_.watchdog_seconds);
  if (!line.ok()) {
    if (line.status().IsTimedOut()) {
      stalled_ = true;
      err_ << "replay --tp-size: rank " << r << " (pid " << ranks_.pid(r)
           << ") did not answer request " << index << " within " << run_.watchdog_seconds
           << " s; its threads:\n"
           << DescribeThreadsOf(ranks_.pid(r));
      *go_on = false;
      return std::nullopt;
    }
    if (r != victim) Error("rank " + std::to_string(r) + ": " + line.status().ToString());
    if (Status s = StartRank(r); !s.ok()) {
      Error("rank " + std::to_string(r) + " could not start again: " + s.ToString());
      *go_on = false;
    }
    return std::nullopt;
  }
  std::istringstream in(*line);
  std::string word;
  in >> word;
  if (word != want) {
    Error("rank " + std::to_string(r) + ", request " + std::to_string(index) + ": " + *line);
    return std::nullopt;
  }
  return in;
}

bool Scheduler::Request(uint64_t index, const std::vector<uint32_t>& tokens, Store* owner) {
  const ModelLayout& l = owner->layout();
  const std::vector<PageHash> hashes = owner->HashTokens("", tokens);
  auto match = owner->LookupHashes(hashes);
  if (!match.ok()) {
    Error("request " + std::to_string(index) + ": lookup: " + match.status().ToString());
    return true;
  }
  const uint64_t reuse = match->reusable_pages;
  std::optional<PrefixLock> lock;
  if (reuse > 0) {
    auto locked = owner->Lock(*match, reuse);
    if (locked.ok()) lock = std::move(locked).value();
  }
  std::ostringstream msg;
  msg << "req " << reuse << " " << tokens.size() << "\n";
  for (size_t i = 0; i < tokens.size(); ++i) msg << (i ? " " : "") << tokens[i];
  const std::string text = msg.str();
  const bool kill = run_.kill_rank_every > 0 && rng_() % run_.kill_rank_every == 0;
  const uint32_t victim = kill ? static_cast<uint32_t>(rng_() % run_.tp_size) : run_.tp_size;
  const int kill_phase = kill ? static_cast<int>(rng_() % 2) : -1;  // while loading or saving
  // Phase 1: every rank looks up and loads the scheduler's depth. Phase 2, once all have
  // answered: the ranks that loaded save the rest.
  std::vector<bool> alive(run_.tp_size, true);
  bool go_on = true, killed = false;
  for (int phase = 0; phase < 2 && go_on; ++phase) {
    for (uint32_t r = 0; r < run_.tp_size; ++r) {
      if (!alive[r]) continue;
      if (Status s = ranks_.Send(r, phase == 0 ? text : "save"); !s.ok()) Error(s.ToString());
    }
    if (kill_phase == phase && alive[victim]) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng_() % 3000));
      ranks_.Kill(victim);
      ++totals_.kills;
      killed = true;
    }
    for (uint32_t r = 0; r < run_.tp_size; ++r) {
      if (!alive[r]) continue;
      auto answer = Answer(r, index, kill_phase == phase ? victim : run_.tp_size,
                           phase == 0 ? "loaded" : "done", &go_on);
      if (!answer) {
        alive[r] = false;
        continue;
      }
      uint64_t depth = 0, wrong = 0, loaded = 0, refused = 0, saved = 0;
      if (phase == 0) {
        *answer >> depth >> wrong >> loaded >> refused;
        if (depth != reuse) ++totals_.depth_mismatches;
        totals_.wrong_bytes += wrong;
        totals_.loaded_bytes += loaded;
        totals_.refused += refused;
      } else {
        *answer >> saved;
        totals_.saved_bytes += saved;
      }
    }
  }
  if (killed) ++totals_.killed_requests;
  if (lock) (void)owner->Unlock(*lock);
  ++totals_.requests;
  totals_.prompt_tokens += tokens.size();
  totals_.reused_tokens += reuse * l.page_size_tokens;
  Progress("tp request");
  return go_on;
}

int Scheduler::Main(const RequestSource& source, std::ostream& out) {
  auto rank0 = ShardLayout(run_.whole, run_.tp_size, 0);
  if (!rank0.ok()) {
    err_ << "replay --tp-size: " << rank0.status().ToString() << "\n";
    return 2;
  }
  block_pages_ = std::max<uint32_t>(1, run_.block_size_tokens / rank0->page_size_tokens);
  auto group = GroupLayout(*rank0);
  if (!group.ok()) {
    err_ << "replay --tp-size: " << group.status().ToString() << "\n";
    return 2;
  }
  StoreOptions o = run_.owner;
  o.layout = *rank0;
  o.layout_name.clear();
  o.cuda_device = -1;  // the ranks copy; the owner moves nothing to a GPU
  o.device_pool_bytes = 0;
  char tmpl[] = "/tmp/cachepawl-replay-tp-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    err_ << "replay --tp-size: mkdtemp: " << std::strerror(errno) << "\n";
    return 1;
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{tmpl};
  socket_ = cleanup.dir + "/owner.sock";
  ServeOptions so;
  so.socket_path = socket_;
  so.dead_client_grace_ms = 2000;
  auto owner = Store::Serve(o, so);
  if (!owner.ok()) {
    err_ << "replay --tp-size: " << owner.status().ToString() << "\n";
    return owner.status().IsInvalidArgument() ? 2 : 1;
  }
  for (uint32_t r = 0; r < run_.tp_size; ++r) {
    if (Status s = StartRank(r); !s.ok()) {
      err_ << "replay --tp-size: rank " << r << ": " << s.ToString() << "\n";
      return 1;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<TraceRequest> requests = source(0);
  std::vector<uint32_t> tokens;
  uint64_t index = 0;
  for (const TraceRequest& req : requests) {
    tokens.clear();
    AppendPromptTokens(req, run_.block_size_tokens, &tokens);
    tokens.resize(tokens.size() / rank0->page_size_tokens * rank0->page_size_tokens);
    if (tokens.empty()) continue;
    if (!Request(index++, tokens, owner->get())) break;
  }
  for (uint32_t r = 0; r < run_.tp_size; ++r) (void)ranks_.Send(r, "quit");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const StoreStats st = (*owner)->Stats();
  const Totals& t = totals_;
  out << "cachepawl replay --tp-size " << run_.tp_size << ": " << run_.source_name << ", layout '"
      << run_.whole.model << "' (" << run_.tp_size << " ranks of "
      << HumanBytes(rank0->has_attention() ? rank0->RecordBytes(Kind::kKV) : 0)
      << " KV a page each; a group record "
      << HumanBytes(group->has_attention() ? group->RecordBytes(Kind::kKV) : 0) << ", "
      << (rank0->has_attention() ? rank0->TpShares(Kind::kKV) : 0) << " of the " << run_.tp_size
      << " ranks' KV distinct), host tier " << HumanBytes(o.host_bytes) << ", disk tier "
      << HumanBytes(o.disk_bytes) << (run_.gpu ? ", rank r on the r-th visible GPU" : ", CPU mode")
      << "\n";
  out << "requests " << t.requests << " in " << std::fixed << std::setprecision(1) << seconds
      << " s; prompt tokens " << t.prompt_tokens << ", reused " << t.reused_tokens << " (hit rate "
      << std::setprecision(4)
      << (t.prompt_tokens ? static_cast<double>(t.reused_tokens) / t.prompt_tokens : 0.0) << ")\n";
  out << "every rank's depth equal to the scheduler's: " << (t.depth_mismatches == 0 ? "yes" : "NO")
      << " (" << t.depth_mismatches << " mismatches)\n";
  out << "loaded " << HumanBytes(t.loaded_bytes)
      << " (all ranks, every byte compared), given to Save " << HumanBytes(t.saved_bytes)
      << " (refreshes included); wrong bytes: " << t.wrong_bytes << "; errors: " << t.errors
      << "\n";
  out << "rank Loads refused for host room (NoSpace; that rank recomputed): " << t.refused << "\n";
  out << "rank processes killed: " << t.kills << "; partial entries now " << st.tp_partial_entries
      << ", dropped " << st.tp_partials_dropped << "\n";
  for (const std::string& e : t.first_errors) err_ << "replay --tp-size: error: " << e << "\n";
  if (stalled_) return kExitStalled;
  const bool ok = t.requests > 0 && t.depth_mismatches == 0 && t.wrong_bytes == 0 &&
                  (t.errors == 0 || (run_.kill_rank_every > 0 && t.errors <= t.kills));
  return ok ? 0 : 1;
}

}  // namespace

int RunTpReplay(const TpReplayRun& run, const RequestSource& source, std::ostream& out,
                std::ostream& err) {
  Scheduler s(run, err);
  return s.Main(source, out);
}

int RunTpReplayRank(const std::string& spec_text) {
  auto spec = ParseRankSpec(spec_text);
  if (!spec.ok()) {
    std::cout << "err " << spec.status().ToString() << std::endl;
    return 2;
  }
  ReplayRank rank(*spec);
  if (Status s = rank.Attach(); !s.ok()) {
    std::cout << "err " << s.ToString() << std::endl;
    return 1;
  }
  std::cout << "ready" << std::endl;
  std::string header, body;
  while (std::getline(std::cin, header)) {
    if (header == "quit") return 0;
    std::istringstream h(header);
    std::string word;
    uint64_t reuse = 0, n = 0;
    h >> word >> reuse >> n;
    if (word != "req" || !std::getline(std::cin, body)) {
      std::cout << "err request '" << header << "'" << std::endl;
      return 2;
    }
    std::vector<uint32_t> tokens;
    tokens.reserve(n);
    std::istringstream b(body);
    for (uint32_t t; b >> t;) tokens.push_back(t);
    auto answer = tokens.size() == n ? rank.Load(tokens, reuse)
                                     : StatusOr<std::string>(Status::InvalidArgument(
                                           "request of " + std::to_string(n) + " tokens, " +
                                           std::to_string(tokens.size()) + " came"));
    std::cout << (answer.ok() ? *answer : "err " + answer.status().ToString()) << std::endl;
    if (!answer.ok()) continue;
    std::string go;
    if (!std::getline(std::cin, go)) return 0;
    if (go != "save") {
      std::cout << "err expected 'save', got '" << go << "'" << std::endl;
      return 2;
    }
    auto saved = rank.SaveRest();
    std::cout << (saved.ok() ? *saved : "err " + saved.status().ToString()) << std::endl;
  }
  return 0;
}

}  // namespace cachepawl::tools
