/* The C ABI test, part 3: bad arguments to store, match, lock, fence and prefetch calls
 * (null handles, null pointers with lengths, wrong sizes and kinds, bad flags), the per-store
 * and per-thread error messages, and a full store-owned pool (NoSpace). */
#define _XOPEN_SOURCE 700

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi/cachepawl.h"
#include "tests/capi/c_test_util.h"

static void null_store_calls(void) {
  uint32_t tokens[4] = {1, 2, 3, 4};
  uint8_t hash[CACHEPAWL_HASH_BYTES] = {1};
  uint64_t u64 = 0;
  size_t count = 0;
  int32_t flag = 0;
  char* text = NULL;
  cachepawl_layout* l = NULL;
  cachepawl_match* m = NULL;
  cachepawl_lock* lk = NULL;
  cachepawl_fence* f = NULL;
  cachepawl_prefetch* p = NULL;

  NULL_STORE(cachepawl_store_close(NULL));
  cachepawl_store_free(NULL);
  NULL_STORE(cachepawl_store_layout(NULL, &l));
  NULL_STORE(cachepawl_store_gpu_mode(NULL, &flag));
  text = (char*)&text; /* results are NULL after a failure */
  NULL_STORE(cachepawl_store_stats_json(NULL, &text));
  CHECK(text == NULL);
  NULL_STORE(cachepawl_store_stats_prometheus(NULL, &text));
  NULL_STORE(cachepawl_store_register_device_pool(NULL, NULL));
  NULL_STORE(cachepawl_store_allocate_device_slot(NULL, CACHEPAWL_KIND_KV, &u64));
  NULL_STORE(cachepawl_store_free_device_slot(NULL, CACHEPAWL_KIND_KV, 0));
  NULL_STORE(cachepawl_store_write_device_record(NULL, CACHEPAWL_KIND_KV, 0, NULL, 0));
  NULL_STORE(cachepawl_store_read_device_record(NULL, CACHEPAWL_KIND_KV, 0, NULL, 0));
  NULL_STORE(cachepawl_store_hash_tokens(NULL, NULL, 0, tokens, 4, NULL, 0, &count));
  m = (cachepawl_match*)&m;
  NULL_STORE(cachepawl_store_lookup(NULL, NULL, 0, tokens, 4, &m));
  CHECK(m == NULL);
  NULL_STORE(cachepawl_store_lookup_hashes(NULL, hash, 1, &m));
  NULL_STORE(cachepawl_store_lock(NULL, m, 0, &lk));
  NULL_STORE(cachepawl_store_unlock(NULL, lk));
  NULL_STORE(cachepawl_store_load(NULL, m, NULL, 0, CACHEPAWL_NO_SLOT, 0, 0, &f));
  NULL_STORE(cachepawl_store_save(NULL, NULL, 0, tokens, 4, 0, NULL, 0, CACHEPAWL_NO_SLOT, 0, &f));
  NULL_STORE(cachepawl_store_save_hashes(NULL, hash, 1, 0, NULL, 0, CACHEPAWL_NO_SLOT, 0, &f));
  NULL_STORE(cachepawl_store_prefetch(NULL, m, &p));

  /* Match, lock, fence and prefetch calls on null handles. */
  EXPECT_ERR(cachepawl_match_num_pages(NULL, &count), CACHEPAWL_INVALID_ARGUMENT, "match: null");
  EXPECT_ERR(cachepawl_match_page_size_tokens(NULL, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "match: null");
  EXPECT_ERR(cachepawl_match_reusable_pages(NULL, &count), CACHEPAWL_INVALID_ARGUMENT,
             "match: null");
  EXPECT_ERR(cachepawl_match_kv_only_pages(NULL, &count), CACHEPAWL_INVALID_ARGUMENT,
             "match: null");
  EXPECT_ERR(cachepawl_match_checkpoint_hint_pages(NULL, &count), CACHEPAWL_INVALID_ARGUMENT,
             "match: null");
  EXPECT_ERR(cachepawl_match_page_tiers(NULL, NULL, 0, &count), CACHEPAWL_INVALID_ARGUMENT,
             "match: null");
  EXPECT_ERR(cachepawl_match_state_tier(NULL, NULL), CACHEPAWL_INVALID_ARGUMENT, "match: null");
  EXPECT_ERR(cachepawl_match_hashes(NULL, NULL, 0, &count), CACHEPAWL_INVALID_ARGUMENT,
             "match: null");
  EXPECT_ERR(cachepawl_lock_pages(NULL, &count), CACHEPAWL_INVALID_ARGUMENT, "lock: null");
  EXPECT_ERR(cachepawl_lock_has_state(NULL, &flag), CACHEPAWL_INVALID_ARGUMENT, "lock: null");
  EXPECT_ERR(cachepawl_fence_ready(NULL, &flag), CACHEPAWL_INVALID_ARGUMENT, "fence: null");
  EXPECT_ERR(cachepawl_fence_wait(NULL, 0), CACHEPAWL_INVALID_ARGUMENT, "fence: null");
  EXPECT_ERR(cachepawl_fence_result(NULL, NULL, NULL), CACHEPAWL_INVALID_ARGUMENT, "fence: null");
  EXPECT_ERR(cachepawl_fence_num_layers(NULL, &count), CACHEPAWL_INVALID_ARGUMENT, "fence: null");
  EXPECT_ERR(cachepawl_fence_layer_ready(NULL, 0, &flag), CACHEPAWL_INVALID_ARGUMENT,
             "fence: null");
  EXPECT_ERR(cachepawl_fence_wait_layer(NULL, 0, 0), CACHEPAWL_INVALID_ARGUMENT, "fence: null");
  EXPECT_ERR(cachepawl_fence_stream_wait(NULL, NULL), CACHEPAWL_INVALID_ARGUMENT, "fence: null");
  EXPECT_ERR(cachepawl_fence_on_complete(NULL, NULL, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "fence: null");
  EXPECT_ERR(cachepawl_prefetch_fence(NULL, &f), CACHEPAWL_INVALID_ARGUMENT, "prefetch: null");
  EXPECT_ERR(cachepawl_prefetch_cancel(NULL), CACHEPAWL_INVALID_ARGUMENT, "prefetch: null");
}

static void null_outputs(cachepawl_store* s, const cachepawl_match* m) {
  uint32_t tokens[4] = {1, 2, 3, 4};
  const uint64_t page = 0;
  size_t count = 0;
  cachepawl_prefetch* p = NULL;

  EXPECT_ERR(cachepawl_store_layout(s, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_gpu_mode(s, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_stats_json(s, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_stats_prometheus(s, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, NULL),
             CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_hash_tokens(s, NULL, 0, tokens, 4, NULL, 0, NULL),
             CACHEPAWL_INVALID_ARGUMENT, "count: null");
  EXPECT_ERR(cachepawl_store_lookup(s, NULL, 0, tokens, 4, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "out: null");
  EXPECT_ERR(cachepawl_store_lookup_hashes(s, NULL, 0, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "out: null");
  EXPECT_ERR(cachepawl_store_lock(s, m, 0, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_load(s, m, &page, 1, CACHEPAWL_NO_SLOT, 0, 0, NULL),
             CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_save(s, NULL, 0, tokens, 4, 0, &page, 1, CACHEPAWL_NO_SLOT, 0, NULL),
             CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_save_hashes(s, NULL, 0, 0, NULL, 0, CACHEPAWL_NO_SLOT, 0, NULL),
             CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_prefetch(s, m, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_OK(cachepawl_store_prefetch(s, m, &p)); /* nothing on disk: fired at once */
  EXPECT_ERR(cachepawl_prefetch_fence(p, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  cachepawl_prefetch_free(p);
  EXPECT_ERR(cachepawl_match_num_pages(m, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_match_page_tiers(m, NULL, 0, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "count: null");
  EXPECT_ERR(cachepawl_match_hashes(m, NULL, 4, &count), CACHEPAWL_INVALID_ARGUMENT,
             "out: null with capacity 4");
}

static void bad_values(cachepawl_store* s, const cachepawl_match* m) {
  uint32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t record[TINY_KV_RECORD];
  uint64_t slot = 0, state = 0, pages[2] = {0, 0};
  size_t count = 0;
  cachepawl_match* mm = NULL;
  cachepawl_fence* f = (cachepawl_fence*)1;
  cachepawl_prefetch* p = NULL;
  int32_t flag = 0;
  char* msg = NULL;

  EXPECT_ERR(cachepawl_store_hash_tokens(s, NULL, 3, tokens, 8, NULL, 0, &count),
             CACHEPAWL_INVALID_ARGUMENT, "ns: null with ns_len 3");
  EXPECT_ERR(cachepawl_store_hash_tokens(s, "a", 1, NULL, 5, NULL, 0, &count),
             CACHEPAWL_INVALID_ARGUMENT, "tokens: null with num_tokens 5");
  EXPECT_ERR(cachepawl_store_hash_tokens(s, "a", 1, tokens, 8, NULL, 2, &count),
             CACHEPAWL_INVALID_ARGUMENT, "out: null with capacity 2");
  EXPECT_ERR(cachepawl_store_lookup(s, "a", 1, NULL, 2, &mm), CACHEPAWL_INVALID_ARGUMENT,
             "tokens: null with num_tokens 2");
  EXPECT_ERR(cachepawl_store_lookup(s, NULL, 4, tokens, 2, &mm), CACHEPAWL_INVALID_ARGUMENT,
             "ns: null with ns_len 4");
  EXPECT_ERR(cachepawl_store_lookup_hashes(s, NULL, 2, &mm), CACHEPAWL_INVALID_ARGUMENT,
             "hashes: null with num_hashes 2");
  CHECK(mm == NULL);
  EXPECT_ERR(cachepawl_store_lock(s, NULL, 0, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_store_unlock(s, NULL), CACHEPAWL_INVALID_ARGUMENT, "lock: null");

  /* Device slots and records: kinds, sizes, unallocated slots. */
  EXPECT_ERR(cachepawl_store_allocate_device_slot(s, 9, &slot), CACHEPAWL_INVALID_ARGUMENT,
             "kind: 9");
  EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &slot));
  EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_STATE, &state));
  EXPECT_ERR(cachepawl_store_write_device_record(s, CACHEPAWL_KIND_KV, slot, NULL, 10),
             CACHEPAWL_INVALID_ARGUMENT, "record: null with bytes 10");
  EXPECT_ERR(cachepawl_store_read_device_record(s, CACHEPAWL_KIND_KV, slot, NULL, 10),
             CACHEPAWL_INVALID_ARGUMENT, "record: null with bytes 10");
  EXPECT_ERR(cachepawl_store_write_device_record(s, CACHEPAWL_KIND_KV, slot, record, 100),
             CACHEPAWL_INVALID_ARGUMENT, "record: 100 bytes");
  EXPECT_ERR(cachepawl_store_read_device_record(s, CACHEPAWL_KIND_STATE, state, record, 1024),
             CACHEPAWL_INVALID_ARGUMENT, "record: 1024 bytes");
  EXPECT_ERR(cachepawl_store_write_device_record(s, 4, slot, record, 100),
             CACHEPAWL_INVALID_ARGUMENT, "kind: 4");
  EXPECT_ERR(cachepawl_store_read_device_record(s, CACHEPAWL_KIND_KV, 100000, record, 1024),
             CACHEPAWL_INVALID_ARGUMENT, "slot 100000");
  EXPECT_ERR(cachepawl_store_free_device_slot(s, -1, slot), CACHEPAWL_INVALID_ARGUMENT, "kind: -1");

  /* Load and save. */
  EXPECT_ERR(cachepawl_store_load(s, NULL, NULL, 0, CACHEPAWL_NO_SLOT, 0, 0, &f),
             CACHEPAWL_INVALID_ARGUMENT, "match: null");
  CHECK(f == NULL);
  EXPECT_ERR(cachepawl_store_load(s, m, NULL, 2, CACHEPAWL_NO_SLOT, 0, 0, &f),
             CACHEPAWL_INVALID_ARGUMENT, "device_pages: null with num_device_pages 2");
  EXPECT_ERR(cachepawl_store_load(s, m, pages, 0, CACHEPAWL_NO_SLOT, 0, 4, &f),
             CACHEPAWL_INVALID_ARGUMENT, "flags: 4");
  EXPECT_ERR(cachepawl_store_load(s, m, pages, 2, CACHEPAWL_NO_SLOT, 0, 0, &f),
             CACHEPAWL_INVALID_ARGUMENT, NULL); /* more pages than the match has */
  EXPECT_ERR(cachepawl_store_save(s, NULL, 1, tokens, 8, 0, pages, 1, CACHEPAWL_NO_SLOT, 0, &f),
             CACHEPAWL_INVALID_ARGUMENT, "ns: null with ns_len 1");
  EXPECT_ERR(cachepawl_store_save(s, NULL, 0, NULL, 8, 0, pages, 1, CACHEPAWL_NO_SLOT, 0, &f),
             CACHEPAWL_INVALID_ARGUMENT, "tokens: null with num_tokens 8");
  EXPECT_ERR(cachepawl_store_save(s, NULL, 0, tokens, 8, 0, NULL, 1, CACHEPAWL_NO_SLOT, 0, &f),
             CACHEPAWL_INVALID_ARGUMENT, "device_pages: null with num_device_pages 1");
  EXPECT_ERR(cachepawl_store_save(s, NULL, 0, tokens, 8, 0, &slot, 1, state, 5, &f),
             CACHEPAWL_INVALID_ARGUMENT, "state_depth_tokens");
  EXPECT_ERR(cachepawl_store_save_hashes(s, NULL, 3, 0, &slot, 1, CACHEPAWL_NO_SLOT, 0, &f),
             CACHEPAWL_INVALID_ARGUMENT, "hashes: null with num_hashes 3");
  EXPECT_ERR(cachepawl_store_save_hashes(s, record, 1, 0, NULL, 1, CACHEPAWL_NO_SLOT, 0, &f),
             CACHEPAWL_INVALID_ARGUMENT, "device_pages: null with num_device_pages 1");
  EXPECT_ERR(cachepawl_store_prefetch(s, NULL, &p), CACHEPAWL_INVALID_ARGUMENT, "match: null");

  /* A store-owned pool: no engine pool on top of it. */
  EXPECT_ERR(cachepawl_store_register_device_pool(s, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "pool: null");

  /* The store's last error is the message of its last failed call; the thread's is kept by
   * successful calls. */
  msg = cachepawl_store_last_error(s);
  CHECK(msg != NULL && strstr(msg, "pool: null") != NULL);
  cachepawl_string_free(msg);
  EXPECT_OK(cachepawl_store_gpu_mode(s, &flag));
  CHECK(strstr(cachepawl_last_error(), "pool: null") != NULL);
  EXPECT_ERR(cachepawl_match_num_pages(NULL, &count), CACHEPAWL_INVALID_ARGUMENT, "match: null");
  msg = cachepawl_store_last_error(s); /* a call without the store: not the store's error */
  CHECK(msg != NULL && strstr(msg, "pool: null") != NULL);
  cachepawl_string_free(msg);
  EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_KV, slot));
  EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_STATE, state));
}

/* Fills the store-owned pool until NoSpace, then gives everything back. */
static void fill_pool(cachepawl_store* s) {
  static uint64_t slots[4096];
  size_t n = 0, i;
  cachepawl_status st = CACHEPAWL_OK;
  while (n < 4096 && (st = cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &slots[n])) ==
                         CACHEPAWL_OK) {
    ++n;
  }
  CHECK(st == CACHEPAWL_NO_SPACE && n > 0);
  CHECK(strstr(cachepawl_last_error(), "cachepawl_store_allocate_device_slot") != NULL);
  for (i = 0; i < n; ++i)
    EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_KV, slots[i]));
}

void test_bad_store_arguments(const char* dir) {
  cachepawl_store* s = open_tiny_store(NULL, 256u << 10);
  cachepawl_match* m = NULL;
  uint32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  (void)dir;

  null_store_calls();
  EXPECT_OK(cachepawl_store_lookup(s, "x", 1, tokens, 8, &m));
  null_outputs(s, m);
  bad_values(s, m);
  fill_pool(s);
  cachepawl_match_free(m);
  cachepawl_store_free(s);
}
