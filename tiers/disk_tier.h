// DiskTier: the bookkeeping of the store's NVMe tier (L3): data files, extents, the RocksDB
// catalog, LRU order, pins, and counters. It moves no data itself: transfer/disk_mover.h
// (DiskMover) reads and writes records through io_uring and drives this object:
//
//   write:  BeginWrite (reserve an extent) -> data write -> CommitWrites (catalog put) or
//           AbortWrite (extent back to free space)
//   read:   BeginRead (pin the record) -> data read -> verify -> EndRead (unpin; on a failed
//           verification the record is dropped from the catalog)
//
// Invariants kept here: a record is in the catalog only after its data write completed
// (CommitWrites is called after); an extent is reused only after the catalog batch deleting
// the record that named it returned OK, and only after the last read of it ended; a record
// pinned by an in-flight read is never evicted (Remove unlists it at once, and its extent
// returns to free space when the read ends); a pending write is never evicted, removed or
// overwritten (Remove answers Busy).
//
// Open rebuilds everything from the catalog (extents, LRU order from the stored access stamps)
// and exposes every record through ForEachRecord so the Store can rebuild its prefix index.
//
// Layouts without attention layers (pure SSM): the tier holds states only. Each state is
// written with its chain (the hashes of the pages leading to it, which no record names since
// those pages carry no KV): the catalog keeps it beside the state's record, in the same batches
// (tiers/disk_catalog.h), and Open hands the chains of the states it found to the Store once
// (TakeRecoveredChains) without keeping a copy.
//
// Thread safety: every method may be called from any thread; one internal mutex. Callbacks
// (ForEachRecord) run under it and must not call back into the tier.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/vocab/model_layout.h"
#include "store/vocab/page_hash.h"
#include "store/vocab/status.h"
#include "tiers/disk_catalog.h"
#include "tiers/disk_data_files.h"
#include "tiers/disk_extent_allocator.h"
#include "tiers/disk_folders.h"
#include "tiers/disk_record.h"

namespace cachepawl {

struct DiskTierOptions {
  // The tier's folder (created 0700 when missing; an existing one is left as it is, with a
  // warning when group or other users may enter it): holds the catalog (<dir>/catalog) and,
  // when `data_paths` is empty, the one data file <dir>/cachepawl.data. Required.
  std::string dir;
  // Data files to stripe records over (one per drive), created 0600 (their folders 0700) when
  // missing. Empty: one file in `dir`. No duplicates.
  std::vector<std::string> data_paths;
  // The byte budget of the tier, for both kinds together, split evenly over the files and
  // preallocated. Each file's share must hold at least one record of the larger kind.
  uint64_t capacity_bytes = 0;
  // When the catalog was made for another layout (fingerprint), format version or set of
  // data files: false -> Open fails with Incompatible naming both; true -> start empty.
  bool wipe_on_mismatch = false;
  // When the catalog cannot be opened (damaged files): false -> Open fails naming the reason;
  // true -> delete it and start empty.
  bool wipe_unreadable_catalog = false;
  // fsync the catalog's log on every commit (survive power loss, not only process death).
  bool sync_catalog = false;
  // When no extent is free for a write: true -> evict least recently used unpinned records
  // (Mamba states first, then KV pages) and report them; false -> the write fails NoSpace.
  bool evict_when_full = true;

  // OK, or InvalidArgument naming the field and value at fault.
  Status Validate() const;
  // The data files: `data_paths`, or {<dir>/cachepawl.data}.
  std::vector<std::string> DataFiles() const;
  std::string CatalogDir() const;  // <dir>/catalog
};

// What the tier knows of one record.
struct DiskRecordInfo {
  DiskKey key;        // depth set for both kinds
  PageHash parent;    // zero for the first page of a chain
  DiskExtent extent;  // extent.Id() is the record's Disk TierSlot
  uint64_t checksum = 0;
  uint64_t stamp = 0;  // access order: higher is more recent
};

// Counters: every error path has one. Snapshot with DiskTier::stats().
struct DiskTierStats {
  uint64_t records_kv = 0;
  uint64_t records_mamba = 0;
  uint64_t records_window = 0;  // windowed-layer KV records (layouts with windowed layers)
  uint64_t bytes_used = 0;
  uint64_t capacity_bytes = 0;
  uint64_t largest_free_bytes = 0;
  // I/O (counted by the disk mover, which moves the data).
  uint64_t reads = 0;  // records read and verified
  uint64_t read_bytes = 0;
  uint64_t writes = 0;  // records written and committed
  uint64_t write_bytes = 0;
  uint64_t writes_existing = 0;  // write asked for a key already on disk: nothing written
  uint64_t read_misses = 0;      // read asked for a key not on disk (NotFound)
  uint64_t checksum_failures = 0;
  uint64_t header_mismatches = 0;
  uint64_t short_reads = 0;
  uint64_t short_writes = 0;
  uint64_t read_io_errors = 0;
  uint64_t write_io_errors = 0;
  uint64_t no_space = 0;  // writes refused: no extent (ENOSPC from the drive included)
  // States of a layout without attention layers refused at BeginWrite, or dropped at open,
  // because their chain is missing or does not fit their depth and parent.
  uint64_t chain_errors = 0;
  uint64_t busy = 0;  // writes or removes refused: the record is in flight
  uint64_t catalog_errors = 0;
  // Bookkeeping.
  uint64_t evictions = 0;
  uint64_t removes = 0;
  uint64_t dropped_on_read = 0;  // records dropped because a read failed or did not verify
  // Catalog entries dropped by recovery: undecodable, breaking tiers/disk_catalog_check.h's
  // rule, overlapping another record, or a state whose chain does not lead to it.
  uint64_t dropped_at_open = 0;

  // name -> value, in declaration order (for tools and JSON).
  std::vector<std::pair<const char*, uint64_t>> Fields() const;
};

class DiskTier {
 public:
  // Opens or creates the tier for `layout` (which must Validate()). Errors: InvalidArgument
  // (options or layout), Incompatible (catalog made for another layout/format/paths and
  // !wipe_on_mismatch; the message names both fingerprints), the catalog's error (unreadable
  // and !wipe_unreadable_catalog), Unavailable (no O_DIRECT; the catalog folder not writable,
  // never wiped), NoSpace (cannot preallocate; the message names the file, the bytes asked
  // and the bytes free). Files are created 0600 and folders 0700; an existing `dir` is left as
  // it is (a warning is logged when other users may enter it).
  static StatusOr<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options,
                                                  const ModelLayout& layout);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // ---- The write protocol (used by the disk mover) ---------------------------------------

  struct Ticket;  // one record in flight (opaque)
  using TicketPtr = std::shared_ptr<Ticket>;

  // What BeginWrite decided.
  struct WritePlan {
    TicketPtr ticket;       // null when nothing must be written (`existing` is set)
    DiskExtent extent;      // where to write (or where the existing record lies)
    bool existing = false;  // the key is on disk already
  };
  // Reserves an extent for `key`. Existing key: `existing`, nothing to write. `chain`: for a
  // state of a layout without attention layers, the hashes of the pages before the state's own
  // (first page first, `parent` last; empty at depth one page), published with the record;
  // ignored otherwise. Errors: InvalidArgument (the layout has no records of the kind, or such a
  // state's chain does not fit its depth and parent), Busy (a write of the key is in flight),
  // NoSpace (no extent even after eviction, or eviction off), IOError (catalog),
  // FailedPrecondition (closed). Keys evicted to make room are appended to `*evicted` (they are
  // gone from the catalog when this returns).
  StatusOr<WritePlan> BeginWrite(const DiskKey& key, const PageHash& parent,
                                 std::vector<DiskKey>* evicted,
                                 std::span<const PageHash> chain = {});
  // Publishes written records: one catalog batch. `checksums[i]` is the checksum written in
  // the header of tickets[i]. On error none is published and every ticket is aborted.
  Status CommitWrites(std::span<const TicketPtr> tickets, std::span<const uint64_t> checksums);
  // The write failed: the extent goes back to free space.
  void AbortWrite(const TicketPtr& ticket);

  // ---- The read protocol ------------------------------------------------------------------

  // Pins `key`'s record for a read. NotFound when it is not on disk (or its write is pending).
  StatusOr<std::pair<TicketPtr, DiskRecordInfo>> BeginRead(const DiskKey& key);
  // Unpins. `ok`: the record verified (it becomes most recently used); otherwise it is dropped
  // from the catalog (its extent freed once no other read pins it).
  void EndRead(const TicketPtr& ticket, bool ok);

  // ---- Queries and maintenance -------------------------------------------------------------

  std::optional<DiskRecordInfo> Lookup(const DiskKey& key) const;
  bool Contains(const DiskKey& key) const { return Lookup(key).has_value(); }
  // Deletes the record: from now on it is not found. NotFound when absent, Busy while a write of
  // it is in flight. Reads in flight finish on the old bytes; its extent is freed after them.
  Status Remove(const DiskKey& key);
  // Up to `max` unpinned records of `kind`, least recently used first (eviction candidates).
  std::vector<DiskKey> LruOrder(Kind kind, size_t max) const;
  // Every committed record (order unspecified). `fn` must not call into the tier.
  void ForEachRecord(const std::function<void(const DiskRecordInfo&)>& fn) const;
  // Layouts without attention layers: the chains of the states Open found, keyed by
  // DiskKeyIdentity(state key), each checked against its state's depth and parent. Moved out:
  // a second call returns nothing (the catalog keeps them; the tier holds no copy).
  std::unordered_map<std::string, std::vector<PageHash>> TakeRecoveredChains();

  DiskTierStats stats() const;
  const ModelLayout& layout() const { return layout_; }
  const DiskTierOptions& options() const { return options_; }
  const DiskDataFiles& files() const { return *files_; }
  uint64_t record_bytes(Kind kind) const { return record_bytes_[static_cast<int>(kind)]; }
  uint64_t payload_bytes(Kind kind) const { return payload_bytes_[static_cast<int>(kind)]; }
  const LayoutFingerprint& fingerprint() const { return fingerprint_; }

  // Counters bumped by the disk mover (thread-safe).
  enum class Counter {
    kReads,
    kReadBytes,
    kWrites,
    kWriteBytes,
    kWritesExisting,
    kReadMisses,
    kChecksumFailures,
    kHeaderMismatches,
    kShortReads,
    kShortWrites,
    kReadIoErrors,
    kWriteIoErrors,
    kNoSpace,
    kChainErrors,
    kBusy,
    kCatalogErrors,
    kNumCounters
  };
  void Count(Counter c, uint64_t n = 1) {
    counters_[static_cast<size_t>(c)].fetch_add(n, std::memory_order_relaxed);
  }

  // Persists access stamps and closes the catalog. Later calls fail FailedPrecondition.
  // The caller must have finished every ticket. Idempotent.
  Status Close();

 private:
  struct Entry;
  // A key's identity (the bytes of DiskKeyIdentity) held inline: the map's key, so a lookup
  // allocates nothing; hashed by its page hash's first bytes (SHA-256: already uniform).
  struct KeyId {
    KeyId() = default;
    explicit KeyId(const DiskKey& key);
    bool operator==(const KeyId&) const = default;
    std::array<uint8_t, 41> bytes{};
    uint8_t size = 0;
  };
  struct KeyIdHash {
    size_t operator()(const KeyId& k) const;
  };
  DiskTier(DiskTierOptions options, ModelLayout layout);
  Status Recover(const std::vector<DiskDataFiles::FileReport>& reports);
  std::optional<DiskExtent> AllocateLocked(uint64_t bytes, std::vector<DiskKey>* evicted,
                                           Status* error);
  void DropLocked(Entry& e);
  void ReleaseExtentLocked(Entry& e);
  void UnlinkLocked(Entry& e);  // out of the LRU list and the record count

  const DiskTierOptions options_;
  const ModelLayout layout_;
  LayoutFingerprint fingerprint_{};
  std::array<uint64_t, kNumKinds> record_bytes_{};
  std::array<uint64_t, kNumKinds> payload_bytes_{};
  std::unique_ptr<FolderOwnerLock> owner_;  // released last (destroyed after the others)
  std::unique_ptr<DiskDataFiles> files_;
  std::unique_ptr<DiskCatalog> catalog_;

  mutable std::mutex mu_;
  bool closed_ = false;                                               // guarded by mu_
  std::unique_ptr<DiskExtentAllocator> allocator_;                    // guarded by mu_
  std::unordered_map<KeyId, std::shared_ptr<Entry>, KeyIdHash> map_;  // guarded by mu_
  std::array<std::list<Entry*>, kNumKinds> lru_;  // guarded by mu_ (front: oldest)
  uint64_t clock_ = 0;                            // guarded by mu_
  std::array<uint64_t, kNumKinds> records_{};     // guarded by mu_ (committed)
  uint64_t evictions_ = 0, removes_ = 0, dropped_on_read_ = 0, dropped_at_open_ = 0;  // mu_
  std::unordered_map<std::string, std::vector<PageHash>> recovered_chains_;  // guarded by mu_
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Counter::kNumCounters)> counters_{};
};

}  // namespace cachepawl
