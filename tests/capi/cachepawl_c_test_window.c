/* The C ABI test, part 6: sliding-window layers (CACHEPAWL_KIND_WINDOW_KV). A layout with one
 * full-attention layer, one windowed layer and one SSM layer: the record sizes of each kind,
 * the window in tokens and pages, the layers of each kind, the errors naming the valid kinds,
 * and the device-slot functions refusing the window kind (a device page holds every attention
 * layer) while taking the KV page whole. */
#define _XOPEN_SOURCE 700

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi/cachepawl.h"
#include "tests/capi/c_test_util.h"

/* Layer 0 full attention, layer 1 SSM, layer 2 a 10-token window (3 pages of 4 tokens): K of
 * either attention layer is TINY_K_BYTES a page. */
static const char kWindowLayoutJson[] =
    "{\"model\": \"test/tiny-window\", \"num_layers\": 3, \"page_size_tokens\": 4,\n"
    " \"attention_layers\": [\n"
    "  {\"layer_index\": 0, \"num_kv_heads\": 2, \"head_dim\": 16, \"dtype\": \"bf16\"},\n"
    "  {\"layer_index\": 2, \"num_kv_heads\": 2, \"head_dim\": 16, \"dtype\": \"bf16\", "
    "\"sliding_window\": 10}],\n"
    " \"ssm_layers\": [\n"
    "  {\"layer_index\": 1, \"block\": \"mamba2\", \"conv_shape\": [8, 3], \"conv_dtype\": "
    "\"bf16\", \"ssm_shape\": [2, 4, 8], \"ssm_dtype\": \"fp32\"}]}\n";

static cachepawl_layout* window_layout(void) {
  cachepawl_layout* l = NULL;
  EXPECT_OK(cachepawl_layout_from_json_string(kWindowLayoutJson, strlen(kWindowLayoutJson), &l));
  if (l == NULL) {
    fprintf(stderr, "cannot parse the window layout: %s\n", cachepawl_last_error());
    exit(2);
  }
  return l;
}

static void test_window_sizes(void) {
  cachepawl_layout* l = window_layout();
  cachepawl_layout* tiny = NULL;
  cachepawl_layout* samba = NULL;
  uint64_t u64 = 0;
  uint64_t kv = 0;
  uint32_t u32 = 0;
  size_t n = 0;

  /* KV: the whole device page (both attention layers); WINDOW_KV the windowed layer's part. */
  EXPECT_OK(cachepawl_layout_record_bytes(l, CACHEPAWL_KIND_KV, &u64));
  CHECK(u64 == 2 * 2 * TINY_K_BYTES);
  EXPECT_OK(cachepawl_layout_record_bytes(l, CACHEPAWL_KIND_WINDOW_KV, &u64));
  CHECK(u64 == 2 * TINY_K_BYTES);
  EXPECT_OK(cachepawl_layout_record_bytes(l, CACHEPAWL_KIND_STATE, &u64));
  CHECK(u64 == TINY_CONV_BYTES + TINY_SSM_BYTES);
  EXPECT_OK(cachepawl_layout_window_tokens(l, &u32));
  CHECK(u32 == 10);
  EXPECT_OK(cachepawl_layout_window_pages(l, &u32));
  CHECK(u32 == 3);

  /* Layers of each kind: KV every attention layer, WINDOW_KV the windowed subset. */
  EXPECT_OK(cachepawl_layout_num_layers_of_kind(l, CACHEPAWL_KIND_KV, &n));
  CHECK(n == 2);
  EXPECT_OK(cachepawl_layout_num_layers_of_kind(l, CACHEPAWL_KIND_WINDOW_KV, &n));
  CHECK(n == 1);
  EXPECT_OK(cachepawl_layout_num_layers_of_kind(l, CACHEPAWL_KIND_STATE, &n));
  CHECK(n == 1);
  EXPECT_OK(cachepawl_layout_layer_index(l, CACHEPAWL_KIND_WINDOW_KV, 0, &u32));
  CHECK(u32 == 2);
  EXPECT_OK(cachepawl_layout_layer_index(l, CACHEPAWL_KIND_KV, 1, &u32));
  CHECK(u32 == 2);
  EXPECT_ERR(cachepawl_layout_layer_index(l, CACHEPAWL_KIND_WINDOW_KV, 1, &u32),
             CACHEPAWL_INVALID_ARGUMENT, "1 sliding-window attention layers");

  /* Bad kinds name the valid values; NULL arguments are named. */
  EXPECT_ERR(cachepawl_layout_record_bytes(l, 3, &u64), CACHEPAWL_INVALID_ARGUMENT,
             "CACHEPAWL_KIND_WINDOW_KV (2)");
  EXPECT_ERR(cachepawl_layout_num_layers_of_kind(l, -1, &n), CACHEPAWL_INVALID_ARGUMENT,
             "kind: -1");
  EXPECT_ERR(cachepawl_layout_window_tokens(NULL, &u32), CACHEPAWL_INVALID_ARGUMENT, "layout");
  EXPECT_ERR(cachepawl_layout_window_pages(l, NULL), CACHEPAWL_INVALID_ARGUMENT, "out");

  /* Without windowed layers: no window, a 0-byte window record, no windowed layers. */
  EXPECT_OK(cachepawl_layout_from_json_string(kTinyLayoutJson, strlen(kTinyLayoutJson), &tiny));
  EXPECT_OK(cachepawl_layout_record_bytes(tiny, CACHEPAWL_KIND_WINDOW_KV, &u64));
  CHECK(u64 == 0);
  EXPECT_OK(cachepawl_layout_record_bytes(tiny, CACHEPAWL_KIND_KV, &u64));
  CHECK(u64 == TINY_KV_RECORD);
  EXPECT_OK(cachepawl_layout_window_tokens(tiny, &u32));
  CHECK(u32 == 0);
  EXPECT_OK(cachepawl_layout_window_pages(tiny, &u32));
  CHECK(u32 == 0);
  EXPECT_OK(cachepawl_layout_num_layers_of_kind(tiny, CACHEPAWL_KIND_WINDOW_KV, &n));
  CHECK(n == 0);

  /* Every attention layer windowed (samba-1.3b): the window record is the whole KV page. */
  EXPECT_OK(cachepawl_layout_from_preset("samba-1.3b", 16, &samba));
  EXPECT_OK(cachepawl_layout_record_bytes(samba, CACHEPAWL_KIND_KV, &kv));
  EXPECT_OK(cachepawl_layout_record_bytes(samba, CACHEPAWL_KIND_WINDOW_KV, &u64));
  CHECK(kv > 0 && u64 == kv);
  EXPECT_OK(cachepawl_layout_window_pages(samba, &u32));
  CHECK(u32 == 2048 / 16);

  cachepawl_layout_free(samba);
  cachepawl_layout_free(tiny);
  cachepawl_layout_free(l);
}

/* A store-owned pool of the window layout: slots of kind KV are whole pages; WINDOW_KV is
 * refused by every device-slot function, naming the kind to use. */
static void test_window_device_slots(void) {
  cachepawl_options* o = NULL;
  cachepawl_store* s = NULL;
  uint8_t record[2 * 2 * TINY_K_BYTES];
  uint8_t back[sizeof record];
  uint64_t slot = 0;
  EXPECT_OK(cachepawl_options_new(&o));
  EXPECT_OK(
      cachepawl_options_set_layout_json_string(o, kWindowLayoutJson, strlen(kWindowLayoutJson)));
  EXPECT_OK(cachepawl_options_set_host_bytes(o, 16u << 20));
  EXPECT_OK(cachepawl_options_set_cuda_device(o, test_cuda_device()));
  EXPECT_OK(cachepawl_options_set_staging_bytes(o, 1u << 20));
  EXPECT_OK(cachepawl_options_set_device_pool_bytes(o, 1u << 20));
  EXPECT_OK(cachepawl_store_open(o, &s));
  cachepawl_options_free(o);
  if (s == NULL) {
    fprintf(stderr, "cannot open the window store: %s\n", cachepawl_last_error());
    exit(2);
  }
  EXPECT_ERR(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_WINDOW_KV, &slot),
             CACHEPAWL_INVALID_ARGUMENT, "use kind kv");
  EXPECT_ERR(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_WINDOW_KV, 0),
             CACHEPAWL_INVALID_ARGUMENT, "kind: window");
  EXPECT_ERR(
      cachepawl_store_write_device_record(s, CACHEPAWL_KIND_WINDOW_KV, 0, record, 2 * TINY_K_BYTES),
      CACHEPAWL_INVALID_ARGUMENT, "kind: window");
  EXPECT_ERR(
      cachepawl_store_read_device_record(s, CACHEPAWL_KIND_WINDOW_KV, 0, back, 2 * TINY_K_BYTES),
      CACHEPAWL_INVALID_ARGUMENT, "kind: window");
  EXPECT_ERR(cachepawl_store_allocate_device_slot(s, 3, &slot), CACHEPAWL_INVALID_ARGUMENT,
             "CACHEPAWL_KIND_WINDOW_KV (2)");

  /* A KV slot takes the whole page (record_bytes of KV), windowed layer included. */
  EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &slot));
  fill_bytes(record, sizeof record, 71);
  memset(back, 0, sizeof back);
  EXPECT_OK(cachepawl_store_write_device_record(s, CACHEPAWL_KIND_KV, slot, record, sizeof record));
  EXPECT_OK(cachepawl_store_read_device_record(s, CACHEPAWL_KIND_KV, slot, back, sizeof back));
  CHECK(memcmp(record, back, sizeof record) == 0);
  EXPECT_ERR(
      cachepawl_store_write_device_record(s, CACHEPAWL_KIND_KV, slot, record, 2 * TINY_K_BYTES),
      CACHEPAWL_INVALID_ARGUMENT, "record: 512 bytes");
  EXPECT_OK(cachepawl_store_free_device_slot(s, CACHEPAWL_KIND_KV, slot));

  /* 5 pages and the state at 5: the match names the window, pages 2..4, all in host memory. */
  {
    enum { kPages = 5 };
    uint64_t pages[kPages], dst[kPages], state = 0, dst_state = 0;
    uint32_t tokens[kPages * 4];
    cachepawl_tier tiers[8];
    size_t n = 0, first = 0;
    cachepawl_match* m = NULL;
    fill_tokens(tokens, kPages * 4, 300);
    for (size_t i = 0; i < kPages; ++i) {
      EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &pages[i]));
      EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_KV, &dst[i]));
      fill_bytes(record, sizeof record, 80 + i);
      EXPECT_OK(cachepawl_store_write_device_record(s, CACHEPAWL_KIND_KV, pages[i], record,
                                                    sizeof record));
    }
    EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_STATE, &state));
    EXPECT_OK(cachepawl_store_allocate_device_slot(s, CACHEPAWL_KIND_STATE, &dst_state));
    save_and_load_back(s, NULL, tokens, kPages, 4, pages, state, dst, dst_state);
    EXPECT_OK(cachepawl_store_lookup(s, NULL, 0, tokens, kPages * 4, &m));
    EXPECT_OK(cachepawl_match_window_first_page(m, &first));
    CHECK(first == 2);
    EXPECT_OK(cachepawl_match_window_tiers(m, tiers, 8, &n));
    CHECK(n == 3 && tiers[0] == CACHEPAWL_TIER_HOST && tiers[2] == CACHEPAWL_TIER_HOST);
    /* The windowed layer of page 4 arrived; the full layer of page 0 too. */
    fill_bytes(record, sizeof record, 84);
    EXPECT_OK(cachepawl_store_read_device_record(s, CACHEPAWL_KIND_KV, dst[4], back, sizeof back));
    CHECK(memcmp(record, back, sizeof record) == 0);
    fill_bytes(record, sizeof record, 80);
    EXPECT_OK(cachepawl_store_read_device_record(s, CACHEPAWL_KIND_KV, dst[0], back, sizeof back));
    CHECK(memcmp(record, back, 2 * TINY_K_BYTES) == 0);
    EXPECT_ERR(cachepawl_match_window_tiers(NULL, tiers, 8, &n), CACHEPAWL_INVALID_ARGUMENT,
               "match");
    cachepawl_match_free(m);
  }
  cachepawl_store_free(s);
}

void test_window_layouts(void) {
  test_window_sizes();
  test_window_device_slots();
}
