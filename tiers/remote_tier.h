// RemoteTier: records in a Redis Cluster that several stores (engine replicas) share: the tier
// below disk (device -> host -> disk -> remote). It moves bytes between host slots and Redis
// through RedisCluster (redis/redis_cluster.h) and never trusts what comes back.
//
// A remote record is the disk record (tiers/disk_record.h): a 4 KiB header block with the full
// key, kind, depth, parent, layout fingerprint, lengths and the XXH3 checksum over header and
// payload, then the payload (unpadded). It is stored as one Redis string value when it fits in
// chunk_bytes, else cut into chunk_bytes parts (the last shorter), each its own value, all
// under one hash tag so that a record lives on one node and moves in one pipeline:
//
//   {<prefix>:<fingerprint, 32 hex>:<kind>:<page hash, 64 hex>:<depth>}:<part 0 .. n-1>
//
// Part 0 (the header block and the first payload bytes) is written last, after the others on
// the same connection: once it exists the other parts were written, unless Redis evicted or
// expired one since. The key names the layout fingerprint, so stores of different layouts
// sharing a cluster never see each other's records, and the page hash, which the namespace
// seeds (docs/DESIGN.md), so tenants stay apart as in the other tiers; `key_prefix` separates
// sites or other users of the cluster.
//
// Every read checks each part's presence and exact length, then the whole record (VerifyRecord:
// magic, version, header check, kind, hash, depth, fingerprint, lengths, checksum). A missing
// part, a part of the wrong length or a record that does not verify is a miss (NotFound or
// Corruption) plus a counter, never data; a record with a bad or missing part is deleted.
// Transport failures (node down, timeout) fail that record only, are counted, and are logged
// once per burst.
//
// Writes are idempotent (one key always carries the same bytes), so a write whose reply was
// lost can be sent again, and two stores writing one record race harmlessly.
//
// Thread safety: every method may be called from any thread, concurrently. A call blocks the
// calling thread for at most the options' deadline (plus one io_timeout); the Store calls them
// on its own threads, never on an engine thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis/redis_cluster.h"
#include "tiers/disk_record.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"
#include "vocab/store_options.h"

namespace cachepawl {

struct RemoteTierOptions {
  RedisClusterOptions redis;
  // Prepended to every key: 1..64 of [A-Za-z0-9_.-].
  std::string key_prefix = "cachepawl";
  // A payload longer than this is stored as several values (64 KiB .. 512 MiB, Redis's
  // proto-max-bulk-len default).
  uint64_t chunk_bytes = 8ull << 20;
  // One batch (Put, Get or Exists) as a whole: 1 ms .. 10 min.
  std::chrono::milliseconds deadline{2000};
  // Expiry of written values in seconds; 0: none (Redis's maxmemory policy decides).
  uint32_t ttl_seconds = 0;

  // Each field in range (and redis.Validate()); the error names the field and the value.
  Status Validate() const;
};

// The tier's options from the store's (StoreOptions::remote).
RemoteTierOptions ToRemoteTierOptions(const RemoteOptions& remote);

struct RemoteTierStats {
  uint64_t puts = 0, put_bytes = 0, put_failures = 0;
  uint64_t gets = 0, get_bytes = 0;  // gets asked; bytes of records that verified
  uint64_t hits = 0;                 // records that verified
  uint64_t misses = 0;               // absent: no part 0
  uint64_t missing_parts = 0;        // part 0 there, another part absent (evicted or expired)
  uint64_t wrong_size = 0;           // a part of the wrong length or type
  uint64_t header_mismatches = 0;    // the header names another record, layout or format
  uint64_t checksum_failures = 0;    // the header verified, the checksum did not
  uint64_t transport_errors = 0;     // records that failed for the connection's sake
  uint64_t exists_queries = 0;       // keys asked by Exists
  uint64_t deleted_bad = 0;          // records deleted after they failed verification
};

// One record to write: its key, its parent page (the header names it) and its payload
// (layout.RecordBytes(kind) bytes, e.g. a host slot's SlotPayload). The tier builds the header
// block itself: the payload is only read.
struct RemotePut {
  DiskKey key;
  PageHash parent;
  std::span<const std::byte> payload;
};

// One record to read into `record`: at least RecordSlotBytes(layout, key.kind) bytes (a host
// slot); on success it holds the verified header block and payload. Each part's bytes are
// received straight into their place in it (RedisCommand::reply_into), so after a failure it
// may hold some of them; the records of one Get must not overlap.
struct RemoteGet {
  DiskKey key;
  std::span<std::byte> record;
};

class RemoteTier {
 public:
  // Connects (RedisCluster::Connect, unreachable allowed): InvalidArgument for the options,
  // FailedPrecondition when a seed refuses (AUTH). When no seed answers yet the tier opens
  // anyway (logged): its calls miss or fail Unavailable until a seed answers.
  static StatusOr<std::unique_ptr<RemoteTier>> Open(const RemoteTierOptions& options,
                                                    const ModelLayout& layout);
  ~RemoteTier();
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // Writes `puts`, pipelined. Result i: OK once every part of record i was stored, else the
  // first error of its parts (Unavailable, TimedOut, IOError, FailedPrecondition for a server
  // error such as OOM); InvalidArgument for a payload of the wrong length. A failed record may
  // have some parts stored: without its header part it is absent to readers.
  std::vector<Status> Put(std::span<const RemotePut> puts);

  // Reads and verifies `gets`, pipelined. Result i: OK (gets[i].record holds the verified
  // record), NotFound (absent, a part missing or of the wrong length), Corruption (it did not
  // verify; it was deleted), a transport error, or InvalidArgument (record span too small).
  std::vector<Status> Get(std::span<const RemoteGet> gets);

  // Which records are there (their first and last parts), one round trip per node. A key whose
  // query failed is reported absent (counted as a transport error): a lookup treats the remote
  // tier as a cache, and an unreachable node is a miss.
  // `deadline`: for this call instead of the options' (a Lookup's shorter one).
  std::vector<bool> Exists(std::span<const DiskKey> keys,
                           std::optional<std::chrono::milliseconds> deadline = std::nullopt);

  // Deletes records (every part). Result i: OK (also when absent) or a transport error.
  std::vector<Status> Remove(std::span<const DiskKey> keys);

  // The Redis key of part `part` of a record.
  std::string PartKey(const DiskKey& key, uint32_t part) const;
  // Parts of a record of `kind`: its kRecordHeaderBytes + layout.RecordBytes(kind) bytes cut
  // into chunk_bytes pieces (0 when the layout stores no such records).
  uint32_t Parts(Kind kind) const;
  // Bytes of a record of `kind` as stored: the header block and the payload.
  uint64_t StoredBytes(Kind kind) const;

  RemoteTierStats stats() const;
  RedisClusterStats redis_stats() const;
  const RemoteTierOptions& options() const { return options_; }

 private:
  RemoteTier(const RemoteTierOptions& options, const ModelLayout& layout,
             std::unique_ptr<RedisCluster> redis);
  std::string RecordTag(const DiskKey& key) const;
  std::chrono::steady_clock::time_point Deadline() const;
  // Sends `verb` followed by part_keys[i] for each record (one command each, pipelined); entry i
  // is empty when part_keys[i] is (no command), else the reply or the transport error (counted
  // and logged).
  std::vector<std::optional<StatusOr<RedisReply>>> OneCommandPerRecord(
      std::string_view verb, std::span<const DiskKey> keys,
      const std::vector<std::vector<std::string>>& part_keys,
      std::chrono::steady_clock::time_point deadline);
  // Counts a transport error and logs it, once per burst (after 10 s without one).
  void TransportError(const Status& s);

  enum class Counter {
    kPuts,
    kPutBytes,
    kPutFailures,
    kGets,
    kGetBytes,
    kHits,
    kMisses,
    kMissingParts,
    kWrongSize,
    kHeaderMismatches,
    kChecksumFailures,
    kTransportErrors,
    kExistsQueries,
    kDeletedBad,
    kNumCounters
  };
  void Count(Counter c, uint64_t n = 1) {
    counters_[static_cast<size_t>(c)].fetch_add(n, std::memory_order_relaxed);
  }

  const RemoteTierOptions options_;
  const ModelLayout layout_;
  const LayoutFingerprint fingerprint_;
  const std::string fingerprint_hex_;  // its first 16 bytes
  std::unique_ptr<RedisCluster> redis_;
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Counter::kNumCounters)> counters_{};
  std::atomic<int64_t> last_error_log_ns_{0};  // steady clock; 0: never
};

}  // namespace cachepawl
