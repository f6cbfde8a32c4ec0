// TierWritePolicy: when an entry cached in the host tier is also written to a slower tier: the
// disk tier (StoreOptions::write_policy) or the remote tier (RemoteOptions::write_policy). The
// Store asks it at three moments and does the writing itself (asynchronously: for disk through
// store/disk_cascade.h, for the remote tier through store/remote_writer.h):
//
//   OnSaved()     a Save's bytes reached host memory;
//   OnHit(key)    a Load or Prefetch used the entry (counts hits per entry);
//   OnEvict()     the entry is about to leave host memory and has no copy in that tier.
//
//   disk policy              remote policy   OnSaved   OnHit              OnEvict
//   write_through            through         yes       no                 no
//   write_through_selective  selective       no        at the N-th hit    no
//   write_back               on_evict        no        no                 yes
//
// A "no" at eviction means the entry is forgotten (a cache may forget). Forget(key) drops the
// hit count of an entry that left every tier.
//
// Thread safety: none; the Store calls it under its own mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "store/entry_key.h"
#include "vocab/store_options.h"

namespace cachepawl {

class TierWritePolicy {
 public:
  virtual ~TierWritePolicy() = default;
  // The disk tier's policy (StoreOptions::write_policy; `selective_min_hits` >= 1 for
  // selective).
  static std::unique_ptr<TierWritePolicy> Make(WritePolicy policy, uint32_t selective_min_hits);
  // The remote tier's (RemoteOptions::write_policy); null for RemoteWritePolicy::kNone.
  static std::unique_ptr<TierWritePolicy> Make(RemoteWritePolicy policy,
                                               uint32_t selective_min_hits);

  virtual bool OnSaved() const = 0;
  virtual bool OnHit(const EntryKey& key) = 0;
  virtual bool OnEvict() const = 0;
  virtual void Forget(const EntryKey& key) = 0;
};

class WriteThroughPolicy final : public TierWritePolicy {
 public:
  bool OnSaved() const override { return true; }
  bool OnHit(const EntryKey&) override { return false; }
  bool OnEvict() const override { return false; }
  void Forget(const EntryKey&) override {}
};

class SelectiveWritePolicy final : public TierWritePolicy {
 public:
  explicit SelectiveWritePolicy(uint32_t min_hits) : min_hits_(min_hits == 0 ? 1 : min_hits) {}
  bool OnSaved() const override { return false; }
  // True exactly once: at the min_hits-th hit of `key`.
  bool OnHit(const EntryKey& key) override { return ++hits_[key] == min_hits_; }
  bool OnEvict() const override { return false; }
  void Forget(const EntryKey& key) override { hits_.erase(key); }
  size_t tracked_entries() const { return hits_.size(); }

 private:
  const uint32_t min_hits_;
  std::unordered_map<EntryKey, uint32_t, EntryKeyHasher> hits_;
};

class WriteOnEvictPolicy final : public TierWritePolicy {
 public:
  bool OnSaved() const override { return false; }
  bool OnHit(const EntryKey&) override { return false; }
  bool OnEvict() const override { return true; }
  void Forget(const EntryKey&) override {}
};

}  // namespace cachepawl
