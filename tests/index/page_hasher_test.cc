// Known-answer vectors were computed independently with Python's hashlib:
//   prev = seed; for each page: h = sha256(prev + b"".join(struct.pack("<I", t) for t in page))
// (the chain SGLang HiCache's get_hash_str builds), seed = b"" or
// sha256(b"cachepawl-namespace" + ns).
#include "index/page_hasher.h"

#include <gtest/gtest.h>

#include <cctype>
#include <numeric>
#include <thread>
#include <vector>

namespace cachepawl {
namespace {

std::vector<uint32_t> Iota(uint32_t first, size_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<std::string> Hex(const std::vector<PageHash>& hashes) {
  std::vector<std::string> out;
  for (const auto& h : hashes) out.push_back(h.ToHex());
  return out;
}

PageHasher MakeHasher(uint32_t page) {
  auto h = PageHasher::Create(page);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return std::move(h).value();
}

TEST(PageHasherTest, EmptyNamespaceMatchesIndependentChain) {
  PageHasher hasher = MakeHasher(16);
  auto tokens = Iota(1, 32);
  EXPECT_EQ(Hex(hasher.HashTokens("", tokens)),
            (std::vector<std::string>{
                "77d735ce838418aa151bd96b5b1e78ee63860892e0a95c00fe34178442be9b07",
                "1170426cf2449cebf4d17f087ce5bb43b6a910ce91b3f40922868e913e8ee91d"}));
}

TEST(PageHasherTest, NamespaceSeedsTheChain) {
  PageHasher hasher = MakeHasher(16);
  auto seed = hasher.ChainStart("tenant-a");
  ASSERT_TRUE(seed.has_value());
  EXPECT_EQ(seed->ToHex(), "efa3e22e08f836c820e97d0a486b3ca1b7784987b4c812fa22b68485e0cc00ff");
  EXPECT_FALSE(hasher.ChainStart("").has_value());
  auto tokens = Iota(1, 32);
  EXPECT_EQ(Hex(hasher.HashTokens("tenant-a", tokens)),
            (std::vector<std::string>{
                "26dd70751f7ed4d8f62e7c40b01e36e0dbf33fee0ff205893881383fa6a7cd09",
                "2f29c92128e18a4c715bfe2afb56b8fc465c407161f4c06dc02362baab8a94c4"}));
  EXPECT_NE(hasher.HashTokens("tenant-a", tokens), hasher.HashTokens("tenant-b", tokens));
}

TEST(PageHasherTest, TokensAreLittleEndianUint32) {
  PageHasher hasher = MakeHasher(2);
  std::vector<uint32_t> tokens{0xFFFFFFFFu, 0, 0x12345678u, 7};
  EXPECT_EQ(Hex(hasher.HashTokens("", tokens)),
            (std::vector<std::string>{
                "72a4fa3544e43a836ffcb268ce06ccdbc55d44d5e6b1b1c19216a53ea98301fd",
                "1fc8e643a116fe8386d5d282c3e7a060b295c3f01ecc3ee65e22a1f7682cb539"}));
}

TEST(PageHasherTest, PartialPageIsIgnored) {
  PageHasher hasher = MakeHasher(16);
  EXPECT_EQ(hasher.HashTokens("", Iota(1, 39)), hasher.HashTokens("", Iota(1, 32)));
  EXPECT_TRUE(hasher.HashTokens("", Iota(1, 15)).empty());
}

TEST(PageHasherTest, EmptyInputGivesNoPages) {
  PageHasher hasher = MakeHasher(16);
  EXPECT_TRUE(hasher.HashTokens("", {}).empty());
  EXPECT_TRUE(hasher.HashTokens("ns", {}).empty());
  std::vector<PageHash> out;
  EXPECT_EQ(hasher.Extend(std::nullopt, {}, &out), 0u);
  EXPECT_TRUE(out.empty());
}

TEST(PageHasherTest, ExtendContinuesAChainWithoutRehashing) {
  PageHasher hasher = MakeHasher(4);
  auto tokens = Iota(100, 40);
  auto whole = hasher.HashTokens("ns", tokens);
  ASSERT_EQ(whole.size(), 10u);
  // Hash the first 3 pages, then extend from the third page's hash.
  std::vector<PageHash> parts = hasher.HashTokens("ns", std::span(tokens).first(12));
  ASSERT_EQ(parts.size(), 3u);
  const PageHash last = parts.back();
  EXPECT_EQ(hasher.Extend(last, std::span(tokens).subspan(12), &parts), 7u);
  EXPECT_EQ(parts, whole);
}

TEST(PageHasherTest, ZeroPageSizeIsRejected) {
  auto h = PageHasher::Create(0);
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(h.status().IsInvalidArgument());
  EXPECT_NE(h.status().message().find("page_size_tokens: 0"), std::string::npos);
}

TEST(PageHasherTest, ConcurrentHashingAgrees) {
  PageHasher hasher = MakeHasher(16);
  auto tokens = Iota(7, 16 * 64);
  const auto expected = hasher.HashTokens("x", tokens);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      bool all = true;
      for (int i = 0; i < 50; ++i) all = all && hasher.HashTokens("x", tokens) == expected;
      ok[t] = all;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
}

TEST(PageHashTest, HexRoundTripAndRejectsBadInput) {
  PageHasher hasher = MakeHasher(16);
  auto h = hasher.HashTokens("", Iota(1, 16)).at(0);
  auto parsed = PageHash::FromHex(h.ToHex());
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(*parsed, h);
  auto upper = h.ToHex();
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(PageHash::FromHex(upper), h);
  EXPECT_FALSE(PageHash::FromHex("abc").has_value());
  EXPECT_FALSE(PageHash::FromHex(std::string(64, 'g')).has_value());
}

}  // namespace
}  // namespace cachepawl
