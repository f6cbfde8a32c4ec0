// RemoteTier against a real 3-master Redis Cluster on loopback (tests/common/redis_test_cluster.h):
// records of every kind round-trip byte for byte; a corrupted, truncated, half-present or
// misplaced value is a miss and never data; layouts sharing a cluster never see each other's
// records; a killed master costs its records and nothing else.
#include "tiers/remote_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/common/redis_test_cluster.h"
#include "tests/tiers/disk_test_util.h"
#include "tiers/host_memory.h"

namespace cachepawl {
namespace {

using testing::FillPayloadForKey;
using testing::TestKey;
using testing::TestParent;

constexpr std::byte kPoison{0xA5};

// Records of several parts with 64 KiB chunks (a 4 KiB header block before each payload): KV
// 128 KiB (3 parts, the last 4 KiB), windowed KV 64 KiB (2), a state of 256.5 KiB (5).
ModelLayout RemoteTestLayout(const std::string& model = "test/remote-hybrid") {
  ModelLayout l;
  l.model = model;
  l.num_layers = 3;
  l.page_size_tokens = 16;
  l.attention_layers.push_back({0, 16, 128, DType::kBf16, 0});
  l.attention_layers.push_back({1, 8, 128, DType::kBf16, 64});
  l.ssm_layers.push_back({2, "mamba2", {64, 4}, DType::kBf16, {8, 64, 128}, DType::kFp32});
  return l;
}

class RemoteTierTest : public testing::RedisClusterFixture {
 protected:
  void SetUp() override {
    RedisClusterFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    layout_ = RemoteTestLayout();
    options_.redis.seeds = cluster_->Seeds();
    options_.chunk_bytes = 64 << 10;
    options_.deadline = std::chrono::milliseconds(5000);
  }

  std::unique_ptr<RemoteTier> Open(const ModelLayout& layout) {
    auto t = RemoteTier::Open(options_, layout);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  std::vector<std::byte> Payload(const DiskKey& key) const {
    std::vector<std::byte> p(layout_.RecordBytes(key.kind));
    FillPayloadForKey(key, p);
    return p;
  }

  // Puts records 0..n-1 of `kind`; the result of each.
  std::vector<Status> PutRecords(RemoteTier& t, Kind kind, uint64_t n) {
    std::vector<std::vector<std::byte>> payloads;
    std::vector<RemotePut> puts;
    for (uint64_t i = 0; i < n; ++i) payloads.push_back(Payload(TestKey(kind, i)));
    for (uint64_t i = 0; i < n; ++i) {
      puts.push_back({TestKey(kind, i), TestParent(kind, i), payloads[i]});
    }
    return t.Put(puts);
  }
  // Puts records 0..n-1 of `kind`; every one must succeed.
  void PutAll(RemoteTier& t, Kind kind, uint64_t n) {
    for (const Status& s : PutRecords(t, kind, n)) ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Gets `key` into a poisoned slot-sized buffer; on OK checks every payload byte.
  Status GetChecked(RemoteTier& t, const DiskKey& key) {
    std::vector<std::byte> record(RecordSlotBytes(layout_, key.kind), kPoison);
    RemoteGet g{key, record};
    Status s = t.Get(std::span<const RemoteGet>(&g, 1)).front();
    if (s.ok()) {
      const std::vector<std::byte> want = Payload(key);
      EXPECT_EQ(std::memcmp(record.data() + kRecordHeaderBytes, want.data(), want.size()), 0)
          << key.ToString();
    }
    return s;
  }

  // A raw client on the same cluster, to damage values behind the tier's back.
  std::unique_ptr<RedisCluster> Raw() {
    RedisClusterOptions o;
    o.seeds = cluster_->Seeds();
    auto c = RedisCluster::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // A tier holding records 0..n-1 of `kind`, and a raw client to damage them with; both null
  // when either failed (the test has failed then).
  struct DamageableTier {
    std::unique_ptr<RemoteTier> tier;
    std::unique_ptr<RedisCluster> raw;
  };
  DamageableTier OpenWithRecords(Kind kind, uint64_t n) {
    DamageableTier d{Open(layout_), Raw()};
    if (!d.tier || !d.raw) return {};
    PutAll(*d.tier, kind, n);
    if (HasFailure()) return {};
    return d;
  }
  StatusOr<RedisReply> RawRun(RedisCluster& c, std::vector<std::string_view> args) {
    RedisCommand cmd{args, args.at(1)};
    auto r = c.Run(std::span<const RedisCommand>(&cmd, 1),
                   std::chrono::steady_clock::now() + std::chrono::seconds(5));
    return std::move(r.front());
  }
  std::string RawGet(RedisCluster& c, const std::string& key) {
    auto r = RawRun(c, {"GET", key});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->str : std::string();
  }

  ModelLayout layout_;
  RemoteTierOptions options_;
};

TEST_F(RemoteTierTest, EveryKindRoundTripsByteForByteInSeveralParts) {
  auto t = Open(layout_);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Parts(Kind::kKV), 3u);
  EXPECT_EQ(t->Parts(Kind::kWindowKV), 2u);
  EXPECT_EQ(t->Parts(Kind::kMamba), 5u);
  for (Kind kind : kAllKinds) PutAll(*t, kind, 40);
  for (Kind kind : kAllKinds) {
    for (uint64_t i = 0; i < 40; ++i) {
      Status s = GetChecked(*t, TestKey(kind, i));
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
  }
  // A batch of everything at once: pipelined per node, not a round trip per record.
  std::vector<std::vector<std::byte>> records;
  std::vector<RemoteGet> gets;
  for (Kind kind : kAllKinds) {
    for (uint64_t i = 0; i < 40; ++i) {
      records.emplace_back(RecordSlotBytes(layout_, kind), kPoison);
    }
  }
  size_t r = 0;
  for (Kind kind : kAllKinds) {
    for (uint64_t i = 0; i < 40; ++i, ++r) gets.push_back({TestKey(kind, i), records[r]});
  }
  const uint64_t trips_before = t->redis_stats().round_trips;
  auto results = t->Get(gets);
  EXPECT_LE(t->redis_stats().round_trips - trips_before, 3u);  // one per master
  for (size_t i = 0; i < gets.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].ToString();
    const std::vector<std::byte> want = Payload(gets[i].key);
    EXPECT_EQ(std::memcmp(records[i].data() + kRecordHeaderBytes, want.data(), want.size()), 0);
  }
  const RemoteTierStats s = t->stats();
  EXPECT_EQ(s.puts, 120u);
  EXPECT_EQ(s.put_failures, 0u);
  EXPECT_EQ(s.hits, 240u);
  EXPECT_EQ(s.misses + s.missing_parts + s.wrong_size + s.checksum_failures, 0u);
}

TEST_F(RemoteTierTest, ExistsAnswersForAWholeChainInOneBatch) {
  auto t = Open(layout_);
  ASSERT_NE(t, nullptr);
  PutAll(*t, Kind::kKV, 10);
  PutAll(*t, Kind::kMamba, 3);
  std::vector<DiskKey> keys;
  for (uint64_t i = 0; i < 20; ++i) keys.push_back(TestKey(Kind::kKV, i));
  for (uint64_t i = 0; i < 6; ++i) keys.push_back(TestKey(Kind::kMamba, i));
  const std::vector<bool> there = t->Exists(keys);
  ASSERT_EQ(there.size(), keys.size());
  for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(there[i], i < 10) << i;
  for (uint64_t i = 0; i < 6; ++i) EXPECT_EQ(there[20 + i], i < 3) << i;
  // A state is found only at its exact depth.
  DiskKey other_depth = TestKey(Kind::kMamba, 0);
  other_depth.depth += 16;
  EXPECT_FALSE(t->Exists(std::span<const DiskKey>(&other_depth, 1)).front());
  EXPECT_TRUE(GetChecked(*t, other_depth).IsNotFound());
}

TEST_F(RemoteTierTest, AFlippedByteIsAMissAndTheRecordIsDeleted) {
  auto [t, raw] = OpenWithRecords(Kind::kMamba, 2);
  ASSERT_TRUE(t && raw);
  const DiskKey key = TestKey(Kind::kMamba, 1);
  // Part 3 written back with one byte flipped.
  const std::string part = t->PartKey(key, 3);
  std::string bytes = RawGet(*raw, part);
  ASSERT_EQ(bytes.size(), 65536u);
  bytes[17] ^= 1;
  ASSERT_TRUE(RawRun(*raw, {"SET", part, bytes}).ok());
  Status s = GetChecked(*t, key);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_EQ(t->stats().checksum_failures, 1u);
  EXPECT_EQ(t->stats().deleted_bad, 1u);
  EXPECT_FALSE(t->Exists(std::span<const DiskKey>(&key, 1)).front());
  EXPECT_TRUE(GetChecked(*t, key).IsNotFound());
  EXPECT_TRUE(GetChecked(*t, TestKey(Kind::kMamba, 0)).ok());  // its neighbour is intact
}

TEST_F(RemoteTierTest, AMissingOrTruncatedPartIsAMissNeverData) {
  auto [t, raw] = OpenWithRecords(Kind::kKV, 3);
  ASSERT_TRUE(t && raw);
  const DiskKey gone = TestKey(Kind::kKV, 0), short_part = TestKey(Kind::kKV, 1);
  ASSERT_TRUE(RawRun(*raw, {"DEL", t->PartKey(gone, 1)}).ok());
  ASSERT_TRUE(RawRun(*raw, {"SET", t->PartKey(short_part, 2), "short"}).ok());
  // Exists looks at the first and last parts only: the truncated record still looks present.
  EXPECT_TRUE(t->Exists(std::span<const DiskKey>(&short_part, 1)).front());
  Status s = GetChecked(*t, gone);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.ToString().find("part 1 is missing"), std::string::npos) << s.ToString();
  s = GetChecked(*t, short_part);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.ToString().find("part 2 has 5 bytes (expected 4096)"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(t->stats().missing_parts, 1u);
  EXPECT_EQ(t->stats().wrong_size, 1u);
  EXPECT_EQ(t->stats().deleted_bad, 2u);  // neither could ever be read: both deleted
  EXPECT_FALSE(t->Exists(std::span<const DiskKey>(&short_part, 1)).front());
  EXPECT_TRUE(GetChecked(*t, TestKey(Kind::kKV, 2)).ok());
  // A record whose part 0 is gone is absent: a plain miss, nothing deleted.
  const DiskKey headless = TestKey(Kind::kKV, 2);
  ASSERT_TRUE(RawRun(*raw, {"DEL", t->PartKey(headless, 0)}).ok());
  EXPECT_TRUE(GetChecked(*t, headless).IsNotFound());
  EXPECT_EQ(t->stats().misses, 1u);
  EXPECT_EQ(t->stats().deleted_bad, 2u);
}

TEST_F(RemoteTierTest, ARecordCopiedUnderAnotherKeyFailsItsHeader) {
  auto [t, raw] = OpenWithRecords(Kind::kKV, 1);
  ASSERT_TRUE(t && raw);
  // Record 0's header block stored as record 5's: every part of 5 copied from 0.
  const DiskKey from = TestKey(Kind::kKV, 0), to = TestKey(Kind::kKV, 5);
  for (uint32_t part = 0; part < t->Parts(Kind::kKV); ++part) {
    const std::string bytes = RawGet(*raw, t->PartKey(from, part));
    ASSERT_FALSE(bytes.empty());
    ASSERT_TRUE(RawRun(*raw, {"SET", t->PartKey(to, part), bytes}).ok());
  }
  Status s = GetChecked(*t, to);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_EQ(t->stats().header_mismatches, 1u);
}

TEST_F(RemoteTierTest, TwoLayoutsOnOneClusterNeverSeeEachOther) {
  auto a = Open(layout_);
  auto b = Open(RemoteTestLayout("test/another-model"));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  PutAll(*a, Kind::kKV, 5);
  const DiskKey key = TestKey(Kind::kKV, 2);
  EXPECT_TRUE(a->Exists(std::span<const DiskKey>(&key, 1)).front());
  EXPECT_FALSE(b->Exists(std::span<const DiskKey>(&key, 1)).front());
  EXPECT_NE(a->PartKey(key, 0), b->PartKey(key, 0));
  std::vector<std::byte> record(RecordSlotBytes(layout_, Kind::kKV), kPoison);
  RemoteGet g{key, record};
  EXPECT_TRUE(b->Get(std::span<const RemoteGet>(&g, 1)).front().IsNotFound());
}

TEST_F(RemoteTierTest, AKilledMasterCostsItsRecordsAndNothingElse) {
  options_.redis.io_timeout = std::chrono::milliseconds(500);
  options_.redis.down_backoff = std::chrono::milliseconds(200);
  auto t = Open(layout_);
  ASSERT_NE(t, nullptr);
  PutAll(*t, Kind::kKV, 60);
  ASSERT_TRUE(cluster_->Kill(0).ok());
  size_t ok = 0, failed = 0;
  for (uint64_t i = 0; i < 60; ++i) {
    Status s = GetChecked(*t, TestKey(Kind::kKV, i));  // bytes checked on every OK
    if (s.ok()) {
      ++ok;
    } else {
      ++failed;
      EXPECT_FALSE(s.IsCorruption()) << s.ToString();
    }
  }
  EXPECT_GT(ok, 0u);
  EXPECT_GT(failed, 0u);  // 60 keys over 3 masters: some were on the dead one
  EXPECT_GT(t->stats().transport_errors, 0u);
  ASSERT_TRUE(cluster_->Restart(0).ok());  // no persistence: it comes back empty
  ASSERT_TRUE(cluster_->WaitClusterOk().ok());
  // The client skips the node for its back-off (at most 8 x 200 ms) after the failures above:
  // write again until every record is stored (bounded).
  bool stored = false;
  for (int attempt = 0; attempt < 100 && !stored; ++attempt) {
    const auto results = PutRecords(*t, Kind::kKV, 60);
    stored = std::all_of(results.begin(), results.end(), [](const Status& s) { return s.ok(); });
    if (!stored) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(stored);
  for (uint64_t i = 0; i < 60; ++i) EXPECT_TRUE(GetChecked(*t, TestKey(Kind::kKV, i)).ok()) << i;
}

TEST_F(RemoteTierTest, TtlPutsAnExpiryOnEveryPart) {
  options_.ttl_seconds = 600;
  auto [t, raw] = OpenWithRecords(Kind::kMamba, 1);
  ASSERT_TRUE(t && raw);
  const DiskKey key = TestKey(Kind::kMamba, 0);
  for (uint32_t part = 0; part < t->Parts(Kind::kMamba); ++part) {
    auto ttl = RawRun(*raw, {"TTL", t->PartKey(key, part)});
    ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
    EXPECT_GT(ttl->integer, 500) << part;
    EXPECT_LE(ttl->integer, 600) << part;
  }
  EXPECT_TRUE(GetChecked(*t, key).ok());
}

TEST_F(RemoteTierTest, AWrongPayloadLengthOrRecordSpanIsRefusedByName) {
  auto t = Open(layout_);
  ASSERT_NE(t, nullptr);
  const DiskKey key = TestKey(Kind::kKV, 0);
  std::vector<std::byte> short_payload(100);
  RemotePut p{key, TestParent(Kind::kKV, 0), short_payload};
  Status s = t->Put(std::span<const RemotePut>(&p, 1)).front();
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("payload of 100 bytes"), std::string::npos) << s.ToString();
  std::vector<std::byte> small(4096);
  RemoteGet g{key, small};
  s = t->Get(std::span<const RemoteGet>(&g, 1)).front();
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("record span of 4096 bytes"), std::string::npos) << s.ToString();
  EXPECT_EQ(t->stats().puts + t->stats().gets, 0u);
}

TEST(RemoteTierOptionsTest, BadOptionsNameTheFieldAndValue) {
  RemoteTierOptions o;
  o.redis.seeds = "redis://127.0.0.1:6379";
  EXPECT_TRUE(o.Validate().ok());
  o.key_prefix = "has space";
  EXPECT_NE(o.Validate().ToString().find("remote.key_prefix 'has space'"), std::string::npos);
  o.key_prefix = "ok";
  o.chunk_bytes = 1000;
  EXPECT_NE(o.Validate().ToString().find("remote.chunk_bytes 1000"), std::string::npos);
  o.chunk_bytes = 1 << 20;
  o.deadline = std::chrono::milliseconds(0);
  EXPECT_NE(o.Validate().ToString().find("remote.deadline 0 ms"), std::string::npos);
  o.deadline = std::chrono::milliseconds(100);
  o.redis.seeds = "http://x";
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  EXPECT_NE(o.Validate().ToString().find("http://x"), std::string::npos);
}

TEST(RemoteTierOptionsTest, NoServerYetOpensAndEveryCallMissesNamingTheSeed) {
  RemoteTierOptions o;
  o.redis.seeds = "redis://127.0.0.1:1";  // nothing listens on port 1
  o.redis.connect_timeout = std::chrono::milliseconds(200);
  auto t = RemoteTier::Open(o, RemoteTestLayout());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const DiskKey key = testing::TestKey(Kind::kKV, 0);
  EXPECT_FALSE((*t)->Exists(std::span<const DiskKey>(&key, 1)).front());
  std::vector<std::byte> payload(RemoteTestLayout().RecordBytes(Kind::kKV));
  RemotePut p{key, testing::TestParent(Kind::kKV, 0), payload};
  const Status s = (*t)->Put(std::span<const RemotePut>(&p, 1)).front();
  EXPECT_TRUE(s.IsUnavailable()) << s.ToString();
  EXPECT_GT((*t)->stats().transport_errors, 0u);
}

}  // namespace
}  // namespace cachepawl
