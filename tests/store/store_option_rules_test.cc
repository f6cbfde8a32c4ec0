// Each rule of store/store_option_rules.h is applied by both StoreOptions::Validate and the C
// ABI's setter of its field: a StoreOptions breaking it fails Validate, the setter given the
// same value fails at once, and both name the same field and value (for the store's own rules,
// in the same text).
#include "store/store_option_rules.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "capi/cachepawl.h"
#include "vocab/store_options.h"

namespace cachepawl {
namespace {

struct RuleCase {
  const char* setter;  // the C function, which prefixes its error with its name
  std::string needle;  // "<field>: <value>" as both errors name it
  bool same_text;      // Validate's message is the setter's, less the function's name
  std::function<void(StoreOptions&)> break_options;
  std::function<cachepawl_status(cachepawl_options*)> set_bad_value;
};

StoreOptions Good() {
  StoreOptions o;
  o.layout_name = "jamba-v0.1";
  o.host_bytes = 64ull << 20;
  return o;
}

StoreOptions GoodWithRemote() {
  StoreOptions o = Good();
  o.remote.seeds = "redis://127.0.0.1:6379";  // syntax only: Validate connects to nothing
  return o;
}

std::vector<RuleCase> Cases() {
  return {
      {"cachepawl_options_set_layout_preset", "StoreOptions.page_size_tokens: 0", true,
       [](StoreOptions& o) { o.page_size_tokens = 0; },
       [](cachepawl_options* h) {
         return cachepawl_options_set_layout_preset(h, "jamba-v0.1", 0);
       }},
      {"cachepawl_options_set_host_bytes", "StoreOptions.host_bytes: 0", true,
       [](StoreOptions& o) { o.host_bytes = 0; },
       [](cachepawl_options* h) { return cachepawl_options_set_host_bytes(h, 0); }},
      {"cachepawl_options_set_host_bytes", "StoreOptions.host_bytes: 1000", true,
       [](StoreOptions& o) { o.host_bytes = 1000; },
       [](cachepawl_options* h) { return cachepawl_options_set_host_bytes(h, 1000); }},
      {"cachepawl_options_set_save_chunk_entries", "StoreOptions.save_chunk_entries: 0", true,
       [](StoreOptions& o) { o.save_chunk_entries = 0; },
       [](cachepawl_options* h) { return cachepawl_options_set_save_chunk_entries(h, 0); }},
      {"cachepawl_options_set_max_prompt_tokens", "StoreOptions.max_prompt_tokens: 0", true,
       [](StoreOptions& o) { o.max_prompt_tokens = 0; },
       [](cachepawl_options* h) { return cachepawl_options_set_max_prompt_tokens(h, 0); }},
      {"cachepawl_options_set_disk_queue_depth", "StoreOptions.disk_queue_depth: 0", true,
       [](StoreOptions& o) {
         o.disk_bytes = 1 << 30;
         o.disk_dir = "/tmp/unused";
         o.disk_queue_depth = 0;
       },
       [](cachepawl_options* h) { return cachepawl_options_set_disk_queue_depth(h, 0); }},
      {"cachepawl_options_set_disk_queue_depth", "StoreOptions.disk_queue_depth: 4097", true,
       [](StoreOptions& o) {
         o.disk_bytes = 1 << 30;
         o.disk_dir = "/tmp/unused";
         o.disk_queue_depth = 4097;
       },
       [](cachepawl_options* h) { return cachepawl_options_set_disk_queue_depth(h, 4097); }},
      {"cachepawl_options_set_write_policy", "StoreOptions.write_policy: 3", true,
       [](StoreOptions& o) { o.write_policy = static_cast<WritePolicy>(3); },
       [](cachepawl_options* h) { return cachepawl_options_set_write_policy(h, 3); }},
      {"cachepawl_options_set_eviction_policy", "StoreOptions.eviction_policy: 2", true,
       [](StoreOptions& o) { o.eviction_policy = static_cast<EvictionPolicy>(2); },
       [](cachepawl_options* h) { return cachepawl_options_set_eviction_policy(h, 2); }},
      {"cachepawl_options_set_selective_min_hits", "StoreOptions.selective_min_hits: 0", true,
       [](StoreOptions& o) {
         o.write_policy = WritePolicy::kWriteThroughSelective;
         o.selective_min_hits = 0;
       },
       [](cachepawl_options* h) { return cachepawl_options_set_selective_min_hits(h, 0); }},
      {"cachepawl_options_set_cuda_device", "StoreOptions.cuda_device: -2", true,
       [](StoreOptions& o) { o.cuda_device = -2; },
       [](cachepawl_options* h) { return cachepawl_options_set_cuda_device(h, -2); }},
      {"cachepawl_options_set_stream_priorities", "StoreOptions.load_stream_priority: -1001", true,
       [](StoreOptions& o) { o.load_stream_priority = -1001; },
       [](cachepawl_options* h) { return cachepawl_options_set_stream_priorities(h, -1001, 0); }},
      {"cachepawl_options_set_stream_priorities", "StoreOptions.write_stream_priority: 1001", true,
       [](StoreOptions& o) { o.write_stream_priority = 1001; },
       [](cachepawl_options* h) { return cachepawl_options_set_stream_priorities(h, 0, 1001); }},
      {"cachepawl_options_set_staging_bytes", "StoreOptions.staging_bytes: 4096", true,
       [](StoreOptions& o) { o.staging_bytes = 4096; },
       [](cachepawl_options* h) { return cachepawl_options_set_staging_bytes(h, 4096); }},
      {"cachepawl_options_set_polling", "StoreOptions.completion_spin_us: 1000001", true,
       [](StoreOptions& o) { o.completion_spin_us = 1000001; },
       [](cachepawl_options* h) { return cachepawl_options_set_polling(h, 1000001, 0, 1); }},
      {"cachepawl_options_set_polling", "StoreOptions.wait_spin_us: 4294967295", true,
       [](StoreOptions& o) { o.wait_spin_us = 4294967295u; },
       [](cachepawl_options* h) { return cachepawl_options_set_polling(h, 0, 4294967295u, 0); }},
      {"cachepawl_options_set_remote_write_policy", "StoreOptions.remote.write_policy: 4", true,
       [](StoreOptions& o) { o.remote.write_policy = static_cast<RemoteWritePolicy>(4); },
       [](cachepawl_options* h) { return cachepawl_options_set_remote_write_policy(h, 4); }},
      {"cachepawl_options_set_remote_selective_min_hits",
       "StoreOptions.remote.selective_min_hits: 0", true,
       [](StoreOptions& o) {
         o.remote.write_policy = RemoteWritePolicy::kSelective;
         o.remote.selective_min_hits = 0;
       },
       [](cachepawl_options* h) { return cachepawl_options_set_remote_selective_min_hits(h, 0); }},
      {"cachepawl_options_set_remote_lookup_deadline_ms",
       "StoreOptions.remote.lookup_deadline_ms: 0", true,
       [](StoreOptions& o) { o.remote.lookup_deadline_ms = 0; },
       [](cachepawl_options* h) { return cachepawl_options_set_remote_lookup_deadline_ms(h, 0); }},
      {"cachepawl_options_set_remote_lookup_deadline_ms",
       "StoreOptions.remote.lookup_deadline_ms: 10001", true,
       [](StoreOptions& o) { o.remote.lookup_deadline_ms = 10001; },
       [](cachepawl_options* h) {
         return cachepawl_options_set_remote_lookup_deadline_ms(h, 10001);
       }},
      {"cachepawl_options_set_remote_max_queued_writes", "StoreOptions.remote.max_queued_writes: 0",
       true, [](StoreOptions& o) { o.remote.max_queued_writes = 0; },
       [](cachepawl_options* h) { return cachepawl_options_set_remote_max_queued_writes(h, 0); }},
      // The remote tier's own rules (tiers/remote_tier.h, redis/redis_cluster.h): Validate names
      // them in the tier's words, after "StoreOptions: ".
      {"cachepawl_options_set_remote_auth", "user: 'tenant' (given without a password", false,
       [](StoreOptions& o) { o.remote.user = "tenant"; },
       [](cachepawl_options* h) { return cachepawl_options_set_remote_auth(h, "tenant", ""); }},
      {"cachepawl_options_set_remote_key_prefix", "remote.key_prefix 'a b'", false,
       [](StoreOptions& o) { o.remote.key_prefix = "a b"; },
       [](cachepawl_options* h) { return cachepawl_options_set_remote_key_prefix(h, "a b"); }},
      {"cachepawl_options_set_remote_chunk_bytes", "remote.chunk_bytes 1000", false,
       [](StoreOptions& o) { o.remote.chunk_bytes = 1000; },
       [](cachepawl_options* h) { return cachepawl_options_set_remote_chunk_bytes(h, 1000); }},
      {"cachepawl_options_set_remote_deadline_ms", "remote.deadline 0 ms", false,
       [](StoreOptions& o) { o.remote.deadline_ms = 0; },
       [](cachepawl_options* h) { return cachepawl_options_set_remote_deadline_ms(h, 0); }},
  };
}

TEST(StoreOptionRulesTest, ValidateAndTheSetterRefuseTheSameValueNamingTheSameField) {
  ASSERT_TRUE(GoodWithRemote().Validate().ok()) << GoodWithRemote().Validate().ToString();
  for (const RuleCase& c : Cases()) {
    SCOPED_TRACE(c.needle);
    StoreOptions o = GoodWithRemote();
    c.break_options(o);
    const Status validated = o.Validate();
    EXPECT_TRUE(validated.IsInvalidArgument()) << validated.ToString();
    EXPECT_NE(validated.message().find(c.needle), std::string::npos) << validated.message();

    cachepawl_options* handle = nullptr;
    ASSERT_EQ(cachepawl_options_new(&handle), CACHEPAWL_OK);
    EXPECT_EQ(c.set_bad_value(handle), CACHEPAWL_INVALID_ARGUMENT);
    const std::string set_error = cachepawl_last_error();
    cachepawl_options_free(handle);
    EXPECT_NE(set_error.find(c.needle), std::string::npos) << set_error;
    if (c.same_text) {
      EXPECT_EQ(set_error, std::string(c.setter) + ": " + validated.message());
    }
  }
}

TEST(StoreOptionRulesTest, EachRuleAcceptsTheEdgesOfItsRange) {
  EXPECT_TRUE(CheckDiskQueueDepth(1).ok());
  EXPECT_TRUE(CheckDiskQueueDepth(4096).ok());
  EXPECT_TRUE(CheckHostBytes(4096).ok());
  EXPECT_TRUE(CheckCudaDevice(-1).ok());
  EXPECT_TRUE(CheckStreamPriority("load_stream_priority", -1000).ok());
  EXPECT_TRUE(CheckStreamPriority("write_stream_priority", 1000).ok());
  EXPECT_TRUE(CheckStagingBytes(1ull << 20).ok());
  EXPECT_TRUE(CheckWritePolicy(2).ok());
  EXPECT_FALSE(CheckWritePolicy(-1).ok());
  EXPECT_TRUE(CheckEvictionPolicy(0).ok());
  EXPECT_TRUE(CheckRemoteWritePolicy(3).ok());
  EXPECT_FALSE(CheckRemoteWritePolicy(-1).ok());
  EXPECT_TRUE(CheckRemoteLookupDeadlineMs(1).ok());
  EXPECT_TRUE(CheckRemoteLookupDeadlineMs(10000).ok());
}

}  // namespace
}  // namespace cachepawl
