/* The C ABI test, part 2: a store-owned device pool round trip (write device records, save,
 * lookup, load into other slots, read back, compare), namespaces, hashes, locks, per-layer
 * fences, stats; reopening from disk with prefetch and cancel; and bad store arguments. */
#define _XOPEN_SOURCE 700

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi/cachepawl.h"
#include "tests/capi/c_test_util.h"

#define PAGES 8
#define NUM_TOKENS (PAGES * TINY_PAGE + 2)

static uint32_t g_tokens[NUM_TOKENS];

static void write_record(cachepawl_store* s, cachepawl_kind kind, uint64_t slot, uint64_t seed) {
  uint8_t buf[TINY_KV_RECORD];
  const size_t n = kind == CACHEPAWL_KIND_KV ? TINY_KV_RECORD : TINY_STATE_RECORD;
  fill_bytes(buf, n, seed);
  EXPECT_OK(cachepawl_store_write_device_record(s, kind, slot, buf, n));
}

/* The slot holds the record of `seed`. */
static int record_is(cachepawl_store* s, cachepawl_kind kind, uint64_t slot, uint64_t seed) {
  uint8_t want[TINY_KV_RECORD], got[TINY_KV_RECORD];
  const size_t n = kind == CACHEPAWL_KIND_KV ? TINY_KV_RECORD : TINY_STATE_RECORD;
  fill_bytes(want, n, seed);
  memset(got, 0, sizeof got);
  EXPECT_OK(cachepawl_store_read_device_record(s, kind, slot, got, n));
  return memcmp(want, got, n) == 0;
}

static void allocate(cachepawl_store* s, uint64_t* slots, size_t n, uint64_t* state) {
  size_t i;
  for (i = 0; i < n; ++i)
    EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &slots[i]));
  if (state != NULL)
    EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_STATE, state));
}

static void wait_ok(cachepawl_fence* f) {
  EXPECT_OK(cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  cachepawl_fence_free(f);
}

static size_t reusable(cachepawl_store* s, const char* ns, const uint32_t* tokens, size_t n) {
  cachepawl_match* m = NULL;
  size_t pages = 0;
  EXPECT_OK(cachepawl_store_lookup(s, ns, strlen(ns), tokens, n, &m));
  EXPECT_OK(cachepawl_match_reusable_pages(m, &pages));
  cachepawl_match_free(m);
  return pages;
}

/* Loads `n` pages from `first` (and the state) of `m` into fresh slots and compares them with
 * the seeds the round trip wrote (page i: i + 1, state: 100). */
static void load_and_compare(cachepawl_store* s, const cachepawl_match* m, size_t first, size_t n,
                             uint32_t flags) {
  uint64_t dst[PAGES], state = 0;
  cachepawl_fence* f = NULL;
  size_t i;
  allocate(s, dst, n, &state);
  EXPECT_OK(cachepawl_store_load(s, m, dst, n, state, first, flags, &f));
  EXPECT_OK(cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  cachepawl_fence_free(f);
  for (i = 0; i < n; ++i) CHECK(record_is(s, CACHEPAWL_KIND_KV, dst[i], first + i + 1));
  CHECK(record_is(s, CACHEPAWL_KIND_STATE, state, 100));
  for (i = 0; i < n; ++i) EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_KV, dst[i]));
  EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_STATE, state));
}

static int g_callbacks = 0;
static cachepawl_status g_callback_status = -1;
static void on_fired(void* user_data, cachepawl_status status) {
  ++*(int*)user_data;
  g_callback_status = status;
}

static void check_match(cachepawl_store* s, const uint8_t* hashes) {
  cachepawl_match* m = NULL;
  cachepawl_tier tiers[PAGES], tier = -5;
  uint8_t got[PAGES * CACHEPAWL_HASH_BYTES];
  size_t n = 0, count = 0, i;
  uint32_t page = 0;

  EXPECT_OK(cachepawl_store_lookup(s, "tenant-a", 8, g_tokens, NUM_TOKENS, &m));
  EXPECT_OK(cachepawl_match_num_pages(m, &n));
  CHECK(n == PAGES);
  EXPECT_OK(cachepawl_match_page_size_tokens(m, &page));
  CHECK(page == TINY_PAGE);
  EXPECT_OK(cachepawl_match_reusable_pages(m, &n));
  CHECK(n == PAGES);
  EXPECT_OK(cachepawl_match_kv_only_pages(m, &n));
  CHECK(n == PAGES);
  EXPECT_OK(cachepawl_match_checkpoint_hint_pages(m, &n));
  CHECK(n == PAGES);
  EXPECT_OK(cachepawl_match_page_tiers(m, NULL, 0, &count));
  CHECK(count == PAGES);
  count = 0;
  EXPECT_ERR(cachepawl_match_page_tiers(m, tiers, 3, &count), CACHEPAWL_INVALID_ARGUMENT,
             "capacity: 3");
  CHECK(count == PAGES);
  EXPECT_OK(cachepawl_match_page_tiers(m, tiers, PAGES, &count));
  for (i = 0; i < PAGES; ++i) CHECK(tiers[i] == CACHEPAWL_TIER_HOST);
  EXPECT_OK(cachepawl_match_state_tier(m, &tier));
  CHECK(tier == CACHEPAWL_TIER_HOST);
  EXPECT_OK(cachepawl_match_hashes(m, got, PAGES, &count));
  CHECK(count == PAGES && memcmp(got, hashes, sizeof got) == 0);
  cachepawl_match_free(m);

  /* Another namespace shares nothing; the hashes find the same prefix. */
  EXPECT_OK(cachepawl_store_lookup(s, "tenant-b", 8, g_tokens, NUM_TOKENS, &m));
  EXPECT_OK(cachepawl_match_kv_only_pages(m, &n));
  CHECK(n == 0);
  EXPECT_OK(cachepawl_match_state_tier(m, &tier));
  CHECK(tier == CACHEPAWL_TIER_NONE);
  cachepawl_match_free(m);
  EXPECT_OK(cachepawl_store_lookup_hashes(s, hashes, PAGES, &m));
  EXPECT_OK(cachepawl_match_reusable_pages(m, &n));
  CHECK(n == PAGES);
  cachepawl_match_free(m);
  cachepawl_match_free(NULL);
}

static void check_lock_and_loads(cachepawl_store* s) {
  cachepawl_match* m = NULL;
  cachepawl_lock* lk = NULL;
  cachepawl_lock* bad = (cachepawl_lock*)&lk; /* set to NULL by a failing call */
  cachepawl_fence* f = NULL;
  uint64_t dst[PAGES], state = 0;
  size_t n = 0, i;
  int32_t flag = 0;

  EXPECT_OK(cachepawl_store_lookup(s, "tenant-a", 8, g_tokens, NUM_TOKENS, &m));
  EXPECT_OK(cachepawl_store_lock(s, m, PAGES, &lk));
  EXPECT_OK(cachepawl_lock_pages(lk, &n));
  CHECK(n == PAGES);
  EXPECT_OK(cachepawl_lock_has_state(lk, &flag));
  CHECK(flag == 1);
  EXPECT_ERR(cachepawl_store_lock(s, m, PAGES + 1, &bad), CACHEPAWL_INVALID_ARGUMENT, "pages: 9");
  CHECK(bad == NULL);

  /* Everything, with per-layer fences (one per attention layer). */
  allocate(s, dst, PAGES, &state);
  EXPECT_OK(cachepawl_store_load(s, m, dst, PAGES, state, 0, CACHEPAWL_LOAD_PER_LAYER_FENCES, &f));
  EXPECT_OK(cachepawl_fence_num_layers(f, &n));
  CHECK(n == 2);
  for (i = 0; i < 2; ++i) {
    EXPECT_OK(cachepawl_fence_wait_layer(f, i, CACHEPAWL_WAIT_FOREVER));
    EXPECT_OK(cachepawl_fence_layer_ready(f, i, &flag));
    CHECK(flag == 1);
  }
  EXPECT_ERR(cachepawl_fence_layer_ready(f, 2, &flag), CACHEPAWL_INVALID_ARGUMENT, "layer: 2");
  EXPECT_ERR(cachepawl_fence_wait_layer(f, 7, 0), CACHEPAWL_INVALID_ARGUMENT, "layer: 7");
  EXPECT_OK(cachepawl_fence_wait(f, 60000));
  EXPECT_OK(cachepawl_fence_stream_wait(f, NULL));
  cachepawl_fence_free(f);
  for (i = 0; i < PAGES; ++i) CHECK(record_is(s, CACHEPAWL_KIND_KV, dst[i], i + 1));
  CHECK(record_is(s, CACHEPAWL_KIND_STATE, state, 100));
  for (i = 0; i < PAGES; ++i)
    EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_KV, dst[i]));
  EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_STATE, state));

  /* The engine holds pages [0, 5): load the rest and the state. */
  load_and_compare(s, m, 5, PAGES - 5, 0);

  EXPECT_OK(cachepawl_store_unlock(s, lk));
  EXPECT_ERR(cachepawl_store_unlock(s, lk), CACHEPAWL_FAILED_PRECONDITION, "already released");
  cachepawl_lock_free(lk);
  cachepawl_lock_free(NULL);
  cachepawl_match_free(m);
}

void test_store_round_trip(const char* dir) {
  cachepawl_store* s = open_tiny_store(dir, 1u << 20);
  cachepawl_layout* l = NULL;
  cachepawl_fence* f = NULL;
  uint64_t src[PAGES], state = 0, u64 = 0;
  uint8_t hashes[PAGES * CACHEPAWL_HASH_BYTES], hashes_c[PAGES * CACHEPAWL_HASH_BYTES];
  size_t count = 0, i;
  int32_t flag = -1;
  cachepawl_status code = -1;
  char* text = NULL;
  int dummy_stream = 0;

  fill_tokens(g_tokens, NUM_TOKENS, 1000);
  EXPECT_OK(cachepawl_store_gpu_mode(s, &flag));
  CHECK(flag == (test_cuda_device() >= 0 ? 1 : 0));
  EXPECT_OK(cachepawl_store_layout(s, &l));
  EXPECT_OK(cachepawl_layout_record_bytes(l, CACHEPAWL_KIND_STATE, &u64));
  CHECK(u64 == TINY_STATE_RECORD);
  cachepawl_layout_free(l);

  /* Hashes: a size query, a buffer too small, then the answer. */
  EXPECT_OK(cachepawl_store_hash_tokens(s, "tenant-a", 8, g_tokens, NUM_TOKENS, NULL, 0, &count));
  CHECK(count == PAGES);
  count = 0;
  EXPECT_ERR(cachepawl_store_hash_tokens(s, "tenant-a", 8, g_tokens, NUM_TOKENS, hashes, 3, &count),
             CACHEPAWL_INVALID_ARGUMENT, "capacity: 3");
  CHECK(count == PAGES);
  EXPECT_OK(
      cachepawl_store_hash_tokens(s, "tenant-a", 8, g_tokens, NUM_TOKENS, hashes, PAGES, &count));

  /* "Prefill": page i holds the record of seed i + 1, the state seed 100. Save it all. */
  allocate(s, src, PAGES, &state);
  for (i = 0; i < PAGES; ++i) write_record(s, CACHEPAWL_KIND_KV, src[i], i + 1);
  write_record(s, CACHEPAWL_KIND_STATE, state, 100);
  EXPECT_OK(cachepawl_store_save(s, "tenant-a", 8, g_tokens, NUM_TOKENS, 0, src, PAGES, state,
                                 PAGES * TINY_PAGE, &f));
  EXPECT_OK(cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  EXPECT_OK(cachepawl_fence_ready(f, &flag));
  CHECK(flag == 1);
  EXPECT_OK(cachepawl_fence_result(f, &code, &text));
  CHECK(code == CACHEPAWL_OK && text != NULL && text[0] == '\0');
  cachepawl_string_free(text);
  EXPECT_OK(cachepawl_fence_num_layers(f, &count));
  CHECK(count == 0);
  EXPECT_OK(cachepawl_fence_wait(f, 0));
  /* A fired fence: callbacks run at once, a stream wait returns its status. */
  EXPECT_OK(cachepawl_fence_on_complete(f, on_fired, &g_callbacks));
  CHECK(g_callbacks == 1 && g_callback_status == CACHEPAWL_OK);
  EXPECT_OK(cachepawl_fence_stream_wait(f, &dummy_stream));
  EXPECT_ERR(cachepawl_fence_on_complete(f, NULL, NULL), CACHEPAWL_INVALID_ARGUMENT, "fn: null");
  EXPECT_ERR(cachepawl_fence_result(f, NULL, NULL), CACHEPAWL_INVALID_ARGUMENT, "code: null");
  cachepawl_fence_free(f);
  cachepawl_fence_free(NULL);

  check_match(s, hashes);
  check_lock_and_loads(s);

  /* Engine-computed hashes of another namespace, saved by hash. */
  EXPECT_OK(
      cachepawl_store_hash_tokens(s, "tenant-c", 8, g_tokens, NUM_TOKENS, hashes_c, PAGES, &count));
  CHECK(memcmp(hashes, hashes_c, sizeof hashes) != 0);
  EXPECT_OK(
      cachepawl_store_save_hashes(s, hashes_c, PAGES, 0, src, PAGES, state, PAGES * TINY_PAGE, &f));
  wait_ok(f);
  CHECK(reusable(s, "tenant-c", g_tokens, NUM_TOKENS) == PAGES);
  /* Three pages without a state: KV only, and a checkpoint hint at the track interval (2). */
  EXPECT_OK(
      cachepawl_store_save(s, NULL, 0, g_tokens, NUM_TOKENS, 0, src, 3, CACHEPAWL_NO_SLOT, 0, &f));
  wait_ok(f);
  {
    cachepawl_match* m = NULL;
    EXPECT_OK(cachepawl_store_lookup(s, NULL, 0, g_tokens, NUM_TOKENS, &m));
    EXPECT_OK(cachepawl_match_reusable_pages(m, &count));
    CHECK(count == 0);
    EXPECT_OK(cachepawl_match_kv_only_pages(m, &count));
    CHECK(count == 3);
    EXPECT_OK(cachepawl_match_checkpoint_hint_pages(m, &count));
    CHECK(count == 2);
    cachepawl_match_free(m);
  }

  EXPECT_OK(cachepawl_store_stats_json(s, &text));
  CHECK(text != NULL && strstr(text, "\"saves\"") != NULL && strstr(text, "\"lookups\"") != NULL);
  cachepawl_string_free(text);
  EXPECT_OK(cachepawl_store_stats_prometheus(s, &text));
  CHECK(text != NULL && strstr(text, "cachepawl_") != NULL);
  cachepawl_string_free(text);
  for (i = 0; i < PAGES; ++i)
    EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_KV, src[i]));
  EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_STATE, state));
  EXPECT_OK(cachepawl_store_close(s));
  cachepawl_store_free(s);
}

void test_reopen_and_prefetch(const char* dir) {
  cachepawl_store* s = open_tiny_store(dir, 1u << 20);
  cachepawl_match* m = NULL;
  cachepawl_prefetch* p = NULL;
  cachepawl_fence* f = NULL;
  cachepawl_tier tiers[PAGES], tier = -5;
  cachepawl_status code = -1;
  cachepawl_options* o = NULL;
  cachepawl_store* other = NULL;
  size_t count = 0;

  /* After a reopen everything is on disk only. */
  EXPECT_OK(cachepawl_store_lookup(s, "tenant-a", 8, g_tokens, NUM_TOKENS, &m));
  EXPECT_OK(cachepawl_match_reusable_pages(m, &count));
  CHECK(count == PAGES);
  EXPECT_OK(cachepawl_match_page_tiers(m, tiers, PAGES, &count));
  CHECK(tiers[0] == CACHEPAWL_TIER_DISK && tiers[PAGES - 1] == CACHEPAWL_TIER_DISK);
  EXPECT_OK(cachepawl_match_state_tier(m, &tier));
  CHECK(tier == CACHEPAWL_TIER_DISK);

  /* A cancelled prefetch fires (OK when it had started, Aborted when not); a second one
   * brings everything into host memory. */
  EXPECT_OK(cachepawl_store_prefetch(s, m, &p));
  EXPECT_OK(cachepawl_prefetch_cancel(p));
  EXPECT_OK(cachepawl_prefetch_fence(p, &f));
  code = cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER);
  CHECK(code == CACHEPAWL_OK || code == CACHEPAWL_ABORTED);
  EXPECT_OK(cachepawl_fence_result(f, &code, NULL));
  CHECK(code == CACHEPAWL_OK || code == CACHEPAWL_ABORTED);
  cachepawl_fence_free(f);
  cachepawl_prefetch_free(p);
  cachepawl_prefetch_free(NULL);
  EXPECT_OK(cachepawl_store_prefetch(s, m, &p));
  EXPECT_OK(cachepawl_prefetch_fence(p, &f));
  wait_ok(f);
  cachepawl_prefetch_free(p);
  cachepawl_match_free(m);
  EXPECT_OK(cachepawl_store_lookup(s, "tenant-a", 8, g_tokens, NUM_TOKENS, &m));
  EXPECT_OK(cachepawl_match_page_tiers(m, tiers, PAGES, &count));
  CHECK(tiers[0] == CACHEPAWL_TIER_HOST && tiers[PAGES - 1] == CACHEPAWL_TIER_HOST);
  load_and_compare(s, m, 0, PAGES, 0);
  cachepawl_match_free(m);

  /* Straight from disk, without a prefetch (tenant-c was saved by hash). */
  EXPECT_OK(cachepawl_store_lookup(s, "tenant-c", 8, g_tokens, NUM_TOKENS, &m));
  load_and_compare(s, m, 0, PAGES, CACHEPAWL_LOAD_PER_LAYER_FENCES);
  cachepawl_match_free(m);
  EXPECT_OK(cachepawl_store_close(s));
  cachepawl_store_free(s);

  /* Another layout on the same folder: Incompatible, unless told to wipe it. */
  EXPECT_OK(cachepawl_options_new(&o));
  EXPECT_OK(cachepawl_options_set_layout_preset(o, "jamba-v0.1", 16));
  EXPECT_OK(cachepawl_options_set_cuda_device(o, -1));
  EXPECT_OK(cachepawl_options_set_host_bytes(o, 64u << 20));
  EXPECT_OK(cachepawl_options_set_staging_bytes(o, 1u << 20));
  EXPECT_OK(cachepawl_options_set_disk_dir(o, dir));
  EXPECT_OK(cachepawl_options_set_disk_bytes(o, 64u << 20));
  EXPECT_ERR(cachepawl_store_open(o, &other), CACHEPAWL_INCOMPATIBLE, NULL);
  CHECK(other == NULL);
  EXPECT_OK(cachepawl_options_set_wipe_on_layout_mismatch(o, 1));
  EXPECT_OK(cachepawl_store_open(o, &other));
  cachepawl_store_free(other);
  cachepawl_options_free(o);
}
