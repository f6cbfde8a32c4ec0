#include "tiers/host_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "cuda/cuda_resources.h"
#include "cuda/gpu_runtime.h"

namespace cachepawl {

namespace {

constexpr uint64_t kUnit = kDirectIoAlignment;  // 4 KiB: the allocation granularity
constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 30;

uint64_t LargestSlotBytes(const ModelLayout& layout) {
  uint64_t b = 0;
  for (Kind k : kAllKinds) {
    if (layout.Stores(k)) b = std::max(b, RecordSlotBytes(layout, k));
  }
  return b;
}

}  // namespace

Status HostArenaOptions::Validate() const {
  if (bytes == 0) return Status::InvalidArgument("host_arena.bytes: 0 (must be > 0)");
  if (bytes > (uint64_t{1} << 50)) {
    return Status::InvalidArgument("host_arena.bytes: " + std::to_string(bytes) +
                                   " (must be <= 1 PiB)");
  }
  if (chunk_bytes != 0 && (chunk_bytes % kUnit != 0 || chunk_bytes > kMaxChunkBytes)) {
    return Status::InvalidArgument("host_arena.chunk_bytes: " + std::to_string(chunk_bytes) +
                                   " (must be a multiple of 4096 and <= 1 GiB)");
  }
  if (touch_threads > 256) {
    return Status::InvalidArgument("host_arena.touch_threads: " + std::to_string(touch_threads) +
                                   " (must be <= 256)");
  }
  CACHEPAWL_RETURN_IF_ERROR(cuda::ValidateGpuMode(pin, "host_arena.pin"));
  if (device < 0) {
    return Status::InvalidArgument("host_arena.device: " + std::to_string(device) +
                                   " (must be >= 0)");
  }
  return Status::OK();
}

HostArena::HostArena(const ModelLayout& layout, const HostArenaOptions& options)
    : layout_(layout), options_(options) {}

StatusOr<std::unique_ptr<HostArena>> HostArena::Open(const ModelLayout& layout,
                                                     const HostArenaOptions& options) {
  CACHEPAWL_RETURN_IF_ERROR(options.Validate());
  CACHEPAWL_RETURN_IF_ERROR(layout.Validate().WithContext("host arena layout"));
  const uint64_t largest = LargestSlotBytes(layout);
  const uint64_t capacity = RoundUpToAlignment(options.bytes, kUnit);
  if (largest > capacity) {
    return Status::InvalidArgument("host_arena.bytes: " + std::to_string(options.bytes) +
                                   " (smaller than one slot of " + std::to_string(largest) +
                                   " bytes)");
  }
  uint64_t chunk = options.chunk_bytes;
  if (chunk == 0) chunk = std::min(kMaxChunkBytes, capacity);
  if (chunk < largest) {
    return Status::InvalidArgument("host_arena.chunk_bytes: " + std::to_string(chunk) +
                                   " (smaller than one slot of " + std::to_string(largest) +
                                   " bytes; a slot never straddles two chunks)");
  }
  CACHEPAWL_ASSIGN_OR_RETURN(const bool pin,
                             cuda::ResolveGpuMode(options.pin, "host_arena.pin", options.device));
  if (pin && options.device >= cuda::DeviceCount()) {
    return Status::InvalidArgument("host_arena.device: " + std::to_string(options.device) + " (" +
                                   std::to_string(cuda::DeviceCount()) + " GPUs visible)");
  }

  std::unique_ptr<HostArena> arena(new HostArena(layout, options));
  for (Kind k : kAllKinds) {
    if (!layout.Stores(k)) continue;
    arena->slot_bytes_[static_cast<int>(k)] = RecordSlotBytes(layout, k);
    arena->slot_units_[static_cast<int>(k)] = RecordSlotBytes(layout, k) / kUnit;
  }
  arena->capacity_ = capacity;
  arena->chunk_bytes_ = chunk;
  arena->num_chunks_ = (capacity + chunk - 1) / chunk;
  arena->pinning_ = pin;
  CACHEPAWL_RETURN_IF_ERROR(arena->MapAndStart());
  return arena;
}

Status HostArena::MapAndStart() {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (options_.shared) {
    shared_fd_ = memfd_create("cachepawl-host-arena", MFD_CLOEXEC);
    if (shared_fd_ < 0) return Status::FromErrno("host arena: memfd_create", errno);
    if (ftruncate(shared_fd_, static_cast<off_t>(capacity_)) != 0) {
      return Status::FromErrno(
          "host arena: ftruncate of the memfd to " + std::to_string(capacity_) + " bytes", errno);
    }
    flags = MAP_SHARED | MAP_NORESERVE;
  }
  void* p = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, flags, shared_fd_, 0);
  if (p == MAP_FAILED) {
    return Status::FromErrno("host arena: mmap of " + std::to_string(capacity_) + " bytes", errno);
  }
  base_ = static_cast<std::byte*>(p);
  if (options_.huge_pages) (void)madvise(p, capacity_, MADV_HUGEPAGE);
  open_time_ = std::chrono::steady_clock::now();
  unit_state_.assign(capacity_ / kUnit, 0);
  chunk_usable_.assign(num_chunks_, 0);
  chunk_registrations_.resize(num_chunks_);
  if (!pinning_) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t c = 0; c < num_chunks_; ++c) MakeChunkUsable(c);
    chunks_done_ = num_chunks_;
    return Status::OK();
  }
  pin_thread_ = std::thread([this] { PinLoop(); });
  return Status::OK();
}

HostArena::~HostArena() {
  stop_.store(true, std::memory_order_release);
  if (pin_thread_.joinable()) pin_thread_.join();
  chunk_registrations_.clear();  // cudaHostUnregister, before the memory is unmapped
  if (base_ != nullptr) munmap(base_, capacity_);
  if (shared_fd_ >= 0) close(shared_fd_);
}

void HostArena::PinLoop() {
  Status st = cuda::SetDevice(options_.device);
  const uint32_t threads = options_.touch_threads != 0
                               ? options_.touch_threads
                               : std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  auto chunk_size = [&](size_t c) {
    return std::min<uint64_t>(chunk_bytes_, capacity_ - c * chunk_bytes_);
  };
  // Touch chunk `c` with `threads` threads (one write per 4 KiB page, which also zeroes it).
  auto start_touch = [&](size_t c) {
    std::vector<std::thread> workers;
    if (c >= num_chunks_) return workers;
    std::byte* begin = base_ + c * chunk_bytes_;
    const uint64_t pages = chunk_size(c) / kUnit;
    const uint64_t per = (pages + threads - 1) / threads;
    for (uint32_t t = 0; t < threads; ++t) {
      const uint64_t lo = std::min(pages, t * per), hi = std::min(pages, lo + per);
      if (lo == hi) break;
      workers.emplace_back([begin, lo, hi] {
        for (uint64_t i = lo; i < hi; ++i) {
          *reinterpret_cast<volatile char*>(begin + i * kUnit) = 0;
        }
      });
    }
    return workers;
  };
  auto join = [](std::vector<std::thread>& ws) {
    for (auto& w : ws) w.join();
    ws.clear();
  };
  std::vector<std::thread> touching = start_touch(0);
  for (size_t c = 0; c < num_chunks_; ++c) {
    join(touching);
    if (!st.ok() || stop_.load(std::memory_order_acquire)) break;
    touching = start_touch(c + 1);  // overlaps with registering chunk c
    auto registration = cuda::HostRegistration::Register(base_ + c * chunk_bytes_, chunk_size(c));
    st = registration.status();
    if (st.ok()) {
      chunk_registrations_[c] = std::move(registration).value();
      std::lock_guard<std::mutex> lock(mu_);
      MakeChunkUsable(c);
      ++chunks_done_;
      pinned_bytes_.fetch_add(chunk_size(c), std::memory_order_release);
    }
  }
  join(touching);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.ok()) {
      pin_status_ = st.WithContext("host arena: pinning chunk " + std::to_string(chunks_done_));
      ++pin_failures_;
    } else if (stop_.load(std::memory_order_acquire) && chunks_done_ < num_chunks_) {
      pin_status_ = Status::Aborted("host arena closed while pinning");
    }
    chunks_done_ = num_chunks_;  // done: usable or failed
    pin_nanos_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now() - open_time_)
                         .count(),
                     std::memory_order_release);
  }
  pinned_cv_.notify_all();
}

void HostArena::MakeChunkUsable(size_t chunk) {
  chunk_usable_[chunk] = 1;
  const uint64_t first = chunk * chunk_bytes_ / kUnit;
  const uint64_t units = std::min<uint64_t>(chunk_bytes_, capacity_ - chunk * chunk_bytes_) / kUnit;
  InsertFree(first, units);
  if (!pinning_) pinned_bytes_.fetch_add(units * kUnit, std::memory_order_release);
}

void HostArena::InsertFree(uint64_t unit, uint64_t units) {
  const uint64_t chunk_units = chunk_bytes_ / kUnit;
  const uint64_t chunk = unit / chunk_units;
  // Merge with the free extent that ends at `unit` and the one that starts at `unit + units`,
  // never across a chunk boundary.
  auto next = free_by_start_.lower_bound(unit);
  if (next != free_by_start_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == unit && prev->first / chunk_units == chunk) {
      unit = prev->first;
      units += prev->second;
      EraseFree(prev);
    }
  }
  if (next != free_by_start_.end() && next->first == unit + units &&
      next->first / chunk_units == chunk) {
    units += next->second;
    EraseFree(next);
  }
  free_by_start_.emplace(unit, units);
  free_by_size_.emplace(units, unit);
}

void HostArena::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_start_.erase(it);
}

StatusOr<HostSlotId> HostArena::Allocate(Kind kind) {
  std::vector<HostSlotId> one;
  CACHEPAWL_RETURN_IF_ERROR(AllocateRun(kind, 1, &one));
  return one.front();
}

Status HostArena::NoRoomLocked(Kind kind) {
  const uint64_t n = slot_units_[static_cast<int>(kind)];
  if (chunks_done_ < num_chunks_ && pin_status_.ok()) {
    ++allocate_busy_;
    return Status::Busy("host arena: no room for a " + std::string(KindName(kind)) +
                        " slot in the " + std::to_string(pinned_bytes() >> 20) +
                        " MiB pinned so far; " + std::to_string(capacity_ >> 20) +
                        " MiB are being pinned");
  }
  ++allocate_no_space_;
  return Status::NoSpace("host arena: no free extent of " + std::to_string(n * kUnit) +
                         " bytes for a " + std::string(KindName(kind)) + " slot (" +
                         std::to_string(allocated_units_ * kUnit) + " of " +
                         std::to_string(capacity_) + " bytes allocated)");
}

void HostArena::CarveLocked(Kind kind, uint64_t start, uint64_t len, uint64_t n,
                            std::vector<HostSlotId>* out) {
  const int k = static_cast<int>(kind);
  const uint64_t units = slot_units_[k];
  free_by_size_.erase({len, start});
  free_by_start_.erase(start);
  const uint64_t used = n * units;
  if (len > used) {
    free_by_start_.emplace(start + used, len - used);
    free_by_size_.emplace(len - used, start + used);
  }
  for (uint64_t i = 0; i < n; ++i) {
    unit_state_[start + i * units] = static_cast<uint8_t>(1 + k);
    out->push_back(HostSlotId{start + i * units});
  }
  allocated_units_ += used;
  slots_[k] += n;
}

Status HostArena::AllocateRun(Kind kind, size_t count, std::vector<HostSlotId>* out) {
  const int k = static_cast<int>(kind);
  if (!IsValidKind(static_cast<uint8_t>(kind)) || slot_units_[k] == 0) {
    return Status::InvalidArgument("host arena: kind " + std::to_string(k) +
                                   " has no slots in layout '" + layout_.model + "'");
  }
  const uint64_t n = slot_units_[k];
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t left = count;
  while (left > 0) {
    // The smallest extent that holds every slot still wanted (best fit keeps large extents
    // whole), else the largest extent (the longest run there is).
    auto it = free_by_size_.lower_bound({left * n, 0});
    if (it == free_by_size_.end()) {
      if (free_by_size_.empty() || free_by_size_.rbegin()->first < n) return NoRoomLocked(kind);
      it = std::prev(free_by_size_.end());
    }
    const uint64_t len = it->first, start = it->second;
    const uint64_t take = std::min<uint64_t>(left, len / n);
    CarveLocked(kind, start, len, take, out);
    left -= take;
  }
  return Status::OK();
}

Status HostArena::Free(HostSlotId slot) {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot >= unit_state_.size() || unit_state_[slot] == 0) {
    ++bad_frees_;
    return Status::InvalidArgument("host arena: Free of slot " + std::to_string(slot) +
                                   ", which is not allocated");
  }
  const int k = unit_state_[slot] - 1;
  unit_state_[slot] = 0;
  allocated_units_ -= slot_units_[k];
  --slots_[k];
  InsertFree(slot, slot_units_[k]);
  return Status::OK();
}

Status HostArena::CheckSlot(HostSlotId slot, Kind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot >= unit_state_.size() || unit_state_[slot] == 0) {
    return Status::InvalidArgument("host slot " + std::to_string(slot) + ": not allocated");
  }
  if (unit_state_[slot] != 1 + static_cast<int>(kind)) {
    return Status::InvalidArgument("host slot " + std::to_string(slot) + ": holds a " +
                                   std::string(KindName(static_cast<Kind>(unit_state_[slot] - 1))) +
                                   " slot, not " + std::string(KindName(kind)));
  }
  return Status::OK();
}

std::byte* HostArena::SlotData(HostSlotId slot) { return base_ + slot * kUnit; }

uint64_t HostArena::SlotBytes(HostSlotId slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (slot >= unit_state_.size() || unit_state_[slot] == 0) return 0;
  return slot_bytes_[unit_state_[slot] - 1];
}

std::vector<std::span<std::byte>> HostArena::Regions() const {
  std::vector<std::span<std::byte>> regions;
  for (size_t c = 0; c < num_chunks_; ++c) {
    regions.emplace_back(base_ + c * chunk_bytes_,
                         std::min<uint64_t>(chunk_bytes_, capacity_ - c * chunk_bytes_));
  }
  return regions;
}

int HostArena::RegionOf(HostSlotId slot) const {
  return static_cast<int>(slot * kUnit / chunk_bytes_);
}

Status HostArena::WaitUntilPinned(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (!pinned_cv_.wait_for(lock, timeout, [&] { return chunks_done_ == num_chunks_; })) {
    return Status::TimedOut("host arena: " + std::to_string(pinned_bytes() >> 20) + " of " +
                            std::to_string(capacity_ >> 20) + " MiB pinned after " +
                            std::to_string(timeout.count()) + " ms");
  }
  return pin_status_;
}

double HostArena::pin_seconds() const {
  return static_cast<double>(pin_nanos_.load(std::memory_order_acquire)) * 1e-9;
}

uint64_t HostArena::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t allocated = allocated_units_ * kUnit;
  const uint64_t usable = pinned_bytes();
  return usable > allocated ? usable - allocated : 0;
}

HostArenaStats HostArena::stats() const {
  HostArenaStats s;
  std::lock_guard<std::mutex> lock(mu_);
  s.capacity_bytes = capacity_;
  s.pinned_bytes = pinned_bytes();
  s.allocated_bytes = allocated_units_ * kUnit;
  for (const auto& [start, len] : free_by_start_) s.free_bytes += len * kUnit;
  const uint64_t mamba_units = slot_units_[static_cast<int>(Kind::kMamba)];
  if (mamba_units != 0) {
    for (auto it = free_by_size_.begin(); it != free_by_size_.end() && it->first < mamba_units;
         ++it) {
      s.fragmented_bytes += it->first * kUnit;
    }
  }
  if (!free_by_size_.empty()) s.largest_free_extent = free_by_size_.rbegin()->first * kUnit;
  s.slots[0] = slots_[0];
  s.slots[1] = slots_[1];
  s.allocate_no_space = allocate_no_space_;
  s.allocate_busy = allocate_busy_;
  s.bad_frees = bad_frees_;
  s.pin_failures = pin_failures_;
  return s;
}

}  // namespace cachepawl
