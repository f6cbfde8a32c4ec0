#include "tools/replay/replay_workloads.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "tools/replay/replay_rng.h"

namespace cachepawl::tools {
namespace {

using Rng = SplitMix64;

// Hands out block ids; each generator of `mixed` gets its own range.
class IdSource {
 public:
  explicit IdSource(uint64_t first) : next_(first) {}
  uint64_t Next() { return next_++; }

 private:
  uint64_t next_;
};

// A prompt under construction: its blocks and token count. The last block may be partial; a
// context appends into its own partial block (same id: the block's content simply continues),
// but a forked copy that shares a partial block gets a fresh id for it on its first append,
// since its content diverges there.
class Context {
 public:
  Context(uint32_t block_size, IdSource* ids) : block_size_(block_size), ids_(ids) {}

  void Append(uint64_t tokens) {
    if (tokens == 0) return;
    const uint64_t used = tokens_ % block_size_;
    if (used != 0 && !owns_last_) blocks_.back() = ids_->Next();
    owns_last_ = true;
    uint64_t room = used == 0 ? 0 : block_size_ - used;
    const uint64_t into_last = std::min(room, tokens);
    tokens_ += into_last;
    tokens -= into_last;
    while (tokens > 0) {
      blocks_.push_back(ids_->Next());
      const uint64_t n = std::min<uint64_t>(tokens, block_size_);
      tokens_ += n;
      tokens -= n;
    }
  }

  Context Fork() const {
    Context c = *this;
    c.owns_last_ = false;
    return c;
  }

  uint64_t tokens() const { return tokens_; }

  TraceRequest Request(double timestamp_ms, uint64_t output_length) const {
    return TraceRequest{timestamp_ms, tokens_, output_length, blocks_};
  }

 private:
  uint32_t block_size_;
  IdSource* ids_;
  std::vector<uint64_t> blocks_;
  uint64_t tokens_ = 0;
  bool owns_last_ = true;
};

// Poisson arrivals.
class Clock {
 public:
  Clock(Rng* rng, double per_second) : rng_(rng), mean_gap_ms_(1000.0 / per_second) {}
  double Next() {
    now_ms_ += -std::log(1.0 - rng_->Unit()) * mean_gap_ms_;
    return std::round(now_ms_ * 1000.0) / 1000.0;
  }

 private:
  Rng* rng_;
  double mean_gap_ms_;
  double now_ms_ = 0;
};

struct Env {
  Rng rng;
  IdSource ids;
  Clock clock;
  uint32_t block_size;
};

std::vector<TraceRequest> Chat(Env& env, size_t n) {
  struct Session {
    Context context;
    uint64_t turns_left;
    uint64_t last_output;
  };
  auto new_session = [&] {
    Session s{Context(env.block_size, &env.ids), env.rng.Between(2, 8), 0};
    s.context.Append(env.rng.Between(200, 1500));  // first user message
    return s;
  };
  std::vector<Session> active;
  for (int i = 0; i < 16; ++i) active.push_back(new_session());
  std::vector<TraceRequest> out;
  while (out.size() < n) {
    Session& s = active[env.rng.Between(0, active.size() - 1)];
    if (s.last_output != 0) {
      s.context.Append(s.last_output);             // the previous answer
      s.context.Append(env.rng.Between(50, 800));  // the next user message
    }
    s.last_output = env.rng.Between(100, 600);
    out.push_back(s.context.Request(env.clock.Next(), s.last_output));
    if (--s.turns_left == 0) s = new_session();
  }
  return out;
}

std::vector<TraceRequest> SystemPrompt(Env& env, size_t n) {
  std::vector<Context> prompts;
  const std::vector<double> popularity = {6, 3, 1};
  for (size_t i = 0; i < popularity.size(); ++i) {
    prompts.emplace_back(env.block_size, &env.ids);
    prompts.back().Append(env.rng.Between(1500, 4000));
  }
  std::vector<TraceRequest> out;
  while (out.size() < n) {
    Context user = prompts[env.rng.Weighted(popularity)].Fork();
    user.Append(env.rng.Between(30, 400));
    // Output length before arrival time: both draw from env.rng, and as two arguments of one call
    // their order was unspecified (GCC drew the output first, Clang the time; the goldens of
    // tests/tools were recorded with GCC).
    const uint64_t output = env.rng.Between(50, 500);
    out.push_back(user.Request(env.clock.Next(), output));
  }
  return out;
}

std::vector<TraceRequest> Agent(Env& env, size_t n) {
  Context tools(env.block_size, &env.ids);
  tools.Append(3000);  // tool definitions and instructions, shared by every agent
  struct Session {
    Context context;
    uint64_t steps_left;
    uint64_t last_output;
  };
  auto new_session = [&] {
    Session s{tools.Fork(), env.rng.Between(4, 20), 0};
    s.context.Append(env.rng.Between(100, 600));  // the task
    return s;
  };
  std::vector<Session> active;
  for (int i = 0; i < 8; ++i) active.push_back(new_session());
  std::vector<TraceRequest> out;
  while (out.size() < n) {
    Session& s = active[env.rng.Between(0, active.size() - 1)];
    if (s.last_output != 0) {
      s.context.Append(s.last_output);               // the action the model chose
      s.context.Append(env.rng.Between(200, 2500));  // the tool's result
    }
    s.last_output = env.rng.Between(50, 300);
    out.push_back(s.context.Request(env.clock.Next(), s.last_output));
    if (--s.steps_left == 0 || s.context.tokens() > 24000) s = new_session();
  }
  return out;
}

std::vector<TraceRequest> FewShot(Env& env, size_t n) {
  std::vector<Context> tasks;
  std::vector<double> popularity;
  for (int i = 0; i < 6; ++i) {
    tasks.emplace_back(env.block_size, &env.ids);
    tasks.back().Append(env.rng.Between(1000, 3000));  // instruction + examples
    popularity.push_back(1.0 / (i + 1));
  }
  std::vector<TraceRequest> out;
  while (out.size() < n) {
    Context query = tasks[env.rng.Weighted(popularity)].Fork();
    query.Append(env.rng.Between(50, 300));
    const uint64_t output = env.rng.Between(10, 200);  // before the time: see SystemPrompt()
    out.push_back(query.Request(env.clock.Next(), output));
  }
  return out;
}

using Generator = std::vector<TraceRequest> (*)(Env&, size_t);

struct Entry {
  WorkloadInfo info;
  Generator generate;  // nullptr for `mixed`
};

const std::vector<Entry>& Entries() {
  static const auto* entries = new std::vector<Entry>{
      {{"chat", "multi-turn chat: sessions re-send the conversation each turn", 300}, &Chat},
      {{"system-prompt", "3 long system prompts shared by many users' short questions", 400},
       &SystemPrompt},
      {{"agent", "agent loops re-sending a growing context (shared tool prefix)", 200}, &Agent},
      {{"few-shot", "6 tasks whose examples are shared by every query of the task", 400}, &FewShot},
      {{"mixed", "the four above interleaved by arrival time", 400}, nullptr},
  };
  return *entries;
}

}  // namespace

const std::vector<WorkloadInfo>& Workloads() {
  static const auto* infos = [] {
    auto* v = new std::vector<WorkloadInfo>();
    for (const Entry& e : Entries()) v->push_back(e.info);
    return v;
  }();
  return *infos;
}

StatusOr<std::vector<TraceRequest>> GenerateWorkload(std::string_view name,
                                                     const WorkloadOptions& options) {
  if (options.block_size_tokens == 0) {
    return Status::InvalidArgument("--block-size: 0 (must be > 0)");
  }
  if (!(options.requests_per_second > 0) || !std::isfinite(options.requests_per_second)) {
    return Status::InvalidArgument(
        "requests_per_second: " + std::to_string(options.requests_per_second) +
        " (must be a positive number)");
  }
  const auto& entries = Entries();
  auto it = std::find_if(entries.begin(), entries.end(),
                         [&](const Entry& e) { return e.info.name == name; });
  if (it == entries.end()) {
    std::string known;
    for (const Entry& e : entries) known += (known.empty() ? "" : ", ") + e.info.name;
    return Status::NotFound("workload '" + std::string(name) + "' is not known (known: " + known +
                            ")");
  }
  const size_t n = options.requests != 0 ? options.requests : it->info.default_requests;
  if (it->generate != nullptr) {
    Env env{Rng(options.seed), IdSource(0), Clock(&env.rng, options.requests_per_second),
            options.block_size_tokens};
    return it->generate(env, n);
  }
  // mixed: each generator at a quarter of the rate, its own seed and id range, merged by time.
  std::vector<TraceRequest> all;
  const size_t parts = entries.size() - 1;
  for (size_t g = 0; g < parts; ++g) {
    Rng seeder(options.seed ^ (0xA5A5A5A5ull * (g + 1)));
    const size_t share = n / parts + (g < n % parts ? 1 : 0);
    Env env{Rng(seeder.Next()), IdSource(uint64_t{g} << 48),
            Clock(&env.rng, options.requests_per_second / static_cast<double>(parts)),
            options.block_size_tokens};
    auto part = entries[g].generate(env, share);
    all.insert(all.end(), part.begin(), part.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const TraceRequest& a, const TraceRequest& b) {
    return a.timestamp_ms < b.timestamp_ms;
  });
  return all;
}

}  // namespace cachepawl::tools
