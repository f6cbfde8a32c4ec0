// The index rebuilt from the disk catalog when a store opens (docs/DESIGN.md, "Restart"): every
// record the disk tier kept after its own checks (tiers/disk_tier.h: catalog, extents, layout
// fingerprint) becomes an index entry with a Disk location, parents before children. A record
// whose parent was lost, or a state whose page entry is missing or at another depth, cannot be
// reached by any lookup: it is removed from the disk tier so that its space is reused. A layout
// without full-attention layers (pure SSM, or every attention layer windowed) has no page
// records: each state's chain (kept in the catalog with it) inserts the pages leading to it.
// Windowed-KV records are located on the entries so inserted, or removed.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "store/store_impl.h"

namespace cachepawl {

StatusOr<size_t> RebuildIndexFromDisk(DiskTier& disk, PrefixIndex& index,
                                      const ModelLayout& layout) {
  std::vector<DiskRecordInfo> kv, mamba, window;
  disk.ForEachRecord([&](const DiskRecordInfo& r) {
    switch (r.key.kind) {
      case Kind::kKV:
        kv.push_back(r);
        break;
      case Kind::kWindowKV:
        window.push_back(r);
        break;
      case Kind::kMamba:
        mamba.push_back(r);
        break;
    }
  });
  // Parents before children: a page's depth is its position in the chain.
  const auto by_depth = [](const DiskRecordInfo& a, const DiskRecordInfo& b) {
    return a.key.depth < b.key.depth;
  };
  std::sort(kv.begin(), kv.end(), by_depth);
  std::sort(window.begin(), window.end(), by_depth);
  // Attention-only layouts whose layers are all windowed have neither KV records nor chains:
  // their windowed records name the pages, as KV records do for other layouts.
  if (!layout.Stores(Kind::kKV) && !layout.has_ssm()) std::swap(kv, window);
  std::vector<DiskKey> orphans;
  for (const DiskRecordInfo& r : kv) {
    std::optional<PageHash> parent;
    if (!r.parent.IsZero()) parent = r.parent;
    Status s = index.InsertKv(parent, r.key.hash);
    if (s.ok()) s = index.SetLocation(r.key.hash, r.key.kind, Tier::kDisk, r.extent.Id());
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
  // Windowed KV: located on the page entry that KV records or a state's chain inserted, at the
  // same depth and under the same parent; without one, no lookup could reach it.
  for (const DiskRecordInfo& r : window) {
    auto entry = index.Lookup(r.key.hash);
    const bool fits = entry &&
                      uint64_t{entry->depth_pages} * layout.page_size_tokens == r.key.depth &&
                      entry->parent.value_or(PageHash::Zero()) == r.parent;
    Status s = fits ? index.SetLocation(r.key.hash, Kind::kWindowKV, Tier::kDisk, r.extent.Id())
                    : Status::NotFound("no page entry");
    if (!s.ok()) orphans.push_back(r.key);
  }
  (void)disk.Remove(orphans);  // one catalog batch; what fails is reclaimed at the next open
  if (!orphans.empty()) {
    spdlog::info(
        "cachepawl: reopened disk tier: {} KV pages, {} windowed pages, {} states, {} orphans "
        "reclaimed",
        kv.size(), window.size(), mamba.size(), orphans.size());
  }
  return orphans.size();
}

}  // namespace cachepawl
