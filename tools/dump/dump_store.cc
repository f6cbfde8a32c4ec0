#include "tools/dump/dump_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <tuple>

#include "layouts/layout_presets.h"
#include "tiers/disk_catalog_check.h"
#include "tiers/disk_data_files.h"
#include "tiers/disk_record.h"
#include "tiers/disk_tier.h"
#include "tiers/host_memory.h"
#include "tiers/pread_all.h"

namespace cachepawl::tools {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBlock = 4096;
constexpr size_t kMaxProblemsListed = 1000;

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string HashKey(const PageHash& h) {
  return std::string(reinterpret_cast<const char*>(h.bytes.data()), h.bytes.size());
}

std::string ExtentText(const DataFileInfo& f, const DiskExtent& e) {
  return CatalogExtentText(f.path, e);
}

// A free byte range [begin, end) of a data file.
struct FreeRange {
  uint64_t begin = 0, end = 0;
};

// The ranges of a file of `file_bytes` bytes that none of `used` (extents of that file) covers,
// in offset order. A sweep of its own, not DiskExtentAllocator's free lists: the dump shows a
// store as its catalog names it, damage included, and extents may overlap, be misaligned or run
// past the file, which the allocator's Reserve refuses (DiskTier::Recover drops such records
// instead); nor does the allocator count free ranges or answer per file.
std::vector<FreeRange> FreeRanges(std::vector<DiskExtent> used, uint64_t file_bytes) {
  std::sort(used.begin(), used.end(),
            [](const DiskExtent& a, const DiskExtent& b) { return a.offset < b.offset; });
  std::vector<FreeRange> free;
  uint64_t cursor = 0;
  for (const DiskExtent& e : used) {
    if (e.offset > cursor) free.push_back({cursor, e.offset});
    cursor = std::max(cursor, e.end());
  }
  if (file_bytes > cursor) free.push_back({cursor, file_bytes});
  return free;
}

}  // namespace

uint64_t DepthBucket(uint64_t pages) { return pages == 0 ? 0 : std::bit_floor(pages); }

StoreView::~StoreView() {
  for (const DataFileInfo& f : files_) {
    if (f.fd >= 0) ::close(f.fd);
  }
}

StatusOr<std::unique_ptr<StoreView>> StoreView::Open(const std::string& dir,
                                                     const std::optional<ModelLayout>& layout) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::NotFound("store folder '" + dir + "' does not exist");
  if (!fs::is_directory(dir, ec)) {
    return Status::InvalidArgument("'" + dir + "' is not a folder (give the store's folder)");
  }
  DiskTierOptions store;  // where the disk tier keeps a store's catalog and (default) data file
  store.dir = dir;
  const std::string catalog_dir = store.CatalogDir();
  if (!fs::exists(catalog_dir, ec)) {
    if (fs::exists(store.DataFiles().front(), ec)) {
      return Status::Corruption("store '" + dir + "': its catalog (" + catalog_dir +
                                ") is missing; the data file cannot be read without it");
    }
    return Status::InvalidArgument("'" + dir + "' is not a Cachepawl store: no catalog (" +
                                   catalog_dir + ")");
  }
  // The folder is there: without a database in it, the store's catalog was lost.
  if (auto missing = MissingCatalogDatabase(catalog_dir)) {
    return Status::Corruption("catalog '" + catalog_dir + "' is damaged: " + *missing);
  }
  std::unique_ptr<StoreView> v(new StoreView());
  v->dir_ = dir;
  CACHEPAWL_ASSIGN_OR_RETURN(v->catalog_, DiskCatalogReader::Open(catalog_dir));
  v->holder_pid_ = v->catalog_->HolderPid();
  CACHEPAWL_ASSIGN_OR_RETURN(std::optional<CatalogMeta> meta, v->catalog_->ReadMeta());
  // The disk tier's rule (tiers/disk_catalog_check.h), read-only: an older format is read too.
  switch (CheckCatalogMeta(meta)) {
    case CatalogMetaVerdict::kMissing:
      return Status::InvalidArgument("'" + dir + "' is not a Cachepawl store: its catalog (" +
                                     catalog_dir + ") has no meta entry");
    case CatalogMetaVerdict::kNewer:
      return Status::Incompatible("store '" + dir + "' has format version " +
                                  std::to_string(meta->format_version) +
                                  ", newer than this cachepawl reads (" +
                                  std::to_string(kDiskFormatVersion) + "): use a newer build");
    case CatalogMetaVerdict::kInvalid:
      return Status::Corruption("catalog '" + catalog_dir + "': format version " +
                                std::to_string(meta->format_version));
    case CatalogMetaVerdict::kOlder:
    case CatalogMetaVerdict::kCurrent:
      break;
  }
  v->meta_ = std::move(*meta);
  CACHEPAWL_ASSIGN_OR_RETURN(DiskCatalogReader::Scan scan, v->catalog_->ReadAll());
  v->records_ = std::move(scan.records);
  v->bad_keys_ = std::move(scan.bad_keys);
  v->unknown_keys_ = std::move(scan.unknown_keys);
  v->orphan_chains_ = std::move(scan.orphan_chains);

  // The layout: given (it must match), or a preset with the same fingerprint.
  if (layout.has_value()) {
    if (layout->Fingerprint() != v->meta_.fingerprint) {
      return Status::InvalidArgument("--layout: fingerprint " + layout->FingerprintHex() +
                                     " differs from the store's");
    }
    v->layout_ = layout;
    v->layout_name_ = layout->model;
  } else {
    for (const std::string& name : LayoutPresetNames()) {
      for (uint32_t page = 1; page <= 1024 && !v->layout_; page *= 2) {
        auto preset = LayoutPreset(name, page);
        if (preset.ok() && preset->Fingerprint() == v->meta_.fingerprint) {
          v->layout_ = *preset;
          v->layout_name_ = name + " (page " + std::to_string(page) + ")";
        }
      }
    }
  }

  // Data files, read-only. A relative path is the creator's; also try the store folder.
  for (const std::string& p : v->meta_.paths) {
    DataFileInfo f;
    f.path = p;
    if (!fs::exists(p, ec) && fs::exists(fs::path(dir) / fs::path(p).filename(), ec)) {
      f.path = (fs::path(dir) / fs::path(p).filename()).string();
    }
    f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (f.fd < 0) {
      f.error = std::string(std::strerror(errno)) + " (errno " + std::to_string(errno) + ")";
    } else if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      f.error = "not a regular file";
      ::close(f.fd);
      f.fd = -1;
    } else {
      f.size = static_cast<uint64_t>(st.st_size);
    }
    v->files_.push_back(std::move(f));
  }
  std::vector<std::vector<DiskExtent>> extents(v->files_.size());
  for (const CatalogRecord& r : v->records_) {
    if (r.extent.file < extents.size()) extents[r.extent.file].push_back(r.extent);
  }
  for (size_t i = 0; i < v->files_.size(); ++i) {
    DataFileInfo& f = v->files_[i];
    for (const DiskExtent& e : extents[i]) {
      ++f.records;
      f.used_bytes += e.bytes;
    }
    for (const FreeRange& run : FreeRanges(std::move(extents[i]), f.size)) {
      ++f.free_runs;
      f.largest_free = std::max(f.largest_free, run.end - run.begin);
    }
    f.free_bytes = f.size > f.used_bytes ? f.size - f.used_bytes : 0;
  }

  bool any_state = false, any_window = false;
  for (const CatalogRecord& r : v->records_) {
    if (r.key.kind == Kind::kKV) v->kv_by_hash_[HashKey(r.key.hash)] = &r;
    any_state = any_state || r.key.kind == Kind::kMamba;
    any_window = any_window || r.key.kind == Kind::kWindowKV;
  }
  if (v->layout_.has_value()) {
    v->pure_ssm_ = !v->layout_->has_attention();
    v->chained_ = !v->layout_->Stores(Kind::kKV);
  } else {
    v->chained_ = v->kv_by_hash_.empty() && any_state;
    v->pure_ssm_ = v->chained_ && !any_window;
  }
  // Tokens per page: the layout's; else a chain's first page's depth; else the gcd of depths.
  // Pure SSM: a state's depth over the pages its chain names.
  if (v->layout_.has_value()) {
    v->page_size_ = v->layout_->page_size_tokens;
  } else if (v->chained_) {
    // The most frequent value (a damaged chain does not decide it).
    std::map<uint64_t, uint64_t> votes;
    for (const CatalogRecord& r : v->records_) {
      if (r.key.kind != Kind::kMamba) continue;
      if (r.key.depth % (r.chain.size() + 1) == 0) ++votes[r.key.depth / (r.chain.size() + 1)];
    }
    uint64_t best = 0;
    for (const auto& [page, n] : votes) {
      if (n > best) {
        best = n;
        v->page_size_ = page;
      }
    }
  } else {
    uint64_t g = 0;
    for (const CatalogRecord& r : v->records_) {
      if (r.key.kind != Kind::kKV) continue;
      if (r.parent.IsZero()) {
        g = r.key.depth;
        break;
      }
      g = std::gcd(g, r.key.depth);
    }
    v->page_size_ = g;
  }
  return v;
}

std::optional<std::string> StoreView::OrphanReason(const CatalogRecord& r) const {
  if (r.key.kind == Kind::kWindowKV) return WindowOrphanReason(r);
  if (chained_) {
    if (r.key.kind == Kind::kKV) return "a KV page in the store of a layout without KV";
    if (ChainFitsState(r.key, r.parent, r.chain, page_size_)) return std::nullopt;
    return "its chain of " + std::to_string(r.chain.size()) +
           " pages does not lead to its depth and parent (the state cannot be reached)";
  }
  if (r.key.kind == Kind::kKV) {
    if (r.parent.IsZero()) return std::nullopt;
    auto it = kv_by_hash_.find(HashKey(r.parent));
    if (it == kv_by_hash_.end()) {
      return "its parent page " + r.parent.ToHex() + " is not on disk (unreachable)";
    }
    if (page_size_ != 0 && it->second->key.depth + page_size_ != r.key.depth) {
      return "depth " + std::to_string(r.key.depth) + " does not follow its parent's (" +
             std::to_string(it->second->key.depth) + ")";
    }
    return std::nullopt;
  }
  auto it = kv_by_hash_.find(HashKey(r.key.hash));
  if (it == kv_by_hash_.end() || it->second->key.depth != r.key.depth) {
    return "no KV page " + r.key.hash.ToHex() + " at depth " + std::to_string(r.key.depth) +
           " is on disk (the state cannot be reused)";
  }
  return std::nullopt;
}

// A window record stands beside its page: the KV page of that hash at that depth or, chained,
// a page at that depth some state's chain names.
std::optional<std::string> StoreView::WindowOrphanReason(const CatalogRecord& r) const {
  if (chained_) {
    if (!chain_depths_.has_value()) {
      chain_depths_.emplace();
      for (const ChainPage& p : ChainPages()) (*chain_depths_)[HashKey(p.hash)] = p.depth_pages;
    }
    auto it = chain_depths_->find(HashKey(r.key.hash));
    if (it != chain_depths_->end() && it->second * page_size_ == r.key.depth) return std::nullopt;
    return "no state's chain names page " + r.key.hash.ToHex() + " at depth " +
           std::to_string(r.key.depth) + " (the window record cannot be used)";
  }
  auto it = kv_by_hash_.find(HashKey(r.key.hash));
  if (it == kv_by_hash_.end() || it->second->key.depth != r.key.depth) {
    return "no KV page " + r.key.hash.ToHex() + " at depth " + std::to_string(r.key.depth) +
           " is on disk (the window record cannot be used)";
  }
  return std::nullopt;
}

std::vector<StoreView::ChainPage> StoreView::ChainPages() const {
  std::map<std::string, ChainPage> pages;  // by hash
  for (const CatalogRecord& r : records_) {
    if (r.key.kind != Kind::kMamba) continue;
    PageHash parent = PageHash::Zero();
    for (size_t i = 0; i <= r.chain.size(); ++i) {
      const PageHash& h = i < r.chain.size() ? r.chain[i] : r.key.hash;
      ChainPage& p = pages[HashKey(h)];
      if (p.states++ == 0) p = {h, parent, i + 1, 1};
      parent = h;
    }
  }
  std::vector<ChainPage> out;
  for (auto& [key, p] : pages) out.push_back(p);
  std::stable_sort(out.begin(), out.end(), [](const ChainPage& a, const ChainPage& b) {
    return a.depth_pages < b.depth_pages;
  });
  return out;
}

StoreView::TreeShape StoreView::Shape() const {
  TreeShape s;
  std::map<std::string, uint64_t> children;
  for (const CatalogRecord& r : records_) {
    if (r.key.kind == Kind::kKV && !r.parent.IsZero()) ++children[HashKey(r.parent)];
  }
  std::vector<const CatalogRecord*> leaves;
  for (const CatalogRecord& r : records_) {
    if (s.oldest == nullptr || r.stamp < s.oldest->stamp) s.oldest = &r;
    if (s.newest == nullptr || r.stamp > s.newest->stamp) s.newest = &r;
    const uint64_t pages = page_size_ != 0 ? r.key.depth / page_size_ : 0;
    const bool orphan = OrphanReason(r).has_value();
    if (r.key.kind == Kind::kWindowKV) {
      ++s.window_by_depth[DepthBucket(pages)];
      s.orphan_window += orphan;
      continue;
    }
    if (r.key.kind == Kind::kMamba) {
      ++s.states_by_depth[DepthBucket(pages)];
      s.orphan_states += orphan;
      if (chained_) leaves.push_back(&r);  // the deepest states stand for the longest chains
      continue;
    }
    ++s.pages_by_depth[DepthBucket(pages)];
    s.orphan_pages += orphan;
    s.roots += r.parent.IsZero();
    auto it = children.find(HashKey(r.key.hash));
    const uint64_t n = it == children.end() ? 0 : it->second;
    if (n == 0) leaves.push_back(&r);
    if (n >= 2) ++s.branching_points;
    s.max_fanout = std::max(s.max_fanout, n);
  }
  if (chained_) {
    // The tree of the pages the chains name (no page has a KV record of its own).
    std::map<std::string, uint64_t> next;
    const std::vector<ChainPage> chain_pages = ChainPages();
    for (const ChainPage& p : chain_pages) {
      if (!p.parent.IsZero()) ++next[HashKey(p.parent)];
    }
    uint64_t chain_leaves = 0;
    for (const ChainPage& p : chain_pages) {
      ++s.pages_by_depth[DepthBucket(p.depth_pages)];
      s.roots += p.parent.IsZero();
      auto it = next.find(HashKey(p.hash));
      const uint64_t n = it == next.end() ? 0 : it->second;
      chain_leaves += n == 0;
      if (n >= 2) ++s.branching_points;
      s.max_fanout = std::max(s.max_fanout, n);
    }
    s.leaves = chain_leaves;
  } else {
    s.leaves = leaves.size();
  }
  std::sort(leaves.begin(), leaves.end(), [](const CatalogRecord* a, const CatalogRecord* b) {
    return a->key.depth > b->key.depth;
  });
  leaves.resize(std::min<size_t>(leaves.size(), 5));
  s.longest = std::move(leaves);
  return s;
}

Status StoreView::ReadRecord(const CatalogRecord& r, std::vector<std::byte>* buffer) const {
  const DataFileInfo& f = files_[r.extent.file];
  buffer->resize(r.extent.bytes);
  return PreadAll(f.fd, *buffer, r.extent.offset, "reading " + ExtentText(f, r.extent));
}

// Reads and verifies one record: nullopt when it holds, else why not.
std::optional<std::string> StoreView::CheckRecord(const CatalogRecord& r,
                                                  std::vector<std::byte>* buffer) {
  Status read = ReadRecord(r, buffer);
  if (!read.ok()) return read.ToString();
  RecordExpectation expect;
  expect.key = r.key;
  expect.fingerprint = meta_.fingerprint;
  expect.record_bytes = r.extent.bytes;
  expect.checksum = r.checksum;
  expect.parent = r.parent;
  if (layout_.has_value()) {
    expect.payload_bytes = layout_->RecordBytes(r.key.kind);
  } else {
    auto header = ParseRecordHeader(std::span(*buffer).first(kRecordHeaderBytes));
    if (!header.ok()) return header.status().ToString();
    expect.payload_bytes = header->payload_bytes;
  }
  RecordFault fault = RecordFault::kNone;
  Status s = VerifyRecord(*buffer, expect, &fault);
  if (s.ok()) return std::nullopt;
  return std::string(fault == RecordFault::kChecksum ? "checksum: " : "header: ") + s.message();
}

StoreView::Verification StoreView::Verify(bool scan_free_space) {
  Verification v;
  auto add = [&](std::string kind, std::string record, std::string detail) {
    if (v.problems.size() < kMaxProblemsListed) {
      v.problems.push_back({std::move(kind), std::move(record), std::move(detail)});
    }
  };
  for (const DataFileInfo& f : files_) {
    if (!f.error.empty()) {
      ++v.unreadable_files;
      add("file", f.path, "cannot be read: " + f.error);
    }
  }
  for (const std::string& k : bad_keys_) {
    ++v.catalog_problems;
    add("catalog", Hex(k), "record entry cannot be decoded");
  }

  // Catalog-level checks of each extent (the disk tier's rule); the records that pass them are
  // read.
  CatalogRecordRules rules;
  rules.fingerprint = meta_.fingerprint;
  for (const DataFileInfo& f : files_) {
    rules.files.push_back(
        {f.path, f.error.empty() ? std::optional<uint64_t>(f.size) : std::nullopt});
  }
  rules.layout = layout_.has_value() ? &*layout_ : nullptr;
  std::vector<const CatalogRecord*> readable;
  std::vector<const CatalogRecord*> by_position;
  for (const CatalogRecord& r : records_) {
    if (auto bad = CatalogRecordFault(r, rules)) {
      ++v.catalog_problems;
      add("catalog", r.key.ToString(), *bad);
      continue;
    }
    by_position.push_back(&r);
    if (files_[r.extent.file].error.empty()) readable.push_back(&r);
  }
  std::sort(by_position.begin(), by_position.end(),
            [](const CatalogRecord* a, const CatalogRecord* b) {
              return std::tie(a->extent.file, a->extent.offset) <
                     std::tie(b->extent.file, b->extent.offset);
            });
  // Overlaps, by a sweep of neighbours: DiskExtentAllocator::Reserve (DiskTier::Recover's test)
  // says that an extent overlaps, not whose, and the report names both records.
  for (size_t i = 1; i < by_position.size(); ++i) {
    const CatalogRecord& a = *by_position[i - 1];
    const CatalogRecord& b = *by_position[i];
    if (a.extent.file == b.extent.file && b.extent.offset < a.extent.end()) {
      ++v.overlaps;
      add("overlap", b.key.ToString(),
          "extent " + ExtentText(files_[b.extent.file], b.extent) + " overlaps " +
              a.key.ToString() + "'s");
    }
  }

  // Every record, read and verified. Failures are re-checked once the view caught up with a
  // store that may be running (the record may have been replaced meanwhile).
  std::vector<std::byte> buffer;
  std::vector<std::pair<const CatalogRecord*, std::string>> failed;
  for (const CatalogRecord* r : readable) {
    ++v.records_checked;
    v.bytes_read += r->extent.bytes;
    if (auto why = CheckRecord(*r, &buffer)) failed.emplace_back(r, *why);
  }
  if (!failed.empty() && catalog_->CatchUp().ok()) {
    for (auto& [r, why] : failed) {
      auto now = catalog_->Get(r->key);
      if (now.ok() && (!now->has_value() || !((*now)->extent == r->extent) ||
                       (*now)->checksum != r->checksum)) {
        ++v.changed_while_reading;
        why.clear();
        continue;
      }
      if (auto again = CheckRecord(*r, &buffer); !again.has_value()) {
        ++v.changed_while_reading;
        why.clear();
      }
    }
  }
  for (const auto& [r, why] : failed) {
    if (why.empty()) continue;
    ++v.corrupt;
    add("corrupt", r->key.ToString(), ExtentText(files_[r->extent.file], r->extent) + ": " + why);
  }

  for (const CatalogRecord& r : records_) {
    if (auto why = OrphanReason(r)) {
      ++v.orphans;
      add("orphan", r.key.ToString(), *why);
    }
  }
  for (const std::string& k : orphan_chains_) {
    ++v.orphans;
    add("orphan", Hex(k), "a chain entry whose state's record is gone");
  }
  if (scan_free_space) ScanFreeSpace(&v);
  return v;
}

// Looks at every 4 KiB block no record names for a record header.
void StoreView::ScanFreeSpace(Verification* v) {
  v->scanned_free_space = true;
  constexpr uint64_t kChunk = 16 << 20;
  std::vector<std::byte> chunk(kChunk);
  for (size_t i = 0; i < files_.size(); ++i) {
    const DataFileInfo& f = files_[i];
    if (!f.error.empty()) continue;
    std::vector<DiskExtent> used;
    for (const CatalogRecord& r : records_) {
      if (r.extent.file == i) used.push_back(r.extent);
    }
    for (const FreeRange& run : FreeRanges(std::move(used), f.size)) {
      const uint64_t begin = (run.begin + kBlock - 1) / kBlock * kBlock;
      const uint64_t end = run.end;
      for (uint64_t at = begin; at + kBlock <= end; at += kChunk) {
        const uint64_t n = std::min(kChunk, (end - at) / kBlock * kBlock);
        if (!PreadAll(f.fd, std::span(chunk).first(n), at, "reading " + f.path).ok()) break;
        v->bytes_read += n;
        for (uint64_t off = 0; off < n; off += kBlock) {
          if (std::memcmp(chunk.data() + off, kDiskRecordMagic.data(), kDiskRecordMagic.size()) !=
              0) {
            continue;
          }
          auto header = ParseRecordHeader(std::span(chunk).subspan(off, kBlock));
          if (!header.ok()) continue;
          ++v->unnamed_in_free;
          if (v->problems.size() < kMaxProblemsListed) {
            v->problems.push_back(
                {"unnamed", DiskKey{header->kind, header->hash, header->depth}.ToString(),
                 f.path + " @" + std::to_string(at + off) +
                     ": a record header in space no catalog entry names (stale or never "
                     "committed; the space is free)"});
          }
        }
      }
    }
  }
}

}  // namespace cachepawl::tools
