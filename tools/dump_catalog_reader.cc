#include "tools/dump_catalog_reader.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace cachepawl::tools {
namespace {

constexpr char kRecordPrefix = kCatalogRecordPrefix;
constexpr const char* kMetaKey = kCatalogMetaKey;

Status FromRocks(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return Status::OK();
  if (s.IsCorruption()) return Status::Corruption(context + ": " + s.ToString());
  if (s.IsNotFound() || s.IsPathNotFound()) return Status::NotFound(context + ": " + s.ToString());
  return Status::IOError(context + ": " + s.ToString());
}

}  // namespace

CatalogReader::CatalogReader(std::string dir, std::string secondary_dir,
                             std::unique_ptr<rocksdb::DB> db)
    : dir_(std::move(dir)), secondary_dir_(std::move(secondary_dir)), db_(std::move(db)) {}

CatalogReader::~CatalogReader() {
  if (db_) db_->Close().PermitUncheckedError();
  db_.reset();
  std::error_code ec;
  std::filesystem::remove_all(secondary_dir_, ec);
}

StatusOr<std::unique_ptr<CatalogReader>> CatalogReader::Open(const std::string& catalog_dir) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(catalog_dir) / "CURRENT", ec)) {
    return Status::NotFound("catalog '" + catalog_dir + "': no RocksDB database there");
  }
  const char* base = std::getenv("TMPDIR");
  std::string secondary =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/cachepawl-dump-XXXXXX";
  if (::mkdtemp(secondary.data()) == nullptr) {
    return Status::FromErrno("mkdtemp " + secondary, errno);
  }
  rocksdb::Options o;
  o.create_if_missing = false;
  o.max_open_files = -1;  // required of a secondary instance
  o.info_log_level = rocksdb::ERROR_LEVEL;
  o.paranoid_checks = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenAsSecondary(o, catalog_dir, secondary, &raw);
  if (!s.ok()) {
    std::filesystem::remove_all(secondary, ec);
    return FromRocks(s, "catalog '" + catalog_dir + "' cannot be opened");
  }
  std::unique_ptr<CatalogReader> reader(
      new CatalogReader(catalog_dir, secondary, std::unique_ptr<rocksdb::DB>(raw)));
  CACHEPAWL_RETURN_IF_ERROR(reader->CatchUp());
  return reader;
}

Status CatalogReader::CatchUp() {
  return FromRocks(db_->TryCatchUpWithPrimary(), "catalog '" + dir_ + "': catching up");
}

StatusOr<std::optional<CatalogMeta>> CatalogReader::ReadMeta() const {
  return ReadCatalogMeta(*db_, dir_);
}

StatusOr<CatalogReader::Scan> CatalogReader::ReadAll() const {
  Scan scan;
  CatalogChains chains;  // key order: every chain entry comes before the records
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view k(it->key().data(), it->key().size());
    const std::string_view v(it->value().data(), it->value().size());
    if (k == kMetaKey) continue;
    if (!k.empty() && k[0] == kCatalogChainPrefix) {
      if (!chains.Add(k, v)) scan.bad_keys.emplace_back(k);
      continue;
    }
    if (k.empty() || k[0] != kRecordPrefix) {
      scan.unknown_keys.emplace_back(k);
      continue;
    }
    if (auto rec = DecodeCatalogRecord(k, v)) {
      chains.Attach(&*rec);
      scan.records.push_back(std::move(*rec));
    } else {
      scan.bad_keys.emplace_back(k);
    }
  }
  CACHEPAWL_RETURN_IF_ERROR(FromRocks(it->status(), "catalog '" + dir_ + "': scan"));
  scan.orphan_chains = chains.LeftOver();
  return scan;
}

StatusOr<std::optional<CatalogRecord>> CatalogReader::Get(const DiskKey& key) const {
  const std::string raw = CatalogRecordKey(key);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), raw, &value);
  if (s.IsNotFound()) return std::optional<CatalogRecord>();
  if (!s.ok()) return FromRocks(s, "catalog '" + dir_ + "': get");
  auto rec = DecodeCatalogRecord(raw, value);
  if (!rec) return Status::Corruption("catalog '" + dir_ + "': entry of " + key.ToString());
  return std::optional<CatalogRecord>(*rec);
}

}  // namespace cachepawl::tools
