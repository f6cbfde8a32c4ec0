// Checks the Store's test suites share (GoogleTest assertions; store_test_util.h has what the
// child-process writer shares too).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "store/store.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {

// Reopens the disk tier of `o` (a store closed with something saved) with layout `other`: the
// open is refused as Incompatible, and with wipe_on_layout_mismatch it starts empty. Returns
// the wiped store (null after a failure).
inline std::unique_ptr<Store> ReopenRefusedThenWiped(const StoreOptions& o,
                                                     const ModelLayout& other) {
  StoreOptions o2 = o;
  o2.layout = other;
  auto refused = Store::Open(o2);
  EXPECT_FALSE(refused.ok());
  if (refused.ok()) return nullptr;
  EXPECT_TRUE(refused.status().IsIncompatible()) << refused.status().ToString();
  o2.wipe_on_layout_mismatch = true;
  auto wiped = Store::Open(o2);
  EXPECT_TRUE(wiped.ok()) << wiped.status().ToString();
  return wiped.ok() ? std::move(wiped).value() : nullptr;
}

// Saves the full pages of `tokens` (and, when `with_state`, the state after the last page).
inline void SaveAll(Store* store, std::string_view ns, const std::vector<uint32_t>& tokens,
                    bool with_state, size_t state_pages = 0) {
  const ModelLayout& layout = store->layout();
  auto hashes = store->HashTokens(ns, tokens);
  std::vector<uint64_t> pages;
  for (const PageHash& h : hashes) {
    auto slot = store->AllocateDeviceSlot(Kind::kKV);
    ASSERT_TRUE(slot.ok()) << slot.status().ToString();
    ASSERT_TRUE(store->WriteDeviceRecord(Kind::kKV, *slot, Content(layout, h, Kind::kKV)).ok());
    pages.push_back(*slot);
  }
  SaveRequest req;
  req.ns = ns;
  req.tokens = tokens;
  req.device_pages = pages;
  std::optional<uint64_t> state_slot;
  if (with_state) {
    if (state_pages == 0) state_pages = hashes.size();
    auto slot = store->AllocateDeviceSlot(Kind::kMamba);
    ASSERT_TRUE(slot.ok()) << slot.status().ToString();
    ASSERT_TRUE(store
                    ->WriteDeviceRecord(Kind::kMamba, *slot,
                                        Content(layout, hashes[state_pages - 1], Kind::kMamba))
                    .ok());
    state_slot = *slot;
    req.device_state_slot = state_slot;
    req.state_depth_tokens = state_pages * layout.page_size_tokens;
  }
  auto fence = store->Save(req);
  ASSERT_TRUE(fence.ok()) << fence.status().ToString();
  ASSERT_TRUE(fence->Wait(std::chrono::seconds(30)).ok());
  for (uint64_t p : pages) ASSERT_TRUE(store->FreeDeviceSlot(Kind::kKV, p).ok());
  if (state_slot) {
    ASSERT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *state_slot).ok());
  }
}

// Loads `match`'s reusable prefix (and its state) into poisoned device slots of the store-owned
// pool and compares every byte with Content(); the load's status (a miss is not a failure of
// the comparison).
// What an engine with its own registered pool does: Save the full pages of `tokens` from device
// pages `from` (and the state at their depth from slot `state_from`), look the prompt up, and
// Load every page into `into` (and the state into `state_into`). The caller compares the bytes.
inline void SaveThenLoadBack(Store* store, const std::vector<uint32_t>& tokens,
                             const std::vector<uint64_t>& from, uint64_t state_from,
                             const std::vector<uint64_t>& into, uint64_t state_into) {
  SaveRequest req;
  req.tokens = tokens;
  req.device_pages = from;
  req.device_state_slot = state_from;
  req.state_depth_tokens = from.size() * store->layout().page_size_tokens;
  auto f = store->Save(req);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(f->Wait().ok());
  auto m = store->Lookup("", tokens);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->reusable_pages, from.size());
  auto lf = store->Load(*m, into, state_into);
  ASSERT_TRUE(lf.ok()) << lf.status().ToString();
  ASSERT_TRUE(lf->Wait().ok());
}

inline Status LoadAndVerify(Store* store, const PrefixMatch& match) {
  const ModelLayout& layout = store->layout();
  std::vector<uint64_t> pages;
  const std::vector<std::byte> poison(layout.RecordBytes(Kind::kKV), std::byte{0xEE});
  for (size_t i = 0; i < match.reusable_pages; ++i) {
    auto slot = store->AllocateDeviceSlot(Kind::kKV);
    if (!slot.ok()) return slot.status();
    EXPECT_TRUE(store->WriteDeviceRecord(Kind::kKV, *slot, poison).ok());
    pages.push_back(*slot);
  }
  std::optional<uint64_t> state_slot;
  if (layout.has_ssm() && match.reusable_pages > 0) {
    auto slot = store->AllocateDeviceSlot(Kind::kMamba);
    if (!slot.ok()) return slot.status();
    std::vector<std::byte> p(layout.RecordBytes(Kind::kMamba), std::byte{0xEE});
    EXPECT_TRUE(store->WriteDeviceRecord(Kind::kMamba, *slot, p).ok());
    state_slot = *slot;
  }
  Status result;
  auto fence = store->Load(match, pages, state_slot);
  if (!fence.ok()) {
    result = fence.status();
  } else {
    result = fence->Wait(std::chrono::seconds(30));
  }
  if (result.ok()) {
    for (size_t i = 0; i < pages.size(); ++i) {
      std::vector<std::byte> got(layout.RecordBytes(Kind::kKV));
      EXPECT_TRUE(store->ReadDeviceRecord(Kind::kKV, pages[i], got).ok());
      EXPECT_TRUE(got == Content(layout, match.hashes[i], Kind::kKV)) << "page " << i;
    }
    if (state_slot) {
      std::vector<std::byte> got(layout.RecordBytes(Kind::kMamba));
      EXPECT_TRUE(store->ReadDeviceRecord(Kind::kMamba, *state_slot, got).ok());
      EXPECT_TRUE(got == Content(layout, match.hashes[match.reusable_pages - 1], Kind::kMamba))
          << "state";
    }
  }
  for (uint64_t p : pages) EXPECT_TRUE(store->FreeDeviceSlot(Kind::kKV, p).ok());
  if (state_slot) {
    EXPECT_TRUE(store->FreeDeviceSlot(Kind::kMamba, *state_slot).ok());
  }
  return result;
}

}  // namespace cachepawl
