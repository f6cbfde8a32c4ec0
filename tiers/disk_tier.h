// DiskTier: the bookkeeping of the store's NVMe tier (L3): data files, extents, the RocksDB
// catalog, pins, and counters. It moves no data itself: transfer/disk_mover.h
// (DiskMover) reads and writes records through io_uring and drives this object:
//
//   write:  BeginWrite (reserve an extent) -> data write -> CommitWrites (catalog put) or
//           AbortWrite (extent back to free space)
//   read:   BeginRead (pin the record) -> data read -> verify -> EndRead (unpin; on a failed
//           verification the record is dropped from the catalog)
//
// Invariants kept here: a record is in the catalog only after its data write completed
// (CommitWrites is called after); an extent is reused only after the catalog batch deleting
// the record that named it returned OK, and only after the last read of it ended; a pending
// write is never removed or overwritten (Remove and BeginWrite answer Busy), and neither is a
// record whose removal is being written to the catalog (BeginWrite answers Busy, so a put of
// the key can never land before that delete). Which records to remove when the tier is full
// is the caller's choice (the Store's index picks disk victims): BeginWrite never evicts.
//
// The catalog is written outside the tier's mutex. CommitWrites, Remove and a read that fails
// verification change the records' state under the mutex (a record being committed or removed
// is not found by Lookup or BeginRead), write the catalog batch without it, and take it again
// to publish or to undo. A RocksDB write stall therefore stalls only the thread that writes;
// Lookup, BeginRead, BeginWrite, stats and the other writers' bookkeeping go on.
//
// Open rebuilds everything from the catalog (extents, the stored access stamps) and exposes
// every record through ForEachRecord so the Store can rebuild its prefix index.
//
// Layouts without attention layers (pure SSM): the tier holds states only. Each state is
// written with its chain (the hashes of the pages leading to it, which no record names since
// those pages carry no KV): the catalog keeps it beside the state's record, in the same batches
// (tiers/disk_catalog.h), and Open hands the chains of the states it found to the Store once
// (TakeRecoveredChains) without keeping a copy.
//
// Thread safety: every method may be called from any thread; one internal mutex, never held
// across a catalog (RocksDB) call. Callbacks (ForEachRecord) run under it and must not call
// back into the tier.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tiers/disk_catalog.h"
#include "tiers/disk_data_files.h"
#include "tiers/disk_extent_allocator.h"
#include "tiers/disk_folders.h"
#include "tiers/disk_record.h"
#include "vocab/model_layout.h"
#include "vocab/page_hash.h"
#include "vocab/status.h"

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
  // Tests only: called on the writing thread, with no lock of the tier held, before every
  // catalog write after Open (commits, removals, drops, the stamps at Close).
  std::function<void()> before_catalog_write_for_test;

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
  // state's chain does not fit its depth and parent), Busy (a write or a removal of the key is
  // in flight), NoSpace (no free extent fits: the message says the bytes used, the capacity and
  // the largest free range), FailedPrecondition (closed). Never evicts; never touches the
  // catalog.
  StatusOr<WritePlan> BeginWrite(const DiskKey& key, const PageHash& parent,
                                 std::span<const PageHash> chain = {});
  // Publishes written records: one catalog batch, written without the tier's mutex (the
  // records are not found meanwhile). `checksums[i]` is the checksum written in the header of
  // tickets[i]. On error none is published and every ticket is aborted.
  Status CommitWrites(std::span<const TicketPtr> tickets, std::span<const uint64_t> checksums);
  // The write failed: the extent goes back to free space.
  void AbortWrite(const TicketPtr& ticket);

  // ---- The read protocol ------------------------------------------------------------------

  // Pins `key`'s record for a read. NotFound when it is not on disk (or its write is pending).
  StatusOr<std::pair<TicketPtr, DiskRecordInfo>> BeginRead(const DiskKey& key);
  // Unpins. `ok`: the record verified (its access stamp becomes the newest); otherwise it is
  // dropped from the catalog (written without the tier's mutex; its extent is freed once no
  // other read pins it, and never when the catalog delete failed: the catalog still names it).
  // A record is gone from the tier when this returns with !ok, whether or not its catalog
  // delete succeeded.
  void EndRead(const TicketPtr& ticket, bool ok);

  // ---- Queries and maintenance -------------------------------------------------------------

  std::optional<DiskRecordInfo> Lookup(const DiskKey& key) const;
  bool Contains(const DiskKey& key) const { return Lookup(key).has_value(); }
  // Deletes the records in one catalog batch, written without the tier's mutex: from the call
  // on they are not found; when it returns OK they are gone. Per key, in order: OK, NotFound
  // (absent, or its removal already under way), Busy (a write of it is in flight),
  // FailedPrecondition (closed), or the catalog's error (the record stays, found again). Reads
  // in flight finish on the old bytes; an extent is freed after them.
  std::vector<Status> Remove(std::span<const DiskKey> keys);
  Status Remove(const DiskKey& key) { return Remove(std::span<const DiskKey>(&key, 1))[0]; }
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

  // Persists access stamps and closes the catalog, after the catalog writes under way (other
  // threads') have returned. Later calls fail FailedPrecondition. The caller must have
  // finished every ticket. Idempotent.
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
  // Out of the map; its extent freed when no read pins it (and its catalog entry is gone).
  // Requires mu_.
  void ReleaseExtentLocked(Entry& e);
  // A catalog write: false (nothing to write) when the tier is closed; otherwise counted in
  // catalog_writers_ until EndCatalogWrite, so that Close waits for it. Requires mu_.
  bool BeginCatalogWriteLocked();
  // Runs `puts` and `deletes` as one catalog batch. Must be called without mu_, between
  // BeginCatalogWriteLocked and EndCatalogWrite.
  Status WriteCatalog(std::span<const CatalogRecord> puts, std::span<const DiskKey> deletes);
  void EndCatalogWrite();  // takes mu_
  // Drops a record whose read failed: the catalog delete written without mu_. Takes mu_.
  void Drop(const std::shared_ptr<Entry>& e);

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
  uint64_t clock_ = 0;                                                // guarded by mu_
  std::array<uint64_t, kNumKinds> records_{};  // guarded by mu_ (committed, not being removed)
  uint64_t removes_ = 0, dropped_on_read_ = 0, dropped_at_open_ = 0;  // guarded by mu_
  int catalog_writers_ = 0;               // catalog writes under way; guarded by mu_
  std::condition_variable catalog_idle_;  // with mu_: catalog_writers_ fell to 0
  std::unordered_map<std::string, std::vector<PageHash>> recovered_chains_;  // guarded by mu_
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Counter::kNumCounters)> counters_{};
};

}  // namespace cachepawl
