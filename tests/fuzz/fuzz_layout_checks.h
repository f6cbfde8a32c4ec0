// What the layout fuzz targets (fuzz_layout_json.cc, fuzz_hf_config.cc) check of a layout that
// parsed: it validates, every derived size and segment is computed (UBSan catches an overflow
// Validate should have refused), segments lie inside their records, and its JSON form parses
// back to the same fingerprint.
//
// The per-layer segment functions walk the layers before the one asked for, so checking every
// layer through them is quadratic: a config with 50,288 layers took 12 s under ASan (a libFuzzer
// timeout). Layouts of more than kEveryLayerUpTo layers have their first and last
// kEveryLayerUpTo / 2 layers checked that way; all layers are checked by one linear walk.
#pragma once

#include "store/vocab/model_layout.h"
#include "tests/fuzz/fuzz_util.h"

namespace cachepawl::fuzz {

inline constexpr size_t kEveryLayerUpTo = 256;

// Whether layer i of n is checked through the per-layer segment functions.
inline bool CheckedOneByOne(size_t i, size_t n) {
  return n <= kEveryLayerUpTo || i < kEveryLayerUpTo / 2 || i >= n - kEveryLayerUpTo / 2;
}

inline void CheckLayout(const ModelLayout& l) {
  Check(l.Validate().ok(), "a parsed layout that does not validate");
  for (Kind kind : {Kind::kKV, Kind::kWindowKV, Kind::kMamba}) {
    Check(l.Stores(kind) == (l.RecordBytes(kind) > 0), "Stores and RecordBytes disagree");
  }
  const uint64_t kv_page = l.KvPageBytes();
  uint64_t kv_walk = 0;
  uint64_t record_walk[2] = {0, 0};  // full-attention record, windowed record
  for (size_t a = 0; a < l.attention_layers.size(); ++a) {
    const bool windowed = l.AttentionKind(a) == Kind::kWindowKV;
    kv_walk += 2 * l.KBytesPerPage(a);
    record_walk[windowed ? 1 : 0] += 2 * l.KBytesPerPage(a);
    Check(kv_walk <= kv_page, "the attention layers' K and V exceed the KV page");
    if (!CheckedOneByOne(a, l.attention_layers.size())) continue;
    const RecordSegment k = l.KSegment(a), v = l.VSegment(a);
    Check(v.offset + v.bytes == kv_walk, "a KV page segment that is not where the walk puts it");
    Check(k.offset + k.bytes <= kv_page && v.offset + v.bytes <= kv_page,
          "an attention segment outside the KV page");
    const uint64_t record = l.RecordBytes(l.AttentionKind(a));
    const RecordSegment kr = l.KRecordSegment(a), vr = l.VRecordSegment(a);
    Check(kr.offset + kr.bytes <= record && vr.offset + vr.bytes <= record,
          "an attention segment outside its record");
    Check(vr.offset + vr.bytes == record_walk[windowed ? 1 : 0],
          "a record segment that is not where the walk puts it");
  }
  const uint64_t state = l.MambaSlotBytes();
  uint64_t state_walk = 0;
  for (size_t s = 0; s < l.ssm_layers.size(); ++s) {
    state_walk += l.ConvStateBytes(s) + l.SsmStateBytes(s);
    Check(state_walk <= state, "the SSM layers' tensors exceed the state record");
    if (!CheckedOneByOne(s, l.ssm_layers.size())) continue;
    const RecordSegment c = l.ConvSegment(s), m = l.SsmSegment(s);
    Check(m.offset + m.bytes == state_walk, "a state segment that is not where the walk puts it");
    Check(c.offset + c.bytes <= state && m.offset + m.bytes <= state,
          "an SSM segment outside the state record");
  }
  (void)l.WindowPages();
  (void)l.EstimatedPrefillCost();
  Check(!l.Describe().empty(), "an empty Describe()");
  auto again = ParseLayoutJson(LayoutToJson(l));
  Check(again.ok(), "LayoutToJson wrote a text ParseLayoutJson refuses");
  Check(again->Fingerprint() == l.Fingerprint(), "LayoutToJson does not round-trip");
}

}  // namespace cachepawl::fuzz
