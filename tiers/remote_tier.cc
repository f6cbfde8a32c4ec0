// RemoteTier (tiers/remote_tier.h): records as Redis values, verified on every read.
#include "tiers/remote_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

constexpr uint64_t kMinChunkBytes = 64ull << 10;
constexpr uint64_t kMaxChunkBytes = 512ull << 20;
constexpr auto kMinDeadline = std::chrono::milliseconds(1);
constexpr auto kMaxDeadline = std::chrono::minutes(10);
constexpr auto kErrorLogQuiet = std::chrono::seconds(10);

bool PrefixChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

std::string Hex(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

std::string_view AsText(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// Where part `part` of a record of `stored` bytes lies, cut into `chunk` pieces.
struct PartRange {
  uint64_t offset;
  uint64_t bytes;
};
PartRange RangeOfPart(uint32_t part, uint64_t stored, uint64_t chunk) {
  const uint64_t offset = uint64_t{part} * chunk;
  return {offset, std::min(chunk, stored - offset)};
}

// A transport failure, as opposed to an answer about the record.
bool IsTransport(const Status& s) {
  return s.IsUnavailable() || s.IsTimedOut() || s.IsIOError() || s.IsFailedPrecondition();
}

}  // namespace

Status RemoteTierOptions::Validate() const {
  CACHEPAWL_RETURN_IF_ERROR(redis.Validate());
  if (key_prefix.empty() || key_prefix.size() > 64 ||
      !std::all_of(key_prefix.begin(), key_prefix.end(), PrefixChar)) {
    return Status::InvalidArgument("remote.key_prefix '" + key_prefix +
                                   "': must be 1 to 64 of A-Z a-z 0-9 _ . -");
  }
  if (chunk_bytes < kMinChunkBytes || chunk_bytes > kMaxChunkBytes) {
    return Status::InvalidArgument("remote.chunk_bytes " + std::to_string(chunk_bytes) +
                                   ": must be 64 KiB (65536) to 512 MiB (536870912)");
  }
  if (deadline < kMinDeadline || deadline > kMaxDeadline) {
    return Status::InvalidArgument("remote.deadline " + std::to_string(deadline.count()) +
                                   " ms: must be 1 ms to 10 minutes");
  }
  return Status::OK();
}

RemoteTierOptions ToRemoteTierOptions(const RemoteOptions& remote) {
  RemoteTierOptions o;
  o.redis.seeds = remote.seeds;
  o.redis.user = remote.user;
  o.redis.password = remote.password;
  o.key_prefix = remote.key_prefix;
  o.chunk_bytes = remote.chunk_bytes;
  o.deadline = std::chrono::milliseconds(remote.deadline_ms);
  o.ttl_seconds = remote.ttl_seconds;
  return o;
}

StatusOr<std::unique_ptr<RemoteTier>> RemoteTier::Open(const RemoteTierOptions& options,
                                                       const ModelLayout& layout) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  CACHEPAWL_RETURN_IF_ERROR(layout.Validate());
  auto redis = RedisCluster::Connect(options.redis, /*allow_unreachable=*/true);
  if (!redis.ok()) return redis.status().WithContext("remote tier");
  if ((*redis)->Masters().empty()) {
    spdlog::warn(
        "remote tier: no seed of '{}' answers yet: lookups miss and writes are retried until one "
        "does",
        options.redis.seeds);
  }
  return std::unique_ptr<RemoteTier>(new RemoteTier(options, layout, std::move(redis).value()));
}

RemoteTier::RemoteTier(const RemoteTierOptions& options, const ModelLayout& layout,
                       std::unique_ptr<RedisCluster> redis)
    : options_(options),
      layout_(layout),
      fingerprint_(layout.Fingerprint()),
      fingerprint_hex_(Hex(fingerprint_.data(), 16)),
      redis_(std::move(redis)) {}

RemoteTier::~RemoteTier() = default;

std::string RemoteTier::RecordTag(const DiskKey& key) const {
  std::string tag = "{";
  tag += options_.key_prefix;
  tag += ':';
  tag += fingerprint_hex_;
  tag += ':';
  tag += KindName(key.kind);
  tag += ':';
  tag += key.hash.ToHex();
  tag += ':';
  tag += std::to_string(key.depth);
  tag += '}';
  return tag;
}

std::string RemoteTier::PartKey(const DiskKey& key, uint32_t part) const {
  std::string k = RecordTag(key);
  k += ':';
  k += std::to_string(part);
  return k;
}

uint64_t RemoteTier::StoredBytes(Kind kind) const {
  const uint64_t payload = layout_.RecordBytes(kind);
  return payload == 0 ? 0 : kRecordHeaderBytes + payload;
}

uint32_t RemoteTier::Parts(Kind kind) const {
  const uint64_t stored = StoredBytes(kind);
  return static_cast<uint32_t>((stored + options_.chunk_bytes - 1) / options_.chunk_bytes);
}

std::chrono::steady_clock::time_point RemoteTier::Deadline() const {
  return std::chrono::steady_clock::now() + options_.deadline;
}

void RemoteTier::TransportError(const Status& s) {
  Count(Counter::kTransportErrors);
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t last = last_error_log_ns_.load(std::memory_order_relaxed);
  const int64_t quiet = std::chrono::nanoseconds(kErrorLogQuiet).count();
  if (last != 0 && now - last < quiet) {
    last_error_log_ns_.store(now, std::memory_order_relaxed);  // the burst goes on
    return;
  }
  if (last_error_log_ns_.compare_exchange_strong(last, now)) {
    spdlog::warn("remote tier: {} (further errors of this burst are counted, not logged)",
                 s.ToString());
  }
}

std::vector<Status> RemoteTier::Put(std::span<const RemotePut> puts) {
  std::vector<Status> results(puts.size());
  // Per record: its header block, the keys of its parts, and where its commands start.
  struct Staged {
    std::vector<std::byte> header;
    std::vector<std::string> keys;  // part 0 .. n-1
    size_t first_command = 0;
  };
  std::vector<Staged> staged(puts.size());
  const std::string ttl = std::to_string(options_.ttl_seconds);
  for (size_t i = 0; i < puts.size(); ++i) {
    const RemotePut& p = puts[i];
    const uint64_t payload_bytes = layout_.RecordBytes(p.key.kind);
    if (payload_bytes == 0 || p.payload.size() != payload_bytes) {
      results[i] = Status::InvalidArgument(
          "remote put " + p.key.ToString() + ": payload of " + std::to_string(p.payload.size()) +
          " bytes (the layout's " + std::string(KindName(p.key.kind)) + " records have " +
          std::to_string(payload_bytes) + ")");
      continue;
    }
    Staged& s = staged[i];
    s.header.assign(kRecordHeaderBytes, std::byte{0});
    RecordHeader h;
    h.kind = p.key.kind;
    h.hash = p.key.hash;
    h.parent = p.parent;
    h.depth = p.key.depth;
    h.fingerprint = fingerprint_;
    h.payload_bytes = payload_bytes;
    h.record_bytes = RecordSlotBytes(layout_, p.key.kind);
    (void)WriteRecordHeader(s.header, h, p.payload);
    const uint32_t parts = Parts(p.key.kind);
    for (uint32_t c = 0; c < parts; ++c) s.keys.push_back(PartKey(p.key, c));
    Count(Counter::kPuts);
  }
  // The commands point into `staged` (its vectors no longer grow). Part 0 goes last.
  std::vector<RedisCommand> commands;
  for (size_t i = 0; i < puts.size(); ++i) {
    if (!results[i].ok()) continue;
    Staged& s = staged[i];
    s.first_command = commands.size();
    const uint64_t stored = StoredBytes(puts[i].key.kind);
    const uint32_t parts = static_cast<uint32_t>(s.keys.size());
    for (uint32_t n = 0; n < parts; ++n) {
      const uint32_t c = parts - 1 - n;
      const PartRange range = RangeOfPart(c, stored, options_.chunk_bytes);
      RedisCommand cmd;
      cmd.key = s.keys[c];
      if (options_.ttl_seconds != 0) {
        cmd.args = {"SETEX", s.keys[c], ttl};
      } else {
        cmd.args = {"SET", s.keys[c]};
      }
      if (c == 0) {  // the header block, then the payload's first bytes: one value
        cmd.args.push_back(AsText(s.header));
        cmd.args.push_back(
            AsText(puts[i].payload.first(static_cast<size_t>(range.bytes - kRecordHeaderBytes))));
        cmd.last_arg_pieces = 2;
      } else {
        cmd.args.push_back(
            AsText(puts[i].payload.subspan(static_cast<size_t>(range.offset - kRecordHeaderBytes),
                                           static_cast<size_t>(range.bytes))));
      }
      commands.push_back(std::move(cmd));
    }
  }
  auto replies = redis_->Run(commands, Deadline());
  for (size_t i = 0; i < puts.size(); ++i) {
    if (!results[i].ok()) continue;
    const Staged& s = staged[i];
    for (size_t c = 0; c < s.keys.size() && results[i].ok(); ++c) {
      const auto& r = replies[s.first_command + c];
      if (!r.ok()) {
        results[i] = r.status().WithContext("remote put " + puts[i].key.ToString());
      } else if (r->type != RedisReply::Type::kStatus || r->str != "OK") {
        results[i] = Status::Internal("remote put " + puts[i].key.ToString() +
                                      ": SET answered something other than OK");
      }
    }
    if (results[i].ok()) {
      Count(Counter::kPutBytes, puts[i].payload.size());
    } else {
      Count(Counter::kPutFailures);
      if (IsTransport(results[i])) TransportError(results[i]);
    }
  }
  return results;
}

std::vector<Status> RemoteTier::Get(std::span<const RemoteGet> gets) {
  std::vector<Status> results(gets.size());
  std::vector<std::vector<std::string>> keys(gets.size());  // part 0 .. n-1
  std::vector<size_t> first_command(gets.size(), 0);
  for (size_t i = 0; i < gets.size(); ++i) {
    const RemoteGet& g = gets[i];
    const uint64_t slot = RecordSlotBytes(layout_, g.key.kind);
    if (layout_.RecordBytes(g.key.kind) == 0 || g.record.size() < slot) {
      results[i] =
          Status::InvalidArgument("remote get " + g.key.ToString() + ": a record span of " +
                                  std::to_string(g.record.size()) + " bytes (need " +
                                  std::to_string(slot) + ", a host slot)");
      continue;
    }
    Count(Counter::kGets);
    for (uint32_t c = 0; c < Parts(g.key.kind); ++c) keys[i].push_back(PartKey(g.key, c));
  }
  // Each part's reply lands in its place in the record as it is parsed (reply_into).
  std::vector<RedisCommand> commands;
  for (size_t i = 0; i < gets.size(); ++i) {
    if (!results[i].ok()) continue;
    first_command[i] = commands.size();
    const uint64_t stored = StoredBytes(gets[i].key.kind);
    for (uint32_t c = 0; c < keys[i].size(); ++c) {
      const PartRange range = RangeOfPart(c, stored, options_.chunk_bytes);
      RedisCommand cmd;
      cmd.args = {"GET", keys[i][c]};
      cmd.key = keys[i][c];
      cmd.reply_into = gets[i].record.subspan(static_cast<size_t>(range.offset),
                                              static_cast<size_t>(range.bytes));
      commands.push_back(std::move(cmd));
    }
  }
  auto replies = redis_->Run(commands, Deadline());
  std::vector<DiskKey> bad;
  for (size_t i = 0; i < gets.size(); ++i) {
    if (!results[i].ok()) continue;
    const RemoteGet& g = gets[i];
    const uint64_t stored = StoredBytes(g.key.kind);
    Status s;
    for (uint32_t c = 0; c < keys[i].size() && s.ok(); ++c) {
      const auto& r = replies[first_command[i] + c];
      if (!r.ok()) {
        s = r.status().WithContext("remote get " + g.key.ToString());
        TransportError(s);
        break;
      }
      if (r->type == RedisReply::Type::kNil) {
        Count(c == 0 ? Counter::kMisses : Counter::kMissingParts);
        if (c > 0) bad.push_back(g.key);  // part 0 without another part: never readable
        s = Status::NotFound("remote record " + g.key.ToString() +
                             (c == 0 ? std::string(" is not in the remote tier")
                                     : ": part " + std::to_string(c) + " is missing"));
        break;
      }
      const PartRange range = RangeOfPart(c, stored, options_.chunk_bytes);
      // Delivered into the record (`into`) or, for a part of no bytes, an empty string.
      const bool whole =
          r->type == RedisReply::Type::kString && (r->into || (range.bytes == 0 && r->str.empty()));
      if (!whole) {
        Count(Counter::kWrongSize);
        s = Status::NotFound("remote record " + g.key.ToString() + ": part " + std::to_string(c) +
                             " has " + std::to_string(r->str.size()) + " bytes (expected " +
                             std::to_string(range.bytes) + ")");
        bad.push_back(g.key);
        break;
      }
    }
    if (s.ok()) {
      RecordExpectation expect;
      expect.key = g.key;
      expect.fingerprint = fingerprint_;
      expect.payload_bytes = layout_.RecordBytes(g.key.kind);
      expect.record_bytes = RecordSlotBytes(layout_, g.key.kind);
      RecordFault fault = RecordFault::kNone;
      s = VerifyRecord(g.record.first(static_cast<size_t>(expect.record_bytes)), expect, &fault);
      if (!s.ok()) {
        Count(fault == RecordFault::kChecksum ? Counter::kChecksumFailures
                                              : Counter::kHeaderMismatches);
        s = s.WithContext("remote record " + g.key.ToString());
        bad.push_back(g.key);
      }
    }
    if (s.ok()) {
      Count(Counter::kHits);
      Count(Counter::kGetBytes, stored - kRecordHeaderBytes);
    }
    results[i] = std::move(s);
  }
  if (!bad.empty()) {
    // A record that does not verify would fail every reader: delete it (a store that has the
    // right bytes writes it again).
    auto removed = Remove(bad);
    for (const Status& r : removed) {
      if (r.ok()) Count(Counter::kDeletedBad);
    }
  }
  return results;
}

std::vector<std::optional<StatusOr<RedisReply>>> RemoteTier::OneCommandPerRecord(
    std::string_view verb, std::span<const DiskKey> keys,
    const std::vector<std::vector<std::string>>& part_keys,
    std::chrono::steady_clock::time_point deadline) {
  std::vector<RedisCommand> commands;
  std::vector<size_t> command_of(keys.size(), SIZE_MAX);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (part_keys[i].empty()) continue;  // the layout has no such records
    command_of[i] = commands.size();
    // The parts share the record's hash tag: one command covers them all.
    RedisCommand cmd;
    cmd.key = part_keys[i][0];
    cmd.args.push_back(verb);
    for (const std::string& k : part_keys[i]) cmd.args.push_back(k);
    commands.push_back(std::move(cmd));
  }
  auto replies = redis_->Run(commands, deadline);
  std::vector<std::optional<StatusOr<RedisReply>>> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (command_of[i] == SIZE_MAX) continue;
    StatusOr<RedisReply>& r = replies[command_of[i]];
    if (!r.ok()) {
      r = r.status().WithContext("remote " + std::string(verb) + " " + keys[i].ToString());
      TransportError(r.status());
    }
    out[i] = std::move(r);
  }
  return out;
}

std::vector<bool> RemoteTier::Exists(std::span<const DiskKey> keys,
                                     std::optional<std::chrono::milliseconds> deadline) {
  std::vector<std::vector<std::string>> part_keys(keys.size());  // the first and last parts
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t parts = Parts(keys[i].kind);
    if (parts == 0) continue;
    Count(Counter::kExistsQueries);
    part_keys[i].push_back(PartKey(keys[i], 0));
    if (parts > 1) part_keys[i].push_back(PartKey(keys[i], parts - 1));
  }
  const auto replies =
      OneCommandPerRecord("EXISTS", keys, part_keys,
                          deadline ? std::chrono::steady_clock::now() + *deadline : Deadline());
  std::vector<bool> out(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& r = replies[i];
    out[i] = r && r->ok() && (*r)->type == RedisReply::Type::kInteger &&
             (*r)->integer == static_cast<int64_t>(part_keys[i].size());
  }
  return out;
}

std::vector<Status> RemoteTier::Remove(std::span<const DiskKey> keys) {
  std::vector<std::vector<std::string>> part_keys(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    // Part 0 first: readers stop finding the record at once.
    for (uint32_t c = 0; c < Parts(keys[i].kind); ++c) part_keys[i].push_back(PartKey(keys[i], c));
  }
  const auto replies = OneCommandPerRecord("DEL", keys, part_keys, Deadline());
  std::vector<Status> results(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (replies[i] && !replies[i]->ok()) results[i] = replies[i]->status();
  }
  return results;
}

RemoteTierStats RemoteTier::stats() const {
  auto get = [&](Counter c) {
    return counters_[static_cast<size_t>(c)].load(std::memory_order_relaxed);
  };
  RemoteTierStats s;
  s.puts = get(Counter::kPuts);
  s.put_bytes = get(Counter::kPutBytes);
  s.put_failures = get(Counter::kPutFailures);
  s.gets = get(Counter::kGets);
  s.get_bytes = get(Counter::kGetBytes);
  s.hits = get(Counter::kHits);
  s.misses = get(Counter::kMisses);
  s.missing_parts = get(Counter::kMissingParts);
  s.wrong_size = get(Counter::kWrongSize);
  s.header_mismatches = get(Counter::kHeaderMismatches);
  s.checksum_failures = get(Counter::kChecksumFailures);
  s.transport_errors = get(Counter::kTransportErrors);
  s.exists_queries = get(Counter::kExistsQueries);
  s.deleted_bad = get(Counter::kDeletedBad);
  return s;
}

RedisClusterStats RemoteTier::redis_stats() const { return redis_->stats(); }

}  // namespace cachepawl
