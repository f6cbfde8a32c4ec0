// StoreStats: the store's counters and latency histograms, as a struct, JSON or Prometheus text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "vocab/types.h"

namespace cachepawl {

// Latency percentiles of one kind of call, in microseconds.
struct LatencySummary {
  uint64_t count = 0;
  double p50_us = 0, p99_us = 0, max_us = 0, mean_us = 0;
};

// The remote tier (StoreOptions::remote): what this store wrote, found and fetched there.
struct RemoteStats {
  bool enabled = false;
  uint64_t writes_queued = 0;   // entries handed to the writer by the write policy
  uint64_t writes = 0;          // entries stored in the remote tier
  uint64_t write_failures = 0;  // entries not stored after their attempts
  uint64_t writes_dropped = 0;  // not queued (queue full) or dropped at close
  uint64_t writes_skipped = 0;  // left host memory before their turn
  // Write-on-evict from the disk (the last local tier): victims read back and queued (counted
  // in writes_queued too), and those that could not be read (counted in write_failures too).
  uint64_t disk_copies = 0, disk_copy_failures = 0;
  uint64_t queued_now = 0;
  uint64_t lookup_pages = 0;   // reusable pages Lookup found past the local match
  uint64_t loaded = 0;         // entries fetched into host memory, verified
  uint64_t load_failures = 0;  // entries a Load or prefetch did not get (missing, bad, down)
  // From the tier (tiers/remote_tier.h RemoteTierStats).
  uint64_t put_bytes = 0, get_bytes = 0;
  uint64_t missing_parts = 0, wrong_size = 0, header_mismatches = 0, checksum_failures = 0;
  uint64_t transport_errors = 0;
  uint64_t deleted_bad = 0;  // records deleted after they failed verification

  // Name and value of every counter (not `enabled`), in declaration order.
  std::vector<std::pair<const char*, uint64_t>> Fields() const;
  // Adds `other`'s counters (queued_now: other's, the later snapshot).
  void Add(const RemoteStats& other);
};

// A shared store (Store::Serve): its attached processes, and what the owner reclaimed from those
// that went away (docs/EMBEDDING.md, "When a process dies").
struct ServeStats {
  bool enabled = false;         // this store is an owner (Store::Serve)
  uint64_t clients_now = 0;     // attached now
  uint64_t attaches = 0;        // accepted since open
  uint64_t refused = 0;         // refused at attach (user, build, layout, too many)
  uint64_t clients_gone = 0;    // connections that ended (a clean close or a death)
  uint64_t locks_released = 0;  // locks of gone clients released by the owner
  uint64_t copies_failed = 0;   // copies in flight when their client went (their slots freed)
  uint64_t reclaim_max_us = 0;  // the longest from a connection's end to all of it reclaimed
  uint64_t bad_messages = 0;    // calls refused, or clients dropped, for malformed messages
  uint64_t calls = 0;           // calls answered

  std::vector<std::pair<const char*, uint64_t>> Fields() const;
};

struct StoreStats {
  // Lookups.
  uint64_t lookups = 0;
  uint64_t lookup_pages = 0;  // full pages asked for
  uint64_t hit_pages = 0;     // reusable pages returned (hybrid rule)
  // Pages with KV but no usable state (not hits); pure SSM: pages the store knew (on a cached
  // state's chain) past the state a lookup reused.
  uint64_t kv_only_hit_pages = 0;
  // Per tier and kind: pages/states served by Load from that tier, and their bytes.
  std::array<std::array<uint64_t, kNumKinds>, kNumLocalTiers> loaded_entries{};
  std::array<std::array<uint64_t, kNumKinds>, kNumLocalTiers> loaded_bytes{};
  // Per tier and kind: entries held now, and their bytes.
  std::array<std::array<uint64_t, kNumKinds>, kNumLocalTiers> resident_entries{};
  std::array<std::array<uint64_t, kNumKinds>, kNumLocalTiers> resident_bytes{};
  // Per tier and kind: evictions.
  std::array<std::array<uint64_t, kNumKinds>, kNumLocalTiers> evictions{};
  // Bytes moved per direction.
  uint64_t bytes_device_to_host = 0, bytes_host_to_device = 0;
  uint64_t bytes_host_to_disk = 0, bytes_disk_to_host = 0;
  double gbps_device_to_host = 0, gbps_host_to_device = 0;  // over busy time
  // Errors and misses that are not errors.
  uint64_t checksum_failures = 0;  // disk records dropped for a bad checksum or header
  uint64_t io_errors = 0;
  uint64_t no_space_errors = 0;
  // Disk records the last open found but could not keep (past the end of a truncated or
  // recreated data file, made for another layout, undecodable): misses now, not errors.
  uint64_t disk_dropped_at_open = 0;
  uint64_t evicted_ahead = 0;  // host entries the evict-ahead thread freed (also in evictions)
  // Hybrid eviction: host victims not written to disk (KV no cached state can use, states
  // scored below the eviction level); they left host memory unwritten.
  uint64_t disk_admission_refused = 0;
  // Write-on-evict victims whose disk write failed (I/O error, no space after one retry): they
  // leave host memory unwritten at their next eviction.
  uint64_t evict_write_failures = 0;
  // Tensor-parallel group stores: entries some ranks saved and others not yet (no hits; each
  // holds a host slot), and those dropped (timed out, StoreOptions::tp_partial_timeout_ms, or
  // freed for room when nothing else could go).
  uint64_t tp_partial_entries = 0;
  uint64_t tp_partials_dropped = 0;
  // Restart: disk records the store opened with (kept by the disk tier's checks and reachable
  // from the index), and records reclaimed at open because no lookup could reach them (their
  // parent page, or the page a state sits on, was not recovered).
  uint64_t disk_records_recovered = 0;
  uint64_t disk_unreachable_at_open = 0;
  uint64_t failed_operations = 0;
  uint64_t saves = 0, saved_pages = 0, saved_states = 0, refreshed_pages = 0;
  // Windowed KV records saved (layouts with sliding-window layers; saved_pages counts the
  // full-attention KV records).
  uint64_t saved_window_pages = 0;
  uint64_t loads = 0, prefetches = 0;
  uint64_t in_flight_operations = 0;  // now
  uint64_t disk_queue_depth = 0;      // now
  // Pages the prefix index holds now (a pure SSM layout's are the links of its states' chains:
  // index memory, no tier bytes; each leads to a cached state).
  uint64_t index_entries = 0;
  LatencySummary lookup_latency, load_latency, save_latency;
  RemoteStats remote;
  ServeStats serve;

  std::string ToJson() const;        // one JSON object; keys as the field names above
  std::string ToPrometheus() const;  // text exposition format, prefix cachepawl_
};

}  // namespace cachepawl
