#include "tiers/disk_catalog_reader.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "tiers/disk_catalog_rocks.h"

namespace cachepawl {
namespace {

// A missing file is nothing to read (see MissingCatalogFile).
Status ReaderStatus(const rocksdb::Status& s, const std::string& context) {
  return FromRocks(s, context, MissingCatalogFile::kNotFound);
}

}  // namespace

std::optional<std::string> MissingCatalogDatabase(const std::string& catalog_dir) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(catalog_dir) / "CURRENT", ec)) {
    return std::nullopt;
  }
  return "its CURRENT file is missing";
}

DiskCatalogReader::DiskCatalogReader(std::string dir, std::string secondary_dir,
                                     std::unique_ptr<CatalogDb> db)
    : dir_(std::move(dir)), secondary_dir_(std::move(secondary_dir)), db_(std::move(db)) {}

DiskCatalogReader::~DiskCatalogReader() {
  db_.reset();  // closes the secondary before its folder goes
  std::error_code ec;
  std::filesystem::remove_all(secondary_dir_, ec);
}

StatusOr<std::unique_ptr<DiskCatalogReader>> DiskCatalogReader::Open(
    const std::string& catalog_dir) {
  if (auto missing = MissingCatalogDatabase(catalog_dir)) {
    return Status::NotFound("catalog '" + catalog_dir + "': no RocksDB database there (" +
                            *missing + ")");
  }
  std::error_code ec;
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
    return ReaderStatus(s, "catalog '" + catalog_dir + "' cannot be opened");
  }
  std::unique_ptr<DiskCatalogReader> reader(
      new DiskCatalogReader(catalog_dir, secondary, std::make_unique<CatalogDb>(raw)));
  CACHEPAWL_RETURN_IF_ERROR(reader->CatchUp());
  return reader;
}

Status DiskCatalogReader::CatchUp() {
  return ReaderStatus(db_->db->TryCatchUpWithPrimary(), "catalog '" + dir_ + "': catching up");
}

std::optional<int> DiskCatalogReader::HolderPid() const {
  const std::string lock_file = (std::filesystem::path(dir_) / "LOCK").string();
  const int fd = ::open(lock_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  std::optional<int> holder;
  if (::fcntl(fd, F_GETLK, &lock) == 0 && lock.l_type != F_UNLCK) holder = lock.l_pid;
  ::close(fd);
  return holder;
}

StatusOr<std::optional<CatalogMeta>> DiskCatalogReader::ReadMeta() const {
  return ReadCatalogMeta(*db_->db, dir_);
}

StatusOr<DiskCatalogReader::Scan> DiskCatalogReader::ReadAll() const {
  Scan scan;
  CatalogChains chains;  // key order: every chain entry comes before the records
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view k(it->key().data(), it->key().size());
    const std::string_view v(it->value().data(), it->value().size());
    if (k == kCatalogMetaKey) continue;
    if (!k.empty() && k[0] == kCatalogChainPrefix) {
      if (!chains.Add(k, v)) scan.bad_keys.emplace_back(k);
      continue;
    }
    if (k.empty() || k[0] != kCatalogRecordPrefix) {
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
  CACHEPAWL_RETURN_IF_ERROR(ReaderStatus(it->status(), "catalog '" + dir_ + "': scan"));
  scan.orphan_chains = chains.LeftOver();
  return scan;
}

StatusOr<std::optional<CatalogRecord>> DiskCatalogReader::Get(const DiskKey& key) const {
  const std::string raw = CatalogRecordKey(key);
  std::string value;
  rocksdb::Status s = db_->db->Get(rocksdb::ReadOptions(), raw, &value);
  if (s.IsNotFound()) return std::optional<CatalogRecord>();
  if (!s.ok()) return ReaderStatus(s, "catalog '" + dir_ + "': get");
  auto rec = DecodeCatalogRecord(raw, value);
  if (!rec) return Status::Corruption("catalog '" + dir_ + "': entry of " + key.ToString());
  return std::optional<CatalogRecord>(*rec);
}

}  // namespace cachepawl
