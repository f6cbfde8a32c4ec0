// Writes the binary seed corpora of the fuzz targets with the code's own encoders, so they stay
// real when a format changes (docs/RELIABILITY.md, "Fuzzing" says when to rerun it):
//
//   fuzz_make_corpus tests/fuzz/corpus
//
// record_header: records WriteRecordHeader encoded (KV, window and Mamba keys, payloads of 0 to
//   8 KiB) under several flag bytes; catalog: record, chain and meta entries of
//   EncodeCatalogValue / EncodeCatalogChain / EncodeCatalogMeta; layout_json: LayoutToJson of
//   every preset; c_abi: small programs (open a store, save, look up, lock, load, wait, close) in
//   fuzz_c_abi.cc's input encoding. The text corpora (hf_config, trace_line, cli_args) are plain
//   files, written by hand or copied from the tests. Not built by default (ninja fuzz_make_corpus).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "layouts/layout_presets.h"
#include "tiers/disk_catalog.h"
#include "tiers/disk_record.h"
#include "tiers/host_memory.h"
#include "vocab/model_layout.h"

namespace cachepawl::fuzz {
namespace {

namespace fs = std::filesystem;

void WriteFile(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

// Bytes in the order fuzz_util.h's FuzzInput reads them (little-endian).
class Bytes {
 public:
  Bytes& U8(uint8_t v) { return Raw(&v, 1); }
  Bytes& U16(uint16_t v) { return Raw(&v, 2); }
  Bytes& U32(uint32_t v) { return Raw(&v, 4); }
  Bytes& U64(uint64_t v) { return Raw(&v, 8); }
  // FuzzInput::String(max): a length (one byte, or two when max > 255), then the bytes.
  Bytes& Str(const std::string& s, size_t max) {
    if (max > 255) {
      U16(static_cast<uint16_t>(s.size()));
    } else {
      U8(static_cast<uint8_t>(s.size()));
    }
    out.append(s);
    return *this;
  }
  Bytes& Raw(const void* p, size_t n) {
    out.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string out;
};

PageHash HashOf(uint8_t seed) {
  PageHash h;
  for (size_t i = 0; i < h.bytes.size(); ++i) h.bytes[i] = static_cast<uint8_t>(seed * 31 + i);
  return h;
}

void RecordHeaders(const fs::path& dir) {
  const ModelLayout layout = *LayoutPreset("recurrentgemma-2b", 16);
  int n = 0;
  for (Kind kind : {Kind::kKV, Kind::kWindowKV, Kind::kMamba}) {
    for (uint64_t payload : {0ull, 100ull, 4096ull, 5000ull}) {
      RecordHeader h;
      h.kind = kind;
      h.hash = HashOf(static_cast<uint8_t>(n));
      h.parent = n % 2 == 0 ? PageHash() : HashOf(static_cast<uint8_t>(n + 1));
      h.depth = 16 * (n + 1);
      h.fingerprint = layout.Fingerprint();
      h.payload_bytes = payload;
      h.record_bytes = kRecordHeaderBytes + (payload + 4095) / 4096 * 4096;
      std::vector<std::byte> record(h.record_bytes);
      for (size_t i = kRecordHeaderBytes; i < record.size(); ++i) {
        record[i] = static_cast<std::byte>(i * 7);
      }
      WriteRecordHeader(record, h);
      // Flags: as read; expecting the catalog's checksum and parent; re-encoded exactly.
      for (uint8_t flags : {0, 8 | 16, 1 | 2, 4 | 8}) {
        Bytes b;
        b.U8(flags).U16(static_cast<uint16_t>(1000 + 997 * n)).Raw(record.data(), record.size());
        WriteFile(dir, "record-" + std::to_string(n) + "-" + std::to_string(flags), b.out);
      }
      ++n;
    }
  }
  // Key identities alone (ParseDiskKeyIdentity), after the flags and piece bytes.
  for (Kind kind : {Kind::kKV, Kind::kMamba}) {
    Bytes b;
    b.U8(0).U16(0);
    const std::string id = DiskKeyIdentity({kind, HashOf(9), 4096});
    b.Raw(id.data(), id.size());
    WriteFile(dir, "identity-" + std::string(KindName(kind)), b.out);
  }
}

void Entry(Bytes& b, const std::string& key, const std::string& value) {
  b.Str(key, 255).Str(value, 65535);
}

void Catalog(const fs::path& dir) {
  const LayoutFingerprint fp = LayoutPreset("recurrentgemma-2b", 16)->Fingerprint();
  CatalogRecord kv;
  kv.key = {Kind::kKV, HashOf(1), 32};
  kv.parent = HashOf(0);
  kv.extent = {0, 1 << 20, 8192};
  kv.checksum = 0x1234;
  kv.fingerprint = fp;
  kv.stamp = 7;
  CatalogRecord state = kv;
  state.key = {Kind::kMamba, HashOf(3), 48};
  state.parent = HashOf(2);
  state.extent = {1, 0, 4096 * 3};
  const std::vector<PageHash> chain = {HashOf(1), HashOf(2)};
  CatalogMeta meta;
  meta.fingerprint = fp;
  meta.paths = {"/mnt/nvme0/cachepawl/data.0", "/mnt/nvme1/cachepawl/data.1"};

  const uint8_t page_size = 16;
  auto one = [&](const std::string& name, const std::string& key, const std::string& value) {
    Bytes b;
    b.U8(page_size);
    Entry(b, key, value);
    WriteFile(dir, name, b.out);
  };
  one("record-kv", CatalogRecordKey(kv.key), EncodeCatalogValue(kv));
  one("record-state", CatalogRecordKey(state.key), EncodeCatalogValue(state));
  one("chain", CatalogChainKey(state.key), EncodeCatalogChain(chain));
  one("chain-empty", CatalogChainKey({Kind::kMamba, HashOf(4), 16}), EncodeCatalogChain({}));
  one("meta", kCatalogMetaKey, EncodeCatalogMeta(meta));
  one("meta-no-paths", kCatalogMetaKey, EncodeCatalogMeta(CatalogMeta{}));
  // A scan: chains first, then records (one chain without its state).
  Bytes scan;
  scan.U8(page_size);
  Entry(scan, CatalogChainKey(state.key), EncodeCatalogChain(chain));
  Entry(scan, CatalogChainKey({Kind::kMamba, HashOf(5), 32}),
        EncodeCatalogChain(std::vector<PageHash>{HashOf(1)}));
  Entry(scan, kCatalogMetaKey, EncodeCatalogMeta(meta));
  Entry(scan, CatalogRecordKey(kv.key), EncodeCatalogValue(kv));
  Entry(scan, CatalogRecordKey(state.key), EncodeCatalogValue(state));
  WriteFile(dir, "scan", scan.out);
  // Near misses: a value one byte short, a version byte of 2, a KV chain key.
  std::string shortened = EncodeCatalogValue(kv);
  shortened.pop_back();
  one("record-short", CatalogRecordKey(kv.key), shortened);
  std::string v2 = EncodeCatalogValue(kv);
  v2[0] = 2;
  one("record-version-2", CatalogRecordKey(kv.key), v2);
  one("chain-of-kv", CatalogChainKey(kv.key), EncodeCatalogChain(chain));
}

void LayoutJson(const fs::path& dir) {
  for (const std::string& name : LayoutPresetNames()) {
    WriteFile(dir, name + ".json", LayoutToJson(*LayoutPreset(name, 16)));
  }
}

// fuzz_c_abi.cc's encoding: an operation byte, then its arguments in the order it reads them.
// Handle slots are Below(3) (a uint32), out pointers a byte (0: NULL, 1: real).
class CProgram {
 public:
  // options_new into slot 0; the usual small store (SetOption's last case); open into slot 0.
  CProgram& OpenSmallStore(bool pool, bool disk) {
    b.U8(5).U32(0).U8(1);
    b.U8(6).U32(0).U8(0).U8(0).U8(9).U8(pool).U8(disk);
    b.U8(9).U32(0).U32(0).U8(1);
    return *this;
  }
  // Save of `tokens` (i * mult) with device pages 0..n-1 and a state slot or none.
  CProgram& Save(uint32_t tokens, uint8_t mult, std::vector<uint8_t> pages, bool state,
                 uint8_t depth_pages) {
    b.U8(24).U32(0);
    b.U8(1).U32(static_cast<uint32_t>(pages.size()));
    for (uint8_t p : pages) b.U8(1).U8(p);
    if (state) {
      b.U8(1).U8(0).U8(0);  // StateSlot: not NO_SLOT; Number case 0: slot 0
    } else {
      b.U8(0);
    }
    b.U8(1).U8(0);            // first page 0
    b.U8(1).U8(depth_pages);  // depth: 4 * (byte % 64) tokens, pages of 4 tokens
    b.U8(1);                  // tokens, not hashes
    b.U8(1).Str("", 32);      // namespace ""
    b.U8(static_cast<uint8_t>(mult & 0xfe)).U32(tokens);  // tokens i * mult
    b.U8(1);                                              // tokens not NULL
    b.U32(0).U8(1);                                       // fence slot 0
    return *this;
  }
  CProgram& Lookup(uint32_t tokens, uint8_t mult) {
    b.U8(19).U32(0).U8(1).U8(1).Str("", 32);
    b.U8(static_cast<uint8_t>(mult & 0xfe)).U32(tokens).U8(1);
    b.U32(0).U8(1);  // match slot 0
    return *this;
  }
  CProgram& WaitFence() {
    b.U8(27).U32(0).U8(1).U8(1).U8(0).U8(1).U8(1);  // fence_wait(slot 0, forever)
    return *this;
  }
  // A size_t getter (reusable_pages: 1, ...) or, with `hashes`, cachepawl_match_hashes.
  CProgram& MatchQuery(uint32_t getter, bool hashes) {
    b.U8(21).U32(0).U32(1).U8(1).U8(1);  // a buffer of one hash, its whole capacity
    if (hashes) {
      b.U8(4).U8(1);
    } else {
      b.U8(0).U32(getter).U8(1);
    }
    return *this;
  }
  CProgram& Lock() {
    b.U8(22).U32(0).U32(0).U8(1).U8(0).U32(0).U8(1).U8(4);  // lock slot 0, pages 4
    return *this;
  }
  CProgram& Load(std::vector<uint8_t> pages, bool state) {
    b.U8(23).U32(0).U32(0);
    b.U8(1).U32(static_cast<uint32_t>(pages.size()));
    for (uint8_t p : pages) b.U8(1).U8(p);
    if (state) {
      b.U8(1).U8(0).U8(1);
    } else {
      b.U8(0);
    }
    b.U8(1).U8(0);  // first page 0
    b.U8(1).U8(0);  // flags 0
    b.U32(0).U8(1);
    return *this;
  }
  CProgram& Close() {
    b.U8(12).U32(0).U8(1);
    return *this;
  }
  std::string out() const { return b.out; }

 private:
  Bytes b;
};

void CAbi(const fs::path& dir) {
  WriteFile(dir, "open-host", CProgram().OpenSmallStore(false, false).Close().out());
  WriteFile(dir, "open-pool-disk", CProgram().OpenSmallStore(true, true).Close().out());
  WriteFile(dir, "save-lookup",
            CProgram()
                .OpenSmallStore(true, false)
                .Save(16, 2, {0, 1, 2, 3}, false, 0)
                .WaitFence()
                .Lookup(16, 2)
                .MatchQuery(1, false)
                .MatchQuery(0, true)
                .out());
  WriteFile(dir, "save-state-lock-load",
            CProgram()
                .OpenSmallStore(true, true)
                .Save(16, 2, {0, 1, 2, 3}, true, 4)
                .WaitFence()
                .Lookup(20, 2)
                .Lock()
                .Load({4, 5, 6, 7}, true)
                .WaitFence()
                .Close()
                .out());
  // Every operation once with the bytes that follow as its arguments.
  for (uint8_t op = 0; op < 32; ++op) {
    Bytes b;
    b.U8(op);
    for (int i = 0; i < 48; ++i) b.U8(static_cast<uint8_t>(i * 37 + op));
    WriteFile(dir, "op-" + std::to_string(op), b.out);
  }
  // Layout text through the C ABI: the tiny hybrid layout as JSON and a small HF config.
  const std::string json = LayoutToJson(*LayoutPreset("recurrentgemma-2b", 4));
  Bytes layout;
  layout.U8(1).U8(1).Str(json, 4096).U8(0).U32(1).U8(1);
  layout.U8(3).U32(1).U8(1).U8(2).U8(0).U8(0).U8(3).U8(1);  // record_bytes(kind STATE)
  WriteFile(dir, "layout-json", layout.out);
}

}  // namespace
}  // namespace cachepawl::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  cachepawl::fuzz::RecordHeaders(dir / "record_header");
  cachepawl::fuzz::Catalog(dir / "catalog");
  cachepawl::fuzz::LayoutJson(dir / "layout_json");
  cachepawl::fuzz::CAbi(dir / "c_abi");
  return 0;
}
