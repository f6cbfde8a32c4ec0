/* The C ABI test, part 5: layouts from Hugging Face config.json text and files, their bad
 * arguments (each INVALID_ARGUMENT naming the argument), a rank's share of a layout
 * (cachepawl_layout_shard), and a store of an LFM2 layout (short
 * convolution layers: a conv state and no SSM state) whose engine pool has no SSM tensor for
 * them (ssm_base NULL) round-tripping a state and pages through save and load. */
#define _XOPEN_SOURCE 700

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi/cachepawl.h"
#include "tests/capi/c_test_util.h"

/* LFM2 with 4-token pages: layers 0 and 2 short convolutions (conv [64, 3] bf16 = 384 bytes,
 * no SSM state), layers 1 and 3 attention (2 KV heads of 16: 4 * 2 * 16 * 2 = 256 bytes of K a
 * page). */
static const char kDeepseek[] = "{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 2}";
static const char kLfm2[] =
    "{\"model_type\": \"lfm2\", \"_name_or_path\": \"test/lfm2\", \"hidden_size\": 64, "
    "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
    "\"layer_types\": [\"conv\", \"full_attention\", \"conv\", \"full_attention\"], "
    "\"conv_L_cache\": 3}";
#define LFM2_PAGE 4u
#define LFM2_K_BYTES 256u
#define LFM2_CONV_BYTES 384u

static void layouts_from_configs(void) {
  static const char kGpt2[] = "{\"model_type\": \"gpt2\"}";
  static const char kNoKv[] = "{\"model_type\": \"lfm2\", \"num_key_value_heads\": 0}";
  cachepawl_layout* l = NULL;
  char* json = NULL;
  char* types = NULL;
  uint64_t u64 = 0;
  size_t n = 0;
  char path[64];
  FILE* f;

  EXPECT_OK(cachepawl_layout_from_hf_config_string(kLfm2, strlen(kLfm2), NULL, NULL, NULL,
                                                   LFM2_PAGE, NULL, &l));
  EXPECT_OK(cachepawl_layout_num_layers_of_kind(l, CACHEPAWL_KIND_STATE, &n));
  CHECK(n == 2);
  EXPECT_OK(cachepawl_layout_conv_state_bytes(l, 1, &u64));
  CHECK(u64 == LFM2_CONV_BYTES);
  EXPECT_OK(cachepawl_layout_ssm_state_bytes(l, 1, &u64));
  CHECK(u64 == 0);
  EXPECT_OK(cachepawl_layout_k_bytes_per_page(l, 0, &u64));
  CHECK(u64 == LFM2_K_BYTES);
  EXPECT_OK(cachepawl_layout_to_json(l, &json));
  CHECK(json != NULL && strstr(json, "\"model\": \"test/lfm2\"") != NULL);
  CHECK(json != NULL && strstr(json, "\"block\":\"shortconv\",\"conv_shape\":[64,3]") != NULL);
  cachepawl_string_free(json);
  cachepawl_layout_free(l);

  /* DeepSeek V3: every layer one MLA latent of 512 + 64 values per token, no V. */
  EXPECT_OK(cachepawl_layout_from_hf_config_string(kDeepseek, strlen(kDeepseek), NULL, NULL, NULL,
                                                   16, NULL, &l));
  EXPECT_OK(cachepawl_layout_k_bytes_per_page(l, 1, &u64));
  CHECK(u64 == 16 * 576 * 2);
  EXPECT_OK(cachepawl_layout_v_bytes_per_page(l, 1, &u64));
  CHECK(u64 == 0);
  EXPECT_OK(cachepawl_layout_to_json(l, &json));
  CHECK(json != NULL && strstr(json,
                               "\"head_dim\":576,\"dtype\":\"bf16\",\"sliding_window\":0,"
                               "\"mla\":true") != NULL);
  cachepawl_string_free(json);
  cachepawl_layout_free(l);

  /* Dtypes, the sglang width, the page size and the name. */
  EXPECT_OK(cachepawl_layout_from_hf_config_string(kLfm2, strlen(kLfm2), "float32", "bf16",
                                                   "sglang", 8, "mine", &l));
  EXPECT_OK(cachepawl_layout_conv_state_bytes(l, 0, &u64));
  CHECK(u64 == 64 * 2 * 4); /* [64, 2] fp32 */
  EXPECT_OK(cachepawl_layout_k_bytes_per_page(l, 0, &u64));
  CHECK(u64 == 8 * 2 * 16 * 4);
  EXPECT_OK(cachepawl_layout_to_json(l, &json));
  CHECK(json != NULL && strstr(json, "\"model\": \"mine\"") != NULL);
  cachepawl_string_free(json);
  cachepawl_layout_free(l);

  /* A file; errors start "hf config PATH". */
  snprintf(path, sizeof path, "/tmp/cachepawl-c-hf-%d.json", (int)getpid());
  f = fopen(path, "w");
  CHECK(f != NULL);
  if (f != NULL) {
    fputs(kLfm2, f);
    fclose(f);
  }
  EXPECT_OK(cachepawl_layout_from_hf_config_file(path, "bf16", "fp32", "transformers", LFM2_PAGE,
                                                 NULL, &l));
  EXPECT_OK(cachepawl_layout_record_bytes(l, CACHEPAWL_KIND_STATE, &u64));
  CHECK(u64 == 2 * LFM2_CONV_BYTES);
  cachepawl_layout_free(l);
  remove(path);
  l = (cachepawl_layout*)1;
  EXPECT_ERR(cachepawl_layout_from_hf_config_file(path, NULL, NULL, NULL, 16, NULL, &l),
             CACHEPAWL_NOT_FOUND, "hf config /tmp/cachepawl-c-hf-");
  CHECK(l == NULL);

  /* Bad arguments, each named. */
  EXPECT_ERR(cachepawl_layout_from_hf_config_string(kLfm2, strlen(kLfm2), NULL, NULL, NULL, 16,
                                                    NULL, NULL),
             CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_layout_from_hf_config_string(NULL, 5, NULL, NULL, NULL, 16, NULL, &l),
             CACHEPAWL_INVALID_ARGUMENT, "json: null with len 5");
  EXPECT_ERR(cachepawl_layout_from_hf_config_string(NULL, 0, NULL, NULL, NULL, 16, NULL, &l),
             CACHEPAWL_INVALID_ARGUMENT, "line 1, column 1");
  EXPECT_ERR(cachepawl_layout_from_hf_config_file(NULL, NULL, NULL, NULL, 16, NULL, &l),
             CACHEPAWL_INVALID_ARGUMENT, "path: null");
  EXPECT_ERR(cachepawl_layout_from_hf_config_file(path, NULL, NULL, NULL, 16, NULL, NULL),
             CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_layout_from_hf_config_string(kLfm2, strlen(kLfm2), "fp13", NULL, NULL, 16,
                                                    NULL, &l),
             CACHEPAWL_INVALID_ARGUMENT, "cache_dtype: 'fp13' (unknown dtype");
  EXPECT_ERR(cachepawl_layout_from_hf_config_string(kLfm2, strlen(kLfm2), NULL, "double", NULL, 16,
                                                    NULL, &l),
             CACHEPAWL_INVALID_ARGUMENT, "state_dtype: 'double' (unknown dtype");
  EXPECT_ERR(cachepawl_layout_from_hf_config_file(path, NULL, "x", NULL, 16, NULL, &l),
             CACHEPAWL_INVALID_ARGUMENT, "state_dtype: 'x'");
  EXPECT_ERR(cachepawl_layout_from_hf_config_string(kLfm2, strlen(kLfm2), NULL, NULL, "vllm", 16,
                                                    NULL, &l),
             CACHEPAWL_INVALID_ARGUMENT, "convention: 'vllm' (expected transformers or sglang)");
  EXPECT_ERR(
      cachepawl_layout_from_hf_config_string(kLfm2, strlen(kLfm2), NULL, NULL, NULL, 0, NULL, &l),
      CACHEPAWL_INVALID_ARGUMENT, "page_size_tokens: 0 (must be > 0)");
  EXPECT_ERR(
      cachepawl_layout_from_hf_config_string(kGpt2, strlen(kGpt2), NULL, NULL, NULL, 16, NULL, &l),
      CACHEPAWL_INVALID_ARGUMENT, "model_type: 'gpt2'");
  EXPECT_ERR(
      cachepawl_layout_from_hf_config_string(kNoKv, strlen(kNoKv), NULL, NULL, NULL, 16, NULL, &l),
      CACHEPAWL_INVALID_ARGUMENT, "num_key_value_heads: 0 (must be > 0)");
  CHECK(l == NULL);

  EXPECT_OK(cachepawl_layout_hf_model_types(&types));
  CHECK(types != NULL && strstr(types, "jamba\n") != NULL && strstr(types, "lfm2\n") != NULL);
  cachepawl_string_free(types);
  EXPECT_ERR(cachepawl_layout_hf_model_types(NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
}

/* Rank shares of the LFM2 layout: 2 KV heads and 64 conv channels split 2 ways (one head, 32
 * channels a rank) and 4 ways (the KV head replicated, 16 channels); impossible splits and bad
 * arguments name the field. */
static void rank_shares(void) {
  cachepawl_layout* whole = NULL;
  cachepawl_layout* rank = NULL;
  cachepawl_layout* again = NULL;
  uint32_t size = 0, r = 9;
  uint64_t u64 = 0;

  EXPECT_OK(cachepawl_layout_from_hf_config_string(kLfm2, strlen(kLfm2), NULL, NULL, "sglang",
                                                   LFM2_PAGE, NULL, &whole));
  EXPECT_OK(cachepawl_layout_tp(whole, &size, &r));
  CHECK(size == 1 && r == 0);
  EXPECT_OK(cachepawl_layout_shard(whole, 2, 1, &rank));
  EXPECT_OK(cachepawl_layout_tp(rank, &size, &r));
  CHECK(size == 2 && r == 1);
  EXPECT_OK(cachepawl_layout_k_bytes_per_page(rank, 0, &u64));
  CHECK(u64 == LFM2_K_BYTES / 2);
  EXPECT_OK(cachepawl_layout_conv_state_bytes(rank, 0, &u64));
  CHECK(u64 == 32 * 2 * 2); /* [32, 2] bf16 */
  EXPECT_ERR(cachepawl_layout_shard(rank, 2, 0, &again), CACHEPAWL_INVALID_ARGUMENT,
             "already one rank's");
  CHECK(again == NULL);
  cachepawl_layout_free(rank);
  rank = NULL;
  EXPECT_OK(cachepawl_layout_shard(whole, 4, 3, &rank));
  EXPECT_OK(cachepawl_layout_k_bytes_per_page(rank, 0, &u64));
  CHECK(u64 == LFM2_K_BYTES / 2); /* one head of two, replicated */
  EXPECT_OK(cachepawl_layout_conv_state_bytes(rank, 0, &u64));
  CHECK(u64 == 16 * 2 * 2);
  cachepawl_layout_free(rank);
  rank = NULL;
  EXPECT_ERR(cachepawl_layout_shard(whole, 3, 0, &rank), CACHEPAWL_INVALID_ARGUMENT,
             "attention_layers[0].num_kv_heads: 2 (tp_size 3 neither divides it");
  EXPECT_ERR(cachepawl_layout_shard(whole, 0, 0, &rank), CACHEPAWL_INVALID_ARGUMENT, "tp_size: 0");
  EXPECT_ERR(cachepawl_layout_shard(whole, 2, 2, &rank), CACHEPAWL_INVALID_ARGUMENT,
             "tp_rank: 2 (must be < tp_size 2)");
  EXPECT_ERR(cachepawl_layout_shard(NULL, 2, 0, &rank), CACHEPAWL_INVALID_ARGUMENT, "whole: null");
  EXPECT_ERR(cachepawl_layout_shard(whole, 2, 0, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_layout_tp(whole, NULL, &r), CACHEPAWL_INVALID_ARGUMENT, "tp_size: null");
  EXPECT_ERR(cachepawl_layout_tp(whole, &size, NULL), CACHEPAWL_INVALID_ARGUMENT, "tp_rank: null");
  CHECK(rank == NULL);
  /* A store of a rank's layout is a tensor-parallel group's: it opens as that rank (its saves
   * and loads move rank 1's shares; the other ranks attach with theirs). */
  {
    cachepawl_options* o = NULL;
    cachepawl_store* s = NULL;
    cachepawl_layout* got = NULL;
    EXPECT_OK(cachepawl_layout_shard(whole, 2, 1, &rank));
    EXPECT_OK(cachepawl_options_new(&o));
    EXPECT_OK(cachepawl_options_set_layout(o, rank));
    EXPECT_OK(cachepawl_options_set_host_bytes(o, 1u << 20));
    EXPECT_OK(cachepawl_options_set_cuda_device(o, -1));
    EXPECT_OK(cachepawl_store_open(o, &s));
    EXPECT_OK(cachepawl_store_layout(s, &got));
    EXPECT_OK(cachepawl_layout_tp(got, &size, &r));
    CHECK(size == 2 && r == 1);
    cachepawl_layout_free(got);
    cachepawl_store_free(s);
    cachepawl_options_free(o);
    cachepawl_layout_free(rank);
  }
  cachepawl_layout_free(whole);
}

/* A store of the LFM2 layout with an engine pool per layer and NULL ssm_base for its shortconv
 * layers: pages 0..1 and state slot 0 saved, loaded into pages 2..3 and slot 1. */
static void shortconv_engine_pool(void) {
  enum { kPages = 4, kSlots = 2 };
  static uint8_t k[2][kPages * LFM2_K_BYTES], v[2][kPages * LFM2_K_BYTES];
  static uint8_t conv[2][kSlots * LFM2_CONV_BYTES];
  cachepawl_layout* l = NULL;
  cachepawl_options* o = NULL;
  cachepawl_store* s = NULL;
  cachepawl_pool* p = NULL;
  uint32_t tokens[2 * LFM2_PAGE];
  const uint64_t src[2] = {0, 1}, dst[2] = {2, 3};
  size_t a;

  EXPECT_OK(cachepawl_layout_from_hf_config_string(kLfm2, strlen(kLfm2), NULL, NULL, NULL,
                                                   LFM2_PAGE, NULL, &l));
  EXPECT_OK(cachepawl_options_new(&o));
  EXPECT_OK(cachepawl_options_set_layout(o, l));
  EXPECT_OK(cachepawl_options_set_host_bytes(o, 4u << 20));
  EXPECT_OK(cachepawl_options_set_cuda_device(o, -1));
  EXPECT_OK(cachepawl_options_set_staging_bytes(o, 1u << 20));
  EXPECT_OK(cachepawl_store_open(o, &s));
  cachepawl_options_free(o);
  cachepawl_layout_free(l);
  if (s == NULL) return;

  EXPECT_OK(cachepawl_pool_new(-1, kPages, kSlots, &p));
  for (a = 0; a < 2; ++a) {
    EXPECT_OK(cachepawl_pool_set_kv_layer(p, a, k[a], 0, v[a], 0));
    EXPECT_OK(cachepawl_pool_set_ssm_layer(p, a, conv[a], 0, NULL, 0));
  }
  EXPECT_OK(cachepawl_store_register_device_pool(s, p));
  cachepawl_pool_free(p);

  for (a = 0; a < 2; ++a) {
    fill_bytes(k[a], 2 * LFM2_K_BYTES, 900 + a);
    fill_bytes(v[a], 2 * LFM2_K_BYTES, 910 + a);
    fill_bytes(conv[a], LFM2_CONV_BYTES, 920 + a);
  }
  fill_tokens(tokens, 2 * LFM2_PAGE, 77);
  save_and_load_back(s, NULL, tokens, 2, LFM2_PAGE, src, 0, dst, 1);
  for (a = 0; a < 2; ++a) {
    CHECK(memcmp(k[a] + 2 * LFM2_K_BYTES, k[a], 2 * LFM2_K_BYTES) == 0);
    CHECK(memcmp(v[a] + 2 * LFM2_K_BYTES, v[a], 2 * LFM2_K_BYTES) == 0);
    CHECK(memcmp(conv[a] + LFM2_CONV_BYTES, conv[a], LFM2_CONV_BYTES) == 0);
  }
  cachepawl_store_free(s);
}

void test_hf_layouts(void) {
  layouts_from_configs();
  rank_shares();
  shortconv_engine_pool();
}
