// DiskCatalog: the RocksDB database that says which extent of which data file holds which
// record, and which layout the disk tier was created for.
//
// Keys: "R" + DiskKeyIdentity(key) -> an encoded CatalogRecord; "M" -> CatalogMeta.
// Invariant 4 is the caller's (DiskTier's): Apply() a put only after the data write completed,
// and reuse an extent only after an Apply() that deleted the record naming it returned OK.
// Apply() writes its puts and deletes in one WriteBatch, so either all land or none.
//
// Thread safety: all methods may be called concurrently (RocksDB serializes writes).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "index/page_hash.h"
#include "store/status.h"
#include "tiers/disk_extent_allocator.h"
#include "tiers/disk_record.h"

namespace rocksdb {
class DB;
}

namespace cachepawl {

// One record as the catalog holds it.
struct CatalogRecord {
  DiskKey key;  // depth included for KV too (stored in the value)
  PageHash parent;
  DiskExtent extent;  // file, offset, length
  uint64_t checksum = 0;
  LayoutFingerprint fingerprint{};
  uint64_t stamp = 0;  // last-access order (higher is more recent)
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
  // write-ahead log (survives power loss, not just process death). Errors: IOError or
  // Corruption naming `dir` and RocksDB's reason (e.g. the database is locked by another
  // process, or its files are damaged).
  static StatusOr<std::unique_ptr<DiskCatalog>> Open(const std::string& dir, bool sync);
  // Deletes the database in `dir` and everything in it (for wipe-on-mismatch).
  static Status Destroy(const std::string& dir);

  ~DiskCatalog();
  DiskCatalog(const DiskCatalog&) = delete;
  DiskCatalog& operator=(const DiskCatalog&) = delete;

  // nullopt for a fresh database; Corruption when the stored meta cannot be decoded.
  StatusOr<std::optional<CatalogMeta>> ReadMeta() const;
  Status WriteMeta(const CatalogMeta& meta);

  // Writes `puts` and deletes `deletes` in one atomic batch.
  Status Apply(std::span<const CatalogRecord> puts, std::span<const DiskKey> deletes);

  // Calls `fn` for every record. Entries whose key or value cannot be decoded are passed to
  // `bad` (with the raw key) instead; the caller decides to delete them (DeleteRaw).
  Status ForEach(const std::function<void(const CatalogRecord&)>& fn,
                 const std::function<void(const std::string& raw_key)>& bad) const;
  Status DeleteRaw(std::span<const std::string> raw_keys);

  const std::string& dir() const { return dir_; }

 private:
  DiskCatalog(std::string dir, std::unique_ptr<rocksdb::DB> db, bool sync);
  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  bool sync_;
};

// Keys and value encodings, exposed for tests and tools (cachepawl dump reads the catalog as a
// RocksDB secondary instance).
inline constexpr char kCatalogRecordPrefix = 'R';
inline constexpr char kCatalogMetaKey[] = "M";
// kCatalogRecordPrefix + DiskKeyIdentity(key): the RocksDB key of `key`'s record.
std::string CatalogRecordKey(const DiskKey& key);
std::string EncodeCatalogValue(const CatalogRecord& record);
std::optional<CatalogRecord> DecodeCatalogRecord(std::string_view raw_key, std::string_view value);
// The meta entry's value; Corruption naming `catalog_dir` when it cannot be decoded.
StatusOr<CatalogMeta> DecodeCatalogMeta(std::string_view value, const std::string& catalog_dir);
// Reads and decodes the meta entry of the catalog open as `db` (primary or secondary): nullopt
// when there is none; IOError or Corruption naming `catalog_dir` otherwise.
StatusOr<std::optional<CatalogMeta>> ReadCatalogMeta(rocksdb::DB& db,
                                                     const std::string& catalog_dir);

}  // namespace cachepawl
