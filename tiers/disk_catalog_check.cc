#include "tiers/disk_catalog_check.h"

#include "tiers/host_memory.h"

namespace cachepawl {

std::string CatalogExtentText(const std::string& path, const DiskExtent& e) {
  std::string text = path;
  text += " @";
  text += std::to_string(e.offset);
  text += " +";
  text += std::to_string(e.bytes);
  return text;
}

std::optional<std::string> CatalogRecordFault(const CatalogRecord& r,
                                              const CatalogRecordRules& rules) {
  if (r.fingerprint != rules.fingerprint) return "layout fingerprint differs from the catalog's";
  if (r.extent.file >= rules.files.size()) {
    return "extent in file " + std::to_string(r.extent.file) + " of " +
           std::to_string(rules.files.size());
  }
  const CatalogDataFile& file = rules.files[r.extent.file];
  if (r.extent.offset % kDirectIoAlignment != 0 || r.extent.bytes % kDirectIoAlignment != 0 ||
      r.extent.bytes < kRecordHeaderBytes) {
    return "extent " + CatalogExtentText(file.path, r.extent) + " is not 4 KiB-aligned";
  }
  if (file.size.has_value() && r.extent.end() > *file.size) {
    return "extent " + CatalogExtentText(file.path, r.extent) + " ends past the file's " +
           std::to_string(*file.size) + " bytes";
  }
  if (rules.layout == nullptr) return std::nullopt;
  const ModelLayout& layout = *rules.layout;
  if (!layout.Stores(r.key.kind)) {
    std::string fault = "a ";
    fault += KindName(r.key.kind);
    fault += " record in the store of a layout without ";
    fault += r.key.kind == Kind::kWindowKV ? "sliding-window layers"
             : r.key.kind == Kind::kMamba  ? "SSM layers"
                                           : "full-attention layers";
    return fault;
  }
  const uint64_t slot = RecordSlotBytes(layout, r.key.kind);
  if (r.extent.bytes != slot) {
    std::string fault = "extent of " + std::to_string(r.extent.bytes) + " bytes (a ";
    fault += KindName(r.key.kind);
    fault += " record of this layout takes " + std::to_string(slot) + ")";
    return fault;
  }
  return std::nullopt;
}

CatalogMetaVerdict CheckCatalogMeta(const std::optional<CatalogMeta>& meta) {
  if (!meta.has_value()) return CatalogMetaVerdict::kMissing;
  if (meta->format_version == 0) return CatalogMetaVerdict::kInvalid;
  if (meta->format_version > kDiskFormatVersion) return CatalogMetaVerdict::kNewer;
  if (meta->format_version < kDiskFormatVersion) return CatalogMetaVerdict::kOlder;
  return CatalogMetaVerdict::kCurrent;
}

}  // namespace cachepawl
