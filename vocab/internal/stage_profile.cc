// StageProfile: process-wide relaxed counters (see stage_profile.h).
#include "vocab/internal/stage_profile.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>

namespace cachepawl::profile {
namespace {

constexpr size_t kStages = static_cast<size_t>(Stage::kCount);
constexpr size_t kCounters = static_cast<size_t>(Counter::kCount);

struct Registry {
  std::atomic<bool> enabled{false};
  std::array<std::atomic<uint64_t>, kStages> counts{};
  std::array<std::atomic<uint64_t>, kStages> nanos{};
  std::array<std::atomic<uint64_t>, kCounters> counters{};
  Registry() {
    const char* v = std::getenv("CACHEPAWL_PROFILE_STAGES");
    enabled.store(v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0);
  }
};

Registry& R() {
  static Registry r;
  return r;
}

constexpr std::string_view kStageNames[] = {
    "lookup.check",       "lookup.match",   "lookup.build",
    "save.hash",          "save.index",     "save.host_allocate",
    "host.evict",         "save.submit",    "save.copy",
    "save.hop",           "save.finish",    "load.index",
    "load.host_allocate", "load.submit",    "load.copy",
    "load.hop",           "load.finish",    "mover.validate",
    "mover.plan",         "mover.queue",    "mover.enqueue",
    "mover.gpu",          "mover.fire",     "disk.read_setup",
    "disk.read_submit",   "disk.read_wait", "disk.read_verify",
    "disk.read_finish",   "attached.call",  "attached.copy_order",
};
constexpr std::string_view kCounterNames[] = {
    "mover.copy_runs",
    "mover.chunks",
    "mover.units",
    "host.runs_allocated",
};

static_assert(std::size(kStageNames) == kStages, "a name for every Stage");
static_assert(std::size(kCounterNames) == kCounters, "a name for every Counter");

}  // namespace

std::string_view StageName(Stage s) {
  const auto i = static_cast<size_t>(s);
  return i < kStages ? kStageNames[i] : "unknown";
}

std::string_view CounterName(Counter c) {
  const auto i = static_cast<size_t>(c);
  return i < kCounters ? kCounterNames[i] : "unknown";
}

bool Enabled() { return R().enabled.load(std::memory_order_relaxed); }
void SetEnabled(bool on) { R().enabled.store(on, std::memory_order_relaxed); }

uint64_t Now() {
  if (!Enabled()) return 0;
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void AddNanos(Stage s, uint64_t nanos) {
  const auto i = static_cast<size_t>(s);
  if (i >= kStages || !Enabled()) return;
  R().counts[i].fetch_add(1, std::memory_order_relaxed);
  R().nanos[i].fetch_add(nanos, std::memory_order_relaxed);
}

void Add(Stage s, uint64_t start_ns) {
  if (start_ns == 0) return;
  const uint64_t now = Now();
  if (now >= start_ns) AddNanos(s, now - start_ns);
}

void Count(Counter c, uint64_t n) {
  const auto i = static_cast<size_t>(c);
  if (i >= kCounters || !Enabled()) return;
  R().counters[i].fetch_add(n, std::memory_order_relaxed);
}

Totals& Totals::operator+=(const Totals& other) {
  for (size_t i = 0; i < stages.size(); ++i) {
    stages[i].count += other.stages[i].count;
    stages[i].nanos += other.stages[i].nanos;
  }
  for (size_t i = 0; i < counters.size(); ++i) counters[i] += other.counters[i];
  return *this;
}

Totals Snapshot() {
  Totals t;
  for (size_t i = 0; i < kStages; ++i) {
    t.stages[i].count = R().counts[i].load(std::memory_order_relaxed);
    t.stages[i].nanos = R().nanos[i].load(std::memory_order_relaxed);
  }
  for (size_t i = 0; i < kCounters; ++i) {
    t.counters[i] = R().counters[i].load(std::memory_order_relaxed);
  }
  return t;
}

void Reset() {
  for (size_t i = 0; i < kStages; ++i) {
    R().counts[i].store(0, std::memory_order_relaxed);
    R().nanos[i].store(0, std::memory_order_relaxed);
  }
  for (auto& c : R().counters) c.store(0, std::memory_order_relaxed);
}

}  // namespace cachepawl::profile
