// StressWorker: Loads, their byte-for-byte verification, and the ways of waiting for a fence
// (tools/stress/stress_worker.h).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "tools/replay/replay_content.h"
#include "tools/stress/stress_worker.h"

namespace cachepawl::tools {
namespace {

constexpr std::byte kPoison{0xA5};

}  // namespace

void StressWorker::LoadAndVerify(const PrefixMatch& match, bool strict) {
  const size_t m = match.reusable_pages;
  // The range: pages [first, end) and the state when the load ends at the reusable depth.
  size_t first = 0, end = 0;
  bool with_state = false;
  if (!shape_.kv) {
    if (m == 0) return;
    first = rng_.Between(0, 1) == 0 ? 0 : m;  // both name the match's state
    with_state = true;
  } else if (shape_.ssm && m > 0 && rng_.Between(0, 9) < 7) {
    end = m;
    with_state = true;
    first = rng_.Between(0, 1) == 0 ? 0 : rng_.Between(0, m - 1);
  } else {
    // Pages only; under a strict lock within the locked pages, else anywhere cached.
    const size_t limit = strict ? m : match.kv_only_pages;
    if (limit == 0) return;
    end = rng_.Between(1, limit);
    first = rng_.Between(0, 1) == 0 ? 0 : rng_.Between(0, end - 1);
  }
  const size_t count = shape_.kv ? end - first : 0;
  const std::span<const uint64_t> slots = std::span<const uint64_t>(page_slots_).first(count);

  beat_.Step("poison device slots");
  for (uint64_t slot : slots) {
    if (Status s = store_.WriteDeviceRecord(Kind::kKV, slot, poison_page_); !s.ok()) {
      return Refused("WriteDeviceRecord", s, false);
    }
  }
  if (with_state) {
    if (Status s = store_.WriteDeviceRecord(Kind::kMamba, *state_slot_, poison_state_); !s.ok()) {
      return Refused("WriteDeviceRecord", s, false);
    }
  }
  LoadOptions options;
  options.first_page = first;
  options.per_layer_fences = shape_.attention_layers > 0 && rng_.Between(0, 3) == 0;
  beat_.Step("Load");
  auto fence = store_.Load(match, slots, with_state ? state_slot_ : std::nullopt, options);
  // NotFound: something went since the Lookup, which no lock held; Busy: another Load or
  // Prefetch is reading one of these records from disk; NoSpace: the host tier is full of
  // locked and pinned entries.
  auto allowed = [&](const Status& s) { return (!strict && s.IsNotFound()) || s.IsBusy(); };
  if (!fence.ok()) {
    const Status& s = fence.status();
    return Refused(strict ? "Load (locked)" : "Load", s, allowed(s) || s.IsNoSpace());
  }
  beat_.Step("Load fence wait");
  if (Status s = WaitFence(*fence, true); !s.ok()) {
    return Refused(strict ? "Load fence (locked)" : "Load fence", s, !strict && s.IsNotFound());
  }
  if (strict) ++totals_.strict_locked_loads;

  beat_.Step("verify");
  // Windowed layers' KV arrives only for the pages a model at depth D reads; the windowed part
  // of the other pages must be left as it was (poisoned).
  const size_t depth = std::max(first + count, m);
  const size_t window_from = depth - std::min<size_t>(depth, shape_.window_pages);
  for (size_t j = 0; j < count; ++j) {
    VerifyPage(match.hashes[first + j], slots[j], first + j >= window_from);
  }
  if (with_state) {
    const size_t state_pages = shape_.kv ? end : m;
    VerifyState(match.hashes[state_pages - 1], uint64_t{state_pages} * shape_.page_size,
                *state_slot_);
  }
}

void StressWorker::VerifyPage(const PageHash& hash, uint64_t slot, bool window_loaded) {
  record_.resize(shape_.page_bytes);
  if (Status s = store_.ReadDeviceRecord(Kind::kKV, slot, record_); !s.ok()) {
    return Refused("ReadDeviceRecord", s, false);
  }
  const uint64_t seed = PageContentSeed(hash);
  uint64_t wrong = 0;
  if (!window_loaded && !shape_.window_ranges.empty()) {
    // The windowed layers' bytes must still be the poison; then they are set to what they
    // would be, so the rest compares as a whole.
    expected_.resize(record_.size());
    FillContent(seed, expected_);
    for (const RecordSegment& r : shape_.window_ranges) {
      wrong += static_cast<uint64_t>(
          std::count_if(record_.begin() + static_cast<long>(r.offset),
                        record_.begin() + static_cast<long>(r.offset + r.bytes),
                        [](std::byte b) { return b != kPoison; }));
      std::memcpy(record_.data() + r.offset, expected_.data() + r.offset, r.bytes);
    }
  }
  uint64_t first_wrong = 0;
  wrong += CountWrongBytes(seed, record_, &first_wrong);
  CountWrong(wrong, record_.size(),
             "kv page " + hash.ToHex() + (window_loaded ? "" : " (outside the window)") +
                 ", first wrong byte at or after offset " + std::to_string(first_wrong));
}

void StressWorker::VerifyState(const PageHash& last_page, uint64_t depth_tokens, uint64_t slot) {
  record_.resize(shape_.state_bytes);
  if (Status s = store_.ReadDeviceRecord(Kind::kMamba, slot, record_); !s.ok()) {
    return Refused("ReadDeviceRecord", s, false);
  }
  uint64_t first_wrong = 0;
  const uint64_t wrong =
      CountWrongBytes(StateContentSeed(last_page, depth_tokens), record_, &first_wrong);
  CountWrong(wrong, record_.size(),
             "state after page " + last_page.ToHex() + " at depth " + std::to_string(depth_tokens) +
                 ", first wrong byte at offset " + std::to_string(first_wrong));
}

void StressWorker::CountWrong(uint64_t wrong, uint64_t bytes, const std::string& what) {
  ++totals_.records_verified;
  totals_.bytes_verified += bytes;
  if (wrong == 0) return;
  ++totals_.wrong_records;
  totals_.wrong_bytes += wrong;
  if (totals_.wrong_seen.size() < 10) {
    totals_.wrong_seen.push_back("thread " + std::to_string(id_) + ": " + what + ": " +
                                 std::to_string(wrong) + " of " + std::to_string(bytes) +
                                 " bytes wrong");
  }
}

Status StressWorker::WaitFence(const Fence& fence, bool gpu_side) {
  switch (rng_.Between(0, 4)) {
    case 0:
      return fence.Wait();
    case 1:
      return stream_.Wait(fence, gpu_side);
    case 2:
      while (!fence.Ready()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      return fence.status();
    case 3: {
      // The callback may run on the completing thread after this function returned: it owns
      // what it touches.
      struct Done {
        std::mutex mu;
        std::condition_variable cv;
        bool fired = false;
        Status status;
      };
      auto done = std::make_shared<Done>();
      fence.OnComplete([done](const Status& s) {
        std::lock_guard lock(done->mu);
        done->fired = true;
        done->status = s;
        done->cv.notify_all();
      });
      std::unique_lock lock(done->mu);
      done->cv.wait(lock, [&] { return done->fired; });
      return done->status;
    }
    default: {
      // Layer by layer, as an engine's forward pass would; each layer's status is the
      // operation's when the whole fence succeeds.
      std::vector<Status> layers;
      for (size_t l = 0; l < fence.num_layers(); ++l) layers.push_back(fence.WaitLayer(l));
      Status all = fence.Wait();
      for (size_t l = 0; l < layers.size() && all.ok(); ++l) {
        if (!layers[l].ok()) {
          Unexpected("fence layer " + std::to_string(l) + ": " + layers[l].ToString() +
                     " though the fence fired OK");
        }
      }
      return all;
    }
  }
}

}  // namespace cachepawl::tools
