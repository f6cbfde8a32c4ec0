// An attached store's long Load goes to the owner in pieces (AttachOptions::load_split_pages):
// every piece lands byte for byte, the state with the last; a piece the owner refuses fails the
// Load, after the pieces before it have landed; a Load with per-layer fences goes whole.
#include <gtest/gtest.h>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/ipc/shared_store_fixture.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

TEST_F(SharedStoreTest, ALongLoadGoesInPiecesAndLandsWhole) {
  auto owner = Serve(16 * kMiB);
  ASSERT_NE(owner, nullptr);
  SavePrompt(*owner, 3, 9);
  AttachOptions ao = Attaching();
  ao.load_split_pages = 2;
  auto attached = Store::Attach(ao);
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  const uint64_t calls = owner->Stats().serve.calls;
  LoadAndVerify(**attached, 3, 9);  // pieces of 2, 2, 2 and 3 pages; the state with the last
  // A lookup and four Load calls at least (each answered).
  EXPECT_GE(owner->Stats().serve.calls - calls, 5u);

  // A piece past the match's pages is refused by the owner: the Load fails, naming it.
  const ModelLayout& layout = (*attached)->layout();
  const auto tokens = Tokens(300000, 9 * layout.page_size_tokens);
  auto match = (*attached)->Lookup("", tokens);
  ASSERT_TRUE(match.ok());
  ASSERT_EQ(match->kv_only_pages, 9u);
  std::vector<uint64_t> slots;
  for (int i = 0; i < 11; ++i) slots.push_back(*(*attached)->AllocateDeviceSlot(Kind::kKV));
  auto too_many = (*attached)->Load(*match, slots, std::nullopt, {});
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("pages [8, 10) exceed the match's 9 cached pages"),
            std::string::npos)
      << too_many.status().ToString();
  // The pieces before it landed: the pages they hold are the saved ones.
  std::vector<std::byte> got(layout.KvPageBytes());
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE((*attached)->ReadDeviceRecord(Kind::kKV, slots[i], got).ok());
    EXPECT_EQ(got, Content(layout, match->hashes[i], Kind::kKV)) << "page " << i;
  }
  // Per-layer fences: one call (its sub-fences are the Load's own).
  const uint64_t before = owner->Stats().serve.calls;
  LoadOptions per_layer;
  per_layer.per_layer_fences = true;
  auto whole = (*attached)->Load(*match, std::span(slots).first(9), std::nullopt, per_layer);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_TRUE(whole->Wait().ok()) << whole->status().ToString();
  EXPECT_EQ(owner->Stats().serve.calls - before, 1u);
  for (uint64_t s : slots) ASSERT_TRUE((*attached)->FreeDeviceSlot(Kind::kKV, s).ok());
}

TEST(AttachOptionsSplitTest, LoadSplitPagesIsBounded) {
  AttachOptions ao;
  ao.socket_path = "/tmp/x.sock";
  ao.load_split_pages = (1u << 20) + 1;
  EXPECT_NE(ao.Validate().message().find("AttachOptions.load_split_pages: 1048577"),
            std::string::npos)
      << ao.Validate().ToString();
}

}  // namespace
}  // namespace cachepawl
