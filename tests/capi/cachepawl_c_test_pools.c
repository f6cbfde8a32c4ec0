/* The C ABI test, part 4: engine-owned device pools in the three forms of vocab/device_pool.h
 * (K/V separate with padded strides, K/V interleaved, block-contiguous; SSM conv/state bases
 * and strides) round-tripped through save and load; closing a store with operations in flight
 * and the handles that outlive it; several threads on one store, each with its own error. */
#define _XOPEN_SOURCE 700

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "capi/cachepawl.h"
#include "tests/capi/c_test_util.h"

#define NP 8 /* KV pages of an engine pool */
#define NS 2 /* state slots */

enum { kSeparate = 0, kInterleaved = 1, kBlock = 2 };

/* One engine pool in host memory (CPU mode, device -1). */
typedef struct {
  int form;
  uint8_t* kv[2];   /* per attention layer: K (separate) or K+V (interleaved) */
  uint8_t* v[2];    /* per attention layer, separate form */
  uint8_t* conv[2]; /* per SSM layer (per-layer forms) */
  uint8_t* ssm[2];
  uint8_t* kv_block; /* block-contiguous form */
  uint8_t* state_block;
} Pool;

#define K_STRIDE (TINY_K_BYTES + 64) /* separate form: padded K pages */
#define SSM_STRIDE 512               /* per-layer forms: padded SSM states */

static uint8_t* K(const Pool* p, size_t a, size_t page) {
  if (p->form == kBlock) return p->kv_block + page * TINY_KV_RECORD + a * 2 * TINY_K_BYTES;
  if (p->form == kInterleaved) return p->kv[a] + page * 2 * TINY_K_BYTES;
  return p->kv[a] + page * K_STRIDE;
}

static uint8_t* V(const Pool* p, size_t a, size_t page) {
  if (p->form == kSeparate) return p->v[a] + page * TINY_K_BYTES;
  return K(p, a, page) + TINY_K_BYTES;
}

static uint8_t* Conv(const Pool* p, size_t s, size_t slot) {
  if (p->form == kBlock) {
    return p->state_block + slot * TINY_STATE_RECORD + s * (TINY_CONV_BYTES + TINY_SSM_BYTES);
  }
  return p->conv[s] + slot * TINY_CONV_BYTES;
}

static uint8_t* Ssm(const Pool* p, size_t s, size_t slot) {
  if (p->form == kBlock) return Conv(p, s, slot) + TINY_CONV_BYTES;
  return p->ssm[s] + slot * SSM_STRIDE;
}

static void make_pool(Pool* p, int form) {
  size_t i;
  memset(p, 0, sizeof *p);
  p->form = form;
  p->kv_block = calloc(NP, TINY_KV_RECORD);
  p->state_block = calloc(NS, TINY_STATE_RECORD);
  for (i = 0; i < 2; ++i) {
    p->kv[i] = calloc(NP, 2 * K_STRIDE);
    p->v[i] = calloc(NP, TINY_K_BYTES);
    p->conv[i] = calloc(NS, TINY_CONV_BYTES);
    p->ssm[i] = calloc(NS, SSM_STRIDE);
  }
}

static void free_pool(Pool* p) {
  size_t i;
  free(p->kv_block);
  free(p->state_block);
  for (i = 0; i < 2; ++i) {
    free(p->kv[i]);
    free(p->v[i]);
    free(p->conv[i]);
    free(p->ssm[i]);
  }
}

/* Describes `p` to the library, checking the setters' bad arguments on the way. */
static cachepawl_pool* describe(const Pool* p) {
  cachepawl_pool* d = NULL;
  size_t i;
  EXPECT_ERR(cachepawl_pool_new(-2, NP, NS, &d), CACHEPAWL_INVALID_ARGUMENT, "device: -2");
  EXPECT_ERR(cachepawl_pool_new(-1, NP, NS, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_OK(cachepawl_pool_new(-1, NP, NS, &d));
  if (p->form == kBlock) {
    EXPECT_ERR(cachepawl_pool_set_block_contiguous(d, NULL, 0, p->state_block, 0),
               CACHEPAWL_INVALID_ARGUMENT, "kv_base: null with num_pages 8");
    EXPECT_ERR(cachepawl_pool_set_block_contiguous(d, p->kv_block, 0, NULL, 0),
               CACHEPAWL_INVALID_ARGUMENT, "state_base: null with num_state_slots 2");
    EXPECT_OK(cachepawl_pool_set_block_contiguous(d, p->kv_block, 0, p->state_block, 0));
    EXPECT_ERR(cachepawl_pool_set_kv_layer(d, 0, p->kv[0], 0, p->v[0], 0),
               CACHEPAWL_FAILED_PRECONDITION, "block-contiguous");
    return d;
  }
  EXPECT_ERR(cachepawl_pool_set_kv_layer(NULL, 0, p->kv[0], 0, p->v[0], 0),
             CACHEPAWL_INVALID_ARGUMENT, "pool: null");
  EXPECT_ERR(cachepawl_pool_set_kv_layer(d, 0, NULL, 0, p->v[0], 0), CACHEPAWL_INVALID_ARGUMENT,
             "k_base: null");
  EXPECT_ERR(cachepawl_pool_set_kv_layer(d, 70000, p->kv[0], 0, p->v[0], 0),
             CACHEPAWL_INVALID_ARGUMENT, "i: 70000");
  EXPECT_ERR(cachepawl_pool_set_kv_layer_interleaved(d, 0, NULL, 0), CACHEPAWL_INVALID_ARGUMENT,
             "base: null");
  for (i = 0; i < 2; ++i) {
    if (p->form == kSeparate) {
      EXPECT_OK(cachepawl_pool_set_kv_layer(d, i, p->kv[i], K_STRIDE, p->v[i], 0));
    } else {
      EXPECT_OK(cachepawl_pool_set_kv_layer_interleaved(d, i, p->kv[i], 0));
    }
    EXPECT_OK(cachepawl_pool_set_ssm_layer(d, i, p->conv[i], 0, p->ssm[i], SSM_STRIDE));
  }
  EXPECT_ERR(cachepawl_pool_set_block_contiguous(d, p->kv_block, 0, p->state_block, 0),
             CACHEPAWL_FAILED_PRECONDITION, "per-layer");
  return d;
}

/* Registration errors that leave the store able to register a good pool afterwards. */
static void bad_registrations(cachepawl_store* s, const Pool* p) {
  cachepawl_pool* d = NULL;
  EXPECT_OK(cachepawl_pool_new(-1, NP, NS, &d));
  EXPECT_OK(cachepawl_pool_set_kv_layer(d, 0, p->kv[0], 0, p->v[0], 0));
  EXPECT_OK(cachepawl_pool_set_ssm_layer(d, 0, p->conv[0], 0, p->ssm[0], 0));
  EXPECT_OK(cachepawl_pool_set_ssm_layer(d, 1, p->conv[1], 0, p->ssm[1], 0));
  EXPECT_ERR(cachepawl_store_register_device_pool(s, d), CACHEPAWL_INVALID_ARGUMENT,
             "attention layer 1 not set");
  EXPECT_OK(cachepawl_pool_set_kv_layer(d, 1, p->kv[1], 0, p->v[1], 0));
  /* NULL ssm_base is for layers without an SSM state (shortconv); these mamba2 layers have one. */
  EXPECT_OK(cachepawl_pool_set_ssm_layer(d, 0, p->conv[0], 0, NULL, 0));
  EXPECT_ERR(cachepawl_store_register_device_pool(s, d), CACHEPAWL_INVALID_ARGUMENT,
             "device_pool.ssm[0].ssm_base: null");
  EXPECT_OK(cachepawl_pool_set_ssm_layer(d, 0, p->conv[0], 0, p->ssm[0], 0));
  /* NULL conv_base is for layers without a conv state (lightning); these have one. */
  EXPECT_OK(cachepawl_pool_set_ssm_layer(d, 1, NULL, 0, p->ssm[1], 0));
  EXPECT_ERR(cachepawl_store_register_device_pool(s, d), CACHEPAWL_INVALID_ARGUMENT,
             "device_pool.ssm[1].conv_base: null");
  EXPECT_OK(cachepawl_pool_set_ssm_layer(d, 1, p->conv[1], 0, p->ssm[1], 0));
  /* NULL v_base is for MLA layers (no V); these layers have one. */
  EXPECT_OK(cachepawl_pool_set_kv_layer(d, 1, p->kv[1], 0, NULL, 0));
  EXPECT_ERR(cachepawl_store_register_device_pool(s, d), CACHEPAWL_INVALID_ARGUMENT,
             "device_pool.attention[1].v_base: null");
  EXPECT_OK(cachepawl_pool_set_kv_layer(d, 1, p->kv[1], 100, p->v[1], 0));
  EXPECT_ERR(cachepawl_store_register_device_pool(s, d), CACHEPAWL_INVALID_ARGUMENT,
             "k_page_stride");
  EXPECT_OK(cachepawl_pool_set_ssm_layer(d, 2, p->conv[1], 0, p->ssm[1], 0));
  EXPECT_ERR(cachepawl_store_register_device_pool(s, d), CACHEPAWL_INVALID_ARGUMENT,
             "SSM layer 2 set");
  cachepawl_pool_free(d);
  cachepawl_pool_free(NULL);
}

static void engine_pool_round_trip(int form) {
  cachepawl_store* s = open_tiny_store(NULL, 0);
  cachepawl_pool* d = NULL;
  Pool p;
  uint32_t tokens[4 * TINY_PAGE];
  const uint64_t src[4] = {0, 1, 2, 3}, dst[4] = {4, 5, 6, 7};
  uint64_t slot = 0;
  size_t a, page;

  make_pool(&p, form);
  EXPECT_ERR(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &slot),
             CACHEPAWL_FAILED_PRECONDITION, "store-owned");
  EXPECT_ERR(cachepawl_store_unregister_device_pool(s), CACHEPAWL_FAILED_PRECONDITION,
             "no device pool is registered");
  EXPECT_ERR(cachepawl_store_unregister_device_pool(NULL), CACHEPAWL_INVALID_ARGUMENT, "store");
  if (form == kSeparate) bad_registrations(s, &p);
  d = describe(&p);
  EXPECT_OK(cachepawl_store_register_device_pool(s, d));
  EXPECT_ERR(cachepawl_store_register_device_pool(s, d), CACHEPAWL_FAILED_PRECONDITION,
             "already registered");
  /* Unregistered and registered again (an engine that resized its KV cache). */
  EXPECT_OK(cachepawl_store_unregister_device_pool(s));
  EXPECT_OK(cachepawl_store_register_device_pool(s, d));
  cachepawl_pool_free(d);

  /* "Prefill" pages 0..3 and state slot 0 in the engine's own layout; save; load into pages
   * 4..7 and slot 1; every layer's bytes must match. */
  for (page = 0; page < 4; ++page) {
    for (a = 0; a < 2; ++a) {
      fill_bytes(K(&p, a, page), TINY_K_BYTES, page * 10 + a * 2);
      fill_bytes(V(&p, a, page), TINY_K_BYTES, page * 10 + a * 2 + 1);
    }
  }
  for (a = 0; a < 2; ++a) {
    fill_bytes(Conv(&p, a, 0), TINY_CONV_BYTES, 500 + a * 2);
    fill_bytes(Ssm(&p, a, 0), TINY_SSM_BYTES, 501 + a * 2);
  }
  fill_tokens(tokens, 4 * TINY_PAGE, 7);
  save_and_load_back(s, "pool", tokens, 4, TINY_PAGE, src, 0, dst, 1);
  for (page = 0; page < 4; ++page) {
    for (a = 0; a < 2; ++a) {
      CHECK(memcmp(K(&p, a, page + 4), K(&p, a, page), TINY_K_BYTES) == 0);
      CHECK(memcmp(V(&p, a, page + 4), V(&p, a, page), TINY_K_BYTES) == 0);
    }
  }
  for (a = 0; a < 2; ++a) {
    CHECK(memcmp(Conv(&p, a, 1), Conv(&p, a, 0), TINY_CONV_BYTES) == 0);
    CHECK(memcmp(Ssm(&p, a, 1), Ssm(&p, a, 0), TINY_SSM_BYTES) == 0);
  }
  EXPECT_OK(cachepawl_store_close(s));
  cachepawl_store_free(s);
  free_pool(&p);
}

void test_engine_pools(void) {
  engine_pool_round_trip(kSeparate);
  engine_pool_round_trip(kInterleaved);
  engine_pool_round_trip(kBlock);
}

void test_close_and_lifetimes(const char* dir) {
  char sub[128];
  cachepawl_store* s = NULL;
  cachepawl_store* other = open_tiny_store(NULL, 1u << 20);
  cachepawl_match *m = NULL, *no_match = NULL;
  cachepawl_prefetch* no_prefetch = NULL;
  cachepawl_lock* lk = NULL;
  cachepawl_fence *saved = NULL, *none = NULL, *in_flight[3] = {NULL, NULL, NULL};
  cachepawl_prefetch* p = NULL;
  cachepawl_layout* l = NULL;
  uint32_t tokens[4 * TINY_PAGE];
  uint64_t pages[8], state = 0, state2 = 0;
  size_t i, n = 0;
  int32_t flag = 0;
  cachepawl_status code = -1;
  char* text = NULL;

  snprintf(sub, sizeof sub, "%s/life", dir);
  CHECK(mkdir(sub, 0700) == 0);
  s = open_tiny_store(sub, 1u << 20);
  fill_tokens(tokens, 4 * TINY_PAGE, 300);
  for (i = 0; i < 8; ++i)
    EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &pages[i]));
  EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_STATE, &state));
  EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_STATE, &state2));
  EXPECT_OK(cachepawl_store_save(s, "life", 4, tokens, 4 * TINY_PAGE, 0, pages, 4, state,
                                 4 * TINY_PAGE, &saved));
  EXPECT_OK(cachepawl_fence_wait(saved, CACHEPAWL_WAIT_FOREVER));
  EXPECT_OK(cachepawl_store_lookup(s, "life", 4, tokens, 4 * TINY_PAGE, &m));
  EXPECT_OK(cachepawl_store_lock(s, m, 4, &lk));
  EXPECT_ERR(cachepawl_store_unlock(other, lk), CACHEPAWL_FAILED_PRECONDITION, "another store");

  /* Operations in flight when the store closes: every fence fires. */
  EXPECT_OK(cachepawl_store_save(s, "other", 5, tokens, 4 * TINY_PAGE, 0, pages, 4, state,
                                 4 * TINY_PAGE, &in_flight[0]));
  EXPECT_OK(cachepawl_store_load(s, m, pages + 4, 4, state2, 0, CACHEPAWL_LOAD_PER_LAYER_FENCES,
                                 &in_flight[1]));
  EXPECT_OK(cachepawl_store_prefetch(s, m, &p));
  EXPECT_OK(cachepawl_prefetch_fence(p, &in_flight[2]));
  EXPECT_OK(cachepawl_store_close(s));
  for (i = 0; i < 3; ++i) {
    EXPECT_OK(cachepawl_fence_ready(in_flight[i], &flag));
    CHECK(flag == 1);
  }
  EXPECT_OK(cachepawl_store_close(s)); /* twice is fine */

  /* A closed store: cache calls fail naming it, the rest still answer. */
  EXPECT_ERR(cachepawl_store_lookup(s, "life", 4, tokens, 4 * TINY_PAGE, &no_match),
             CACHEPAWL_FAILED_PRECONDITION, "closed");
  CHECK(no_match == NULL);
  text = cachepawl_store_last_error(s);
  CHECK(text != NULL && strstr(text, "closed") != NULL);
  cachepawl_string_free(text);
  EXPECT_ERR(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &pages[0]),
             CACHEPAWL_FAILED_PRECONDITION, "closed");
  EXPECT_ERR(cachepawl_store_save(s, NULL, 0, tokens, 4 * TINY_PAGE, 0, pages, 1, CACHEPAWL_NO_SLOT,
                                  0, &none),
             CACHEPAWL_FAILED_PRECONDITION, "closed");
  EXPECT_ERR(cachepawl_store_prefetch(s, m, &no_prefetch), CACHEPAWL_FAILED_PRECONDITION, "closed");
  EXPECT_OK(cachepawl_store_stats_json(s, &text));
  CHECK(text != NULL && strstr(text, "\"saves\"") != NULL);
  cachepawl_string_free(text);
  EXPECT_OK(cachepawl_store_layout(s, &l));
  cachepawl_layout_free(l);
  EXPECT_OK(cachepawl_store_gpu_mode(s, &flag));

  /* Handles outlive their store: the lock, the fences, the prefetch and the match. */
  cachepawl_store_free(s);
  EXPECT_OK(cachepawl_lock_pages(lk, &n));
  CHECK(n == 4);
  cachepawl_lock_free(lk);
  for (i = 0; i < 3; ++i) {
    (void)cachepawl_fence_wait(in_flight[i], CACHEPAWL_WAIT_FOREVER);
    EXPECT_OK(cachepawl_fence_result(in_flight[i], &code, NULL));
    cachepawl_fence_free(in_flight[i]);
  }
  EXPECT_OK(cachepawl_prefetch_cancel(p));
  EXPECT_OK(cachepawl_prefetch_fence(p, &in_flight[0]));
  EXPECT_OK(cachepawl_fence_wait(in_flight[0], 0));
  cachepawl_fence_free(in_flight[0]);
  cachepawl_prefetch_free(p);
  EXPECT_OK(cachepawl_match_reusable_pages(m, &n));
  CHECK(n == 4);
  cachepawl_match_free(m);
  cachepawl_fence_free(saved);
  cachepawl_store_free(other);
}

/* Threads: lookups and hashing on one store at once, each thread's error its own. */
typedef struct {
  cachepawl_store* store;
  int index;
  int failures;
  int stop_on_close;
} Worker;

static uint32_t g_thread_tokens[2 * TINY_PAGE];

static void* worker_main(void* arg) {
  Worker* w = (Worker*)arg;
  char name[32];
  int i;
  cachepawl_layout* l = NULL;
  snprintf(name, sizeof name, "missing-%d", w->index);
  if (cachepawl_layout_from_preset(name, 16, &l) != CACHEPAWL_NOT_FOUND) ++w->failures;
  for (i = 0; w->stop_on_close || i < 200; ++i) {
    cachepawl_match* m = NULL;
    size_t n = 0;
    uint8_t hashes[2 * CACHEPAWL_HASH_BYTES];
    const cachepawl_status st =
        cachepawl_store_lookup(w->store, "t", 1, g_thread_tokens, 2 * TINY_PAGE, &m);
    if (w->stop_on_close && st == CACHEPAWL_FAILED_PRECONDITION) break;
    if (st != CACHEPAWL_OK || cachepawl_match_reusable_pages(m, &n) != CACHEPAWL_OK || n != 2) {
      ++w->failures;
    }
    cachepawl_match_free(m);
    if (cachepawl_store_hash_tokens(w->store, "t", 1, g_thread_tokens, 2 * TINY_PAGE, hashes, 2,
                                    &n) != CACHEPAWL_OK) {
      ++w->failures;
    }
  }
  if (strstr(cachepawl_last_error(), name) == NULL && !w->stop_on_close) ++w->failures;
  return NULL;
}

void test_threads(const char* dir) {
  cachepawl_store* s = open_tiny_store(NULL, 1u << 20);
  cachepawl_fence* f = NULL;
  cachepawl_layout* l = NULL;
  uint64_t pages[2], state = 0;
  pthread_t threads[4];
  Worker workers[4];
  int i;
  (void)dir;

  fill_tokens(g_thread_tokens, 2 * TINY_PAGE, 9000);
  EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &pages[0]));
  EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &pages[1]));
  EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_STATE, &state));
  EXPECT_OK(cachepawl_store_save(s, "t", 1, g_thread_tokens, 2 * TINY_PAGE, 0, pages, 2, state,
                                 2 * TINY_PAGE, &f));
  EXPECT_OK(cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  cachepawl_fence_free(f);
  EXPECT_ERR(cachepawl_layout_from_preset("main-thread-model", 16, &l), CACHEPAWL_NOT_FOUND,
             "main-thread-model");

  /* Four threads at once; then two more while the store closes under them. */
  for (i = 0; i < 4; ++i) {
    workers[i].store = s;
    workers[i].index = i;
    workers[i].failures = 0;
    workers[i].stop_on_close = i >= 2;
  }
  for (i = 0; i < 2; ++i) CHECK(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
  for (i = 0; i < 2; ++i) CHECK(pthread_join(threads[i], NULL) == 0);
  for (i = 2; i < 4; ++i) CHECK(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
  EXPECT_OK(cachepawl_store_close(s));
  for (i = 2; i < 4; ++i) CHECK(pthread_join(threads[i], NULL) == 0);
  for (i = 0; i < 4; ++i) CHECK(workers[i].failures == 0);
  CHECK(strstr(cachepawl_last_error(), "main-thread-model") != NULL);
  cachepawl_store_free(s);
}
