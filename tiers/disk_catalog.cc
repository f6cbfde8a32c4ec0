#include "tiers/disk_catalog.h"

#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "tiers/catalog_env.h"
#include "tiers/disk_catalog_rocks.h"
#include "tiers/disk_folders.h"

namespace cachepawl {
namespace {

constexpr char kRecordPrefix = kCatalogRecordPrefix;
constexpr char kChainPrefix = kCatalogChainPrefix;
constexpr const char* kMetaKey = kCatalogMetaKey;
constexpr uint8_t kValueVersion = 1;
constexpr uint8_t kChainVersion = 1;
// Chains are at most PrefixIndex's depth limit long (16,777,215 pages).
constexpr uint32_t kMaxChain = (1u << 24) - 1;
constexpr size_t kValueBytes = 1 + 4 + 8 + 8 + 8 + 32 + 32 + 8 + 8;

class Writer {
 public:
  template <typename T>
  void Int(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  void Bytes(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
  std::string out;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Int(T* v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool Bytes(void* p, size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

// After a failed write RocksDB stops the database; the catalog closes and reopens it when the
// drive has room (DiskCatalog::Write). RocksDB's own recovery (a thread that calls Resume() once
// there is room, or retries an I/O error it deems retryable) is turned off: in 7.8, when the
// failed write was the first to its log, Resume() keeps that log, and the next write to it aborts
// the process in a build with assertions (WritableFileWriter::sync_without_flush_called_).
class NoAutomaticRecovery final : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status bg_error,
                            bool* auto_recovery) override {
    bg_error.PermitUncheckedError();
    *auto_recovery = false;
  }
};

rocksdb::Options CatalogOptions(const std::string& dir) {
  rocksdb::Options o;
  o.listeners.push_back(std::make_shared<NoAutomaticRecovery>());
  o.max_bgerror_resume_count = 0;
  o.create_if_missing = true;
  o.max_open_files = 64;
  // Private files (0600, folders 0700) and no LOG file: tiers/catalog_env.h.
  o.env = CatalogEnv();
  o.info_log = CatalogLogger(dir);
  o.info_log_level = rocksdb::WARN_LEVEL;
  o.write_buffer_size = 8 << 20;
  o.max_background_jobs = 1;
  o.paranoid_checks = true;
  // The catalog is written all the time and read only at open (a full scan) and for the meta
  // key: a vector memtable appends in O(1) and sorts once when scanned or flushed, where the
  // default skip list spent ~10% of the disk path's CPU placing random page hashes.
  o.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  o.allow_concurrent_memtable_write = false;
  return o;
}

}  // namespace

struct DiskCatalog::Batch {
  rocksdb::WriteBatch rocks;
};

Status FromRocks(const rocksdb::Status& s, const std::string& context, MissingCatalogFile missing) {
  if (s.ok()) return Status::OK();
  if (s.IsCorruption()) return Status::Corruption(context + ": " + s.ToString());
  if (s.IsNotFound() || (missing == MissingCatalogFile::kNotFound && s.IsPathNotFound())) {
    return Status::NotFound(context + ": " + s.ToString());
  }
  return Status::IOError(context + ": " + s.ToString());
}

std::string CatalogRecordKey(const DiskKey& key) {
  std::string raw(1, kRecordPrefix);
  raw += DiskKeyIdentity(key);
  return raw;
}

std::string EncodeCatalogValue(const CatalogRecord& r) {
  Writer w;
  w.Int<uint8_t>(kValueVersion);
  w.Int<uint32_t>(r.extent.file);
  w.Int<uint64_t>(r.extent.offset);
  w.Int<uint64_t>(r.extent.bytes);
  w.Int<uint64_t>(r.checksum);
  w.Bytes(r.parent.bytes.data(), 32);
  w.Bytes(r.fingerprint.data(), 32);
  w.Int<uint64_t>(r.key.depth);
  w.Int<uint64_t>(r.stamp);
  return std::move(w.out);
}

std::optional<CatalogRecord> DecodeCatalogRecord(std::string_view raw_key, std::string_view value) {
  if (raw_key.empty() || raw_key[0] != kRecordPrefix) return std::nullopt;
  auto key = ParseDiskKeyIdentity(raw_key.substr(1));
  if (!key || value.size() != kValueBytes) return std::nullopt;
  CatalogRecord r;
  r.key = *key;
  Reader rd(value);
  uint8_t version = 0;
  uint64_t depth = 0;
  if (!rd.Int(&version) || version != kValueVersion || !rd.Int(&r.extent.file) ||
      !rd.Int(&r.extent.offset) || !rd.Int(&r.extent.bytes) || !rd.Int(&r.checksum) ||
      !rd.Bytes(r.parent.bytes.data(), 32) || !rd.Bytes(r.fingerprint.data(), 32) ||
      !rd.Int(&depth) || !rd.Int(&r.stamp) || !rd.done()) {
    return std::nullopt;
  }
  if (r.key.kind == Kind::kMamba && depth != r.key.depth) return std::nullopt;
  r.key.depth = depth;
  return r;
}

std::string CatalogChainKey(const DiskKey& key) {
  std::string raw(1, kChainPrefix);
  raw += DiskKeyIdentity(key);
  return raw;
}

std::string EncodeCatalogChain(std::span<const PageHash> chain) {
  Writer w;
  w.Int<uint8_t>(kChainVersion);
  w.Int<uint32_t>(static_cast<uint32_t>(chain.size()));
  for (const PageHash& h : chain) w.Bytes(h.bytes.data(), 32);
  return std::move(w.out);
}

std::optional<std::pair<DiskKey, std::vector<PageHash>>> DecodeCatalogChain(
    std::string_view raw_key, std::string_view value) {
  if (raw_key.empty() || raw_key[0] != kChainPrefix) return std::nullopt;
  auto key = ParseDiskKeyIdentity(raw_key.substr(1));
  if (!key || key->kind != Kind::kMamba) return std::nullopt;
  Reader rd(value);
  uint8_t version = 0;
  uint32_t n = 0;
  if (!rd.Int(&version) || version != kChainVersion || !rd.Int(&n) || n > kMaxChain ||
      value.size() != 5 + uint64_t{n} * 32) {
    return std::nullopt;
  }
  std::vector<PageHash> chain(n);
  for (PageHash& h : chain) (void)rd.Bytes(h.bytes.data(), 32);
  return std::make_pair(*key, std::move(chain));
}

DiskCatalog::DiskCatalog(std::string dir, std::unique_ptr<CatalogDb> db, bool sync, bool chains)
    : dir_(std::move(dir)), db_(std::move(db)), sync_(sync), chains_(chains) {}

DiskCatalog::~DiskCatalog() = default;  // CatalogDb closes the database

StatusOr<std::unique_ptr<DiskCatalog>> DiskCatalog::Open(const std::string& dir, bool sync,
                                                         bool chains) {
  CACHEPAWL_RETURN_IF_ERROR(PrepareFolder(dir, FolderOwner::kStore, "catalog"));
  // RocksDB would fail on its first new file with a message naming that file; name the folder.
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    return Status::Unavailable(
        "catalog '" + dir + "': the folder is not writable by this process (" + std::strerror(err) +
        "); the store writes its catalog there: fix the folder's owner or "
        "mode, or give another disk.dir");
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(CatalogOptions(dir), dir, &raw);
  if (!s.ok()) return FromRocks(s, "catalog '" + dir + "' cannot be opened");
  return std::unique_ptr<DiskCatalog>(
      new DiskCatalog(dir, std::make_unique<CatalogDb>(raw), sync, chains));
}

Status DiskCatalog::Destroy(const std::string& dir) {
  return FromRocks(rocksdb::DestroyDB(dir, CatalogOptions(dir)),
                   "catalog '" + dir + "' cannot be destroyed");
}

StatusOr<CatalogMeta> DecodeCatalogMeta(std::string_view value, const std::string& catalog_dir) {
  CatalogMeta m;
  Reader rd(value);
  uint32_t n = 0;
  bool good = rd.Int(&m.format_version) && rd.Bytes(m.fingerprint.data(), 32) && rd.Int(&n) &&
              n <= kMaxDiskFiles;
  for (uint32_t i = 0; good && i < n; ++i) {
    uint32_t len = 0;
    good = rd.Int(&len) && len <= 4096;
    std::string p(good ? len : 0, '\0');
    good = good && rd.Bytes(p.data(), len);
    m.paths.push_back(std::move(p));
  }
  if (!good || !rd.done()) {
    return Status::Corruption("catalog '" + catalog_dir + "': meta entry of " +
                              std::to_string(value.size()) + " bytes cannot be decoded");
  }
  return m;
}

StatusOr<std::optional<CatalogMeta>> ReadCatalogMeta(rocksdb::DB& db,
                                                     const std::string& catalog_dir) {
  std::string value;
  rocksdb::Status s = db.Get(rocksdb::ReadOptions(), kMetaKey, &value);
  if (s.IsNotFound()) return std::optional<CatalogMeta>();
  if (!s.ok()) return FromRocks(s, "catalog '" + catalog_dir + "': reading meta");
  auto m = DecodeCatalogMeta(value, catalog_dir);
  if (!m.ok()) return m.status();
  return std::optional<CatalogMeta>(std::move(m).value());
}

StatusOr<std::optional<CatalogMeta>> DiskCatalog::ReadMeta() const {
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return Status::IOError("catalog '" + dir_ + "': reading meta: the catalog is closed");
  return ReadCatalogMeta(*db_->db, dir_);
}

std::string EncodeCatalogMeta(const CatalogMeta& m) {
  Writer w;
  w.Int<uint32_t>(m.format_version);
  w.Bytes(m.fingerprint.data(), 32);
  w.Int<uint32_t>(static_cast<uint32_t>(m.paths.size()));
  for (const std::string& p : m.paths) {
    w.Int<uint32_t>(static_cast<uint32_t>(p.size()));
    w.Bytes(p.data(), p.size());
  }
  return std::move(w.out);
}

Status DiskCatalog::WriteMeta(const CatalogMeta& m) {
  Batch batch;
  batch.rocks.Put(kMetaKey, EncodeCatalogMeta(m));
  return Write(&batch, /*sync=*/true, "writing meta");
}

uint64_t DiskCatalog::reopens() const {
  std::lock_guard<std::mutex> lock(stop_mu_);
  return reopens_;
}

bool DiskCatalog::stopped() const {
  std::lock_guard<std::mutex> lock(stop_mu_);
  return stopped_;
}

bool DiskCatalog::MayReopenLocked() {
  if (skip_ > 0) {
    --skip_;
    return false;
  }
  if (!stopped_for_space_) return true;
  // The reopen replays the log into an SST file and starts a new log: try only when the file
  // system has room for them (a statvfs per refused write, not a reopen doomed to fail).
  struct statvfs vfs;
  if (::statvfs(dir_.c_str(), &vfs) != 0) return true;
  return uint64_t{vfs.f_bavail} * vfs.f_frsize >= memtable_bytes_ + kReopenMarginBytes;
}

Status DiskCatalog::ReopenLocked() {
  std::unique_lock<std::shared_mutex> db_lock(db_mu_);
  // Closing a stopped database is safe (its failed log is not written again); its error is the
  // one already reported.
  db_.reset();
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(CatalogOptions(dir_), dir_, &raw);
  if (!s.ok()) return FromRocks(s, "catalog '" + dir_ + "': reopening after a failed write");
  db_ = std::make_unique<CatalogDb>(raw);
  return Status::OK();
}

Status DiskCatalog::Write(Batch* batch, bool sync, const char* what) {
  const std::string context = "catalog '" + dir_ + "': " + what;
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopped_) {
      if (!MayReopenLocked()) {
        return Status::IOError(context + ": writes are stopped since one failed (" + stop_reason_ +
                               "); they resume when the drive has room again");
      }
      if (Status r = ReopenLocked(); !r.ok()) {
        // Back off: the next 1, 2, 4 ... 1024 writes do not retry.
        backoff_ = std::min<uint64_t>(backoff_ == 0 ? 1 : backoff_ * 2, 1024);
        skip_ = backoff_;
        return r;
      }
      stopped_ = false;
      backoff_ = 0;
      ++reopens_;
      spdlog::warn("catalog '{}': reopened, writes resume (they stopped after: {})", dir_,
                   stop_reason_);
    }
  }
  rocksdb::Status s;
  uint64_t memtables = 0;
  {
    std::shared_lock<std::shared_mutex> db_lock(db_mu_);
    if (!db_) return Status::IOError(context + ": the catalog is closed");
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    std::lock_guard<std::mutex> write_lock(db_->write_mu);  // one writer at a time
    s = db_->db->Write(wo, &batch->rocks);
    if (!s.ok()) (void)db_->db->GetIntProperty("rocksdb.cur-size-all-mem-tables", &memtables);
  }
  if (!s.ok() && !s.IsBusy() && !s.IsTryAgain() && !s.IsIncomplete()) {
    // RocksDB stops the database after a failed write; it is not written again: a later write
    // closes and reopens it (see stopped()).
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (!stopped_) spdlog::warn("catalog '{}': {}; writes stop", dir_, s.ToString());
    stopped_ = true;
    stopped_for_space_ = s.IsNoSpace();
    stop_reason_ = s.ToString();
    memtable_bytes_ = memtables;
  }
  return FromRocks(s, context);
}

Status DiskCatalog::Apply(std::span<const CatalogRecord> puts, std::span<const DiskKey> deletes) {
  if (puts.empty() && deletes.empty()) return Status::OK();
  Batch batch;
  for (const DiskKey& k : deletes) {
    batch.rocks.Delete(CatalogRecordKey(k));
    if (chains_ && k.kind == Kind::kMamba) batch.rocks.Delete(CatalogChainKey(k));
  }
  for (const CatalogRecord& r : puts) {
    batch.rocks.Put(CatalogRecordKey(r.key), EncodeCatalogValue(r));
    if (!r.chain.empty()) batch.rocks.Put(CatalogChainKey(r.key), EncodeCatalogChain(r.chain));
  }
  return Write(&batch, sync_, "write batch");
}

Status DiskCatalog::ForEach(const std::function<void(const CatalogRecord&)>& fn,
                            const std::function<void(const std::string& raw_key)>& bad) const {
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return Status::IOError("catalog '" + dir_ + "': scan: the catalog is closed");
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(rocksdb::ReadOptions()));
  CatalogChains chains;  // chain entries first, held until their records come
  const std::string chain_prefix(1, kChainPrefix);
  for (it->Seek(chain_prefix); it->Valid() && it->key().starts_with(chain_prefix); it->Next()) {
    const std::string_view k(it->key().data(), it->key().size());
    if (!chains.Add(k, std::string_view(it->value().data(), it->value().size()))) {
      bad(std::string(k));
    }
  }
  CACHEPAWL_RETURN_IF_ERROR(FromRocks(it->status(), "catalog '" + dir_ + "': scan"));
  const std::string prefix(1, kRecordPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    const std::string_view k(it->key().data(), it->key().size());
    const std::string_view v(it->value().data(), it->value().size());
    auto rec = DecodeCatalogRecord(k, v);
    if (!rec) {
      bad(std::string(k));
      continue;
    }
    chains.Attach(&*rec);
    fn(*rec);
  }
  // Chains whose state record is gone (the batch that deleted it did not name them).
  for (const std::string& raw : chains.LeftOver()) bad(raw);
  return FromRocks(it->status(), "catalog '" + dir_ + "': scan");
}

bool ChainFitsState(const DiskKey& key, const PageHash& parent, std::span<const PageHash> chain,
                    uint64_t page_size_tokens) {
  if (key.kind != Kind::kMamba || page_size_tokens == 0) return false;
  if (key.depth % page_size_tokens != 0 || key.depth / page_size_tokens != chain.size() + 1) {
    return false;
  }
  return chain.empty() ? parent.IsZero() : chain.back() == parent;
}

bool CatalogChains::Add(std::string_view raw_key, std::string_view value) {
  auto chain = DecodeCatalogChain(raw_key, value);
  if (!chain) return false;
  by_state_[std::string(raw_key.substr(1))] = std::move(chain->second);
  return true;
}

void CatalogChains::Attach(CatalogRecord* record) {
  if (record->key.kind != Kind::kMamba || by_state_.empty()) return;
  auto c = by_state_.find(DiskKeyIdentity(record->key));
  if (c == by_state_.end()) return;
  record->chain = std::move(c->second);
  by_state_.erase(c);
}

std::vector<std::string> CatalogChains::LeftOver() const {
  std::vector<std::string> raw;
  for (const auto& [id, chain] : by_state_) raw.push_back(std::string(1, kChainPrefix) + id);
  return raw;
}

Status DiskCatalog::DeleteRaw(std::span<const std::string> raw_keys) {
  if (raw_keys.empty()) return Status::OK();
  Batch batch;
  for (const std::string& k : raw_keys) batch.rocks.Delete(k);
  return Write(&batch, sync_, "deleting bad entries");
}

}  // namespace cachepawl
