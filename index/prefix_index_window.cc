// PrefixIndex: windowed KV (Kind::kWindowKV) locations and eviction (see
// index/prefix_index_internal.h for the layout and the rule).
#include <vector>

#include "index/prefix_index.h"
#include "index/prefix_index_internal.h"

namespace cachepawl {

using namespace prefix_index_internal;  // NOLINT(google-build-using-namespace): its internals

// `tier` does not hold entry i's windowed KV yet. Setting the first location attaches a record
// (its recency the clock).
Status Core::SetWindow(uint32_t i, int t, uint64_t slot) {
  WindowEntry& we = win[i];
  Tracked(i, [&](ColdEntry&) {
    if (we.record == kNone) {
      we.record = NewRecord(&windows, &window_ids, i);
      ++live_windows;
    }
    State& w = windows[we.record];
    w.mask |= Bit(t);
    w.slot[t] = slot;
    ++located[kWindow][t];
  });
  return Status::OK();
}

// Clearing the last tier detaches the record. Its queue items become stale as a state's do
// (see PrefixIndex::ClearLocation).
uint64_t Core::ClearWindow(uint32_t i, int t) {
  uint64_t slot = 0;
  WindowEntry& we = win[i];
  Tracked(i, [&](ColdEntry&) {
    State& w = windows[we.record];
    slot = w.slot[t];
    w.mask &= static_cast<uint8_t>(~Bit(t));
    w.slot[t] = 0;
    --located[kWindow][t];
    if (w.mask == 0) {
      w.entry = kNone;
      window_ids.Free(we.record);
      we.record = kNone;
      --live_windows;
    }
  });
  return slot;
}

// Not needed first, then needed but held by another tier too; least recently used first in
// each. Picking changes no entry's class, so the two queues can be taken one after the other.
std::vector<Victim> Core::PickWindows(int t, size_t max_count, VictimClass cls) {
  std::vector<Victim> out;
  std::vector<uint32_t> picked;
  if (cls != VictimClass::kNeeded) PickRecords(kWindowQ, t, max_count, &out, &picked);
  if (cls != VictimClass::kNotNeeded) PickRecords(kNeededWindowQ, t, max_count, &out, &picked);
  EndPick(kWindowQ, t, picked);  // re-queues each victim in the queue of its class
  MaybeRebuild(kNeededWindowQ, t);
  return out;
}

}  // namespace cachepawl
