// The RocksDB side of the disk tier's catalog, internal to tiers/ (only its .cc files include
// this header; no header outside tiers/ names a RocksDB type): the handle both the catalog
// (tiers/disk_catalog.h) and its read-only view (tiers/disk_catalog_reader.h) hold, the one
// translation of a RocksDB status into ours, and the reading of the meta entry they share.
//
// Thread safety: CatalogDb is as thread-safe as rocksdb::DB; the functions are pure.
// Ownership: CatalogDb owns its database and closes it when destroyed.
#pragma once

#include <rocksdb/db.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tiers/disk_catalog.h"
#include "vocab/status.h"

namespace cachepawl {

// An open catalog database (primary or secondary); closed when destroyed.
struct CatalogDb {
  explicit CatalogDb(rocksdb::DB* opened) : db(opened) {}
  ~CatalogDb() {
    if (db) db->Close().PermitUncheckedError();
  }
  CatalogDb(const CatalogDb&) = delete;
  CatalogDb& operator=(const CatalogDb&) = delete;
  std::unique_ptr<rocksdb::DB> db;
  // One DB::Write at a time. RocksDB orders concurrent writers itself, through a write thread
  // whose synchronization Debian's uninstrumented build hides from ThreadSanitizer (its group
  // commit copies one writer's batch on another's thread). The catalog's writes are few and
  // batched, so they are serialized here, where the order is visible. Only catalog writers wait
  // on it: never a read, and never DiskTier's mutex (tiers/disk_tier.h).
  std::mutex write_mu;
};

// How a file RocksDB cannot find is reported. The catalog itself (the store owns the folder):
// a file of its database missing is damage, IOError. The read-only view (`cachepawl dump`):
// nothing to read there, NotFound.
enum class MissingCatalogFile { kIOError, kNotFound };

// OK for OK; otherwise `context` + ": " + RocksDB's reason, as Corruption (damaged files),
// NotFound (RocksDB's NotFound; and a missing file when `missing` says so) or IOError (the rest).
Status FromRocks(const rocksdb::Status& s, const std::string& context,
                 MissingCatalogFile missing = MissingCatalogFile::kIOError);

// Reads and decodes the meta entry of the catalog open as `db`: nullopt when there is none;
// IOError or Corruption naming `catalog_dir` otherwise.
StatusOr<std::optional<CatalogMeta>> ReadCatalogMeta(rocksdb::DB& db,
                                                     const std::string& catalog_dir);

}  // namespace cachepawl
