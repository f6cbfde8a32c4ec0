// The limits a Store enforces on what it is asked (docs/RELIABILITY.md, "Input limits"): a host
// tier (with, in CPU mode, the device pool) beyond the machine's memory is refused at open, before
// anything is pinned; a prompt past StoreOptions::max_prompt_tokens is refused by Lookup,
// LookupHashes and Save before any hashing or allocation, and the store serves on.
#include <gtest/gtest.h>

#include <string>

#include "store/store.h"
#include "tests/common/test_util.h"
#include "tests/store/store_test_util.h"

namespace cachepawl {
namespace {

bool Mentions(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

// `--host-bytes 64G` on a 24 GiB machine used to be OOM-killed 44 s after open, with no message.
TEST(StoreLimitsTest, AHostTierBeyondTheMachinesMemoryIsRefusedAtOpen) {
  testing::TempDir dir;
  const uint64_t huge = uint64_t{1} << 50;  // 1 PiB: beyond any machine this runs on
  auto host = Store::Open(CpuStoreOptions(TinyHybrid(), huge, 0, 0, ""));
  ASSERT_FALSE(host.ok());
  EXPECT_TRUE(host.status().IsInvalidArgument()) << host.status().ToString();
  EXPECT_TRUE(Mentions(host.status(),
                       "StoreOptions.host_bytes: 1048576.0 GiB (1125899906842624 "
                       "bytes) is more memory than this machine offers"))
      << host.status().ToString();
  EXPECT_TRUE(Mentions(host.status(), "MemAvailable")) << host.status().ToString();
  // In CPU mode the store-owned device pool is host memory too, and counts.
  auto pool = Store::Open(CpuStoreOptions(TinyHybrid(), 1 << 20, huge, 1 << 20, dir.str()));
  ASSERT_FALSE(pool.ok());
  EXPECT_TRUE(Mentions(pool.status(),
                       "StoreOptions.host_bytes + device_pool_bytes (host memory "
                       "in CPU mode)"))
      << pool.status().ToString();
  // Nothing was created for the refused store; a budget that fits opens.
  auto fits = Store::Open(CpuStoreOptions(TinyHybrid(), 1 << 20, 1 << 20, 1 << 20, dir.str()));
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
}

// One request of ~717M tokens used to end in std::bad_alloc.
TEST(StoreLimitsTest, APromptPastMaxPromptTokensIsRefusedAndTheStoreServesOn) {
  StoreOptions o = CpuStoreOptions(TinyHybrid(), 1 << 20, 1 << 20, 0, "");
  const uint32_t page = TinyHybrid().page_size_tokens;
  o.max_prompt_tokens = 4 * page;
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  const auto fits = Tokens(1, 4 * page), longer = Tokens(1, 4 * page + 1);
  EXPECT_TRUE(store.Lookup("", fits).ok());
  const auto lookup = store.Lookup("", longer);
  ASSERT_TRUE(lookup.status().IsInvalidArgument()) << lookup.status().ToString();
  EXPECT_EQ(lookup.status().message(), "tokens: " + std::to_string(4 * page + 1) +
                                           " tokens (more than StoreOptions.max_prompt_tokens " +
                                           std::to_string(4 * page) +
                                           ", the longest prompt one call may name)");
  const std::vector<PageHash> five = store.HashTokens("", Tokens(1, 5 * page));
  const auto by_hashes = store.LookupHashes(five);
  ASSERT_TRUE(by_hashes.status().IsInvalidArgument());
  EXPECT_TRUE(Mentions(by_hashes.status(),
                       "hashes: 5 pages of " + std::to_string(page) + " tokens (more than"));
  SaveRequest save;
  save.tokens = longer;
  EXPECT_TRUE(Mentions(store.Save(save).status(), "SaveRequest.tokens: "));
  SaveRequest save_hashes;
  save_hashes.hashes = five;
  EXPECT_TRUE(Mentions(store.Save(save_hashes).status(), "SaveRequest.hashes: 5 pages"));
  EXPECT_TRUE(store.Lookup("", fits).ok());
  // The option's own rules: > 0, and at least one page.
  StoreOptions zero = o;
  zero.max_prompt_tokens = 0;
  EXPECT_TRUE(Mentions(zero.Validate(), "StoreOptions.max_prompt_tokens: 0 (must be > 0)"));
  StoreOptions short_limit = o;
  short_limit.max_prompt_tokens = page - 1;
  EXPECT_TRUE(Mentions(short_limit.Validate(), "must be at least one page"));
}

}  // namespace
}  // namespace cachepawl
