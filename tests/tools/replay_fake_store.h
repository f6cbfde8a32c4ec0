// MapStore: a small in-memory Store for testing the replay engine's own logic (accounting,
// L1, fallbacks) apart from the real store, and for injecting what the real one must never do
// (a wrong byte, an entry that vanishes between Lookup and Load). The real Store is exercised
// end to end by replay_end_to_end_test.cc. A pure SSM layout follows the Store's contract for it
// (store/store.h): pages are chain links saved with their state, no device pages anywhere, and
// Load's first_page 0 stands for the match's depth.
#pragma once

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "index/page_hasher.h"
#include "store/store.h"

namespace cachepawl::tools::fakes {

class MapStore final : public Store {
 public:
  struct Options {
    uint64_t device_pool_bytes = 64 << 20;
    size_t max_pages = 0;                 // 0: unlimited; else evicts the oldest unlocked pages
    uint64_t corrupt_every_nth_load = 0;  // flips one byte of every nth loaded record
    bool vanish_before_load = false;      // Load fails NotFound (entries "evicted" meanwhile)
  };

  MapStore(ModelLayout layout, Options options)
      : layout_(std::move(layout)),
        options_(options),
        hasher_(std::move(PageHasher::Create(layout_.page_size_tokens).value())) {}

  const ModelLayout& layout() const override { return layout_; }
  bool gpu_mode() const override { return false; }

  std::vector<PageHash> HashTokens(std::string_view ns,
                                   std::span<const uint32_t> tokens) const override {
    return hasher_.HashTokens(ns, tokens);
  }

  StatusOr<PrefixMatch> Lookup(std::string_view ns, std::span<const uint32_t> tokens) override {
    return LookupHashes(HashTokens(ns, tokens));
  }

  StatusOr<PrefixMatch> LookupHashes(std::span<const PageHash> hashes) override {
    std::lock_guard lock(mu_);
    ++lookups_;
    PrefixMatch m;
    m.hashes.assign(hashes.begin(), hashes.end());
    m.page_size_tokens = layout_.page_size_tokens;
    while (m.kv_only_pages < hashes.size() && pages_.contains(hashes[m.kv_only_pages])) {
      ++m.kv_only_pages;
      if (layout_.has_attention()) m.page_tiers.push_back(Tier::kHost);
    }
    m.reusable_pages = m.kv_only_pages;
    if (layout_.has_ssm()) {
      while (m.reusable_pages > 0 && !states_.contains(StateKey(m))) --m.reusable_pages;
      if (m.reusable_pages > 0) m.state_tier = Tier::kHost;
    }
    m.checkpoint_hint_pages = m.kv_only_pages;
    return m;
  }

  StatusOr<PrefixLock> Lock(const PrefixMatch& match, size_t pages) override {
    std::lock_guard lock(mu_);
    PrefixLock l;
    l.hashes.assign(match.hashes.begin(), match.hashes.begin() + pages);
    for (const PageHash& h : l.hashes) {
      if (!pages_.contains(h)) return Status::NotFound("page " + h.ToHex());
    }
    for (const PageHash& h : l.hashes) ++locks_[h];
    l.with_state = layout_.has_ssm() && pages == match.reusable_pages;
    return l;
  }

  Status Unlock(PrefixLock& l) override {
    std::lock_guard lock(mu_);
    if (l.released) return Status::FailedPrecondition("lock: already released");
    for (const PageHash& h : l.hashes) {
      if (--locks_[h] == 0) locks_.erase(h);
    }
    l.released = true;
    return Status::OK();
  }

  StatusOr<Fence> Load(const PrefixMatch& match, std::span<const uint64_t> device_pages,
                       std::optional<uint64_t> device_state_slot,
                       const LoadOptions& opts) override {
    std::lock_guard lock(mu_);
    if (options_.vanish_before_load) return Status::NotFound("evicted meanwhile");
    for (size_t k = 0; k < device_pages.size(); ++k) {
      auto it = pages_.find(match.hashes.at(opts.first_page + k));
      if (it == pages_.end()) return Status::NotFound("page gone");
      CACHEPAWL_RETURN_IF_ERROR(CopyIn(Kind::kKV, device_pages[k], it->second));
    }
    if (!layout_.has_attention() && !device_pages.empty()) {
      return Status::InvalidArgument("device_pages: the layout has no KV");
    }
    if (device_state_slot.has_value()) {
      size_t depth_pages = opts.first_page + device_pages.size();
      if (!layout_.has_attention() && depth_pages == 0) depth_pages = match.reusable_pages;
      if (depth_pages != match.reusable_pages) {
        return Status::InvalidArgument("state depth " + std::to_string(depth_pages));
      }
      auto it = states_.find(StateKey(match));
      if (it == states_.end()) return Status::NotFound("state gone");
      CACHEPAWL_RETURN_IF_ERROR(CopyIn(Kind::kMamba, *device_state_slot, it->second));
    }
    ++loads_;
    return Fence::Completed(Status::OK());
  }

  StatusOr<std::shared_ptr<Prefetch>> StartPrefetch(const PrefixMatch&) override {
    return Status::Unavailable("MapStore: no prefetch");
  }

  StatusOr<Fence> Save(const SaveRequest& r) override {
    std::lock_guard lock(mu_);
    auto hashes = hasher_.HashTokens(r.ns, r.tokens);
    if (r.first_page + r.device_pages.size() > hashes.size()) {
      return Status::InvalidArgument("save: pages beyond tokens");
    }
    if (!layout_.has_attention() && !r.device_pages.empty()) {
      return Status::InvalidArgument("save: the layout has no KV");
    }
    for (size_t k = 0; k < r.device_pages.size(); ++k) {
      const PageHash& h = hashes[r.first_page + k];
      CACHEPAWL_ASSIGN_OR_RETURN(std::vector<std::byte> record,
                                 CopyOut(Kind::kKV, r.device_pages[k]));
      if (!pages_.contains(h)) order_.push_back(h);
      pages_[h] = std::move(record);
    }
    if (r.device_state_slot.has_value()) {
      const size_t n = r.state_depth_tokens / layout_.page_size_tokens;
      if (n == 0 || n > hashes.size() || n * layout_.page_size_tokens != r.state_depth_tokens) {
        return Status::InvalidArgument("state_depth_tokens");
      }
      CACHEPAWL_ASSIGN_OR_RETURN(std::vector<std::byte> record,
                                 CopyOut(Kind::kMamba, *r.device_state_slot));
      states_[Key(hashes[n - 1], r.state_depth_tokens)] = std::move(record);
      for (size_t k = 0; !layout_.has_attention() && k < n; ++k) {
        if (pages_.emplace(hashes[k], std::vector<std::byte>()).second) order_.push_back(hashes[k]);
      }
    }
    Evict();
    ++saves_;
    return Fence::Completed(Status::OK());
  }

  Status RegisterDevicePool(const DevicePoolDescription&) override {
    return Status::FailedPrecondition("MapStore: store-owned pool only");
  }
  Status UnregisterDevicePool() override {
    return Status::FailedPrecondition("MapStore: store-owned pool only");
  }

  StatusOr<uint64_t> AllocateDeviceSlot(Kind kind) override {
    std::lock_guard lock(mu_);
    const uint64_t bytes = layout_.RecordBytes(kind);
    if (device_used_ + bytes > options_.device_pool_bytes) return Status::NoSpace("pool full");
    device_used_ += bytes;
    const uint64_t slot = next_slot_++;
    device_[Slot(kind, slot)] = std::vector<std::byte>(bytes, std::byte{0xee});
    return slot;
  }

  Status FreeDeviceSlot(Kind kind, uint64_t slot) override {
    std::lock_guard lock(mu_);
    if (device_.erase(Slot(kind, slot)) == 0) return Status::InvalidArgument("slot not allocated");
    device_used_ -= layout_.RecordBytes(kind);
    return Status::OK();
  }

  Status WriteDeviceRecord(Kind kind, uint64_t slot, std::span<const std::byte> rec) override {
    std::lock_guard lock(mu_);
    auto it = device_.find(Slot(kind, slot));
    if (it == device_.end() || rec.size() != it->second.size()) {
      return Status::InvalidArgument("write: bad slot or size");
    }
    std::memcpy(it->second.data(), rec.data(), rec.size());
    return Status::OK();
  }

  Status ReadDeviceRecord(Kind kind, uint64_t slot, std::span<std::byte> rec) override {
    std::lock_guard lock(mu_);
    auto it = device_.find(Slot(kind, slot));
    if (it == device_.end() || rec.size() != it->second.size()) {
      return Status::InvalidArgument("read: bad slot or size");
    }
    std::memcpy(rec.data(), it->second.data(), rec.size());
    return Status::OK();
  }

  StoreStats Stats() const override {
    std::lock_guard lock(mu_);
    StoreStats s;
    s.lookups = lookups_;
    s.loads = loads_;
    s.saves = saves_;
    return s;
  }

  Status Close() override { return Status::OK(); }

  size_t device_slots_in_use() const {
    std::lock_guard lock(mu_);
    return device_.size();
  }

 private:
  static std::string Key(const PageHash& h, uint64_t depth) {
    return h.ToHex() + "@" + std::to_string(depth);
  }
  std::string StateKey(const PrefixMatch& m) const {
    return Key(m.hashes[m.reusable_pages - 1], m.reusable_pages * layout_.page_size_tokens);
  }
  static std::pair<int, uint64_t> Slot(Kind kind, uint64_t slot) {
    return {static_cast<int>(kind), slot};
  }

  Status CopyIn(Kind kind, uint64_t slot, const std::vector<std::byte>& record) {
    auto it = device_.find(Slot(kind, slot));
    if (it == device_.end()) return Status::InvalidArgument("load: slot not allocated");
    it->second = record;
    if (options_.corrupt_every_nth_load != 0 &&
        ++records_loaded_ % options_.corrupt_every_nth_load == 0) {
      it->second[it->second.size() / 2] ^= std::byte{0x10};
    }
    return Status::OK();
  }

  StatusOr<std::vector<std::byte>> CopyOut(Kind kind, uint64_t slot) const {
    auto it = device_.find(Slot(kind, slot));
    if (it == device_.end()) return Status::InvalidArgument("save: slot not allocated");
    return it->second;
  }

  void Evict() {
    if (options_.max_pages == 0) return;
    for (auto it = order_.begin(); pages_.size() > options_.max_pages && it != order_.end();) {
      if (locks_.contains(*it)) {
        ++it;
        continue;
      }
      pages_.erase(*it);
      it = order_.erase(it);
    }
  }

  ModelLayout layout_;
  Options options_;
  PageHasher hasher_;
  mutable std::mutex mu_;
  std::map<PageHash, std::vector<std::byte>> pages_;
  std::vector<PageHash> order_;  // insertion order, for eviction
  std::map<std::string, std::vector<std::byte>> states_;
  std::map<PageHash, int> locks_;
  std::map<std::pair<int, uint64_t>, std::vector<std::byte>> device_;
  uint64_t device_used_ = 0;
  uint64_t next_slot_ = 0;
  uint64_t records_loaded_ = 0;
  uint64_t lookups_ = 0, loads_ = 0, saves_ = 0;
};

}  // namespace cachepawl::tools::fakes
