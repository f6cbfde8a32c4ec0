// The RocksDB environment of the disk tier's catalog (tiers/disk_catalog.h): which file system
// its files go through, and where its log lines go.
//
// Files: page hashes derive from prompt tokens, so a catalog another local user can read tells
// them which prompts were served. CatalogEnv()'s file system forwards to RocksDB's POSIX file
// system, except that every file the catalog's RocksDB creates (SST, WAL, MANIFEST, CURRENT,
// IDENTITY, OPTIONS, LOCK, temp files, an info log) is created with mode 0600 and every folder
// with mode 0700, whatever the process umask. It is the catalog's own Env: RocksDB's default Env
// (which an embedding engine's own RocksDB may use) is not changed.
//
// Log: CatalogLogger() sends RocksDB's warnings and errors to spdlog (the store's log), named by
// the catalog folder; there is no LOG file. (RocksDB 7.8's file logger aborts the process, in a
// build with assertions, when it writes again after a write failed: on a full disk.)
//
// Internal to tiers/ (only tiers/*.cc include it): RocksDB links privately to cachepawl_tiers.
//
// Thread safety: both may be called from any thread; what they return is thread-safe.
// Ownership: CatalogEnv() is process-wide and never destroyed (RocksDB's background threads,
// shared with the default Env, may use it until the process exits).
#pragma once

#include <memory>
#include <string>

namespace rocksdb {
class Env;
class Logger;
}  // namespace rocksdb

namespace cachepawl {

rocksdb::Env* CatalogEnv();

// A logger for the catalog in `dir`: WARN and above go to spdlog (warn; error for ERROR and
// FATAL), prefixed "catalog '<dir>': "; lower levels are dropped.
std::shared_ptr<rocksdb::Logger> CatalogLogger(const std::string& dir);

}  // namespace cachepawl
