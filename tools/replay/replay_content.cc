#include "tools/replay/replay_content.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <memory>

namespace cachepawl::tools {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kTokenDomain = 0x746f6b656e730001ull;
constexpr uint64_t kPageDomain = 0x6b762d7061676501ull;
constexpr uint64_t kStateDomain = 0x6d616d6261730001ull;
constexpr uint64_t kTableWordsLog2 = 17;  // 2^17 words = 1 MiB
constexpr uint64_t kTableWords = uint64_t{1} << kTableWordsLog2;

// SplitMix64's finalizer: a bijective 64-bit mix.
constexpr uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

const uint64_t* PatternTable() {
  static const std::unique_ptr<uint64_t[]> table = [] {
    auto t = std::make_unique<uint64_t[]>(kTableWords);
    for (uint64_t i = 0; i < kTableWords; ++i) t[i] = Mix((i + 1) * kGolden);
    return t;
  }();
  return table.get();
}

uint64_t ChunkKey(uint64_t seed, uint64_t chunk) { return Mix(seed + (chunk + 1) * kGolden); }

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint64_t HashSeed(const PageHash& h, uint64_t domain) {
  const uint8_t* b = h.bytes.data();
  uint64_t s = Mix(Load64(b) ^ domain);
  s = Mix(s ^ Load64(b + 8));
  s = Mix(s ^ Load64(b + 16));
  return Mix(s ^ Load64(b + 24));
}

// Calls fn(word_index, expected_word) for every word of a record of `bytes` bytes (the last one
// possibly partial), chunk by chunk so the compiler can keep the loop simple.
template <typename Fn>
void ForEachWord(uint64_t seed, uint64_t bytes, Fn&& fn) {
  const uint64_t* table = PatternTable();
  const uint64_t words = (bytes + 7) / 8;
  for (uint64_t start = 0, chunk = 0; start < words; start += kTableWords, ++chunk) {
    const uint64_t key = ChunkKey(seed, chunk);
    const uint64_t n = std::min(kTableWords, words - start);
    if (!fn(start, n, table, key)) return;
  }
}

}  // namespace

uint32_t BlockToken(uint64_t block_id, uint64_t position) {
  return static_cast<uint32_t>(Mix(Mix(block_id ^ kTokenDomain) + position * kGolden) >> 32);
}

void AppendPromptTokens(const TraceRequest& request, uint32_t block_size_tokens,
                        std::vector<uint32_t>* out) {
  uint64_t left = PromptTokenCount(request, block_size_tokens);
  out->reserve(out->size() + left);
  for (uint64_t id : request.hash_ids) {
    const uint64_t n = std::min<uint64_t>(left, block_size_tokens);
    const uint64_t base = Mix(id ^ kTokenDomain);
    for (uint64_t j = 0; j < n; ++j) {
      out->push_back(static_cast<uint32_t>(Mix(base + j * kGolden) >> 32));
    }
    left -= n;
    if (left == 0) break;
  }
}

uint64_t PageContentSeed(const PageHash& page) { return HashSeed(page, kPageDomain); }

uint64_t StateContentSeed(const PageHash& last_page, uint64_t depth_tokens) {
  return Mix(HashSeed(last_page, kStateDomain) ^ Mix(depth_tokens + kGolden));
}

void FillContent(uint64_t seed, std::span<std::byte> record) {
  std::byte* dst = record.data();
  const uint64_t bytes = record.size();
  ForEachWord(seed, bytes, [&](uint64_t start, uint64_t n, const uint64_t* table, uint64_t key) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t word = table[i] ^ key;
      const uint64_t offset = (start + i) * 8;
      if (offset + 8 <= bytes) {
        std::memcpy(dst + offset, &word, 8);
      } else {
        std::memcpy(dst + offset, &word, bytes - offset);
      }
    }
    return true;
  });
}

uint64_t CountWrongBytes(uint64_t seed, std::span<const std::byte> record,
                         uint64_t* first_wrong_offset) {
  const std::byte* src = record.data();
  const uint64_t bytes = record.size();
  uint64_t wrong = 0;
  bool have_first = false;
  ForEachWord(seed, bytes, [&](uint64_t start, uint64_t n, const uint64_t* table, uint64_t key) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t offset = (start + i) * 8;
      const uint64_t len = std::min<uint64_t>(8, bytes - offset);
      uint64_t actual = 0;
      std::memcpy(&actual, src + offset, len);
      uint64_t expected = table[i] ^ key;
      if (len < 8) expected &= (uint64_t{1} << (8 * len)) - 1;  // little-endian leading bytes
      uint64_t diff = actual ^ expected;
      if (diff == 0) continue;
      if (!have_first) {
        have_first = true;
        if (first_wrong_offset != nullptr) {
          *first_wrong_offset = offset + static_cast<uint64_t>(std::countr_zero(diff)) / 8;
        }
      }
      for (; diff != 0; diff >>= 8) wrong += (diff & 0xff) != 0;
    }
    return true;
  });
  return wrong;
}

uint64_t ContentVerifier::CheckPage(const PageHash& page, std::span<const std::byte> record) {
  return Check(PageContentSeed(page), record, "kv page " + page.ToHex());
}

uint64_t ContentVerifier::CheckState(const PageHash& last_page, uint64_t depth_tokens,
                                     std::span<const std::byte> record) {
  return Check(StateContentSeed(last_page, depth_tokens), record,
               "mamba state " + last_page.ToHex() + " at depth " + std::to_string(depth_tokens));
}

uint64_t ContentVerifier::Check(uint64_t seed, std::span<const std::byte> record,
                                const std::string& what) {
  uint64_t first = 0;
  const uint64_t wrong = CountWrongBytes(seed, record, &first);
  ++records_checked_;
  bytes_checked_ += record.size();
  if (wrong != 0) {
    ++wrong_records_;
    wrong_bytes_ += wrong;
    if (failures_.size() < max_kept_) {
      failures_.push_back(what + ": " + std::to_string(wrong) + " of " +
                          std::to_string(record.size()) + " bytes wrong, first at offset " +
                          std::to_string(first));
    }
  }
  return wrong;
}

}  // namespace cachepawl::tools
