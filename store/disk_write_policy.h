// DiskWritePolicy: when an entry cached in the host tier is also written to the disk tier
// (StoreOptions::write_policy). The Store asks it at three moments and does the writing itself
// (asynchronously, through store/disk_cascade.h):
//
//   OnSaved()     a Save's bytes reached host memory;
//   OnHit(key)    a Load or Prefetch used the entry (counts hits per entry);
//   OnEvict()     the entry is about to leave host memory and has no disk copy.
//
//   write_through            OnSaved: yes          OnHit: no               OnEvict: no
//   write_through_selective  OnSaved: no           OnHit: at the N-th hit  OnEvict: no
//   write_back               OnSaved: no           OnHit: no               OnEvict: yes
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
#include "store/vocab/store_options.h"

namespace cachepawl {

class DiskWritePolicy {
 public:
  virtual ~DiskWritePolicy() = default;
  // The policy `policy` (StoreOptions::write_policy; `selective_min_hits` >= 1 for selective).
  static std::unique_ptr<DiskWritePolicy> Make(WritePolicy policy, uint32_t selective_min_hits);

  virtual WritePolicy policy() const = 0;
  virtual bool OnSaved() const = 0;
  virtual bool OnHit(const EntryKey& key) = 0;
  virtual bool OnEvict() const = 0;
  virtual void Forget(const EntryKey& key) = 0;
};

class WriteThroughPolicy final : public DiskWritePolicy {
 public:
  WritePolicy policy() const override { return WritePolicy::kWriteThrough; }
  bool OnSaved() const override { return true; }
  bool OnHit(const EntryKey&) override { return false; }
  bool OnEvict() const override { return false; }
  void Forget(const EntryKey&) override {}
};

class SelectiveWritePolicy final : public DiskWritePolicy {
 public:
  explicit SelectiveWritePolicy(uint32_t min_hits) : min_hits_(min_hits == 0 ? 1 : min_hits) {}
  WritePolicy policy() const override { return WritePolicy::kWriteThroughSelective; }
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

class WriteBackPolicy final : public DiskWritePolicy {
 public:
  WritePolicy policy() const override { return WritePolicy::kWriteBack; }
  bool OnSaved() const override { return false; }
  bool OnHit(const EntryKey&) override { return false; }
  bool OnEvict() const override { return true; }
  void Forget(const EntryKey&) override {}
};

}  // namespace cachepawl
