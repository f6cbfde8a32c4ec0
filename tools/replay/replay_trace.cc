#include "tools/replay/replay_trace.h"

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <string>

#include "vocab/internal/json_text.h"

namespace cachepawl::tools {
namespace {

using nlohmann::json;

std::string LinePrefix(uint64_t line_number) { return "line " + std::to_string(line_number); }

// A short rendering of a JSON value for error messages.
std::string Shown(const json& value) {
  std::string s = value.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

Status BadField(uint64_t line_number, const std::string& field, const json& value,
                std::string_view expected) {
  return Status::InvalidArgument(LinePrefix(line_number) + ": " + field + ": " + Shown(value) +
                                 " (expected " + std::string(expected) + ")");
}

StatusOr<uint64_t> UnsignedField(const json& object, const char* key, uint64_t line_number) {
  auto it = object.find(key);
  if (it == object.end()) {
    return Status::InvalidArgument(LinePrefix(line_number) + ": missing field '" + key + "'");
  }
  if (!it->is_number_unsigned()) {
    return BadField(line_number, key, *it, "an unsigned integer");
  }
  return it->get<uint64_t>();
}

}  // namespace

StatusOr<TraceRequest> ParseTraceLine(std::string_view line, uint64_t line_number) {
  if (const size_t deep = json_text::FindTooDeep(line, json_text::kMaxJsonDepth);
      deep != std::string_view::npos) {
    return Status::InvalidArgument(LinePrefix(line_number) + ", column " +
                                   std::to_string(deep + 1) + ": " +
                                   json_text::TooDeepMessage(json_text::kMaxJsonDepth));
  }
  json object;
  try {
    object = json::parse(line.begin(), line.end());
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based offset where parsing failed.
    return Status::InvalidArgument(LinePrefix(line_number) + ", column " + std::to_string(e.byte) +
                                   ": not valid JSON");
  } catch (const json::exception& e) {
    // The parser's other errors: a number beyond a double's range ("1e400", out_of_range.406).
    return Status::InvalidArgument(LinePrefix(line_number) + ": not valid JSON (" + e.what() + ")");
  }
  if (!object.is_object()) {
    return Status::InvalidArgument(LinePrefix(line_number) + ": " + Shown(object) +
                                   " (expected a JSON object)");
  }
  TraceRequest request;
  auto ts = object.find("timestamp");
  if (ts == object.end()) {
    return Status::InvalidArgument(LinePrefix(line_number) + ": missing field 'timestamp'");
  }
  if (!ts->is_number() || !std::isfinite(ts->get<double>()) || ts->get<double>() < 0) {
    return BadField(line_number, "timestamp", *ts, "a non-negative number of milliseconds");
  }
  request.timestamp_ms = ts->get<double>();
  CACHEPAWL_ASSIGN_OR_RETURN(request.input_length,
                             UnsignedField(object, "input_length", line_number));
  CACHEPAWL_ASSIGN_OR_RETURN(request.output_length,
                             UnsignedField(object, "output_length", line_number));
  auto ids = object.find("hash_ids");
  if (ids == object.end()) {
    return Status::InvalidArgument(LinePrefix(line_number) + ": missing field 'hash_ids'");
  }
  if (!ids->is_array()) return BadField(line_number, "hash_ids", *ids, "an array of block ids");
  request.hash_ids.reserve(ids->size());
  for (size_t i = 0; i < ids->size(); ++i) {
    const json& id = (*ids)[i];
    if (!id.is_number_unsigned()) {
      return BadField(line_number, "hash_ids[" + std::to_string(i) + "]", id,
                      "an unsigned integer");
    }
    request.hash_ids.push_back(id.get<uint64_t>());
  }
  if (request.hash_ids.empty() != (request.input_length == 0)) {
    return Status::InvalidArgument(LinePrefix(line_number) +
                                   ": input_length: " + std::to_string(request.input_length) +
                                   " with " + std::to_string(request.hash_ids.size()) +
                                   " hash_ids (a prompt has tokens exactly when it has blocks)");
  }
  return request;
}

StatusOr<Trace> ParseTrace(std::istream& in, std::string_view source_name,
                           const TraceParseOptions& options) {
  Trace trace;
  std::string line;
  while (std::getline(in, line)) {
    ++trace.lines;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    auto request = ParseTraceLine(line, trace.lines);
    if (request.ok() && options.block_size_tokens > 0 && options.max_prompt_tokens > 0) {
      const uint64_t tokens = PromptTokenCount(*request, options.block_size_tokens);
      if (tokens > options.max_prompt_tokens) {
        request = Status::InvalidArgument(
            "line " + std::to_string(trace.lines) +
            ": hash_ids: " + std::to_string(request->hash_ids.size()) + " blocks of " +
            std::to_string(options.block_size_tokens) + " tokens, a prompt of " +
            std::to_string(tokens) + " tokens (more than --max-prompt-tokens " +
            std::to_string(options.max_prompt_tokens) + ")");
      }
    }
    if (!request.ok()) {
      Status error = request.status().WithContext(source_name);
      if (!options.skip_bad_lines) return error;
      ++trace.bad_lines;
      if (trace.errors.size() < options.max_kept_errors) trace.errors.push_back(error.message());
      continue;
    }
    trace.requests.push_back(std::move(request).value());
    if (options.max_requests != 0 && trace.requests.size() >= options.max_requests) break;
  }
  if (in.bad()) {
    return Status::IOError(std::string(source_name) + ": read failed after line " +
                           std::to_string(trace.lines));
  }
  return trace;
}

StatusOr<Trace> LoadTraceFile(const std::string& path, const TraceParseOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument("trace file '" + path + "': is a directory");
  }
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("trace file '" + path + "': no such file");
    return Status::FromErrno("trace file '" + path + "'", err);
  }
  return ParseTrace(in, path, options);
}

uint64_t PromptTokenCount(const TraceRequest& request, uint32_t block_size_tokens) {
  const uint64_t blocks = request.hash_ids.size();
  if (blocks == 0) return 0;
  const uint64_t whole = blocks * block_size_tokens;
  const uint64_t before_last = whole - block_size_tokens;
  if (request.input_length > before_last && request.input_length <= whole) {
    return request.input_length;
  }
  return whole;
}

Status ValidateBlockAndPageSize(uint32_t block_size_tokens, uint32_t page_size_tokens) {
  if (block_size_tokens == 0) return Status::InvalidArgument("--block-size: 0 (must be > 0)");
  if (page_size_tokens == 0) return Status::InvalidArgument("--page-size: 0 (must be > 0)");
  if (block_size_tokens % page_size_tokens != 0) {
    return Status::InvalidArgument("--block-size: " + std::to_string(block_size_tokens) +
                                   " (must be a multiple of " + "--page-size " +
                                   std::to_string(page_size_tokens) + ")");
  }
  return Status::OK();
}

}  // namespace cachepawl::tools
