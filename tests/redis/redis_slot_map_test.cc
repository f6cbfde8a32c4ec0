// CLUSTER SLOTS replies and MOVED/ASK errors (redis/redis_slot_map.h), as Redis 7 writes them
// and as a broken or hostile server might.
#include "redis/redis_slot_map.h"

#include <gtest/gtest.h>

namespace cachepawl {
namespace {

using Type = RedisReply::Type;

RedisReply Int(int64_t v) {
  RedisReply r;
  r.type = Type::kInteger;
  r.integer = v;
  return r;
}
RedisReply Str(std::string s) {
  RedisReply r;
  r.type = Type::kString;
  r.str = std::move(s);
  return r;
}
RedisReply Arr(std::vector<RedisReply> elements) {
  RedisReply r;
  r.type = Type::kArray;
  r.elements = std::move(elements);
  return r;
}
RedisReply Range(int64_t first, int64_t last, RedisReply host, int64_t port) {
  return Arr({Int(first), Int(last), Arr({std::move(host), Int(port), Str("id")}),
              Arr({Str("10.0.0.9"), Int(7100), Str("replica-id")})});
}

const RedisNode kQueried{"10.0.0.1", 7000};

TEST(RedisSlotMapTest, ParsesRangesAndFillsUnknownHosts) {
  const RedisReply reply = Arr({Range(0, 5460, Str("10.0.0.1"), 7000),
                                Range(5461, 10922, Str(""), 7001),  // unknown: queried's host
                                Range(10923, 16383, Str("?"), 7002), Range(42, 42, {}, 7003)});
  auto ranges = ParseClusterSlots(reply, kQueried);
  ASSERT_TRUE(ranges.ok()) << ranges.status().ToString();
  ASSERT_EQ(ranges->size(), 4u);
  EXPECT_EQ((*ranges)[0].first, 0);
  EXPECT_EQ((*ranges)[0].last, 5460);
  EXPECT_EQ((*ranges)[0].master, (RedisNode{"10.0.0.1", 7000}));
  EXPECT_EQ((*ranges)[1].master, (RedisNode{"10.0.0.1", 7001}));
  EXPECT_EQ((*ranges)[2].master, (RedisNode{"10.0.0.1", 7002}));
  EXPECT_EQ((*ranges)[3].master, (RedisNode{"10.0.0.1", 7003}));  // nil host
  EXPECT_TRUE(ParseClusterSlots(Arr({}), kQueried).ok());
}

TEST(RedisSlotMapTest, MalformedRepliesAreCorruptionNamingTheRange) {
  const RedisReply good = Range(0, 1, Str("h"), 1);
  const std::vector<RedisReply> bad = {
      Range(5, 4, Str("h"), 7000),                       // first > last
      Range(0, 16384, Str("h"), 7000),                   // past the last slot
      Range(-1, 3, Str("h"), 7000),                      // negative
      Range(0, 3, Str("h"), 0),                          // port 0
      Range(0, 3, Str("h"), 65536),                      // port too large
      Range(0, 3, Int(5), 7000),                         // host not a string
      Arr({Int(0), Int(3)}),                             // no master
      Arr({Int(0), Str("3"), Arr({Str("h"), Int(1)})}),  // slot as a string
      Arr({Int(0), Int(3), Arr({Str("h")})}),            // master without port
      Str("not a range"),
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto parsed = ParseClusterSlots(Arr({good, bad[i]}), kQueried);
    ASSERT_FALSE(parsed.ok()) << i;
    EXPECT_TRUE(parsed.status().IsCorruption()) << i;
    EXPECT_NE(parsed.status().message().find("range 1"), std::string::npos)
        << i << ": " << parsed.status().message();
  }
  EXPECT_TRUE(ParseClusterSlots(Str("OK"), kQueried).status().IsCorruption());
}

TEST(RedisSlotMapTest, RedirectionsParse) {
  auto moved = ParseRedirect("MOVED 3999 127.0.0.1:6381", kQueried);
  ASSERT_TRUE(moved.has_value());
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->target, (RedisNode{"127.0.0.1", 6381}));

  auto ask = ParseRedirect("ASK 0 cache-b:7002", kQueried);
  ASSERT_TRUE(ask.has_value());
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->target, (RedisNode{"cache-b", 7002}));

  auto v6 = ParseRedirect("MOVED 16383 ::1:7003", kQueried);  // Redis writes no brackets
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->target, (RedisNode{"::1", 7003}));
  auto bracketed = ParseRedirect("MOVED 1 [fe80::1]:7003", kQueried);
  ASSERT_TRUE(bracketed.has_value());
  EXPECT_EQ(bracketed->target, (RedisNode{"fe80::1", 7003}));

  auto no_host = ParseRedirect("MOVED 12 :7004", kQueried);  // endpoint unknown
  ASSERT_TRUE(no_host.has_value());
  EXPECT_EQ(no_host->target, (RedisNode{"10.0.0.1", 7004}));

  for (const char* error :
       {"ERR wrong type", "MOVED", "MOVED 3999", "MOVED x 1.2.3.4:5", "MOVED 16384 h:1",
        "MOVED 1 h:0", "MOVED 1 h:99999", "MOVED 1 h", "ASK 1 h:port", "moved 1 h:1"}) {
    EXPECT_FALSE(ParseRedirect(error, kQueried).has_value()) << error;
  }
  EXPECT_TRUE(IsClusterDisabledError("ERR This instance has cluster support disabled"));
  EXPECT_FALSE(IsClusterDisabledError("ERR unknown command"));
}

}  // namespace
}  // namespace cachepawl
