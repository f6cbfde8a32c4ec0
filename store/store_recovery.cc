// The index rebuilt from the disk catalog when a store opens (docs/DESIGN.md, "Restart"): every
// record the disk tier kept after its own checks (tiers/disk_tier.h: catalog, extents, layout
// fingerprint) becomes an index entry with a Disk location, parents before children. A record
// whose parent was lost, or a state whose page entry is missing or at another depth, cannot be
// reached by any lookup: it is removed from the disk tier so that its space is reused. A layout
// without attention layers has no page records: each state's chain (kept in the catalog with it)
// inserts the pages leading to it.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "store/store_impl.h"

namespace cachepawl {

StatusOr<size_t> RebuildIndexFromDisk(DiskTier& disk, PrefixIndex& index,
                                      const ModelLayout& layout) {
  std::vector<DiskRecordInfo> kv, mamba;
  disk.ForEachRecord(
      [&](const DiskRecordInfo& r) { (r.key.kind == Kind::kKV ? kv : mamba).push_back(r); });
  // Parents before children: a page's depth is its position in the chain.
  std::sort(kv.begin(), kv.end(), [](const DiskRecordInfo& a, const DiskRecordInfo& b) {
    return a.key.depth < b.key.depth;
  });
  std::vector<DiskKey> orphans;
  for (const DiskRecordInfo& r : kv) {
    std::optional<PageHash> parent;
    if (!r.parent.IsZero()) parent = r.parent;
    Status s = index.InsertKv(parent, r.key.hash);
    if (s.ok()) s = index.SetLocation(r.key.hash, Kind::kKV, Tier::kDisk, r.extent.Id());
    if (!s.ok()) orphans.push_back(r.key);  // its parent was lost: unreachable, reclaim it
  }
  // Pure SSM: no KV records; each state brings its chain (checked by the disk tier against its
  // depth and parent), and the chain's entries are inserted before the state is located.
  auto chains = disk.TakeRecoveredChains();
  for (const DiskRecordInfo& r : mamba) {
    std::vector<PageHash> chain;
    if (!layout.Stores(Kind::kKV)) {
      if (auto c = chains.find(DiskKeyIdentity(r.key)); c != chains.end()) chain = c->second;
      chain.push_back(r.key.hash);
      if (!index.InsertChain(std::nullopt, chain).ok()) chain.clear();  // all or nothing
    }
    auto entry = index.Lookup(r.key.hash);
    Status s = Status::NotFound("no KV entry");
    if (entry && uint64_t{entry->depth_pages} * layout.page_size_tokens == r.key.depth) {
      s = index.SetLocation(r.key.hash, Kind::kMamba, Tier::kDisk, r.extent.Id());
    }
    if (!s.ok()) {
      orphans.push_back(r.key);
      // Entries inserted for it that hold nothing go again (Remove refuses the others).
      size_t i = chain.size();
      while (i > 0 && index.Remove(chain[i - 1]).ok()) --i;
    }
  }
  for (const DiskKey& k : orphans) (void)disk.Remove(k);
  if (!orphans.empty()) {
    spdlog::info("cachepawl: reopened disk tier: {} KV pages, {} states, {} orphans reclaimed",
                 kv.size(), mamba.size(), orphans.size());
  }
  return orphans.size();
}

}  // namespace cachepawl
