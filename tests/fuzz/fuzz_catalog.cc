// Fuzz target: the disk catalog's decoders (tiers/disk_catalog.h), what RocksDB hands back at
// open: record entries ("R" + key identity -> record value), chain entries ("C" + state key ->
// hash chain) and the meta entry.
//
// Input: a sequence of entries, each a key (one length byte, then its bytes) and a value (two
// length bytes, then its bytes), as a scan would return them. Every key and value goes through
// every decoder; the chain entries go to a CatalogChains and the records are attached to it, as
// DiskCatalog::ForEach does. Properties: nothing crashes or reads past its input; whatever a
// decoder accepts, its encoder writes back byte for byte (so two different values never decode
// to one record); ChainFitsState only answers.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "tiers/disk_catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachepawl;        // NOLINT(google-build-using-namespace)
  using namespace cachepawl::fuzz;  // NOLINT(google-build-using-namespace)
  FuzzInput in(data, size);
  const uint64_t page_size_tokens = in.Byte();
  CatalogChains chains;
  std::vector<CatalogRecord> records;
  while (in.left() > 0) {
    const std::string key = in.String(255);
    const std::string value = in.String(65535);

    if (auto r = DecodeCatalogRecord(key, value)) {
      Check(EncodeCatalogValue(*r) == value, "a record value that does not re-encode to itself");
      Check(CatalogRecordKey(r->key) == key, "a record key that does not re-encode to itself");
      records.push_back(*r);
    }
    if (auto c = DecodeCatalogChain(key, value)) {
      Check(EncodeCatalogChain(c->second) == value, "a chain value that does not re-encode");
      Check(CatalogChainKey(c->first) == key, "a chain key that does not re-encode");
      Check(c->first.kind == Kind::kMamba, "a chain entry of a KV key");
      PageHash parent;
      if (!c->second.empty()) parent = c->second.back();
      (void)ChainFitsState(c->first, parent, c->second, page_size_tokens);
    }
    Check(chains.Add(key, value) == DecodeCatalogChain(key, value).has_value(),
          "CatalogChains::Add and DecodeCatalogChain disagree");
    auto meta = DecodeCatalogMeta(value, "/fuzz/catalog");
    if (meta.ok()) {
      Check(EncodeCatalogMeta(*meta) == value, "a meta value that does not re-encode to itself");
    } else {
      Check(meta.status().IsCorruption(), "a bad meta value that is not Corruption");
    }
  }
  for (CatalogRecord& r : records) {
    chains.Attach(&r);
    (void)ChainFitsState(r.key, r.parent, r.chain, page_size_tokens);
  }
  for (const std::string& raw : chains.LeftOver()) {
    Check(!raw.empty() && raw[0] == kCatalogChainPrefix, "a left-over chain key without 'C'");
  }
  return 0;
}
