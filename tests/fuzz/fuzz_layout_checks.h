// What the layout fuzz targets (fuzz_layout_json.cc, fuzz_hf_config.cc) check of a layout that
// parsed: it validates, every derived size and segment is computed (UBSan catches an overflow
// Validate should have refused), segments lie inside their records, and its JSON form parses
// back to the same fingerprint.
#pragma once

#include "store/model_layout.h"
#include "tests/fuzz/fuzz_util.h"

namespace cachepawl::fuzz {

inline void CheckLayout(const ModelLayout& l) {
  Check(l.Validate().ok(), "a parsed layout that does not validate");
  for (Kind kind : {Kind::kKV, Kind::kWindowKV, Kind::kMamba}) {
    Check(l.Stores(kind) == (l.RecordBytes(kind) > 0), "Stores and RecordBytes disagree");
  }
  const uint64_t kv_page = l.KvPageBytes();
  for (size_t a = 0; a < l.attention_layers.size(); ++a) {
    const RecordSegment k = l.KSegment(a), v = l.VSegment(a);
    Check(k.offset + k.bytes <= kv_page && v.offset + v.bytes <= kv_page,
          "an attention segment outside the KV page");
    const uint64_t record = l.RecordBytes(l.AttentionKind(a));
    const RecordSegment kr = l.KRecordSegment(a), vr = l.VRecordSegment(a);
    Check(kr.offset + kr.bytes <= record && vr.offset + vr.bytes <= record,
          "an attention segment outside its record");
  }
  const uint64_t state = l.MambaSlotBytes();
  for (size_t s = 0; s < l.ssm_layers.size(); ++s) {
    const RecordSegment c = l.ConvSegment(s), m = l.SsmSegment(s);
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
