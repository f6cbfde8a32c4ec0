// The CPU backend: the device mover's plan executed with memcpy on the dispatcher thread of
// each direction, with the same staging chunks, kernel jobs and copy runs as the CUDA backend
// (chunks run one after another, so one chunk of staging per direction is enough).
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "transfer/transfer_backend.h"

namespace cachepawl::internal {

namespace {

class CpuBackend final : public TransferBackend {
 public:
  CpuBackend(const RecordMap* const maps[kNumKinds], uint64_t chunk_bytes) {
    maps_[0] = maps[0];
    maps_[1] = maps[1];
    maps_[2] = maps[2];
    for (auto& s : staging_) s.reset(new std::byte[chunk_bytes]);
  }

  void Dispatch(std::unique_ptr<PlannedOperation> op) override {
    if (!op->pre_status.ok()) {
      ++execution_errors_;
      op->Finish(op->pre_status);
      return;
    }
    const bool saving = op->direction == Direction::kSave;
    std::byte* staging = staging_[saving ? 0 : 1].get();
    if (!saving) RunCopies(op->direct, nullptr, /*to_host=*/false);
    for (size_t c = 0; c < op->chunks.size(); ++c) {
      const StagedChunk& chunk = op->chunks[c];
      std::byte* stage = staging;
      const bool last = c + 1 == op->chunks.size();
      if (saving) {
        for (int k = 0; k < kNumKinds; ++k) RunJobs(*maps_[k], chunk.jobs[k], stage, true);
        RunCopies(chunk.copies, stage, /*to_host=*/true);
      } else {
        RunCopies(chunk.copies, stage, /*to_host=*/false);
        // States and windowed KV first; a layer's fence then waits only for its full KV.
        for (int k : {1, 2}) {
          if (maps_[k] != nullptr) RunJobs(*maps_[k], chunk.jobs[k], stage, false);
        }
        const RecordMap& kv = *maps_[0];
        if (op->per_layer && !chunk.jobs[0].empty()) {
          for (size_t a = 0; a + 1 < kv.layer_tiles.size(); ++a) {
            RunJobs(kv, RestrictJobs(chunk.jobs[0], kv.layer_tiles[a], kv.layer_tiles[a + 1]),
                    stage, false);
            if (last) op->completer.CompleteLayer(a);
          }
        } else if (!chunk.jobs[0].empty()) {
          RunJobs(kv, chunk.jobs[0], stage, false);
        }
      }
    }
    if (saving) RunCopies(op->direct, nullptr, /*to_host=*/true);
    op->Finish(Status::OK());
  }

  void Drain() override {}
  std::function<Status(void*)> StreamWaiter(Direction, uint64_t) override { return {}; }
  uint64_t kernel_launches() const override { return kernel_launches_.load(); }
  uint64_t copy_calls() const override { return copy_calls_.load(); }
  uint64_t execution_errors() const override { return execution_errors_.load(); }

 private:
  // A "kernel": copies each job's tiles between the pool and the staging chunk.
  void RunJobs(const RecordMap& m, const std::vector<KernelJob>& jobs, std::byte* stage,
               bool gather) {
    if (jobs.empty()) return;
    ++kernel_launches_;
    for (const KernelJob& j : jobs) {
      for (uint32_t t = j.tile_begin; t < j.tile_begin + j.tile_count; ++t) {
        auto* dev = reinterpret_cast<std::byte*>(m.DeviceAddress(t, j.slot));
        // Sum the offsets first: staging_record_base alone may be negative.
        std::byte* stg = stage + (j.staging_record_base + static_cast<int64_t>(m.tile_offset[t]));
        if (gather) {
          std::memcpy(stg, dev, m.tiles[t].bytes);
        } else {
          std::memcpy(dev, stg, m.tiles[t].bytes);
        }
      }
    }
  }

  // "Copy engines": each run between host memory and the staging chunk (or, when `stage` is null,
  // the device address in `other`).
  void RunCopies(const std::vector<CopyRun>& runs, std::byte* stage, bool to_host) {
    for (const CopyRun& r : runs) {
      ++copy_calls_;
      for (uint64_t row = 0; row < r.height; ++row) {
        std::byte* host = r.host + row * r.host_pitch;
        std::byte* other =
            (stage != nullptr ? stage + r.other : reinterpret_cast<std::byte*>(r.other)) +
            row * r.other_pitch;
        if (to_host) {
          std::memcpy(host, other, r.width);
        } else {
          std::memcpy(other, host, r.width);
        }
      }
    }
  }

  const RecordMap* maps_[kNumKinds] = {nullptr, nullptr};
  std::unique_ptr<std::byte[]> staging_[2];  // per direction; each touched by one thread
  std::atomic<uint64_t> kernel_launches_{0};
  std::atomic<uint64_t> copy_calls_{0};
  std::atomic<uint64_t> execution_errors_{0};
};

}  // namespace

std::unique_ptr<TransferBackend> MakeCpuBackend(const RecordMap* const maps[kNumKinds],
                                                uint64_t chunk_bytes) {
  return std::make_unique<CpuBackend>(maps, chunk_bytes);
}

}  // namespace cachepawl::internal
