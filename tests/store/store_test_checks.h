// Checks the Store's test suites share (GoogleTest assertions; store_test_util.h has what the
// child-process writer shares too).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "store/store.h"

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

}  // namespace cachepawl
