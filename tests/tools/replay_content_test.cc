#include "tools/replay/replay_content.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/common/test_util.h"

namespace cachepawl::tools {
namespace {

PageHash HashOf(uint64_t seed) {
  PageHash h;
  testing::FillRandom(std::as_writable_bytes(std::span(h.bytes)), seed);
  return h;
}

TEST(ReplayContentTest, PromptTokensFollowTheBlocks) {
  TraceRequest r{0, 40, 1, {5, 6, 5}};  // block 5 twice: same tokens both times
  std::vector<uint32_t> tokens;
  AppendPromptTokens(r, 16, &tokens);
  ASSERT_EQ(tokens.size(), 40u);
  for (uint64_t j = 0; j < 16; ++j) {
    EXPECT_EQ(tokens[j], BlockToken(5, j));
    EXPECT_EQ(tokens[16 + j], BlockToken(6, j));
  }
  for (uint64_t j = 0; j < 8; ++j) EXPECT_EQ(tokens[32 + j], BlockToken(5, j));
  // Different blocks, different tokens (no two of the first 16 positions coincide).
  int equal = 0;
  for (uint64_t j = 0; j < 16; ++j) equal += tokens[j] == tokens[16 + j];
  EXPECT_EQ(equal, 0);
}

TEST(ReplayContentTest, FilledContentVerifiesForAwkwardSizes) {
  // Sizes around the 8-byte word and the 1 MiB chunk of the pattern.
  for (size_t size : {size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{4096},
                      (size_t{1} << 20) - 3, (size_t{3} << 20) + 5}) {
    std::vector<std::byte> record(size, std::byte{0x5a});
    const uint64_t seed = PageContentSeed(HashOf(size));
    FillContent(seed, record);
    EXPECT_EQ(CountWrongBytes(seed, record), 0u) << size;
    std::vector<std::byte> again(size);
    FillContent(seed, again);
    EXPECT_EQ(again, record) << size;
  }
}

TEST(ReplayContentTest, EveryFlippedByteIsCountedWhereItIs) {
  const size_t size = (size_t{2} << 20) + 3;  // a partial last word and two chunks
  std::vector<std::byte> record(size);
  const uint64_t seed = StateContentSeed(HashOf(1), 4096);
  FillContent(seed, record);
  const uint64_t rng_seed = testing::SeedFromEnv(7);
  std::vector<size_t> offsets = {0, 7, 8, (size_t{1} << 20) - 1, size_t{1} << 20, size - 1};
  for (int i = 0; i < 20; ++i) offsets.push_back((rng_seed * 2654435761u + i * 40503u) % size);
  for (size_t offset : offsets) {
    std::vector<std::byte> copy = record;
    copy[offset] ^= std::byte{0x01};
    uint64_t first = ~0ull;
    EXPECT_EQ(CountWrongBytes(seed, copy, &first), 1u) << offset;
    EXPECT_EQ(first, offset);
  }
  // Two flips in one word are two wrong bytes.
  std::vector<std::byte> copy = record;
  copy[16] ^= std::byte{0x80};
  copy[19] ^= std::byte{0xff};
  EXPECT_EQ(CountWrongBytes(seed, copy), 2u);
}

TEST(ReplayContentTest, OtherKeysOrMovedChunksAreAlmostAllWrong) {
  const size_t size = size_t{2} << 20;
  std::vector<std::byte> record(size);
  const PageHash h = HashOf(3);
  FillContent(PageContentSeed(h), record);
  auto mostly_wrong = [&](uint64_t seed) {
    return CountWrongBytes(seed, record) > size * 99 / 100;
  };
  EXPECT_TRUE(mostly_wrong(PageContentSeed(HashOf(4))));
  EXPECT_TRUE(mostly_wrong(StateContentSeed(h, 16)));  // a state is not a page
  FillContent(StateContentSeed(h, 16), record);
  EXPECT_TRUE(mostly_wrong(StateContentSeed(h, 32)));  // another depth is another state
  // Swap the two 1 MiB halves: every byte lands where the other chunk's bytes belong.
  std::vector<std::byte> swapped(size);
  std::memcpy(swapped.data(), record.data() + size / 2, size / 2);
  std::memcpy(swapped.data() + size / 2, record.data(), size / 2);
  EXPECT_GT(CountWrongBytes(StateContentSeed(h, 16), swapped), size * 99 / 100);
  // All zeros (a slot never written) is wrong.
  std::vector<std::byte> zeros(4096);
  EXPECT_GT(CountWrongBytes(PageContentSeed(h), zeros), 4000u);
}

TEST(ReplayContentTest, VerifierCountsAndDescribesFailures) {
  ContentVerifier verifier(/*max_kept_failures=*/1);
  const PageHash h = HashOf(9);
  std::vector<std::byte> page(1000), state(3000);
  FillContent(PageContentSeed(h), page);
  FillContent(StateContentSeed(h, 48), state);
  EXPECT_EQ(verifier.CheckPage(h, page), 0u);
  EXPECT_EQ(verifier.CheckState(h, 48, state), 0u);
  page[999] ^= std::byte{4};
  EXPECT_EQ(verifier.CheckPage(h, page), 1u);
  EXPECT_GT(verifier.CheckState(h, 64, state), 2900u);
  EXPECT_EQ(verifier.records_checked(), 4u);
  EXPECT_EQ(verifier.bytes_checked(), 8000u);
  EXPECT_EQ(verifier.wrong_records(), 2u);
  EXPECT_GT(verifier.wrong_bytes(), 2900u);
  ASSERT_EQ(verifier.failures().size(), 1u);
  EXPECT_NE(verifier.failures()[0].find("kv page " + h.ToHex() +
                                        ": 1 of 1000 bytes wrong, "
                                        "first at offset 999"),
            std::string::npos)
      << verifier.failures()[0];
}

}  // namespace
}  // namespace cachepawl::tools
