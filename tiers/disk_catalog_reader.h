// DiskCatalogReader: a read-only view of a disk tier's catalog (tiers/disk_catalog.h), safe while
// a store has the catalog open (`cachepawl dump` reads through it).
//
// It opens the RocksDB database as a *secondary* instance (RocksDB's supported way to read a
// database another process is writing; the secondary keeps its own log files in a temporary
// folder removed on destruction) and never writes to the catalog's folder. Records, chains and
// the meta entry are decoded as DiskCatalog decodes them (DecodeCatalogRecord, CatalogChains,
// DecodeCatalogMeta).
//
// Whether a folder holds a RocksDB database at all (MissingCatalogDatabase) and which process
// holds it open (HolderPid) are answered here too, so that no caller outside tiers/ needs
// RocksDB's file names (CURRENT, LOCK).
//
// Errors name the folder: NotFound (no catalog there, or a file of it is missing), Corruption
// (RocksDB reports damaged files, or the meta entry cannot be decoded), IOError (anything else
// RocksDB says).
//
// Thread safety: one thread at a time. Ownership: the reader owns its secondary instance and
// its temporary folder.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tiers/disk_catalog.h"
#include "vocab/status.h"

namespace cachepawl {

struct CatalogDb;  // tiers/disk_catalog_rocks.h (internal)

class DiskCatalogReader {
 public:
  // `catalog_dir` is the RocksDB folder (<store dir>/catalog). The secondary's temporary folder
  // is made under $TMPDIR (else /tmp).
  static StatusOr<std::unique_ptr<DiskCatalogReader>> Open(const std::string& catalog_dir);
  ~DiskCatalogReader();
  DiskCatalogReader(const DiskCatalogReader&) = delete;
  DiskCatalogReader& operator=(const DiskCatalogReader&) = delete;

  // Brings the view up to date with the primary's latest writes (a no-op when none runs).
  Status CatchUp();

  // nullopt when the catalog has no meta entry (not a store's catalog, or never finished).
  StatusOr<std::optional<CatalogMeta>> ReadMeta() const;

  struct Scan {
    std::vector<CatalogRecord> records;      // states of chained layouts with their chains
    std::vector<std::string> bad_keys;       // record or chain entries that cannot be decoded
    std::vector<std::string> unknown_keys;   // entries that are neither records, chains nor meta
    std::vector<std::string> orphan_chains;  // chain entries without their state's record
  };
  // Every entry, in key order.
  StatusOr<Scan> ReadAll() const;

  // The record stored for `key` now (after CatchUp), or nullopt.
  StatusOr<std::optional<CatalogRecord>> Get(const DiskKey& key) const;

  const std::string& dir() const { return dir_; }

  // The pid of another process holding the catalog open as its primary (a running store: it
  // holds a POSIX lock on RocksDB's LOCK file), if any. nullopt as well when that cannot be
  // told (the LOCK file cannot be opened). Not for a process that has the catalog open as its
  // primary itself: POSIX locks do not conflict within a process, and closing the descriptor
  // this opens would drop that process's own lock.
  [[nodiscard]] std::optional<int> HolderPid() const;

 private:
  DiskCatalogReader(std::string dir, std::string secondary_dir, std::unique_ptr<CatalogDb> db);
  std::string dir_;
  std::string secondary_dir_;
  std::unique_ptr<CatalogDb> db_;
};

// nullopt when `catalog_dir` holds a RocksDB database (its CURRENT file, which names the live
// manifest, is there: the check DiskCatalogReader::Open makes first); else what is missing,
// without the folder's name: "its CURRENT file is missing". The folder itself may be missing
// too; callers that tell the two apart check it first.
[[nodiscard]] std::optional<std::string> MissingCatalogDatabase(const std::string& catalog_dir);

}  // namespace cachepawl
