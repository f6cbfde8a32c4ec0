#include "tools/replay/replay_workloads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "tools/replay/replay_ceiling.h"

namespace cachepawl::tools {
namespace {

std::vector<TraceRequest> Generate(const std::string& name, uint64_t seed, size_t n = 0,
                                   uint32_t block = 512) {
  WorkloadOptions o;
  o.seed = seed;
  o.requests = n;
  o.block_size_tokens = block;
  auto r = GenerateWorkload(name, o);
  EXPECT_TRUE(r.ok()) << name << ": " << r.status().ToString();
  return r.ok() ? std::move(r).value() : std::vector<TraceRequest>{};
}

TEST(ReplayWorkloadsTest, EveryWorkloadIsDeterministicPerSeedAndWellFormed) {
  ASSERT_EQ(Workloads().size(), 5u);
  for (const WorkloadInfo& w : Workloads()) {
    SCOPED_TRACE(w.name);
    auto a = Generate(w.name, 11);
    auto b = Generate(w.name, 11);
    auto c = Generate(w.name, 12);
    ASSERT_EQ(a.size(), w.default_requests);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    for (size_t i = 0; i < a.size(); ++i) {
      const TraceRequest& r = a[i];
      ASSERT_FALSE(r.hash_ids.empty());
      // Consistent with the block size: the prompt ends inside its last block.
      EXPECT_EQ(PromptTokenCount(r, 512), r.input_length);
      EXPECT_GT(r.output_length, 0u);
      if (i > 0) {
        EXPECT_LE(a[i - 1].timestamp_ms, r.timestamp_ms);
      }
    }
    EXPECT_EQ(Generate(w.name, 11, 37).size(), 37u);
    // Sharing is what the workloads are for: an infinite cache hits a fair share of blocks.
    auto ceiling = ComputeCeiling(a, CeilingOptions{});
    ASSERT_TRUE(ceiling.ok());
    EXPECT_GT(ceiling->block_rate(), 0.25);
    EXPECT_LT(ceiling->block_rate(), 1.0);
  }
}

// A map from each request's first block to the requests that start with it.
std::map<uint64_t, std::vector<const TraceRequest*>> ByFirstBlock(
    const std::vector<TraceRequest>& requests) {
  std::map<uint64_t, std::vector<const TraceRequest*>> groups;
  for (const TraceRequest& r : requests) groups[r.hash_ids[0]].push_back(&r);
  return groups;
}

bool IsPrefix(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

TEST(ReplayWorkloadsTest, ChatTurnsResendTheWholeConversation) {
  auto requests = Generate("chat", 5);
  size_t continued = 0;
  for (const auto& [first, turns] : ByFirstBlock(requests)) {
    for (size_t t = 1; t < turns.size(); ++t) {
      // A session's next turn extends its previous prompt, block for block.
      EXPECT_TRUE(IsPrefix(turns[t - 1]->hash_ids, turns[t]->hash_ids));
      EXPECT_GT(turns[t]->input_length, turns[t - 1]->input_length);
      ++continued;
    }
  }
  EXPECT_GT(continued, requests.size() / 2);
}

TEST(ReplayWorkloadsTest, SharedPrefixWorkloadsShareTheirLeadingBlocks) {
  EXPECT_LE(ByFirstBlock(Generate("system-prompt", 5)).size(), 3u);
  EXPECT_LE(ByFirstBlock(Generate("few-shot", 5)).size(), 6u);
  // Agents: all share the 3000-token tool prefix (5 whole blocks of 512), and each step
  // re-sends its session's context.
  auto agent = Generate("agent", 5);
  for (const TraceRequest& r : agent) {
    ASSERT_GE(r.hash_ids.size(), 6u);
    EXPECT_TRUE(std::equal(r.hash_ids.begin(), r.hash_ids.begin() + 5, agent[0].hash_ids.begin()));
  }
}

TEST(ReplayWorkloadsTest, MixedKeepsEachGeneratorsIdsApart) {
  auto mixed = Generate("mixed", 3, 400);
  std::set<uint64_t> ranges;
  for (const TraceRequest& r : mixed) {
    std::set<uint64_t> own;
    for (uint64_t id : r.hash_ids) own.insert(id >> 48);
    EXPECT_EQ(own.size(), 1u);  // one generator per request
    ranges.insert(*own.begin());
  }
  EXPECT_EQ(ranges.size(), 4u);
}

TEST(ReplayWorkloadsTest, BadOptionsAreNamed) {
  WorkloadOptions o;
  auto unknown = GenerateWorkload("chatty", o);
  ASSERT_TRUE(unknown.status().IsNotFound());
  EXPECT_NE(unknown.status().message().find("workload 'chatty' is not known (known: chat, "),
            std::string::npos)
      << unknown.status().ToString();
  o.block_size_tokens = 0;
  EXPECT_NE(GenerateWorkload("chat", o).status().message().find("--block-size: 0"),
            std::string::npos);
  o.block_size_tokens = 512;
  o.requests_per_second = 0;
  EXPECT_TRUE(GenerateWorkload("chat", o).status().IsInvalidArgument());
}

}  // namespace
}  // namespace cachepawl::tools
