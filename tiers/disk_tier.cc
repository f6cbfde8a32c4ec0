#include "tiers/disk_tier.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "tiers/disk_catalog_check.h"
#include "tiers/host_memory.h"

namespace cachepawl {

// A ticket lives inside its entry (TicketPtr aliases the entry's shared_ptr): pinning a record
// allocates nothing.
struct DiskTier::Ticket {
  Entry* entry;
};

namespace {
// A record's life: kWriting (BeginWrite) -> kCommitting (its catalog put under way) ->
// kCommitted (found) -> kRemoving (its catalog delete under way) -> out of the map. A failed
// put takes it out of the map; a failed delete of Remove makes it kCommitted again.
enum class EntryState { kWriting, kCommitting, kCommitted, kRemoving };
}  // namespace

struct DiskTier::Entry {
  DiskRecordInfo info;
  KeyId id;
  EntryState state = EntryState::kWriting;
  bool in_map = true;  // false: removed or dropped; extent freed once readers == 0
  bool extent_freed = false;
  bool stamp_dirty = false;     // stamp newer than the catalog's copy
  int readers = 0;              // in-flight reads
  std::vector<PageHash> chain;  // a pending state write without KV: its chain, until committed
  Ticket ticket{this};
  bool found() const { return state == EntryState::kCommitted; }
};

DiskTier::KeyId::KeyId(const DiskKey& key) {
  bytes[0] = static_cast<uint8_t>(key.kind);
  std::memcpy(bytes.data() + 1, key.hash.bytes.data(), 32);
  size = 33;
  if (key.kind == Kind::kMamba) {  // big-endian depth, as DiskKeyIdentity
    for (int i = 7; i >= 0; --i) bytes[size++] = static_cast<uint8_t>(key.depth >> (8 * i));
  }
}

size_t DiskTier::KeyIdHash::operator()(const KeyId& k) const {
  uint64_t h, depth = 0;
  std::memcpy(&h, k.bytes.data() + 1, 8);
  std::memcpy(&depth, k.bytes.data() + 33, 8);
  return static_cast<size_t>(h ^ (depth * 0x9E3779B97F4A7C15ull) ^ k.bytes[0]);
}

namespace {

std::string FingerprintHex(const LayoutFingerprint& f) {
  PageHash h;
  h.bytes = f;
  return h.ToHex();
}

std::string JoinPaths(const std::vector<std::string>& paths) {
  std::string out = "[";
  for (size_t i = 0; i < paths.size(); ++i) out += (i ? ", '" : "'") + paths[i] + "'";
  return out + "]";
}

}  // namespace

DiskTier::DiskTier(DiskTierOptions options, ModelLayout layout)
    : options_(std::move(options)), layout_(std::move(layout)) {}

DiskTier::~DiskTier() {
  Status s = Close();
  if (!s.ok()) spdlog::warn("disk tier: close: {}", s.ToString());
}

StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options,
                                                   const ModelLayout& layout) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  CACHEPAWL_RETURN_IF_ERROR(layout.Validate().WithContext("layout"));
  std::unique_ptr<DiskTier> tier(new DiskTier(options, layout));
  DiskTier& t = *tier;
  t.fingerprint_ = layout.Fingerprint();
  for (Kind k : kAllKinds) {
    const int i = static_cast<int>(k);
    const bool used = layout.Stores(k);
    t.payload_bytes_[i] = used ? layout.RecordBytes(k) : 0;
    t.record_bytes_[i] = used ? RecordSlotBytes(layout, k) : 0;
  }
  const std::vector<std::string> data_files = options.DataFiles();
  const uint64_t n = data_files.size();
  const uint64_t per_file = options.capacity_bytes / n / kDirectIoAlignment * kDirectIoAlignment;
  const uint64_t largest = *std::max_element(t.record_bytes_.begin(), t.record_bytes_.end());
  if (per_file < largest) {
    return Status::InvalidArgument(
        "disk.capacity_bytes: " + std::to_string(options.capacity_bytes) + " gives " +
        std::to_string(per_file) + " bytes per data file, less than one record of " +
        std::to_string(largest) + " bytes (" + std::to_string(n) + " data files)");
  }
  if (largest > (1ull << 40)) {
    return Status::InvalidArgument("layout: records of " + std::to_string(largest) +
                                   " bytes exceed the disk tier's 1 TiB record limit");
  }

  // The catalog first: a mismatch must be reported before anything on disk is touched.
  const std::string catalog_dir = options.CatalogDir();
  // Without full-attention KV records (pure SSM, or every attention layer windowed) no record
  // chain reaches a state from the root: states carry their chains.
  const bool chains = !layout.Stores(Kind::kKV);
  CACHEPAWL_RETURN_IF_ERROR(PrepareFolder(options.dir, FolderOwner::kUser, "disk.dir"));
  // One owner: nothing below (reading, wiping) may touch a folder a live store uses.
  auto owner = FolderOwnerLock::Acquire(options.dir);
  if (!owner.ok()) return owner.status();
  t.owner_ = std::move(owner).value();
  auto catalog = DiskCatalog::Open(catalog_dir, options.sync_catalog, chains);
  if (!catalog.ok()) {
    // Unavailable: the folder cannot be written (permissions, a read-only mount); wiping would
    // not help and must not be tried.
    if (!options.wipe_unreadable_catalog || catalog.status().IsUnavailable()) {
      return catalog.status().WithContext(
          "to start empty, set wipe_unreadable_catalog (StoreOptions, the C and Python options, "
          "cachepawl replay --wipe-unreadable-catalog)");
    }
    spdlog::warn("disk tier: {}; wiping it", catalog.status().ToString());
    // A damaged database may not even destroy cleanly: remove the folder.
    (void)DiskCatalog::Destroy(catalog_dir);
    std::error_code ec;
    std::filesystem::remove_all(catalog_dir, ec);
    if (ec) return Status::FromErrno("removing catalog '" + catalog_dir + "'", ec.value());
    catalog = DiskCatalog::Open(catalog_dir, options.sync_catalog, chains);
    if (!catalog.ok()) return catalog.status();
  }
  t.catalog_ = std::move(catalog).value();

  auto meta = t.catalog_->ReadMeta();
  bool fresh = false;
  if (!meta.ok() && !options.wipe_on_mismatch) {
    return meta.status().WithContext(
        "to start empty, set wipe_on_layout_mismatch (StoreOptions, the C and Python options, "
        "cachepawl replay --wipe-on-layout-mismatch)");
  }
  if (meta.ok() && CheckCatalogMeta(*meta) == CatalogMetaVerdict::kMissing) fresh = true;
  if (!fresh) {
    std::string why;
    if (!meta.ok()) {
      why = meta.status().ToString();
    } else {
      const CatalogMeta& m = **meta;
      if (CheckCatalogMeta(m) != CatalogMetaVerdict::kCurrent) {
        why = "catalog '" + catalog_dir + "' has disk format version " +
              std::to_string(m.format_version) + ", this build writes " +
              std::to_string(kDiskFormatVersion);
      } else if (m.fingerprint != t.fingerprint_) {
        why = "catalog '" + catalog_dir + "' was written for layout fingerprint " +
              FingerprintHex(m.fingerprint) + ", this store's layout (" + layout.model +
              ") has fingerprint " + FingerprintHex(t.fingerprint_);
      } else if (m.paths != data_files) {
        why = "catalog '" + catalog_dir + "' was written for data files " + JoinPaths(m.paths) +
              ", now " + JoinPaths(data_files);
      }
    }
    if (!why.empty()) {
      if (!options.wipe_on_mismatch) {
        return Status::Incompatible(why +
                                    " (set wipe_on_layout_mismatch to start empty: StoreOptions, "
                                    "the C and Python options, cachepawl replay "
                                    "--wipe-on-layout-mismatch)");
      }
      spdlog::warn("disk tier: {}; wiping", why);
      t.catalog_.reset();
      CACHEPAWL_RETURN_IF_ERROR(DiskCatalog::Destroy(catalog_dir));
      CACHEPAWL_ASSIGN_OR_RETURN(t.catalog_,
                                 DiskCatalog::Open(catalog_dir, options.sync_catalog, chains));
      fresh = true;
    }
  }

  for (size_t i = 0; i < options.data_paths.size(); ++i) {
    const std::string folder = std::filesystem::path(data_files[i]).parent_path().string();
    if (folder.empty() || folder == options.dir) continue;
    CACHEPAWL_RETURN_IF_ERROR(PrepareFolder(folder, FolderOwner::kUser,
                                            "disk.data_paths[" + std::to_string(i) + "]'s folder"));
  }
  std::vector<DiskDataFiles::FileReport> reports;
  CACHEPAWL_ASSIGN_OR_RETURN(t.files_, DiskDataFiles::Open(data_files, per_file, &reports));
  t.allocator_ = std::make_unique<DiskExtentAllocator>(std::vector<uint64_t>(n, per_file));
  for (size_t i = 0; fresh && i < reports.size(); ++i) {
    // A new catalog beside a data file that was there: whatever records the file held have no
    // catalog entry (the catalog folder or its WAL was removed, or a mismatch wiped it) and are
    // dropped. Said, so that an emptied cache is never a silent surprise.
    if (!reports[i].created && reports[i].size_found > 0) {
      spdlog::warn(
          "disk tier: data file {} ({} bytes) was there but the catalog {} is new (removed, its "
          "WAL lost, or wiped): the records it held are dropped and the disk tier starts empty",
          data_files[i], reports[i].size_found, catalog_dir);
    }
  }
  if (fresh) {
    CatalogMeta m;
    m.fingerprint = t.fingerprint_;
    m.paths = data_files;
    CACHEPAWL_RETURN_IF_ERROR(t.catalog_->WriteMeta(m));
  }
  CACHEPAWL_RETURN_IF_ERROR(t.Recover(reports));
  return tier;
}

Status DiskTier::Recover(const std::vector<DiskDataFiles::FileReport>& reports) {
  std::vector<CatalogRecord> good;
  std::vector<DiskKey> drop;
  std::vector<std::string> bad_raw;
  const bool chains = !layout_.Stores(Kind::kKV);
  uint64_t bad_chains = 0;
  // A record may lie in what its file held before this open, within the file's size now.
  CatalogRecordRules rules;
  rules.fingerprint = fingerprint_;
  rules.layout = &layout_;
  for (size_t i = 0; i < reports.size(); ++i) {
    const uint64_t size =
        reports[i].created ? 0 : std::min(reports[i].size_found, files_->bytes_per_file());
    rules.files.push_back({files_->path(i), size});
  }
  CACHEPAWL_RETURN_IF_ERROR(catalog_->ForEach(
      [&](const CatalogRecord& r) {
        const bool chain_ok = !chains || r.key.kind != Kind::kMamba ||
                              ChainFitsState(r.key, r.parent, r.chain, layout_.page_size_tokens);
        bad_chains += !chain_ok;
        const bool ok = !CatalogRecordFault(r, rules).has_value() && chain_ok &&
                        allocator_->Reserve(r.extent).ok();
        if (ok) {
          good.push_back(r);
        } else {
          drop.push_back(r.key);
        }
      },
      [&](const std::string& raw) { bad_raw.push_back(raw); }));
  if (!drop.empty() || !bad_raw.empty()) {
    spdlog::warn("disk tier: recovery drops {} catalog entries ({} undecodable)",
                 drop.size() + bad_raw.size(), bad_raw.size());
    CACHEPAWL_RETURN_IF_ERROR(catalog_->Apply({}, drop));
    CACHEPAWL_RETURN_IF_ERROR(catalog_->DeleteRaw(bad_raw));
    dropped_at_open_ = drop.size() + bad_raw.size();
  }
  Count(Counter::kChainErrors, bad_chains);
  std::sort(good.begin(), good.end(),
            [](const CatalogRecord& a, const CatalogRecord& b) { return a.stamp < b.stamp; });
  std::lock_guard<std::mutex> lock(mu_);
  for (CatalogRecord& r : good) {
    if (chains) recovered_chains_.emplace(DiskKeyIdentity(r.key), std::move(r.chain));
    auto e = std::make_shared<Entry>();
    e->info = DiskRecordInfo{r.key, r.parent, r.extent, r.checksum, r.stamp};
    e->id = KeyId(r.key);
    e->state = EntryState::kCommitted;
    ++records_[static_cast<int>(r.key.kind)];
    clock_ = std::max(clock_, r.stamp);
    map_.emplace(e->id, std::move(e));
  }
  return Status::OK();
}

StatusOr<DiskTier::WritePlan> DiskTier::BeginWrite(const DiskKey& key, const PageHash& parent,
                                                   std::span<const PageHash> chain) {
  const uint64_t bytes = record_bytes(key.kind);
  if (bytes == 0) {
    return Status::InvalidArgument("key " + key.ToString() + ": the layout has no " +
                                   std::string(KindName(key.kind)) + " records");
  }
  // Only states carry chains; a window record names its page (hash, depth, parent) as a KV
  // page does.
  const bool with_chain = !layout_.Stores(Kind::kKV) && key.kind == Kind::kMamba;
  if (with_chain && !ChainFitsState(key, parent, chain, layout_.page_size_tokens)) {
    Count(Counter::kChainErrors);
    const uint64_t pages = key.depth / std::max<uint64_t>(1, layout_.page_size_tokens);
    return Status::InvalidArgument(
        "chain: " + std::to_string(chain.size()) + " hashes for " + key.ToString() +
        " (a state of a layout without attention layers is written with the hashes of the " +
        std::to_string(pages > 0 ? pages - 1 : 0) + " pages before its own, its parent last)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Status::FailedPrecondition("disk tier is closed");
  const KeyId id(key);
  auto it = map_.find(id);
  if (it != map_.end()) {
    if (!it->second->found()) {
      Count(Counter::kBusy);
      return Status::Busy("disk record " + key.ToString() + ": a " +
                          (it->second->state == EntryState::kRemoving ? "removal" : "write") +
                          " of it is in flight");
    }
    WritePlan plan;
    plan.existing = true;
    plan.extent = it->second->info.extent;
    return plan;
  }
  std::optional<DiskExtent> extent = allocator_->Allocate(bytes);
  if (!extent) {
    Count(Counter::kNoSpace);
    return Status::NoSpace(
        "disk tier full: " + std::to_string(allocator_->used_bytes()) + " of " +
        std::to_string(allocator_->capacity_bytes()) + " bytes used, largest free range " +
        std::to_string(allocator_->LargestFree()) + " < " + std::to_string(bytes) + " needed");
  }
  auto e = std::make_shared<Entry>();
  e->info.key = key;
  e->info.parent = parent;
  e->info.extent = *extent;
  e->id = id;
  if (with_chain) e->chain.assign(chain.begin(), chain.end());
  map_.emplace(id, e);
  WritePlan plan;
  plan.ticket = TicketPtr(e, &e->ticket);
  plan.extent = *extent;
  return plan;
}

bool DiskTier::BeginCatalogWriteLocked() {
  if (closed_) return false;
  ++catalog_writers_;
  return true;
}

Status DiskTier::WriteCatalog(std::span<const CatalogRecord> puts,
                              std::span<const DiskKey> deletes) {
  if (options_.before_catalog_write_for_test) options_.before_catalog_write_for_test();
  Status s = catalog_->Apply(puts, deletes);
  if (!s.ok()) Count(Counter::kCatalogErrors);
  return s;
}

void DiskTier::EndCatalogWrite() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--catalog_writers_ == 0) catalog_idle_.notify_all();
}

Status DiskTier::CommitWrites(std::span<const TicketPtr> tickets,
                              std::span<const uint64_t> checksums) {
  if (tickets.empty()) return Status::OK();
  std::vector<CatalogRecord> puts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!BeginCatalogWriteLocked()) {
      for (const TicketPtr& t : tickets) ReleaseExtentLocked(*t->entry);
      return Status::FailedPrecondition("disk tier is closed");
    }
    puts.reserve(tickets.size());
    for (size_t i = 0; i < tickets.size(); ++i) {
      Entry& e = *tickets[i]->entry;
      e.state = EntryState::kCommitting;
      CatalogRecord r;
      r.key = e.info.key;
      r.parent = e.info.parent;
      r.extent = e.info.extent;
      r.checksum = checksums[i];
      r.fingerprint = fingerprint_;
      r.stamp = clock_ + 1 + i;
      r.chain = std::move(e.chain);  // the catalog keeps it (the tier holds no copy)
      puts.push_back(std::move(r));
    }
    clock_ += tickets.size();
  }
  const Status s = WriteCatalog(puts, {});
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < tickets.size(); ++i) {
    Entry& e = *tickets[i]->entry;
    if (!s.ok()) {
      ReleaseExtentLocked(e);
      continue;
    }
    e.state = EntryState::kCommitted;
    e.info.checksum = checksums[i];
    e.info.stamp = puts[i].stamp;
    ++records_[static_cast<int>(e.info.key.kind)];
  }
  if (--catalog_writers_ == 0) catalog_idle_.notify_all();
  return s;
}

void DiskTier::ReleaseExtentLocked(Entry& e) {
  if (e.in_map) {
    map_.erase(e.id);  // the callers' tickets or shared_ptrs keep `e` alive
    e.in_map = false;
  }
  if (!e.extent_freed && e.readers == 0) {
    allocator_->Free(e.info.extent);
    e.extent_freed = true;
  }
}

void DiskTier::AbortWrite(const TicketPtr& ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = *ticket->entry;
  if (e.state != EntryState::kWriting || !e.in_map) return;
  ReleaseExtentLocked(e);
}

StatusOr<std::pair<DiskTier::TicketPtr, DiskRecordInfo>> DiskTier::BeginRead(const DiskKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Status::FailedPrecondition("disk tier is closed");
  auto it = map_.find(KeyId(key));
  if (it == map_.end() || !it->second->found()) {
    return Status::NotFound("disk record " + key.ToString() + " is not on disk");
  }
  Entry& e = *it->second;
  if (key.kind == Kind::kKV && key.depth != 0 && key.depth != e.info.key.depth) {
    return Status::NotFound("disk record " + key.ToString() + ": asked at depth " +
                            std::to_string(key.depth) + ", the record is at depth " +
                            std::to_string(e.info.key.depth));
  }
  ++e.readers;
  return std::make_pair(TicketPtr(it->second, &e.ticket), e.info);
}

void DiskTier::Drop(const std::shared_ptr<Entry>& e) {
  const DiskKey key = e->info.key;
  Status s = Status::FailedPrecondition("disk tier is closed");
  bool writing = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing = BeginCatalogWriteLocked();
  }
  if (writing) {
    s = WriteCatalog({}, std::span<const DiskKey>(&key, 1));
    EndCatalogWrite();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok()) {
    // The catalog still names the extent: never reuse it (a restart re-verifies the record).
    e->extent_freed = true;
    spdlog::warn("disk tier: dropping {}: {}", key.ToString(), s.ToString());
  }
  ReleaseExtentLocked(*e);
}

void DiskTier::EndRead(const TicketPtr& ticket, bool ok) {
  std::shared_ptr<Entry> drop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry* e = ticket->entry;
    --e->readers;
    if (ok) {
      if (e->found()) {
        e->info.stamp = ++clock_;
        e->stamp_dirty = true;
      }
    } else if (e->found()) {
      // Gone from now on (not found, never written over): its delete is written below.
      e->state = EntryState::kRemoving;
      --records_[static_cast<int>(e->info.key.kind)];
      ++dropped_on_read_;
      drop = map_.at(e->id);
    }
    if (!e->in_map) ReleaseExtentLocked(*e);
  }
  if (drop) Drop(drop);
}

std::optional<DiskRecordInfo> DiskTier::Lookup(const DiskKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(KeyId(key));
  if (it == map_.end() || !it->second->found()) return std::nullopt;
  return it->second->info;
}

std::vector<Status> DiskTier::Remove(std::span<const DiskKey> keys) {
  std::vector<Status> out(keys.size());
  std::vector<std::shared_ptr<Entry>> removing;
  std::vector<size_t> which;
  std::vector<DiskKey> deletes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool writing = BeginCatalogWriteLocked();
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = writing ? map_.find(KeyId(keys[i])) : map_.end();
      if (!writing) {
        out[i] = Status::FailedPrecondition("disk tier is closed");
      } else if (it == map_.end() || it->second->state == EntryState::kRemoving) {
        out[i] = Status::NotFound("disk record " + keys[i].ToString() + " is not on disk");
      } else if (!it->second->found()) {
        Count(Counter::kBusy);
        out[i] = Status::Busy("disk record " + keys[i].ToString() + ": a write of it is in flight");
      } else {
        it->second->state = EntryState::kRemoving;
        --records_[static_cast<int>(keys[i].kind)];
        removing.push_back(it->second);
        which.push_back(i);
        deletes.push_back(it->second->info.key);
      }
    }
    if (writing && removing.empty() && --catalog_writers_ == 0) catalog_idle_.notify_all();
  }
  if (removing.empty()) return out;
  const Status s = WriteCatalog({}, deletes);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t j = 0; j < removing.size(); ++j) {
    Entry& e = *removing[j];
    out[which[j]] = s;
    if (s.ok()) {
      ReleaseExtentLocked(e);  // readers' tickets keep `e`; the last EndRead frees the extent
      ++removes_;
    } else {
      e.state = EntryState::kCommitted;  // the catalog still has it: found again
      ++records_[static_cast<int>(e.info.key.kind)];
    }
  }
  if (--catalog_writers_ == 0) catalog_idle_.notify_all();
  return out;
}

void DiskTier::ForEachRecord(const std::function<void(const DiskRecordInfo&)>& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : map_) {
    if (e->found()) fn(e->info);
  }
}

std::unordered_map<std::string, std::vector<PageHash>> DiskTier::TakeRecoveredChains() {
  std::lock_guard<std::mutex> lock(mu_);
  std::unordered_map<std::string, std::vector<PageHash>> out;
  out.swap(recovered_chains_);
  return out;
}

DiskTierStats DiskTier::stats() const {
  DiskTierStats s;
  auto c = [&](Counter x) { return counters_[static_cast<size_t>(x)].load(); };
  s.reads = c(Counter::kReads);
  s.read_bytes = c(Counter::kReadBytes);
  s.writes = c(Counter::kWrites);
  s.write_bytes = c(Counter::kWriteBytes);
  s.writes_existing = c(Counter::kWritesExisting);
  s.read_misses = c(Counter::kReadMisses);
  s.checksum_failures = c(Counter::kChecksumFailures);
  s.header_mismatches = c(Counter::kHeaderMismatches);
  s.short_reads = c(Counter::kShortReads);
  s.short_writes = c(Counter::kShortWrites);
  s.read_io_errors = c(Counter::kReadIoErrors);
  s.write_io_errors = c(Counter::kWriteIoErrors);
  s.no_space = c(Counter::kNoSpace);
  s.chain_errors = c(Counter::kChainErrors);
  s.busy = c(Counter::kBusy);
  s.catalog_errors = c(Counter::kCatalogErrors);
  std::lock_guard<std::mutex> lock(mu_);
  s.records_kv = records_[static_cast<int>(Kind::kKV)];
  s.records_mamba = records_[static_cast<int>(Kind::kMamba)];
  s.records_window = records_[static_cast<int>(Kind::kWindowKV)];
  if (allocator_) {
    s.bytes_used = allocator_->used_bytes();
    s.capacity_bytes = allocator_->capacity_bytes();
    s.largest_free_bytes = allocator_->LargestFree();
  }
  s.removes = removes_;
  s.dropped_on_read = dropped_on_read_;
  s.dropped_at_open = dropped_at_open_;
  return s;
}

Status DiskTier::Close() {
  std::vector<CatalogRecord> puts;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Status::OK();
    closed_ = true;  // no catalog write starts from now on
    catalog_idle_.wait(lock, [&] { return catalog_writers_ == 0; });
    if (!catalog_) return Status::OK();
    for (const auto& [id, e] : map_) {
      if (!e->found() || !e->stamp_dirty) continue;
      CatalogRecord r;
      r.key = e->info.key;
      r.parent = e->info.parent;
      r.extent = e->info.extent;
      r.checksum = e->info.checksum;
      r.fingerprint = fingerprint_;
      r.stamp = e->info.stamp;
      puts.push_back(r);
    }
  }
  // No other thread writes the catalog now (closed_, and the last writer has returned).
  Status s = puts.empty() ? Status::OK() : WriteCatalog(puts, {});
  std::lock_guard<std::mutex> lock(mu_);
  catalog_.reset();
  owner_.reset();  // the folder may be opened again (by this process too)
  return s;
}

}  // namespace cachepawl
