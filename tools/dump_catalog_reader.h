// CatalogReader: a read-only view of a disk tier's catalog (tiers/disk_catalog.h) for
// `cachepawl dump`, safe while a store has the catalog open.
//
// It opens the RocksDB database as a *secondary* instance (RocksDB's supported way to read a
// database another process is writing; the secondary keeps its own log files in a temporary
// folder removed on destruction) and never writes to the store's folder. DiskCatalog has no
// read-only open of its own; the record encoding is shared with it (DecodeCatalogRecord), the
// meta entry is decoded here the way DiskCatalog::ReadMeta decodes it.
//
// Errors name the folder: NotFound (no catalog there), Corruption (RocksDB reports damaged
// files, or the meta entry cannot be decoded), IOError (anything else RocksDB says).
//
// Thread safety: one thread at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/status.h"
#include "tiers/disk_catalog.h"

namespace rocksdb {
class DB;
}

namespace cachepawl::tools {

class CatalogReader {
 public:
  // `catalog_dir` is the RocksDB folder (<store dir>/catalog).
  static StatusOr<std::unique_ptr<CatalogReader>> Open(const std::string& catalog_dir);
  ~CatalogReader();
  CatalogReader(const CatalogReader&) = delete;
  CatalogReader& operator=(const CatalogReader&) = delete;

  // Brings the view up to date with the primary's latest writes (a no-op when none runs).
  Status CatchUp();

  // nullopt when the catalog has no meta entry (not a store's catalog, or never finished).
  StatusOr<std::optional<CatalogMeta>> ReadMeta() const;

  struct Scan {
    std::vector<CatalogRecord> records;      // a pure SSM layout's states with their chains
    std::vector<std::string> bad_keys;       // record or chain entries that cannot be decoded
    std::vector<std::string> unknown_keys;   // entries that are neither records, chains nor meta
    std::vector<std::string> orphan_chains;  // chain entries without their state's record
  };
  StatusOr<Scan> ReadAll() const;

  // The record stored for `key` now (after CatchUp), or nullopt.
  StatusOr<std::optional<CatalogRecord>> Get(const DiskKey& key) const;

  const std::string& dir() const { return dir_; }

 private:
  CatalogReader(std::string dir, std::string secondary_dir, std::unique_ptr<rocksdb::DB> db);
  std::string dir_;
  std::string secondary_dir_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace cachepawl::tools
