// Built-in workloads for `cachepawl replay --workload NAME`: seeded generators producing the
// same request structure as a Mooncake trace (replay_trace.h): arrival times, prompt and output
// lengths, and one block id per `block_size_tokens` prompt tokens, where equal ids mean equal
// content after an equal prefix. Sharing is explicit:
//
//   chat           multi-turn conversations: each turn re-sends the conversation so far (the
//                  previous answer and a new user message appended), sessions interleaved
//   system-prompt  a few long system prompts (skewed popularity) shared by many users, each
//                  adding a short question
//   agent          agent loops: a shared tool-definition prefix, then steps that each re-send
//                  the whole growing context with the last action and tool result appended
//   few-shot       tasks whose instruction and examples are shared by every query of the task
//   mixed          the four above interleaved by arrival time
//
// Same name, options and seed: the same requests, on every platform (no std distributions).
// Arrivals are Poisson at `requests_per_second`.
//
// Thread safety: free functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tools/replay/replay_trace.h"
#include "vocab/status.h"

namespace cachepawl::tools {

struct WorkloadOptions {
  uint64_t seed = 1;
  size_t requests = 0;  // 0: the workload's default count
  uint32_t block_size_tokens = 512;
  double requests_per_second = 5.0;  // arrival rate for the timestamps
};

struct WorkloadInfo {
  std::string name;
  std::string description;
  size_t default_requests = 0;
};

// Every built-in workload, in the order above.
const std::vector<WorkloadInfo>& Workloads();

// The requests of workload `name`. NotFound naming the workload (and listing the known ones);
// InvalidArgument naming the field for a zero block size or a non-positive rate.
StatusOr<std::vector<TraceRequest>> GenerateWorkload(std::string_view name,
                                                     const WorkloadOptions& options);

}  // namespace cachepawl::tools
