// Fuzz target: request traces (tools/replay/replay_trace.h), the JSONL lines `cachepawl replay
// TRACE` reads.
//
// Input: one options byte, then the text: first as one line (ParseTraceLine), then as a whole
// trace (ParseTrace, with or without skip_bad_lines and a request limit). Properties: no crash,
// no exception; a request that parses has blocks exactly when it has prompt tokens, its prompt
// length under any block size lies within its blocks; ParseTrace keeps no more errors than asked
// and counts every line.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include "tools/replay/replay_trace.h"

namespace cachepawl::fuzz {
namespace {

void CheckRequest(const tools::TraceRequest& r, uint32_t block_size) {
  Check(r.hash_ids.empty() == (r.input_length == 0), "a prompt with tokens but no blocks");
  const uint64_t prompt = tools::PromptTokenCount(r, block_size);
  const uint64_t blocks = r.hash_ids.size();
  Check(prompt <= blocks * block_size && (blocks == 0 || prompt > (blocks - 1) * block_size),
        "PromptTokenCount outside the request's blocks");
}

}  // namespace
}  // namespace cachepawl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachepawl;  // NOLINT(google-build-using-namespace)
  fuzz::FuzzInput in(data, size);
  const uint8_t choice = in.Byte();
  const uint32_t block_size = (choice & 1) != 0 ? 16 : 512;
  const std::string text(in.Rest());

  auto line = tools::ParseTraceLine(text, 1);
  if (line.ok()) {
    fuzz::CheckRequest(*line, block_size);
  } else {
    fuzz::Check(line.status().IsInvalidArgument(), "a bad line that is not InvalidArgument");
  }

  tools::TraceParseOptions options;
  options.skip_bad_lines = (choice & 2) != 0;
  options.max_requests = (choice >> 2) & 3;
  options.max_kept_errors = (choice >> 4) & 3;
  std::istringstream stream(text);
  auto trace = tools::ParseTrace(stream, "fuzz.jsonl", options);
  if (!trace.ok()) {
    fuzz::Check(!options.skip_bad_lines, "ParseTrace failed with skip_bad_lines");
    return 0;
  }
  fuzz::Check(trace->errors.size() <= options.max_kept_errors, "more errors kept than asked");
  fuzz::Check(trace->requests.size() + trace->bad_lines <= trace->lines, "lines not counted");
  fuzz::Check(options.max_requests == 0 || trace->requests.size() <= options.max_requests,
              "more requests than max_requests");
  for (const tools::TraceRequest& r : trace->requests) fuzz::CheckRequest(r, block_size);
  return 0;
}
