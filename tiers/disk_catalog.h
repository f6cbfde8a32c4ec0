// DiskCatalog: the RocksDB database that says which extent of which data file holds which
// record, and which layout the disk tier was created for.
//
// Keys: "R" + DiskKeyIdentity(key) -> an encoded CatalogRecord; "M" -> CatalogMeta; and, in the
// catalog of a layout without attention layers (pure SSM), "C" + DiskKeyIdentity(state key) ->
// the state's chain: the hashes of the pages leading to it (its pages carry no KV, so no record
// names them; a restart rebuilds the prefix from these). A chain entry is put in the batch that
// puts its state's record and deleted in the batch that deletes it.
// Invariant 4 is the caller's (DiskTier's): Apply() a put only after the data write completed,
// and reuse an extent only after an Apply() that deleted the record naming it returned OK.
// Apply() writes its puts and deletes in one WriteBatch, so either all land or none.
//
// Thread safety: all methods may be called concurrently (RocksDB serializes writes).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tiers/disk_extent_allocator.h"
#include "tiers/disk_record.h"
#include "vocab/page_hash.h"
#include "vocab/status.h"

namespace cachepawl {

struct CatalogDb;  // tiers/disk_catalog_rocks.h (internal: no RocksDB type leaves tiers/)

// One record as the catalog holds it.
struct CatalogRecord {
  DiskKey key;  // depth included for KV too (stored in the value)
  PageHash parent;
  DiskExtent extent;  // file, offset, length
  uint64_t checksum = 0;
  LayoutFingerprint fingerprint{};
  uint64_t stamp = 0;  // last-access order (higher is more recent)
  // A state of a layout without attention layers: the pages before the state's own, first page
  // first and `parent` last. Put with the record when not empty (a put that only refreshes the
  // stamp leaves it out and keeps the stored chain); ForEach fills it from the chain entry.
  std::vector<PageHash> chain;
};

// What the catalog was created for.
struct CatalogMeta {
  uint32_t format_version = kDiskFormatVersion;
  LayoutFingerprint fingerprint{};
  std::vector<std::string> paths;  // the data files, in stripe order
};

class DiskCatalog {
 public:
  // Opens (creating when missing) the database in `dir`. `sync` makes every Apply() fsync the
  // write-ahead log (survives power loss, not just process death). The folder is created 0700
  // (an existing one is made 0700, its files 0600) and RocksDB's files 0600: catalog_env.h.
  // Errors: Unavailable naming `dir` when the folder is not writable by this process; IOError or
  // Corruption naming `dir` and RocksDB's reason (e.g. the database is locked by another
  // process, or its files are damaged). `chains`: the catalog of a layout without attention
  // layers, whose states have chain entries (Apply deletes a state's chain with its record).
  static StatusOr<std::unique_ptr<DiskCatalog>> Open(const std::string& dir, bool sync,
                                                     bool chains = false);
  // Deletes the database in `dir` and everything in it (for wipe-on-mismatch).
  static Status Destroy(const std::string& dir);

  ~DiskCatalog();
  DiskCatalog(const DiskCatalog&) = delete;
  DiskCatalog& operator=(const DiskCatalog&) = delete;

  // nullopt for a fresh database; Corruption when the stored meta cannot be decoded.
  StatusOr<std::optional<CatalogMeta>> ReadMeta() const;
  Status WriteMeta(const CatalogMeta& meta);

  // Writes `puts` (with their chain entries when CatalogRecord::chain is not empty) and deletes
  // `deletes` (with their chain entries, for states of a `chains` catalog) in one atomic batch.
  Status Apply(std::span<const CatalogRecord> puts, std::span<const DiskKey> deletes);

  // Calls `fn` for every record, its chain filled from its chain entry when there is one.
  // Entries whose key or value cannot be decoded, and chain entries without a state record,
  // are passed to `bad` (with the raw key) instead; the caller decides to delete them
  // (DeleteRaw).
  Status ForEach(const std::function<void(const CatalogRecord&)>& fn,
                 const std::function<void(const std::string& raw_key)>& bad) const;
  Status DeleteRaw(std::span<const std::string> raw_keys);

  const std::string& dir() const { return dir_; }

  // Write failures. After a write fails (a full drive, an I/O error) RocksDB stops the
  // database; every write here then refuses with IOError naming the first failure, until a
  // later write closes the database and opens it again (RocksDB's crash recovery: the log is
  // replayed into an SST file, a new log started; the failed write is not in it). A write
  // tries that after a failure for lack of room once the file system has room for the memtables
  // plus kReopenMarginBytes (a statvfs per refused write, no reopen doomed to fail); after any
  // other failure, and after a failed reopen, after 1, 2, 4 ... 1024 refused writes. Reads
  // (ReadMeta, ForEach) work while stopped (not while a reopen failed). RocksDB's own recovery is
  // off (disk_catalog.cc says why).
  bool stopped() const;
  uint64_t reopens() const;  // reopens after a failed write that succeeded
  static constexpr uint64_t kReopenMarginBytes = 1 << 20;

 private:
  struct Batch;  // a RocksDB write batch (disk_catalog.cc)
  DiskCatalog(std::string dir, std::unique_ptr<CatalogDb> db, bool sync, bool chains);
  // Writes `batch`, reopening first when stopped and allowed; `what` names it in errors.
  Status Write(Batch* batch, bool sync, const char* what);
  bool MayReopenLocked();  // stop_mu_ held
  Status ReopenLocked();   // stop_mu_ held; takes db_mu_

  const std::string dir_;
  mutable std::shared_mutex db_mu_;  // exclusive only to reopen; order: stop_mu_, then db_mu_
  std::unique_ptr<CatalogDb> db_;    // guarded by db_mu_; null after a failed reopen
  const bool sync_;
  const bool chains_;
  mutable std::mutex stop_mu_;
  bool stopped_ = false;             // guarded by stop_mu_
  bool stopped_for_space_ = false;   // guarded by stop_mu_
  std::string stop_reason_;          // guarded by stop_mu_
  uint64_t memtable_bytes_ = 0;      // guarded by stop_mu_: at the failure
  uint64_t skip_ = 0, backoff_ = 0;  // guarded by stop_mu_
  uint64_t reopens_ = 0;             // guarded by stop_mu_
};

// Keys and value encodings, exposed for tests, tools and the read-only view
// (tiers/disk_catalog_reader.h).
inline constexpr char kCatalogRecordPrefix = 'R';
inline constexpr char kCatalogChainPrefix = 'C';
inline constexpr char kCatalogMetaKey[] = "M";
// kCatalogRecordPrefix + DiskKeyIdentity(key): the RocksDB key of `key`'s record.
std::string CatalogRecordKey(const DiskKey& key);
std::string EncodeCatalogValue(const CatalogRecord& record);
std::optional<CatalogRecord> DecodeCatalogRecord(std::string_view raw_key, std::string_view value);
// kCatalogChainPrefix + DiskKeyIdentity(key): the RocksDB key of state `key`'s chain entry.
std::string CatalogChainKey(const DiskKey& key);
// A chain entry's value: a version byte (1), a 32-bit little-endian count, then the hashes.
std::string EncodeCatalogChain(std::span<const PageHash> chain);
// The state key a chain entry's RocksDB key names and the chain its value holds; nullopt when
// either cannot be decoded (or the key names a KV page).
std::optional<std::pair<DiskKey, std::vector<PageHash>>> DecodeCatalogChain(
    std::string_view raw_key, std::string_view value);
// The meta entry's value: the format version (32-bit little-endian), the 32 fingerprint bytes,
// a 32-bit path count (at most kMaxDiskFiles), then each path as a 32-bit length (at most 4096)
// and its bytes.
std::string EncodeCatalogMeta(const CatalogMeta& meta);
// Decodes EncodeCatalogMeta's output; Corruption naming `catalog_dir` on any other value.
StatusOr<CatalogMeta> DecodeCatalogMeta(std::string_view value, const std::string& catalog_dir);
// Whether `chain` (the hashes of the pages before a pure SSM state's own, first page first) leads
// to state `key` taken after its page whose parent is `parent`, at `page_size_tokens` per page.
bool ChainFitsState(const DiskKey& key, const PageHash& parent, std::span<const PageHash> chain,
                    uint64_t page_size_tokens);

// The chain entries of a scan, handed to their states' records. A scan in key order meets every
// chain entry ('C') before the records ('R'), so: Add each chain entry, then Attach each record.
class CatalogChains {
 public:
  // A chain entry; false when its key or value cannot be decoded.
  bool Add(std::string_view raw_key, std::string_view value);
  // Moves the chain of `record`'s state (if there is one) into record->chain.
  void Attach(CatalogRecord* record);
  // The raw keys of the chain entries no record took (their states are gone).
  std::vector<std::string> LeftOver() const;

 private:
  std::unordered_map<std::string, std::vector<PageHash>> by_state_;  // DiskKeyIdentity -> chain
};

}  // namespace cachepawl
