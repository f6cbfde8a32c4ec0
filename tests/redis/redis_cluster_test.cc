// RedisCluster (redis/redis_cluster.h) against real redis-server processes
// (tests/common/redis_test_cluster.h): seeds and options, key slots, binary values over three
// masters, MOVED and ASK, a killed and a paused master, AUTH, a standalone server, many
// threads. Every reply's bytes are checked. The only time bounds asserted are generous upper
// bounds where the point is that a call does not hang (each says so).
#include "redis/redis_cluster.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <thread>

#include "redis/redis_slot_map.h"
#include "tests/common/redis_test_cluster.h"
#include "tests/common/test_util.h"

namespace cachepawl {
namespace {

using testing::RedisTestCluster;
using testing::RedisTestOptions;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Type = RedisReply::Type;

RedisClusterOptions ClientOptions(const std::string& seeds) {
  RedisClusterOptions options;
  options.seeds = seeds;
  options.connect_timeout = milliseconds(1000);
  options.io_timeout = milliseconds(5000);
  options.down_backoff = milliseconds(200);
  return options;
}

std::string RandomBytes(size_t size, uint64_t seed) {
  std::string bytes(size, '\0');
  testing::FillRandom(std::as_writable_bytes(std::span(bytes.data(), bytes.size())), seed);
  for (size_t i = 0; i < size; i += 97) bytes[i] = '\0';  // zero bytes inside every value
  return bytes;
}

// Keys and values a test writes and reads back; commands point into them.
struct Records {
  std::vector<std::string> keys;
  std::vector<std::string> values;

  void Add(std::string key, std::string value) {
    keys.push_back(std::move(key));
    values.push_back(std::move(value));
  }
  // `verb`: a string literal (the commands point at it).
  std::vector<RedisCommand> Commands(std::string_view verb, bool with_value) const {
    std::vector<RedisCommand> commands(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      commands[i].args = {verb, keys[i]};
      if (with_value) commands[i].args.push_back(values[i]);
      commands[i].key = keys[i];
    }
    return commands;
  }
};

Clock::time_point In(milliseconds ms) { return Clock::now() + ms; }

// Runs SET for every record; every reply must be +OK.
void SetAll(RedisCluster& client, const Records& records) {
  const auto commands = records.Commands("SET", true);
  const auto results = client.Run(commands, In(seconds(30)));
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << "SET " << i << ": " << results[i].status().ToString();
    ASSERT_EQ(results[i]->type, Type::kStatus);
    ASSERT_EQ(results[i]->str, "OK");
  }
}

// GETs every record and compares every byte; returns the number of mismatches.
size_t CheckAll(RedisCluster& client, const Records& records) {
  const auto commands = records.Commands("GET", false);
  const auto results = client.Run(commands, In(seconds(30)));
  size_t bad = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const bool good = results[i].ok() && results[i]->type == Type::kString &&
                      results[i]->str == records.values[i];
    if (!good) {
      ++bad;
      ADD_FAILURE() << "GET " << i << " (" << records.values[i].size() << " bytes): "
                    << (results[i].ok() ? "wrong reply" : results[i].status().ToString());
    }
  }
  return bad;
}

// `count` keys "<prefix>:<i>" with values of `value_bytes`.
Records Numbered(const std::string& prefix, size_t count, size_t value_bytes) {
  Records records;
  for (size_t i = 0; i < count; ++i) {
    records.Add(prefix + ":" + std::to_string(i), RandomBytes(value_bytes, i));
  }
  return records;
}

// Keys in one slot: a shared hash tag.
Records TaggedRecords(const std::string& tag, size_t count, uint64_t seed) {
  Records records;
  for (size_t i = 0; i < count; ++i) {
    records.Add("{" + tag + "}:" + std::to_string(i), RandomBytes(100 + i * 37, seed + i));
  }
  return records;
}

// ---- No server needed ----

TEST(RedisOptionsTest, SeedsParseAndErrorsNameTheValue) {
  auto nodes =
      ParseRedisSeeds("redis://127.0.0.1:7000,[::1]:7001,cache-a.local:65535,127.0.0.1:7000");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 3u);  // the repeated seed is dropped
  EXPECT_EQ((*nodes)[0], (RedisNode{"127.0.0.1", 7000}));
  EXPECT_EQ((*nodes)[1], (RedisNode{"::1", 7001}));
  EXPECT_EQ((*nodes)[1].ToString(), "[::1]:7001");
  EXPECT_EQ((*nodes)[2], (RedisNode{"cache-a.local", 65535}));

  const std::pair<const char*, const char*> bad[] = {
      {"", "empty"},
      {"127.0.0.1:7000", "127.0.0.1:7000"},  // no scheme: the value is named
      {"redis://h:0", "'0'"},                // port out of range
      {"redis://h:70000", "'70000'"},
      {"redis://h:12x", "'12x'"},
      {"redis://h", "'h'"},  // no port
      {"redis://:7000", "empty host"},
      {"redis://[::1:7000", "'[::1:7000'"},  // unclosed bracket
      {"redis://::1:7000", "brackets"},      // IPv6 without brackets
      {"redis://a:1,,b:2", "''"},            // an empty part
      {"redis://a b:1", "'a b:1'"},
      {"rediss://h:1", "TLS"},
  };
  for (const auto& [seeds, expected] : bad) {
    auto parsed = ParseRedisSeeds(seeds);
    ASSERT_FALSE(parsed.ok()) << seeds;
    EXPECT_TRUE(parsed.status().IsInvalidArgument()) << seeds;
    EXPECT_NE(parsed.status().message().find(expected), std::string::npos)
        << seeds << " -> " << parsed.status().message();
    EXPECT_NE(parsed.status().message().find("seeds"), std::string::npos);
  }
  // Credentials in the seeds are refused without being echoed.
  auto with_password = ParseRedisSeeds("redis://alice:hunter2@h:1");
  ASSERT_FALSE(with_password.ok());
  EXPECT_EQ(with_password.status().message().find("hunter2"), std::string::npos);
}

TEST(RedisOptionsTest, ValidateNamesTheFieldAndValue) {
  RedisClusterOptions options;
  options.seeds = "redis://127.0.0.1:7000";
  EXPECT_TRUE(options.Validate().ok());

  auto expect_error = [](const RedisClusterOptions& o, const std::string& expected) {
    const Status s = o.Validate();
    EXPECT_TRUE(s.IsInvalidArgument()) << expected;
    EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  };
  RedisClusterOptions o = options;
  o.connections_per_node = 0;
  expect_error(o, "connections_per_node: 0");
  o = options;
  o.connections_per_node = 65;
  expect_error(o, "connections_per_node: 65");
  o = options;
  o.io_timeout = milliseconds(0);
  expect_error(o, "io_timeout: 0 ms");
  o = options;
  o.connect_timeout = milliseconds(-5);
  expect_error(o, "connect_timeout: -5 ms");
  o = options;
  o.down_backoff = milliseconds(700'000);
  expect_error(o, "down_backoff: 700000 ms");
  o = options;
  o.user = "alice";
  expect_error(o, "user: 'alice'");
  o = options;
  o.seeds = "redis://h:99999";
  expect_error(o, "'99999'");

  auto client = RedisCluster::Connect(o);
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(client.status().IsInvalidArgument());
}

TEST(RedisKeySlotTest, KnownValuesAndHashTags) {
  EXPECT_EQ(RedisKeySlot("foo"), 12182);
  EXPECT_EQ(RedisKeySlot("bar"), 5061);
  EXPECT_EQ(RedisKeySlot("123456789"), 0x31C3 % 16384);  // the CRC16/XMODEM check value
  EXPECT_EQ(RedisKeySlot(""), 0);
  EXPECT_EQ(RedisKeySlot("{user1000}.following"), RedisKeySlot("{user1000}.followers"));
  EXPECT_EQ(RedisKeySlot("{user1000}.following"), RedisKeySlot("user1000"));
  EXPECT_EQ(RedisKeySlot("foo{bar}{zap}"), RedisKeySlot("bar"));  // the first tag
  EXPECT_EQ(RedisKeySlot("foo{}{bar}"), RedisKeySlot("foo{}{bar}"));
  EXPECT_NE(RedisKeySlot("foo{}{bar}"), RedisKeySlot("bar"));      // an empty tag: whole key
  EXPECT_EQ(RedisKeySlot("foo{{bar}}zap"), RedisKeySlot("{bar"));  // from the first '{'
  EXPECT_EQ(RedisKeySlot("foo{bar"), RedisKeySlot("foo{bar"));     // no '}': whole key
  EXPECT_NE(RedisKeySlot("foo{bar"), RedisKeySlot("bar"));
}

TEST(RedisConnectTest, NoSeedAnswersNamesEachSeed) {
  auto port_a = testing::FreeLoopbackPort();
  auto port_b = testing::FreeLoopbackPort();
  ASSERT_TRUE(port_a.ok() && port_b.ok());
  const std::string a = "127.0.0.1:" + std::to_string(*port_a);
  const std::string b = "127.0.0.1:" + std::to_string(*port_b);
  RedisClusterOptions options = ClientOptions("redis://" + a + "," + b);
  auto client = RedisCluster::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(client.status().IsUnavailable()) << client.status().ToString();
  EXPECT_NE(client.status().message().find(a), std::string::npos) << client.status().message();
  EXPECT_NE(client.status().message().find(b), std::string::npos) << client.status().message();
  EXPECT_NE(client.status().message().find("refused"), std::string::npos);
}

// Retries `attempt` every 100 ms until it returns true, at most `tries` times.
bool Eventually(int tries, const std::function<bool()>& attempt) {
  for (int i = 0; i < tries; ++i) {
    if (attempt()) return true;
    std::this_thread::sleep_for(milliseconds(100));
  }
  return false;
}

// ---- Against real servers ----

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override { CACHEPAWL_SKIP_WITHOUT_REDIS(); }

  void StartServers(const RedisTestOptions& servers = {}) {
    auto started = RedisTestCluster::Start(servers);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    cluster_ = std::move(started).value();
  }
  RedisClusterOptions Options() const { return ClientOptions(cluster_->Seeds()); }
  std::unique_ptr<RedisCluster> NewClient(const RedisClusterOptions& options) {
    auto client = RedisCluster::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(client).value() : nullptr;
  }
  // The servers, and client_ with Options() as `tweak` changes them.
  void StartAndConnect(const RedisTestOptions& servers = {},
                       const std::function<void(RedisClusterOptions&)>& tweak = {}) {
    ASSERT_NO_FATAL_FAILURE(StartServers(servers));
    RedisClusterOptions options = Options();
    if (tweak) tweak(options);
    client_ = NewClient(options);
    ASSERT_NE(client_, nullptr);
  }

  // Which of `records` live on `node`, by the servers' own CLUSTER SLOTS.
  std::vector<bool> OnNode(const Records& records, size_t node) const {
    auto owners = cluster_->SlotOwners();
    EXPECT_TRUE(owners.ok()) << owners.status().ToString();
    std::vector<bool> on(records.keys.size(), false);
    for (size_t i = 0; i < on.size() && owners.ok(); ++i) {
      on[i] = (*owners)[RedisKeySlot(records.keys[i])] == node;
    }
    return on;
  }

  std::unique_ptr<RedisTestCluster> cluster_;
  std::unique_ptr<RedisCluster> client_;  // destroyed before the servers
};

TEST_F(RedisClusterTest, KeySlotMatchesTheServerForBinaryKeys) {
  ASSERT_NO_FATAL_FAILURE(StartServers());
  for (uint64_t i = 0; i < 40; ++i) {
    std::string key = RandomBytes(i % 23, 1000 + i);
    if (i % 4 == 1) key = "x{" + key + "}y";
    if (i % 4 == 2) key = "{}" + key;
    auto reply = cluster_->Command(0, {"CLUSTER", "KEYSLOT", key});
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->integer, RedisKeySlot(key)) << "key " << i;
  }
}

TEST_F(RedisClusterTest, BinaryValuesOverThreeMastersOneRoundTripPerNode) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  ASSERT_EQ(client_->Masters().size(), 3u);

  Records records;
  for (size_t i = 0; i < 1000; ++i) {
    std::string key = "bin";
    key += '\0';
    key += std::to_string(i);
    key += '\xff';
    size_t size = (i * 7919) % 4096;
    if (i % 100 == 0) size = 0;
    if (i % 125 == 1) size = 1 << 20;  // 8 values of 1 MiB
    records.Add(std::move(key), RandomBytes(size, 7 + i));
  }
  std::vector<size_t> per_master(3, 0);
  auto owners = cluster_->SlotOwners();
  ASSERT_TRUE(owners.ok());
  for (const std::string& key : records.keys) ++per_master[(*owners)[RedisKeySlot(key)]];
  for (size_t n : per_master) ASSERT_GT(n, 0u);  // every master has keys
  // The client's slot map names the owner the servers report, for every slot.
  for (uint32_t slot = 0; slot < kRedisSlotCount; ++slot) {
    const std::optional<RedisNode> master = client_->MasterOf(static_cast<uint16_t>(slot));
    ASSERT_TRUE(master.has_value()) << slot;
    ASSERT_EQ(*master, cluster_->address((*owners)[slot])) << slot;
  }

  const RedisClusterStats before = client_->stats();
  SetAll(*client_, records);
  const RedisClusterStats after_set = client_->stats();
  EXPECT_EQ(after_set.round_trips - before.round_trips, 3u);  // per node per batch
  EXPECT_EQ(after_set.commands - before.commands, 1000u);
  EXPECT_EQ(after_set.moved + after_set.ask, 0u);

  EXPECT_EQ(CheckAll(*client_, records), 0u);
  EXPECT_EQ(client_->stats().round_trips - after_set.round_trips, 3u);

  // Check the bytes with the admin connection too (a different client).
  auto direct =
      cluster_->Command((*owners)[RedisKeySlot(records.keys[1])], {"GET", records.keys[1]});
  ASSERT_TRUE(direct.ok());
  EXPECT_TRUE(direct->str == records.values[1]);

  auto expect_integers = [&](std::string_view verb, int64_t expected) {
    const auto results = client_->Run(records.Commands(verb, false), In(seconds(30)));
    for (size_t i = 0; i < results.size(); ++i) {
      ASSERT_TRUE(results[i].ok()) << verb << " " << i << ": " << results[i].status().ToString();
      ASSERT_EQ(results[i]->type, Type::kInteger);
      EXPECT_EQ(results[i]->integer, expected) << verb << " " << i;
    }
  };
  expect_integers("EXISTS", 1);
  expect_integers("DEL", 1);
  expect_integers("EXISTS", 0);
  const auto gone = client_->Run(records.Commands("GET", false), In(seconds(30)));
  for (const auto& r : gone) {
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->type, Type::kNil);
  }
  const RedisClusterStats end = client_->stats();
  EXPECT_EQ(end.server_errors + end.timeouts + end.broken_connections + end.connect_failures, 0u);
}

TEST_F(RedisClusterTest, AValueInPiecesArrivesAsOneValue) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  // Pieces below and above the inline size, an empty one, and a command with a value of one
  // piece after it in the same pipeline (the framing must stay in step).
  const std::string head = RandomBytes(4096, 1), middle = RandomBytes(100, 2),
                    tail = RandomBytes(3 << 20, 3), plain = RandomBytes(5000, 4);
  const std::string key = "{pieces}:joined", other = "{pieces}:plain";
  std::vector<RedisCommand> set(2);
  set[0].args = {"SET", key, head, "", middle, tail};
  set[0].key = key;
  set[0].last_arg_pieces = 4;
  set[1].args = {"SET", other, plain};
  set[1].key = other;
  auto results = client_->Run(set, In(seconds(30)));
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto owner = cluster_->OwnerOf(RedisKeySlot(key));
  ASSERT_TRUE(owner.ok());
  auto joined = cluster_->Command(*owner, {"GET", key});
  ASSERT_TRUE(joined.ok());
  EXPECT_TRUE(joined->str == head + middle + tail);
  auto single = cluster_->Command(*owner, {"GET", other});
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(single->str == plain);

  // More pieces than arguments: refused before anything is sent, counted.
  std::vector<RedisCommand> bad(1);
  bad[0].args = {"GET", key};
  bad[0].key = key;
  bad[0].last_arg_pieces = 3;
  const uint64_t invalid = client_->stats().invalid_commands;
  results = client_->Run(bad, In(seconds(5)));
  ASSERT_FALSE(results[0].ok());
  EXPECT_TRUE(results[0].status().IsInvalidArgument());
  EXPECT_NE(results[0].status().message().find("last_arg_pieces 3"), std::string::npos);
  EXPECT_EQ(client_->stats().invalid_commands - invalid, 1u);
}

TEST_F(RedisClusterTest, MovedSlotIsFollowedAndTheMapRefreshed) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  const Records records = TaggedRecords("moved", 50, 11);
  SetAll(*client_, records);

  const uint16_t slot = RedisKeySlot(records.keys[0]);
  auto from = cluster_->OwnerOf(slot);
  ASSERT_TRUE(from.ok()) << from.status().ToString();
  const size_t to = (*from + 1) % 3;
  ASSERT_TRUE(cluster_->MoveSlot(slot, *from, to).ok());

  const RedisClusterStats before = client_->stats();
  EXPECT_EQ(CheckAll(*client_, records), 0u);  // sent to the old owner, MOVED, re-sent
  const RedisClusterStats after = client_->stats();
  EXPECT_EQ(after.moved - before.moved, 50u);
  EXPECT_GT(after.slot_map_refreshes, before.slot_map_refreshes);
  EXPECT_EQ(after.redirect_limit, 0u);

  // The refreshed map sends them to the new owner at once.
  EXPECT_EQ(CheckAll(*client_, records), 0u);
  EXPECT_EQ(client_->stats().moved, after.moved);
  EXPECT_EQ(client_->stats().round_trips - after.round_trips, 1u);
  auto direct = cluster_->Command(to, {"GET", records.keys[7]});
  ASSERT_TRUE(direct.ok());
  EXPECT_TRUE(direct->str == records.values[7]);

  // Two masters that each say the other serves a slot (an empty one): the client gives up
  // after kRedisMaxRedirects redirections.
  const std::string loop_key = "{loop}:k";
  const uint16_t loop_slot = RedisKeySlot(loop_key);
  auto owner = cluster_->OwnerOf(loop_slot);
  ASSERT_TRUE(owner.ok());
  const size_t other = (*owner + 1) % 3;
  auto given = cluster_->Command(
      *owner, {"CLUSTER", "SETSLOT", std::to_string(loop_slot), "NODE", cluster_->NodeId(other)});
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  const RedisClusterStats pre = client_->stats();
  std::vector<RedisCommand> loop(1);
  loop[0].args = {"GET", loop_key};
  loop[0].key = loop_key;
  const auto looped = client_->Run(loop, In(seconds(10)));
  ASSERT_FALSE(looped[0].ok());
  EXPECT_TRUE(looped[0].status().IsUnavailable()) << looped[0].status().ToString();
  EXPECT_NE(looped[0].status().message().find("redirections"), std::string::npos);
  EXPECT_EQ(client_->stats().redirect_limit - pre.redirect_limit, 1u);
  EXPECT_EQ(client_->stats().moved - pre.moved, uint64_t{kRedisMaxRedirects});
}

// GET with reply_into: a bulk string of exactly the span's size lands in the span (the reply
// says `into`, no string); another length, nil or an error reply leaves the span untouched and
// arrives as without one; a MOVED redirection writes into the same span after the retry.
TEST_F(RedisClusterTest, GetIntoASpanOnlyWhenTheLengthMatches) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  Records records;
  records.Add("{into}:big", RandomBytes(300 << 10, 41));  // several reads of the socket
  records.Add("{into}:small", RandomBytes(100, 42));
  records.Add("{into}:plain", RandomBytes(5000, 43));
  SetAll(*client_, records);
  const std::string absent = "{into}:absent", list = "{into}:list";
  std::vector<RedisCommand> push(1);
  push[0].args = {"RPUSH", list, "x"};
  push[0].key = list;
  ASSERT_TRUE(client_->Run(push, In(seconds(10)))[0].ok());

  static constexpr std::byte kUntouched{0xab};
  // One destination per command, each filled with kUntouched.
  struct Spans {
    std::vector<std::vector<std::byte>> buffers;
    std::span<std::byte> Add(size_t size) {
      buffers.emplace_back(size, kUntouched);
      return buffers.back();
    }
  };
  auto untouched = [&](std::span<const std::byte> span) {
    return std::all_of(span.begin(), span.end(), [&](std::byte b) { return b == kUntouched; });
  };
  auto as_string = [](std::span<const std::byte> span) {
    return std::string(reinterpret_cast<const char*>(span.data()), span.size());
  };
  auto get_into = [&](const std::string& key, std::span<std::byte> into) {
    RedisCommand c;
    c.args = {"GET", key};
    c.key = key;
    c.reply_into = into;
    return c;
  };

  // All in one pipeline to one node: exact, too long, too short, without a destination, nil,
  // an error (WRONGTYPE), and exact again (the framing stays in step).
  Spans spans;
  spans.buffers.reserve(8);
  const size_t big = records.values[0].size(), small = records.values[1].size();
  std::vector<RedisCommand> commands;
  commands.push_back(get_into(records.keys[0], spans.Add(big)));
  commands.push_back(get_into(records.keys[1], spans.Add(small + 1)));
  commands.push_back(get_into(records.keys[1], spans.Add(small - 1)));
  commands.push_back(get_into(records.keys[2], {}));
  commands.push_back(get_into(absent, spans.Add(16)));
  commands.push_back(get_into(list, spans.Add(1)));
  commands.push_back(get_into(records.keys[1], spans.Add(small)));
  const RedisClusterStats before = client_->stats();
  auto results = client_->Run(commands, In(seconds(30)));
  EXPECT_EQ(client_->stats().round_trips - before.round_trips, 1u);

  ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
  EXPECT_EQ(results[0]->type, Type::kString);
  EXPECT_TRUE(results[0]->into);
  EXPECT_TRUE(results[0]->str.empty());
  EXPECT_TRUE(as_string(spans.buffers[0]) == records.values[0]);

  for (size_t i :
       {size_t{1}, size_t{2}}) {  // the wrong sizes: reported with their length, span untouched
    ASSERT_TRUE(results[i].ok()) << results[i].status().ToString();
    EXPECT_EQ(results[i]->type, Type::kString);
    EXPECT_FALSE(results[i]->into);
    EXPECT_EQ(results[i]->str.size(), small);
    EXPECT_TRUE(results[i]->str == records.values[1]);
    EXPECT_TRUE(untouched(spans.buffers[i])) << "command " << i;
  }
  ASSERT_TRUE(results[3].ok());
  EXPECT_FALSE(results[3]->into);
  EXPECT_TRUE(results[3]->str == records.values[2]);

  ASSERT_TRUE(results[4].ok());
  EXPECT_EQ(results[4]->type, Type::kNil);
  EXPECT_FALSE(results[4]->into);
  EXPECT_TRUE(untouched(spans.buffers[3]));

  ASSERT_FALSE(results[5].ok());
  EXPECT_TRUE(results[5].status().IsFailedPrecondition()) << results[5].status().ToString();
  EXPECT_NE(results[5].status().message().find("WRONGTYPE"), std::string::npos);
  EXPECT_TRUE(untouched(spans.buffers[4]));

  ASSERT_TRUE(results[6].ok());
  EXPECT_TRUE(results[6]->into);
  EXPECT_TRUE(as_string(spans.buffers[5]) == records.values[1]);

  // Through MOVED: the slot changes owner; the first answer (MOVED) writes nothing, the retry
  // at the new owner writes into the same span.
  const uint16_t slot = RedisKeySlot(records.keys[0]);
  auto from = cluster_->OwnerOf(slot);
  ASSERT_TRUE(from.ok()) << from.status().ToString();
  ASSERT_TRUE(cluster_->MoveSlot(slot, *from, (*from + 1) % 3).ok());
  Spans moved_spans;
  moved_spans.buffers.reserve(2);
  std::vector<RedisCommand> moved;
  moved.push_back(get_into(records.keys[0], moved_spans.Add(big)));
  moved.push_back(get_into(records.keys[1], moved_spans.Add(small + 7)));
  const uint64_t moved_before = client_->stats().moved;
  results = client_->Run(moved, In(seconds(30)));
  EXPECT_EQ(client_->stats().moved - moved_before, 2u);
  ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
  EXPECT_TRUE(results[0]->into);
  EXPECT_TRUE(as_string(moved_spans.buffers[0]) == records.values[0]);
  ASSERT_TRUE(results[1].ok()) << results[1].status().ToString();
  EXPECT_FALSE(results[1]->into);
  EXPECT_EQ(results[1]->str.size(), small);
  EXPECT_TRUE(untouched(moved_spans.buffers[1]));
}

TEST_F(RedisClusterTest, AskDuringMigrationKeepsTheMap) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  Records records = TaggedRecords("asked", 40, 23);
  SetAll(*client_, records);

  const uint16_t slot = RedisKeySlot(records.keys[0]);
  auto from = cluster_->OwnerOf(slot);
  ASSERT_TRUE(from.ok());
  const size_t to = (*from + 2) % 3;
  ASSERT_TRUE(cluster_->BeginSlotMigration(slot, *from, to).ok());
  auto migrated = cluster_->MigrateSlotKeys(slot, *from, to, 15);
  ASSERT_TRUE(migrated.ok()) << migrated.status().ToString();
  ASSERT_EQ(*migrated, 15u);

  const RedisClusterStats before = client_->stats();
  EXPECT_EQ(CheckAll(*client_, records), 0u);  // 25 answered by `from`, 15 after ASK by `to`
  RedisClusterStats after = client_->stats();
  EXPECT_EQ(after.ask - before.ask, 15u);
  EXPECT_EQ(after.moved, before.moved);
  EXPECT_EQ(after.slot_map_refreshes, before.slot_map_refreshes);

  // A new key of a migrating slot goes to the importing node (ASK), readable there by ASK too.
  Records fresh;
  fresh.Add("{asked}:new", RandomBytes(5000, 99));
  SetAll(*client_, fresh);
  EXPECT_EQ(CheckAll(*client_, fresh), 0u);
  EXPECT_EQ(client_->stats().ask - after.ask, 2u);
  auto on_from = cluster_->Command(*from, {"EXISTS", fresh.keys[0]});  // not there: ASK
  ASSERT_FALSE(on_from.ok());
  EXPECT_NE(on_from.status().message().find("ASK"), std::string::npos);

  // Finish the migration: the old owner answers MOVED, the map follows.
  auto rest = cluster_->MigrateSlotKeys(slot, *from, to, 1000);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(*rest, 25u);
  ASSERT_TRUE(cluster_->FinishSlotMigration(slot, to).ok());
  records.Add(fresh.keys[0], fresh.values[0]);
  after = client_->stats();
  EXPECT_EQ(CheckAll(*client_, records), 0u);
  EXPECT_GT(client_->stats().moved, after.moved);
  EXPECT_EQ(CheckAll(*client_, records), 0u);
}

TEST_F(RedisClusterTest, KilledMasterFailsFastOthersServeAndItServesAfterRestart) {
  ASSERT_NO_FATAL_FAILURE(StartAndConnect());
  const Records records = Numbered("kill", 300, 3000);
  SetAll(*client_, records);
  const size_t victim = 1;
  const std::vector<bool> on_victim = OnNode(records, victim);

  // Batches run on another thread while the master dies: no wrong byte, the other masters'
  // commands all succeed, the victim's fail with Unavailable or IOError.
  std::atomic<bool> stop{false};
  std::atomic<size_t> batches{0}, wrong{0}, failed_elsewhere{0}, victim_failures{0};
  std::atomic<size_t> unexpected_code{0};
  std::thread reader([&] {
    const auto commands = records.Commands("GET", false);
    for (int round = 0; round < 2000 && !stop.load(); ++round) {
      const auto results = client_->Run(commands, In(seconds(10)));
      for (size_t i = 0; i < results.size(); ++i) {
        if (results[i].ok()) {
          if (results[i]->str != records.values[i]) ++wrong;
        } else if (!on_victim[i]) {
          ++failed_elsewhere;
        } else {
          ++victim_failures;
          const Status& s = results[i].status();
          if (!s.IsUnavailable() && !s.IsIOError()) ++unexpected_code;
        }
      }
      ++batches;
    }
  });
  for (int i = 0; i < 500 && batches.load() < 3; ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_TRUE(cluster_->Kill(victim).ok());
  const size_t at_kill = batches.load();
  for (int i = 0; i < 500 && batches.load() < at_kill + 5; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  stop = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(failed_elsewhere.load(), 0u);
  EXPECT_GT(victim_failures.load(), 0u);
  EXPECT_EQ(unexpected_code.load(), 0u);

  // With the master down: its commands fail at once. (An upper bound only, far above what it
  // takes, far below the 10 s deadline: the point is that a dead node costs no timeout.)
  const RedisClusterStats before = client_->stats();
  const Clock::time_point start = Clock::now();
  const auto results = client_->Run(records.Commands("GET", false), In(seconds(10)));
  EXPECT_LT(Clock::now() - start, seconds(5));
  for (size_t i = 0; i < results.size(); ++i) {
    if (on_victim[i]) {
      ASSERT_FALSE(results[i].ok());
      EXPECT_TRUE(results[i].status().IsUnavailable()) << results[i].status().ToString();
    } else {
      ASSERT_TRUE(results[i].ok()) << results[i].status().ToString();
      EXPECT_TRUE(results[i]->str == records.values[i]);
    }
  }
  const RedisClusterStats after = client_->stats();
  EXPECT_GT(after.skipped_down + after.connect_failures,
            before.skipped_down + before.connect_failures);

  // Restarted on its port with its nodes.conf (its data is gone: no persistence): it serves
  // again once it rejoined and its back-off ran out. Bounded retries.
  ASSERT_TRUE(cluster_->Restart(victim).ok());
  Records victim_records;
  for (size_t i = 0; i < records.keys.size(); ++i) {
    if (on_victim[i]) victim_records.Add(records.keys[i], records.values[i]);
  }
  const bool served = Eventually(300, [&] {
    const auto set = client_->Run(victim_records.Commands("SET", true), In(seconds(5)));
    return std::all_of(set.begin(), set.end(), [](const auto& r) { return r.ok(); });
  });
  ASSERT_TRUE(served) << "the restarted master did not serve within 300 tries";
  EXPECT_EQ(CheckAll(*client_, records), 0u);
}

TEST_F(RedisClusterTest, PausedMasterTimesOutWithinTheDeadlineOthersSucceed) {
  ASSERT_NO_FATAL_FAILURE(
      StartAndConnect({}, [](RedisClusterOptions& o) { o.io_timeout = milliseconds(2000); }));
  const Records records = Numbered("pause", 200, 500);
  SetAll(*client_, records);
  const size_t victim = 2;
  const std::vector<bool> on_victim = OnNode(records, victim);
  ASSERT_TRUE(cluster_->Pause(victim).ok());

  auto check = [&](RedisCluster& c, milliseconds deadline, milliseconds io_timeout) {
    const Clock::time_point start = Clock::now();
    const auto results = c.Run(records.Commands("GET", false), start + deadline);
    // An upper bound where the point is not hanging: deadline + io_timeout, plus slack for a
    // loaded machine.
    EXPECT_LT(Clock::now() - start, deadline + io_timeout + seconds(2));
    size_t timed_out = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      if (on_victim[i]) {
        ASSERT_FALSE(results[i].ok());
        EXPECT_TRUE(results[i].status().IsTimedOut()) << results[i].status().ToString();
        ++timed_out;
      } else {
        ASSERT_TRUE(results[i].ok()) << results[i].status().ToString();
        EXPECT_TRUE(results[i]->str == records.values[i]);
      }
    }
    EXPECT_GT(timed_out, 0u);
  };
  // The deadline (1 s) comes before io_timeout (2 s).
  const uint64_t timeouts_before = client_->stats().timeouts;
  check(*client_, milliseconds(1000), milliseconds(2000));
  EXPECT_GT(client_->stats().timeouts, timeouts_before);
  // io_timeout (300 ms) comes before the deadline (20 s).
  RedisClusterOptions short_io = Options();
  short_io.io_timeout = milliseconds(300);
  short_io.seeds = cluster_->Seed(0);  // a seed that answers
  auto quick = NewClient(short_io);
  ASSERT_NE(quick, nullptr);
  check(*quick, milliseconds(20'000), milliseconds(300));

  ASSERT_TRUE(cluster_->Resume(victim).ok());
  const bool served = Eventually(150, [&] {
    const auto results = client_->Run(records.Commands("GET", false), In(seconds(5)));
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].ok() || results[i]->str != records.values[i]) return false;
    }
    return true;
  });
  EXPECT_TRUE(served) << "the resumed master did not serve within 150 tries";
}

TEST_F(RedisClusterTest, AuthWithPasswordAndWithAclUser) {
  RedisTestOptions options;
  options.requirepass = "default-s3cret";
  options.acl_user = "alice";
  options.acl_password = "alice-s3cret";
  ASSERT_NO_FATAL_FAILURE(StartServers(options));

  RedisClusterOptions with_password = Options();
  with_password.password = "default-s3cret";
  client_ = NewClient(with_password);
  ASSERT_NE(client_, nullptr);
  const Records records = Numbered("auth", 100, 64);
  SetAll(*client_, records);

  RedisClusterOptions as_alice = with_password;
  as_alice.user = "alice";
  as_alice.password = "alice-s3cret";
  auto alice = NewClient(as_alice);
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(CheckAll(*alice, records), 0u);

  as_alice.password = "not-alices-password";
  auto refused = RedisCluster::Connect(as_alice);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsFailedPrecondition()) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("'alice'"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("AUTH"), std::string::npos);
  EXPECT_EQ(refused.status().message().find("not-alices-password"), std::string::npos);

  RedisClusterOptions wrong_default = with_password;
  wrong_default.password = "not-the-default-password";
  auto wrong = RedisCluster::Connect(wrong_default);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("default user"), std::string::npos);
  EXPECT_EQ(wrong.status().message().find("not-the-default-password"), std::string::npos);

  auto anonymous = RedisCluster::Connect(Options());
  ASSERT_FALSE(anonymous.ok());
  EXPECT_TRUE(anonymous.status().IsFailedPrecondition());
  EXPECT_NE(anonymous.status().message().find("NOAUTH"), std::string::npos)
      << anonymous.status().message();
}

TEST_F(RedisClusterTest, StandaloneServerOwnsEverySlot) {
  RedisTestOptions options;
  options.cluster = false;
  options.masters = 1;
  ASSERT_NO_FATAL_FAILURE(StartAndConnect(options));
  ASSERT_EQ(client_->Masters().size(), 1u);
  EXPECT_EQ(client_->Masters()[0], cluster_->address(0));
  EXPECT_EQ(client_->MasterOf(0), cluster_->address(0));
  EXPECT_EQ(client_->MasterOf(kRedisSlotCount - 1), cluster_->address(0));
  EXPECT_EQ(client_->MasterOf(kRedisSlotCount), std::nullopt);  // no such slot

  Records records;
  for (size_t i = 0; i < 200; ++i) records.Add("solo:" + std::to_string(i), RandomBytes(i * 50, i));
  const RedisClusterStats before = client_->stats();
  SetAll(*client_, records);
  EXPECT_EQ(client_->stats().round_trips - before.round_trips, 1u);
  EXPECT_EQ(CheckAll(*client_, records), 0u);

  // One batch: a command without arguments, a server error, and good commands around them.
  const std::string_view lpush[] = {"LPUSH", records.keys[0], "x"};
  std::vector<RedisCommand> mixed(4);
  mixed[0].args = {"GET", records.keys[1]};
  mixed[0].key = records.keys[1];
  mixed[1].key = "nothing";
  mixed[2].args = {lpush[0], lpush[1], lpush[2]};
  mixed[2].key = records.keys[0];
  mixed[3].args = {"GET", records.keys[2]};
  mixed[3].key = records.keys[2];
  const RedisClusterStats mid = client_->stats();
  const auto results = client_->Run(mixed, In(seconds(10)));
  ASSERT_TRUE(results[0].ok());
  EXPECT_TRUE(results[0]->str == records.values[1]);
  EXPECT_TRUE(results[1].status().IsInvalidArgument()) << results[1].status().ToString();
  EXPECT_TRUE(results[2].status().IsFailedPrecondition()) << results[2].status().ToString();
  EXPECT_NE(results[2].status().message().find("WRONGTYPE"), std::string::npos);
  ASSERT_TRUE(results[3].ok());
  EXPECT_TRUE(results[3]->str == records.values[2]);
  const RedisClusterStats end = client_->stats();
  EXPECT_EQ(end.invalid_commands - mid.invalid_commands, 1u);
  EXPECT_EQ(end.server_errors - mid.server_errors, 1u);

  // A deadline already past: nothing is sent, every command times out.
  const auto late = client_->Run(records.Commands("GET", false), Clock::now() - milliseconds(1));
  for (const auto& r : late) EXPECT_TRUE(r.status().IsTimedOut()) << r.status().ToString();
  EXPECT_EQ(client_->stats().commands, end.commands);
  EXPECT_EQ(CheckAll(*client_, records), 0u);  // the connection is still good
}

TEST_F(RedisClusterTest, EightThreadsRunBatchesConcurrently) {
  constexpr uint32_t kConnections = 2;  // fewer than the threads: some wait for a connection
  ASSERT_NO_FATAL_FAILURE(
      StartAndConnect({}, [](RedisClusterOptions& o) { o.connections_per_node = kConnections; }));

  constexpr int kThreads = 8;
  constexpr int kRounds = 15;
  std::atomic<size_t> bad{0}, checked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        Records records;
        for (size_t i = 0; i < 40; ++i) {
          const uint64_t seed = (uint64_t(t) << 32) | (uint64_t(round) << 16) | i;
          records.Add("mt:" + std::to_string(t) + ":" + std::to_string(i),
                      RandomBytes((seed * 2654435761u) % 20000, seed));
        }
        const auto set = client_->Run(records.Commands("SET", true), In(seconds(30)));
        for (const auto& r : set) {
          if (!r.ok() || r->str != "OK") ++bad;
        }
        const auto get = client_->Run(records.Commands("GET", false), In(seconds(30)));
        for (size_t i = 0; i < get.size(); ++i) {
          if (!get[i].ok() || get[i]->str != records.values[i]) ++bad;
          ++checked;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(checked.load(), size_t{kThreads} * kRounds * 40);
  const RedisClusterStats stats = client_->stats();
  EXPECT_LE(stats.connects, 3u * kConnections);  // the pools' bound
  EXPECT_EQ(stats.timeouts + stats.broken_connections + stats.server_errors, 0u);
}

}  // namespace
}  // namespace cachepawl
