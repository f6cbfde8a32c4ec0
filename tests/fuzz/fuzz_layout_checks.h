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

#include <string>

#include "tests/fuzz/fuzz_util.h"
#include "vocab/model_layout.h"

namespace cachepawl::fuzz {

inline constexpr size_t kEveryLayerUpTo = 256;

// Whether layer i of n is checked through the per-layer segment functions.
inline bool CheckedOneByOne(size_t i, size_t n) {
  return n <= kEveryLayerUpTo || i < kEveryLayerUpTo / 2 || i >= n - kEveryLayerUpTo / 2;
}

// One layer's pair of segments (K and V, or conv and SSM state) in a record of `limit` bytes
// (`what` names it for the message: "a KV page"): the second ends where the walk over the
// layers so far (`walk`) puts it, and both lie inside the record.
inline void CheckSegmentPair(const RecordSegment& first, const RecordSegment& second, uint64_t walk,
                             uint64_t limit, const char* what) {
  if (second.offset + second.bytes != walk) {
    Check(false, (std::string(what) + " segment that is not where the walk puts it").c_str());
  }
  if (first.offset + first.bytes > limit || second.offset + second.bytes > limit) {
    Check(false, (std::string(what) + " segment outside its record").c_str());
  }
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
    const uint64_t kv = l.KBytesPerPage(a) + l.VBytesPerPage(a);
    Check(l.VBytesPerPage(a) == (l.attention_layers[a].mla ? 0 : l.KBytesPerPage(a)),
          "V bytes that are neither K's nor 0 for an MLA layer");
    kv_walk += kv;
    record_walk[windowed ? 1 : 0] += kv;
    Check(kv_walk <= kv_page, "the attention layers' K and V exceed the KV page");
    if (!CheckedOneByOne(a, l.attention_layers.size())) continue;
    CheckSegmentPair(l.KSegment(a), l.VSegment(a), kv_walk, kv_page, "a KV page");
    CheckSegmentPair(l.KRecordSegment(a), l.VRecordSegment(a), record_walk[windowed ? 1 : 0],
                     l.RecordBytes(l.AttentionKind(a)), "an attention record");
  }
  const uint64_t state = l.MambaSlotBytes();
  uint64_t state_walk = 0;
  for (size_t s = 0; s < l.ssm_layers.size(); ++s) {
    state_walk += l.ConvStateBytes(s) + l.SsmStateBytes(s);
    Check(state_walk <= state, "the SSM layers' tensors exceed the state record");
    if (!CheckedOneByOne(s, l.ssm_layers.size())) continue;
    CheckSegmentPair(l.ConvSegment(s), l.SsmSegment(s), state_walk, state, "a state record");
  }
  (void)l.WindowPages();
  (void)l.EstimatedPrefillCost();
  Check(!l.Describe().empty(), "an empty Describe()");
  auto again = ParseLayoutJson(LayoutToJson(l));
  Check(again.ok(), "LayoutToJson wrote a text ParseLayoutJson refuses");
  Check(again->Fingerprint() == l.Fingerprint(), "LayoutToJson does not round-trip");
}

}  // namespace cachepawl::fuzz
