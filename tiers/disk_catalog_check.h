// The rule that says which catalog records (tiers/disk_catalog.h) may name a record on disk:
// one rule for the disk tier, which drops the records that break it when it opens
// (DiskTier::Recover), and for `cachepawl dump`, which reports them (tools/dump/dump_store.h).
//
// A record breaks it when its layout fingerprint is not the catalog's, its extent names a data
// file the catalog does not have, is not 4 KiB-aligned (offset and length) or shorter than a
// record header, ends past the bytes its file holds, or, when the layout is known, holds a kind
// the layout does not store or is not that kind's record size (RecordSlotBytes). Two records
// whose extents overlap, and a state whose chain does not lead to it (ChainFitsState), are the
// callers' to find: they need the other records.
//
// The catalog's meta entry has one rule too (CheckCatalogMeta): how its format version stands
// to this build's (kDiskFormatVersion). The disk tier and `cachepawl dump` act on the verdict
// differently (the table below), but neither decides it on its own.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tiers/disk_catalog.h"
#include "vocab/model_layout.h"

namespace cachepawl {

// A data file of the catalog, as the rule sees it.
struct CatalogDataFile {
  std::string path;              // as faults name it
  std::optional<uint64_t> size;  // bytes a record may lie in; nullopt when unknown (not checked)
};

// What records are checked against.
struct CatalogRecordRules {
  LayoutFingerprint fingerprint{};      // the catalog's (its meta entry's)
  std::vector<CatalogDataFile> files;   // the catalog's data files, in stripe order
  const ModelLayout* layout = nullptr;  // the layout when known (not owned); null: not checked
};

// nullopt when `record` keeps the rule; else the first fault found, naming the field and the
// value at fault (e.g. "extent /d/cachepawl.data @8192 +65536 ends past the file's 4096 bytes").
std::optional<std::string> CatalogRecordFault(const CatalogRecord& record,
                                              const CatalogRecordRules& rules);

// What a catalog's meta entry (DiskCatalog::ReadMeta, DiskCatalogReader::ReadMeta) says of the
// catalog, and what each reader does with it:
//
//   verdict    disk tier (DiskTier::Open)                 cachepawl dump (read-only)
//   kMissing   a fresh catalog: it writes the entry       not a store: InvalidArgument
//   kCurrent   opens it (checks fingerprint and files)    reads it
//   kOlder     Incompatible, or wiped (wipe_on_mismatch)  reads it (no older format exists yet)
//   kNewer     Incompatible, or wiped                     Incompatible: "use a newer build"
//   kInvalid   Incompatible, or wiped                     Corruption (no build writes version 0)
enum class CatalogMetaVerdict { kMissing, kCurrent, kOlder, kNewer, kInvalid };
[[nodiscard]] CatalogMetaVerdict CheckCatalogMeta(const std::optional<CatalogMeta>& meta);

// "<path> @<offset> +<bytes>": how faults name an extent of the file at `path`.
std::string CatalogExtentText(const std::string& path, const DiskExtent& extent);

}  // namespace cachepawl
