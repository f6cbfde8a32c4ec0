// `cachepawl replay ... --tp-size N`: the replay of a tensor-parallel deployment. One group's
// store (Store::Serve of rank 0's layout, in this process) and N rank processes (this program
// again, `replay --tp-rank-worker SPEC`, attached as rank r; in GPU mode on the r-th visible
// GPU). This process is the scheduler, as in vLLM and SGLang: for each request it looks the
// prompt up once, locks the reusable prefix and tells every rank the prompt and the depth to
// reuse; each rank looks the prompt up itself (its depth must equal the scheduler's: one index,
// one answer), loads its shares of the prefix into poisoned slots and checks every byte, then
// saves its shares of the rest (a page chunk and the state at every block boundary, contents by
// page hash and rank). The next request starts once every rank answered.
//
// With `kill_rank_every` K, a random rank process is SIGKILLed during about every K-th request
// and started again: the entries it had not saved stay partial (never a hit: a rank that loaded
// another rank's missing share would find wrong bytes), and the other ranks serve on.
//
// Thread safety: called once, from the command's thread.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "tools/replay/replay_runner.h"
#include "vocab/store_options.h"

namespace cachepawl::tools {

struct TpReplayRun {
  uint32_t tp_size = 2;
  ModelLayout whole;   // the model's layout (StoreOptions::layout is set from it)
  StoreOptions owner;  // the store the owner serves (host, disk, policies)
  uint32_t block_size_tokens = 512;
  uint64_t device_bytes = 0;  // each rank's device pool
  bool gpu = false;
  std::string self;  // this program
  std::string source_name;
  uint64_t seed = 1;
  uint64_t kill_rank_every = 0;   // 0: no kills
  double watchdog_seconds = 300;  // a rank silent this long on a request ends the run
};

// Returns 0 when every rank's depth matched the scheduler's on every request, no byte was wrong
// and no call failed; 1 otherwise; 2 for a request source or layout that cannot run; 3 when a
// rank stalled (its threads are printed).
int RunTpReplay(const TpReplayRun& run, const RequestSource& source, std::ostream& out,
                std::ostream& err);

// The rank process's body (`replay --tp-rank-worker SPEC`). Returns its exit code.
int RunTpReplayRank(const std::string& spec);

}  // namespace cachepawl::tools
