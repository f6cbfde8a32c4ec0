// Request traces for `cachepawl replay`: the Mooncake JSONL format, one request per line.
//
//   {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, ...]}
//
// `timestamp` is the arrival time in milliseconds, `input_length` / `output_length` the prompt
// and generated token counts, and `hash_ids` one id per block of `block_size` prompt tokens
// (512 in the Mooncake traces): equal ids mean equal block content. Other keys are ignored.
// Blank lines are skipped. Anything else that is not such an object is a bad line: parsing
// stops with InvalidArgument naming the source, the 1-based line number and the field at fault,
// or, with `skip_bad_lines`, the line is counted, its error kept, and parsing goes on.
//
// Thread safety: plain values and free functions.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "vocab/status.h"

namespace cachepawl::tools {

// One request: also what the built-in workload generators produce (replay_workloads.h).
struct TraceRequest {
  double timestamp_ms = 0;
  uint64_t input_length = 0;
  uint64_t output_length = 0;
  std::vector<uint64_t> hash_ids;

  friend bool operator==(const TraceRequest&, const TraceRequest&) = default;
};

struct TraceParseOptions {
  bool skip_bad_lines = false;
  size_t max_requests = 0;      // stop after this many requests (0: no limit)
  size_t max_kept_errors = 10;  // with skip_bad_lines: how many error messages to keep
  // With both set: a request whose prompt (PromptTokenCount at block_size_tokens) is longer than
  // max_prompt_tokens is a bad line naming hash_ids, the tokens and --max-prompt-tokens.
  uint32_t block_size_tokens = 0;
  uint64_t max_prompt_tokens = 0;
};

struct Trace {
  std::vector<TraceRequest> requests;
  uint64_t lines = 0;               // lines read, blank and bad ones included
  uint64_t bad_lines = 0;           // lines skipped (skip_bad_lines only)
  std::vector<std::string> errors;  // the first max_kept_errors bad-line messages
};

// Parses one line (without its newline). InvalidArgument "line N: ..." naming the field and
// value at fault, e.g. "line 7: hash_ids[3]: -1 (expected an unsigned integer)".
StatusOr<TraceRequest> ParseTraceLine(std::string_view line, uint64_t line_number);

// Parses a whole trace; errors are prefixed with `source_name` ("trace.jsonl: line 7: ...").
StatusOr<Trace> ParseTrace(std::istream& in, std::string_view source_name,
                           const TraceParseOptions& options = {});

// Opens and parses a file; NotFound / IOError naming the path when it cannot be read.
StatusOr<Trace> LoadTraceFile(const std::string& path, const TraceParseOptions& options = {});

// The prompt length a replay uses for `request` with blocks of `block_size_tokens`: all its
// blocks, the last one cut at input_length when input_length falls inside it. When
// input_length does not fall inside the last block (a trace recorded with another block size),
// every block is taken whole. `block_size_tokens` must be > 0.
uint64_t PromptTokenCount(const TraceRequest& request, uint32_t block_size_tokens);

// Checks a block size / page size pair: both > 0 and the block size a multiple of the page
// size (so every page lies inside one block). InvalidArgument naming the flag otherwise.
Status ValidateBlockAndPageSize(uint32_t block_size_tokens, uint32_t page_size_tokens);

}  // namespace cachepawl::tools
