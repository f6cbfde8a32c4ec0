// DiskTierOptions and DiskTierStats (tiers/disk_tier.h): validation, paths, field names.
#include <filesystem>
#include <set>

#include "tiers/disk_tier.h"

namespace cachepawl {

std::vector<std::string> DiskTierOptions::DataFiles() const {
  if (!data_paths.empty()) return data_paths;
  return {(std::filesystem::path(dir) / kDataFileName).string()};
}

std::string DiskTierOptions::CatalogDir() const {
  return (std::filesystem::path(dir) / "catalog").string();
}

Status DiskTierOptions::Validate() const {
  if (dir.empty()) return Status::InvalidArgument("disk.dir: empty (the catalog's folder)");
  if (data_paths.size() > kMaxDiskFiles) {
    return Status::InvalidArgument("disk.data_paths: " + std::to_string(data_paths.size()) +
                                   " files (at most " + std::to_string(kMaxDiskFiles) + ")");
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < data_paths.size(); ++i) {
    const std::string field = "disk.data_paths[" + std::to_string(i) + "]";
    if (data_paths[i].empty()) return Status::InvalidArgument(field + ": empty");
    const std::filesystem::path p = std::filesystem::path(data_paths[i]).lexically_normal();
    if (!p.has_filename()) {
      return Status::InvalidArgument(field + ": '" + data_paths[i] +
                                     "' names a folder, not a file");
    }
    if (!seen.insert(std::filesystem::absolute(p).string()).second) {
      return Status::InvalidArgument(field + ": '" + data_paths[i] + "' is listed twice");
    }
  }
  if (capacity_bytes == 0) return Status::InvalidArgument("disk.capacity_bytes: 0 (must be > 0)");
  const uint64_t files = data_paths.empty() ? 1 : data_paths.size();
  if (capacity_bytes / files >= kMaxDiskFileBytes) {
    return Status::InvalidArgument("disk.capacity_bytes: " + std::to_string(capacity_bytes) +
                                   " (more than 2^56 bytes per file)");
  }
  return Status::OK();
}

std::vector<std::pair<const char*, uint64_t>> DiskTierStats::Fields() const {
  return {{"records_kv", records_kv},
          {"records_mamba", records_mamba},
          {"bytes_used", bytes_used},
          {"capacity_bytes", capacity_bytes},
          {"largest_free_bytes", largest_free_bytes},
          {"reads", reads},
          {"read_bytes", read_bytes},
          {"writes", writes},
          {"write_bytes", write_bytes},
          {"writes_existing", writes_existing},
          {"read_misses", read_misses},
          {"checksum_failures", checksum_failures},
          {"header_mismatches", header_mismatches},
          {"short_reads", short_reads},
          {"short_writes", short_writes},
          {"read_io_errors", read_io_errors},
          {"write_io_errors", write_io_errors},
          {"no_space", no_space},
          {"chain_errors", chain_errors},
          {"busy", busy},
          {"catalog_errors", catalog_errors},
          {"removes", removes},
          {"dropped_on_read", dropped_on_read},
          {"dropped_at_open", dropped_at_open}};
}

}  // namespace cachepawl
