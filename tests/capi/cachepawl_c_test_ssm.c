/* The C ABI test, part 5: a pure SSM layout (no attention layers, as Mamba-2). The engine
 * registers a device pool of state slots and no KV pages, saves states with no device pages
 * (the tokens name the pages), loads them with none, and is refused a state at another depth;
 * two prompts that branch share the state before the branch; a reopened store finds the
 * states again on disk. Every loaded byte is compared, in slots poisoned first. */
#define _XOPEN_SOURCE 700

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi/cachepawl.h"
#include "tests/capi/c_test_util.h"

#define SLOTS 4
#define PROMPT_PAGES 4

static const char kSsmLayoutJson[] =
    "{\"model\": \"test/tiny-ssm\", \"num_layers\": 2, \"page_size_tokens\": 4,\n"
    " \"ssm_layers\": [\n"
    "  {\"layer_index\": 0, \"block\": \"mamba2\", \"conv_shape\": [8, 3], \"conv_dtype\": "
    "\"bf16\", \"ssm_shape\": [2, 4, 8], \"ssm_dtype\": \"fp32\"},\n"
    "  {\"layer_index\": 1, \"block\": \"mamba2\", \"conv_shape\": [8, 3], \"conv_dtype\": "
    "\"bf16\", \"ssm_shape\": [2, 4, 8], \"ssm_dtype\": \"fp32\"}]}\n";

/* The engine's state tensors: per SSM layer, SLOTS conv states and SLOTS SSM states. */
static uint8_t g_conv[2][SLOTS * TINY_CONV_BYTES];
static uint8_t g_ssm[2][SLOTS * TINY_SSM_BYTES];

/* Writes the state of `seed` into slot `slot` (every layer's conv and SSM state). */
static void fill_state(uint64_t slot, uint64_t seed) {
  size_t l;
  for (l = 0; l < 2; ++l) {
    fill_bytes(g_conv[l] + slot * TINY_CONV_BYTES, TINY_CONV_BYTES, seed * 4 + l * 2);
    fill_bytes(g_ssm[l] + slot * TINY_SSM_BYTES, TINY_SSM_BYTES, seed * 4 + l * 2 + 1);
  }
}

/* Slot `slot` holds the state of `seed`. */
static int state_is(uint64_t slot, uint64_t seed) {
  uint8_t want[TINY_SSM_BYTES];
  size_t l;
  int same = 1;
  for (l = 0; l < 2; ++l) {
    fill_bytes(want, TINY_CONV_BYTES, seed * 4 + l * 2);
    same &= memcmp(want, g_conv[l] + slot * TINY_CONV_BYTES, TINY_CONV_BYTES) == 0;
    fill_bytes(want, TINY_SSM_BYTES, seed * 4 + l * 2 + 1);
    same &= memcmp(want, g_ssm[l] + slot * TINY_SSM_BYTES, TINY_SSM_BYTES) == 0;
  }
  return same;
}

static void poison(uint64_t slot) {
  size_t l;
  for (l = 0; l < 2; ++l) {
    memset(g_conv[l] + slot * TINY_CONV_BYTES, 0xEE, TINY_CONV_BYTES);
    memset(g_ssm[l] + slot * TINY_SSM_BYTES, 0xEE, TINY_SSM_BYTES);
  }
}

static cachepawl_store* open_ssm_store(const char* disk_dir) {
  cachepawl_options* o = NULL;
  cachepawl_store* s = NULL;
  cachepawl_pool* pool = NULL;
  size_t l;
  EXPECT_OK(cachepawl_options_new(&o));
  EXPECT_OK(cachepawl_options_set_layout_json_string(o, kSsmLayoutJson, strlen(kSsmLayoutJson)));
  EXPECT_OK(cachepawl_options_set_host_bytes(o, 16u << 20));
  EXPECT_OK(cachepawl_options_set_cuda_device(o, -1));
  EXPECT_OK(cachepawl_options_set_disk_dir(o, disk_dir));
  EXPECT_OK(cachepawl_options_set_disk_bytes(o, 16u << 20));
  EXPECT_OK(cachepawl_options_set_disk_queue_depth(o, 8));
  EXPECT_OK(cachepawl_store_open(o, &s));
  cachepawl_options_free(o);
  if (s == NULL) {
    fprintf(stderr, "cannot open the pure SSM store: %s\n", cachepawl_last_error());
    exit(2);
  }
  /* KV pages in a layout without attention layers: refused, naming the field. */
  EXPECT_OK(cachepawl_pool_new(-1, 8, SLOTS, &pool));
  for (l = 0; l < 2; ++l) {
    EXPECT_OK(cachepawl_pool_set_ssm_layer(pool, l, g_conv[l], 0, g_ssm[l], 0));
  }
  EXPECT_ERR(cachepawl_store_register_device_pool(s, pool), CACHEPAWL_INVALID_ARGUMENT,
             "num_pages: 8");
  cachepawl_pool_free(pool);
  /* The engine's pool: state slots, no KV pages. */
  EXPECT_OK(cachepawl_pool_new(-1, 0, SLOTS, &pool));
  for (l = 0; l < 2; ++l) {
    EXPECT_OK(cachepawl_pool_set_ssm_layer(pool, l, g_conv[l], 0, g_ssm[l], 0));
  }
  EXPECT_OK(cachepawl_store_register_device_pool(s, pool));
  cachepawl_pool_free(pool);
  return s;
}

/* Saves the state in `slot` taken after `pages` pages of `tokens` (no device pages). */
static void save_state(cachepawl_store* s, const uint32_t* tokens, uint64_t slot, size_t pages) {
  cachepawl_fence* f = NULL;
  EXPECT_OK(cachepawl_store_save(s, NULL, 0, tokens, PROMPT_PAGES * TINY_PAGE, 0, NULL, 0, slot,
                                 pages * TINY_PAGE, &f));
  EXPECT_OK(cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  cachepawl_fence_free(f);
}

/* Looks `tokens` up, checks the hit (`want` pages, the state in `tier`), loads the state into
 * a poisoned slot 3 and checks it is the state of `seed`. */
static void lookup_and_load(cachepawl_store* s, const uint32_t* tokens, size_t num_tokens,
                            size_t want, cachepawl_tier tier, uint64_t seed) {
  cachepawl_match* m = NULL;
  cachepawl_fence* f = NULL;
  cachepawl_tier got_tier = CACHEPAWL_TIER_NONE;
  size_t pages = 0, tiers = 99;
  EXPECT_OK(cachepawl_store_lookup(s, NULL, 0, tokens, num_tokens, &m));
  EXPECT_OK(cachepawl_match_reusable_pages(m, &pages));
  CHECK(pages == want);
  EXPECT_OK(cachepawl_match_state_tier(m, &got_tier));
  CHECK(got_tier == tier);
  EXPECT_OK(cachepawl_match_page_tiers(m, NULL, 0, &tiers));
  CHECK(tiers == 0); /* no page is held anywhere: there is no KV */
  poison(3);
  EXPECT_OK(cachepawl_store_load(s, m, NULL, 0, 3, 0, 0, &f));
  EXPECT_OK(cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  cachepawl_fence_free(f);
  CHECK(state_is(3, seed));
  cachepawl_match_free(m);
}

void test_pure_ssm(const char* dir) {
  char disk[128];
  cachepawl_store* s = NULL;
  cachepawl_layout* layout = NULL;
  cachepawl_match* m = NULL;
  cachepawl_fence* f = NULL;
  uint32_t a[PROMPT_PAGES * TINY_PAGE], b[PROMPT_PAGES * TINY_PAGE];
  const uint64_t pages[2] = {0, 1};
  size_t n = 99;
  uint64_t bytes = 99;

  snprintf(disk, sizeof disk, "%s/ssm", dir);
  s = open_ssm_store(disk);
  EXPECT_OK(cachepawl_store_layout(s, &layout));
  EXPECT_OK(cachepawl_layout_num_layers_of_kind(layout, CACHEPAWL_KIND_KV, &n));
  CHECK(n == 0);
  EXPECT_OK(cachepawl_layout_record_bytes(layout, CACHEPAWL_KIND_KV, &bytes));
  CHECK(bytes == 0);
  cachepawl_layout_free(layout);

  /* Prompt A: states after 3 pages (a checkpoint) and 4 (its end). Prompt B: A's first 3
   * pages, then another 4th page. */
  fill_tokens(a, PROMPT_PAGES * TINY_PAGE, 1);
  memcpy(b, a, sizeof a);
  b[3 * TINY_PAGE] = 9999;
  fill_state(0, 30);
  save_state(s, a, 0, 3);
  fill_state(0, 40);
  save_state(s, a, 0, 4);
  /* B hits the state A left at depth 3; its chain is known that far (no further). */
  EXPECT_OK(cachepawl_store_lookup(s, NULL, 0, b, PROMPT_PAGES * TINY_PAGE, &m));
  EXPECT_OK(cachepawl_match_kv_only_pages(m, &n));
  CHECK(n == 3);
  /* A state at another depth than the match's, device pages, no slot: refused. */
  EXPECT_ERR(cachepawl_store_load(s, m, NULL, 0, 3, 2, 0, &f), CACHEPAWL_INVALID_ARGUMENT,
             "first_page: 2");
  EXPECT_ERR(cachepawl_store_load(s, m, pages, 2, 3, 0, 0, &f), CACHEPAWL_INVALID_ARGUMENT,
             "no attention layers");
  EXPECT_ERR(cachepawl_store_load(s, m, NULL, 0, CACHEPAWL_NO_SLOT, 0, 0, &f),
             CACHEPAWL_INVALID_ARGUMENT, "device_state_slot: none");
  CHECK(f == NULL);
  cachepawl_match_free(m);
  EXPECT_ERR(cachepawl_store_save(s, NULL, 0, b, PROMPT_PAGES * TINY_PAGE, 0, pages, 2, 0,
                                  4 * TINY_PAGE, &f),
             CACHEPAWL_INVALID_ARGUMENT, "SaveRequest.device_pages: 2 pages");
  lookup_and_load(s, b, PROMPT_PAGES * TINY_PAGE, 3, CACHEPAWL_TIER_HOST, 30);
  fill_state(1, 50);
  save_state(s, b, 1, 4);
  /* Each prompt its own state at depth 4; the state at depth 3 serves both. */
  lookup_and_load(s, a, PROMPT_PAGES * TINY_PAGE, 4, CACHEPAWL_TIER_HOST, 40);
  lookup_and_load(s, b, PROMPT_PAGES * TINY_PAGE, 4, CACHEPAWL_TIER_HOST, 50);
  lookup_and_load(s, a, 3 * TINY_PAGE, 3, CACHEPAWL_TIER_HOST, 30);
  EXPECT_OK(cachepawl_store_close(s));
  cachepawl_store_free(s);

  /* Reopened: the states come back from disk, their chains with them. */
  s = open_ssm_store(disk);
  lookup_and_load(s, b, PROMPT_PAGES * TINY_PAGE, 4, CACHEPAWL_TIER_DISK, 50);
  lookup_and_load(s, b, 3 * TINY_PAGE, 3, CACHEPAWL_TIER_DISK, 30);
  lookup_and_load(s, a, PROMPT_PAGES * TINY_PAGE, 4, CACHEPAWL_TIER_DISK, 40);
  EXPECT_OK(cachepawl_store_close(s));
  cachepawl_store_free(s);
}
