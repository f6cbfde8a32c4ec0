// `cachepawl bench store --tp-size N`: one tensor-parallel group's store, its N ranks in N
// processes, each moving its own shares on its own GPU at once, as SGLang's and vLLM's rank
// processes do. This process is the owner (Store::Serve of rank 0's layout, no GPU of its own);
// it starts N rank processes (this program again: `bench store --tp-rank-worker SPEC`), each
// attached as its rank (Store::Attach with AttachOptions::tp_rank) on GPU r (CUDA_VISIBLE_DEVICES
// set to the r-th of those visible here, modulo their number).
//
// A round, every rank at once at each step (the owner tells them over their stdin, they answer
// with their start and end on CLOCK_MONOTONIC): the limit (one contiguous copy of the rank's
// request bytes between pinned host memory and its GPU, each way), a Save of a new prompt's
// pages and state from the rank's own device slots (the entry becomes a hit once all have
// saved), a Load of the same prompt into poisoned slots, and the check of every loaded byte
// against what that rank saved (outside the timing). Aggregate GB/s: all ranks' bytes over the
// span from the first start to the last end; the limit's the same for N contiguous copies at once
// (the node's limit). The limit of rank 0 alone is measured too (N = 1's).
//
// Thread safety: the functions run on the calling thread (a command's).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "vocab/model_layout.h"

namespace cachepawl::tools::bench_store {

struct TpBenchConfig {
  std::string layout_name;
  ModelLayout whole;  // the model's layout; each rank's is ShardLayout(whole, tp_size, r)
  uint32_t tp_size = 2;
  uint64_t pages = 2048;      // per request
  int iters = 5;              // timed rounds (after one warm-up)
  uint64_t host_bytes = 0;    // the owner's host tier
  uint64_t device_bytes = 0;  // each rank's device pool
  bool gpu = false;
  std::string self;  // this program, started again for each rank
  std::string dir;   // a folder for the owner's socket
  uint64_t seed = 1;
  double watchdog_seconds = 300;  // a rank silent this long on a step: the run ends (exit 3)
  // Time the stages (vocab/internal/stage_profile.h) of rank 0's timed Loads alone: the owner's
  // (this process) and rank 0's (its client side), per Load.
  bool profile_stages = false;
  uint32_t load_split_pages = 256;  // the ranks' AttachOptions::load_split_pages
};

// Runs the bench and prints its table to `out` (progress and errors to `err`). Returns the
// exit code: 0, 1 (an error or a wrong byte), 3 (a rank stalled: what it waits on is printed).
int RunTpBench(const TpBenchConfig& c, std::ostream& out, std::ostream& err);

// The rank process's body (`--tp-rank-worker SPEC`, SPEC from RunTpBench). Returns its exit code.
int RunTpRank(const std::string& spec);

}  // namespace cachepawl::tools::bench_store
