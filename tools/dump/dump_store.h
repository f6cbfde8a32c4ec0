// StoreView: what `cachepawl dump` reads of a store's disk tier, without writing anything: the
// catalog (through a read-only DiskCatalogReader, so an engine may have the store open), the data
// files (opened O_RDONLY), and what follows from them: per-file extents, the prefix-tree shape,
// and a verification of every record.
//
// A store folder holds <dir>/catalog (RocksDB) and, unless the store striped its data over
// other paths (the catalog's meta lists them), <dir>/cachepawl.data.
//
// A pure SSM layout's store (no attention layers) holds states only; each state's record comes
// with its chain (the pages leading to it, which hold no KV and so have no record): the prefix
// tree is the tree of those chains (ChainPages), and a state without a fitting chain is an
// orphan. The same holds for every layout without full-attention KV ("chained": all attention
// layers windowed, as RecurrentGemma or Samba), whose store also holds window records.
//
// Window records (Kind::kWindowKV, layouts with sliding-window layers) are the windowed part of
// a page: they name the page (hash, depth, parent) and stand beside its KV record, or, in a
// chained store, beside a page a state's chain names; one that stands beside nothing is an
// orphan. They are not pages of the tree themselves.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tiers/disk_catalog.h"
#include "tiers/disk_catalog_reader.h"
#include "vocab/model_layout.h"
#include "vocab/status.h"

namespace cachepawl::tools {

struct DataFileInfo {
  std::string path;           // as the catalog names it (resolved against the store folder)
  std::string error;          // why it cannot be read ("" when it can)
  int fd = -1;                // O_RDONLY, owned by the StoreView
  uint64_t size = 0;          // bytes
  uint64_t records = 0;       // records whose extent lies in this file
  uint64_t used_bytes = 0;    // bytes of those extents
  uint64_t free_bytes = 0;    // the rest
  uint64_t free_runs = 0;     // maximal free byte ranges
  uint64_t largest_free = 0;  // bytes of the largest
};

class StoreView {
 public:
  // Opens the store in `dir` read-only. Errors (each naming the path):
  //   NotFound         no such folder
  //   InvalidArgument  not a folder, or not a Cachepawl store (no catalog, or no meta entry)
  //   Incompatible     the store's format version is newer than this build reads
  //   Corruption       the catalog is damaged (RocksDB's reason) or its meta cannot be decoded
  //   IOError          anything else the catalog or the OS reports
  // A data file that cannot be read is not an error here: its DataFileInfo::error says why.
  // `layout`: the model layout, when the caller knows it; otherwise a built-in preset whose
  // fingerprint matches (at a power-of-two page size up to 1024) is looked for.
  static StatusOr<std::unique_ptr<StoreView>> Open(const std::string& dir,
                                                   const std::optional<ModelLayout>& layout = {});
  ~StoreView();
  StoreView(const StoreView&) = delete;
  StoreView& operator=(const StoreView&) = delete;

  const std::string& dir() const { return dir_; }
  const CatalogMeta& meta() const { return meta_; }
  // The layout, when known (given, or a preset matching the fingerprint), and its name.
  const std::optional<ModelLayout>& layout() const { return layout_; }
  const std::string& layout_name() const { return layout_name_; }
  const std::vector<CatalogRecord>& records() const { return records_; }
  const std::vector<std::string>& bad_catalog_keys() const { return bad_keys_; }
  const std::vector<std::string>& unknown_catalog_keys() const { return unknown_keys_; }
  // Chain entries whose state's record is gone (the store deletes them when it opens).
  const std::vector<std::string>& orphan_catalog_chains() const { return orphan_chains_; }
  // True for a pure SSM layout's store: the layout has no attention layers or, when the layout
  // is not known, the catalog holds states and neither KV pages nor window records.
  bool pure_ssm() const { return pure_ssm_; }
  // True when states carry their chains: the layout stores no full-attention KV (pure SSM, or
  // every attention layer windowed) or, when the layout is not known, the catalog holds states
  // and no KV page.
  bool chained() const { return chained_; }
  const std::vector<DataFileInfo>& files() const { return files_; }
  // The pid of another process holding the catalog open (a running store), if any.
  std::optional<int> holder_pid() const { return holder_pid_; }
  // Tokens per page: the layout's, else inferred from the records (0 when there are none).
  uint64_t page_size_tokens() const { return page_size_; }

  // ---- the prefix tree (KV records chained by parent hash; states hang off their page) ----
  // Chained (pure SSM, all attention windowed): the pages are those the states' chains name
  // (they hold no KV record); the counts below are of them, and `longest` lists the deepest
  // states. Window records hang off their page, as states do.
  struct TreeShape {
    uint64_t roots = 0;             // KV records that start a chain (zero parent)
    uint64_t leaves = 0;            // KV records no other record continues
    uint64_t branching_points = 0;  // KV records two or more records continue
    uint64_t max_fanout = 0;
    uint64_t orphan_pages = 0;   // KV records whose parent page is not on disk
    uint64_t orphan_states = 0;  // states whose page (at that depth) is not on disk
    uint64_t orphan_window = 0;  // window records beside no page (see OrphanReason)
    std::map<uint64_t, uint64_t> pages_by_depth;   // bucket (pages: 1, 2, 4, 8...) -> records
    std::map<uint64_t, uint64_t> states_by_depth;  // bucket (pages) -> states
    std::map<uint64_t, uint64_t> window_by_depth;  // bucket (pages) -> window records
    std::vector<const CatalogRecord*> longest;     // up to 5 deepest leaves, deepest first
    const CatalogRecord* oldest = nullptr;         // by access stamp
    const CatalogRecord* newest = nullptr;
  };
  TreeShape Shape() const;
  // Chained: every page the states' chains name (each state's own page included), once, by
  // depth and then hash; `states` counts the states whose chains go through it.
  struct ChainPage {
    PageHash hash, parent;  // parent zero for a first page
    uint64_t depth_pages = 0;
    uint64_t states = 0;
  };
  std::vector<ChainPage> ChainPages() const;
  // Whether `r` is an orphan (see TreeShape), with the reason.
  std::optional<std::string> OrphanReason(const CatalogRecord& r) const;

  // ---- verification ----
  struct Problem {
    std::string kind;    // "corrupt", "orphan", "catalog", "overlap", "file", "unnamed"
    std::string record;  // DiskKey::ToString() or the raw catalog key (hex), or a file
    std::string detail;
  };
  struct Verification {
    uint64_t records_checked = 0, bytes_read = 0;
    uint64_t corrupt = 0, catalog_problems = 0, overlaps = 0, unreadable_files = 0;
    uint64_t orphans = 0;          // warnings: unreachable, reclaimed at the store's next open
    uint64_t unnamed_in_free = 0;  // warnings: record headers in free space (stale data)
    uint64_t changed_while_reading = 0;  // records a running store replaced meanwhile
    bool scanned_free_space = false;
    std::vector<Problem> problems;
    // True when nothing is wrong: no corrupt record, damaged catalog entry, overlapping
    // extents or unreadable data file. Orphans and unnamed extents are warnings only.
    bool ok() const {
      return corrupt == 0 && catalog_problems == 0 && overlaps == 0 && unreadable_files == 0;
    }
  };
  // Reads every record and checks its header (key, parent, depth, layout fingerprint, lengths)
  // and checksum against the catalog; checks the catalog's entries and extents; finds orphans;
  // with `scan_free_space`, looks for record headers in the space no record names. A record
  // that fails is re-read after catching up with a running store before it is called corrupt.
  Verification Verify(bool scan_free_space);

 private:
  StoreView() = default;
  Status ReadRecord(const CatalogRecord& r, std::vector<std::byte>* buffer) const;
  std::optional<std::string> CheckRecord(const CatalogRecord& r, std::vector<std::byte>* buffer);
  std::optional<std::string> WindowOrphanReason(const CatalogRecord& r) const;
  void ScanFreeSpace(Verification* v);

  std::string dir_;
  std::unique_ptr<DiskCatalogReader> catalog_;
  CatalogMeta meta_;
  std::optional<ModelLayout> layout_;
  std::string layout_name_;
  std::vector<CatalogRecord> records_;
  std::vector<std::string> bad_keys_, unknown_keys_, orphan_chains_;
  bool pure_ssm_ = false;
  bool chained_ = false;
  std::vector<DataFileInfo> files_;
  std::optional<int> holder_pid_;
  uint64_t page_size_ = 0;
  std::map<std::string, const CatalogRecord*> kv_by_hash_;  // raw hash bytes -> record
  // Chained: raw hash bytes -> depth in pages of every page the chains name (built when first
  // needed).
  mutable std::optional<std::map<std::string, uint64_t>> chain_depths_;
};

// Bucket of a depth in pages: the largest power of two <= pages (0 for 0).
uint64_t DepthBucket(uint64_t pages);

}  // namespace cachepawl::tools
