// StageProfile: opt-in wall-clock time per named stage of the data path, for finding where an
// operation's time goes on a machine without perf (the GPU machine) or where perf cannot see it
// (time between threads). Off by default: then a stage costs one relaxed load of a flag.
//
//   profile::SetEnabled(true);           // or CACHEPAWL_PROFILE_STAGES=1 in the environment
//   { profile::ScopedStage s(profile::Stage::kSaveIndex); ... }   // adds the scope's time
//   profile::Add(profile::Stage::kSaveCopy, start_ns);              // from a stamp to now
//   profile::Count(profile::Counter::kCopyCalls, n);
//   auto snap = profile::Snapshot();    // totals since the last Reset()
//
// Stages may overlap (a Save's copy runs while its thread does other work), nest (eviction
// inside host allocation) and run on any thread: a stage's total is the sum of the wall time of
// its occurrences, its count how many there were. Thread safety: every function may be called
// from any thread; totals are relaxed atomics (a snapshot taken while operations run may mix
// an occurrence's count and time).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace cachepawl::profile {

enum class Stage : uint8_t {
  // Store::LookupHashes (and Lookup after hashing).
  kLookupCheck,  // the store is open, no all-zero hash
  kLookupMatch,  // the prefix index's match
  kLookupBuild,  // the PrefixMatch: hashes, tiers, counters
  // Store::Save, on the calling thread unless said otherwise.
  kSaveHash,          // page hashes from tokens
  kSaveIndex,         // prefix index: insert the chain (twice), which keys are cached
  kSaveHostAllocate,  // host slots for the fresh entries (eviction included)
  kHostEvict,         // eviction, inside kSaveHostAllocate or kLoadHostAllocate
  kSaveSubmit,        // DeviceMover::Submit of the operation
  kSaveCopy,          // Submit returned -> the device mover's fence fired (store's threads)
  kSaveHop,           // mover fence fired -> the completion worker runs the finish (only
                      // when it is not run inline: large Saves, or the mutex was busy)
  kSaveFinish,        // the finish: locations published, disk hand-off
  // Store::Load.
  kLoadIndex,         // checks, pins, disk fills planned (under the store's mutex)
  kLoadHostAllocate,  // host slots for disk hits
  kLoadSubmit,        // DeviceMover::Submit of the host -> device operation
  kLoadCopy,          // Submit returned -> the device mover's fence fired
  kLoadHop,           // outer fence fired -> the completion worker runs the unpins (after
                      // the fence: not in the Load's latency)
  kLoadFinish,        // the unpins, on the completion worker
  // DeviceMover.
  kMoverValidate,  // Submit: every unit checked
  kMoverPlan,      // Submit: host placements and the copy plan
  kMoverQueue,     // Submit returned -> the dispatcher took the operation
  kMoverEnqueue,   // GPU mode: the dispatcher enqueues the operation's kernels and copies
  kMoverGpu,       // GPU mode: enqueued -> its completion thread saw the last event (the
                   // GPU's work and that thread's wake-up)
  kMoverFire,      // GPU mode: the mover's fence fired, its callbacks included
  // DiskMover reads.
  kDiskReadSetup,   // Load: pins and requests, before the first submit
  kDiskReadSubmit,  // Load: handing the requests to the ring (io_uring_enter included)
  kDiskReadWait,    // a record's requests built -> its last piece seen landed (the drive,
                    // the ring's completion thread waking)
  kDiskReadVerify,  // a record's header and checksum over the pieces that landed
  kDiskReadFinish,  // a read batch's result assembled and its fence fired (callbacks included)
  // An attached store's Load (ipc/attached_store.h), in the attached process.
  kAttachedCall,       // the call sent -> the owner's Reply taken
  kAttachedCopyOrder,  // the call sent -> its Copy order taken, before the copy is submitted
  kCount
};

enum class Counter : uint8_t {
  kMoverCopyRuns,      // copy runs the planner produced (one copy-engine record each, at most)
  kMoverChunks,        // staging chunks the planner produced
  kMoverUnits,         // units submitted
  kHostRunsAllocated,  // runs of adjacent host slots handed to an allocation
  kCount
};

std::string_view StageName(Stage s);
std::string_view CounterName(Counter c);

// Whether stages are recorded. Initially: the environment variable CACHEPAWL_PROFILE_STAGES is
// set to something other than "" or "0".
bool Enabled();
void SetEnabled(bool on);

// Nanoseconds on the steady clock; 0 when profiling is off (so a later Add is a no-op).
uint64_t Now();
// Adds (now - start_ns) to `s` when start_ns != 0 and profiling is on.
void Add(Stage s, uint64_t start_ns);
void AddNanos(Stage s, uint64_t nanos);
void Count(Counter c, uint64_t n = 1);

struct StageTotal {
  uint64_t count = 0;
  uint64_t nanos = 0;
};
struct Totals {
  std::array<StageTotal, static_cast<size_t>(Stage::kCount)> stages{};
  std::array<uint64_t, static_cast<size_t>(Counter::kCount)> counters{};
  // Adds `other` stage by stage and counter by counter (summing the snapshots of some rounds).
  Totals& operator+=(const Totals& other);
};
Totals Snapshot();
void Reset();

class ScopedStage {
 public:
  explicit ScopedStage(Stage s) : stage_(s), start_(Now()) {}
  ~ScopedStage() { Add(stage_, start_); }
  ScopedStage(const ScopedStage&) = delete;
  ScopedStage& operator=(const ScopedStage&) = delete;

 private:
  Stage stage_;
  uint64_t start_;
};

}  // namespace cachepawl::profile
