/* The C ABI test (capi/cachepawl.h), compiled as C99 with warnings as errors: calls every
 * function of the header, from here and from cachepawl_c_test_store.c / _pools.c, checking
 * every status and that error messages name the argument at fault. Prints "N passed, N failed"
 * and exits non-zero on any failure. This file: the harness, the library calls, layouts and
 * options. CPU mode unless CACHEPAWL_C_TEST_CUDA_DEVICE names a GPU (the store-owned pools are
 * then in VRAM; the engine pools stay in host memory). */
#define _XOPEN_SOURCE 700

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi/cachepawl.h"
#include "tests/capi/c_test_util.h"

int g_passed = 0;
int g_failed = 0;

const char kTinyLayoutJson[] =
    "{\"model\": \"test/tiny-hybrid\", \"num_layers\": 4, \"page_size_tokens\": 4,\n"
    " \"attention_layers\": [\n"
    "  {\"layer_index\": 0, \"num_kv_heads\": 2, \"head_dim\": 16, \"dtype\": \"bf16\"},\n"
    "  {\"layer_index\": 2, \"num_kv_heads\": 2, \"head_dim\": 16, \"dtype\": \"bf16\"}],\n"
    " \"ssm_layers\": [\n"
    "  {\"layer_index\": 1, \"block\": \"mamba2\", \"conv_shape\": [8, 3], \"conv_dtype\": "
    "\"bf16\", \"ssm_shape\": [2, 4, 8], \"ssm_dtype\": \"fp32\"},\n"
    "  {\"layer_index\": 3, \"block\": \"mamba2\", \"conv_shape\": [8, 3], \"conv_dtype\": "
    "\"bf16\", \"ssm_shape\": [2, 4, 8], \"ssm_dtype\": \"fp32\"}]}\n";

void check(int ok, const char* what, int line) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  fprintf(stderr, "FAILED line %d: %s (last error: %s)\n", line, what, cachepawl_last_error());
}

void expect_code(cachepawl_status got, cachepawl_status code, const char* needle, const char* what,
                 int line) {
  const char* msg = cachepawl_last_error();
  if (got != code) {
    ++g_failed;
    fprintf(stderr, "FAILED line %d: %s returned %s, expected %s (last error: %s)\n", line, what,
            cachepawl_status_name(got), cachepawl_status_name(code), msg);
    return;
  }
  if (needle != NULL && strstr(msg, needle) == NULL) {
    ++g_failed;
    fprintf(stderr, "FAILED line %d: %s: message '%s' does not name '%s'\n", line, what, msg,
            needle);
    return;
  }
  ++g_passed;
}

void fill_bytes(uint8_t* out, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  size_t i;
  for (i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = (uint8_t)(x >> 56);
  }
}

void fill_tokens(uint32_t* out, size_t n, uint32_t first) {
  size_t i;
  for (i = 0; i < n; ++i) out[i] = first + (uint32_t)i;
}

void make_temp_dir(char* path, size_t capacity) {
  snprintf(path, capacity, "/tmp/cachepawl-c-test-XXXXXX");
  if (mkdtemp(path) == NULL) {
    perror("mkdtemp");
    exit(2);
  }
}

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void remove_tree(const char* path) { (void)nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

int32_t test_cuda_device(void) {
  const char* env = getenv("CACHEPAWL_C_TEST_CUDA_DEVICE");
  return env != NULL && env[0] != '\0' ? (int32_t)atoi(env) : -1;
}

cachepawl_store* open_tiny_store(const char* disk_dir, uint64_t device_pool_bytes) {
  cachepawl_options* o = NULL;
  cachepawl_store* s = NULL;
  EXPECT_OK(cachepawl_options_new(&o));
  EXPECT_OK(cachepawl_options_set_layout_json_string(o, kTinyLayoutJson, strlen(kTinyLayoutJson)));
  EXPECT_OK(cachepawl_options_set_host_bytes(o, 16u << 20));
  EXPECT_OK(cachepawl_options_set_cuda_device(o, test_cuda_device()));
  EXPECT_OK(cachepawl_options_set_staging_bytes(o, 1u << 20));
  EXPECT_OK(cachepawl_options_set_track_interval_pages(o, 2));
  EXPECT_OK(cachepawl_options_set_device_pool_bytes(o, device_pool_bytes));
  if (disk_dir != NULL) {
    EXPECT_OK(cachepawl_options_set_disk_dir(o, disk_dir));
    EXPECT_OK(cachepawl_options_set_disk_bytes(o, 64u << 20));
    EXPECT_OK(cachepawl_options_set_disk_queue_depth(o, 8));
    EXPECT_OK(cachepawl_options_set_write_policy(o, CACHEPAWL_WRITE_THROUGH));
  }
  EXPECT_OK(cachepawl_store_open(o, &s));
  cachepawl_options_free(o);
  if (s == NULL) {
    fprintf(stderr, "cannot open the tiny store: %s\n", cachepawl_last_error());
    exit(2);
  }
  return s;
}

void save_and_load_back(cachepawl_store* s, const char* ns, const uint32_t* tokens,
                        size_t num_pages, uint32_t page_size, const uint64_t* src,
                        uint64_t src_slot, const uint64_t* dst, uint64_t dst_slot) {
  const size_t ns_len = ns == NULL ? 0 : strlen(ns);
  const size_t num_tokens = num_pages * page_size;
  cachepawl_match* m = NULL;
  cachepawl_fence* f = NULL;
  size_t n = 0;
  EXPECT_OK(cachepawl_store_save(s, ns, ns_len, tokens, num_tokens, 0, src, num_pages, src_slot,
                                 num_tokens, &f));
  EXPECT_OK(cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  cachepawl_fence_free(f);
  f = NULL;
  EXPECT_OK(cachepawl_store_lookup(s, ns, ns_len, tokens, num_tokens, &m));
  EXPECT_OK(cachepawl_match_reusable_pages(m, &n));
  CHECK(n == num_pages);
  EXPECT_OK(cachepawl_store_load(s, m, dst, num_pages, dst_slot, 0, 0, &f));
  EXPECT_OK(cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  cachepawl_fence_free(f);
  cachepawl_match_free(m);
}

void test_library_and_layouts(void) {
  static const char kBadDtype[] =
      "{\"model\": \"m\", \"num_layers\": 1, \"attention_layers\": [{\"layer_index\": 0, "
      "\"num_kv_heads\": 1, \"head_dim\": 8, \"dtype\": \"fp13\"}]}";
  unsigned major = 0, minor = 0, patch = 0;
  char* names = NULL;
  char* json = NULL;
  cachepawl_layout* l = NULL;
  cachepawl_layout* again = NULL;
  uint8_t fp[32], fp2[32];
  uint64_t u64 = 0;
  uint32_t u32 = 0;
  size_t n = 0;
  char path[64];
  FILE* f;

  CHECK(sscanf(cachepawl_version(), "%u.%u.%u", &major, &minor, &patch) == 3);
  CHECK(cachepawl_version_number() == major * 10000u + minor * 100u + patch);
  CHECK(cachepawl_abi_version() == CACHEPAWL_ABI_VERSION);
  CHECK(strcmp(cachepawl_last_error(), "") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_OK), "OK") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_INVALID_ARGUMENT), "InvalidArgument") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_NOT_FOUND), "NotFound") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_CORRUPTION), "Corruption") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_IO_ERROR), "IOError") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_NO_SPACE), "NoSpace") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_BUSY), "Busy") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_UNAVAILABLE), "Unavailable") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_FAILED_PRECONDITION), "FailedPrecondition") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_TIMED_OUT), "TimedOut") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_ABORTED), "Aborted") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_INTERNAL), "Internal") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_INCOMPATIBLE), "Incompatible") == 0);
  CHECK(strcmp(cachepawl_status_name(CACHEPAWL_OUT_OF_MEMORY), "OutOfMemory") == 0);
  CHECK(strcmp(cachepawl_status_name(99), "Unknown") == 0);
  CHECK(strcmp(cachepawl_status_name(-1), "Unknown") == 0);
  cachepawl_string_free(NULL);
  CHECK(cachepawl_store_last_error(NULL) == NULL);

  /* Presets. */
  EXPECT_OK(cachepawl_layout_preset_names(&names));
  CHECK(names != NULL && strstr(names, "jamba-v0.1\n") != NULL);
  cachepawl_string_free(names);
  EXPECT_ERR(cachepawl_layout_preset_names(NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_OK(cachepawl_layout_from_preset("jamba-v0.1", 16, &l));
  EXPECT_OK(cachepawl_layout_page_size_tokens(l, &u32));
  CHECK(u32 == 16);
  cachepawl_layout_free(l);
  l = (cachepawl_layout*)1;
  EXPECT_ERR(cachepawl_layout_from_preset("no-such-model", 16, &l), CACHEPAWL_NOT_FOUND,
             "no-such-model");
  CHECK(l == NULL);
  EXPECT_ERR(cachepawl_layout_from_preset("jamba-v0.1", 0, &l), CACHEPAWL_INVALID_ARGUMENT,
             "page_size_tokens: 0");
  EXPECT_ERR(cachepawl_layout_from_preset(NULL, 16, &l), CACHEPAWL_INVALID_ARGUMENT, "name: null");
  EXPECT_ERR(cachepawl_layout_from_preset("jamba-v0.1", 16, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "out: null");
  cachepawl_layout_free(NULL);

  /* JSON text: the tiny layout and its sizes. */
  EXPECT_OK(cachepawl_layout_from_json_string(kTinyLayoutJson, strlen(kTinyLayoutJson), &l));
  EXPECT_OK(cachepawl_layout_page_size_tokens(l, &u32));
  CHECK(u32 == TINY_PAGE);
  EXPECT_OK(cachepawl_layout_record_bytes(l, CACHEPAWL_KIND_KV, &u64));
  CHECK(u64 == TINY_KV_RECORD);
  EXPECT_OK(cachepawl_layout_record_bytes(l, CACHEPAWL_KIND_STATE, &u64));
  CHECK(u64 == TINY_STATE_RECORD);
  EXPECT_ERR(cachepawl_layout_record_bytes(l, 7, &u64), CACHEPAWL_INVALID_ARGUMENT, "kind: 7");
  EXPECT_OK(cachepawl_layout_num_layers(l, &u32));
  CHECK(u32 == 4);
  EXPECT_OK(cachepawl_layout_num_layers_of_kind(l, CACHEPAWL_KIND_KV, &n));
  CHECK(n == 2);
  EXPECT_OK(cachepawl_layout_num_layers_of_kind(l, CACHEPAWL_KIND_STATE, &n));
  CHECK(n == 2);
  EXPECT_ERR(cachepawl_layout_num_layers_of_kind(l, -3, &n), CACHEPAWL_INVALID_ARGUMENT, "kind");
  EXPECT_OK(cachepawl_layout_layer_index(l, CACHEPAWL_KIND_KV, 1, &u32));
  CHECK(u32 == 2);
  EXPECT_OK(cachepawl_layout_layer_index(l, CACHEPAWL_KIND_STATE, 0, &u32));
  CHECK(u32 == 1);
  EXPECT_ERR(cachepawl_layout_layer_index(l, CACHEPAWL_KIND_KV, 2, &u32),
             CACHEPAWL_INVALID_ARGUMENT, "i: 2");
  EXPECT_OK(cachepawl_layout_k_bytes_per_page(l, 0, &u64));
  CHECK(u64 == TINY_K_BYTES);
  EXPECT_ERR(cachepawl_layout_k_bytes_per_page(l, 5, &u64), CACHEPAWL_INVALID_ARGUMENT, "i: 5");
  EXPECT_OK(cachepawl_layout_v_bytes_per_page(l, 1, &u64));
  CHECK(u64 == TINY_K_BYTES);
  EXPECT_ERR(cachepawl_layout_v_bytes_per_page(l, 2, &u64), CACHEPAWL_INVALID_ARGUMENT, "i: 2");
  EXPECT_OK(cachepawl_layout_conv_state_bytes(l, 1, &u64));
  CHECK(u64 == TINY_CONV_BYTES);
  EXPECT_ERR(cachepawl_layout_conv_state_bytes(l, 2, &u64), CACHEPAWL_INVALID_ARGUMENT, "i: 2");
  EXPECT_OK(cachepawl_layout_ssm_state_bytes(l, 1, &u64));
  CHECK(u64 == TINY_SSM_BYTES);
  EXPECT_ERR(cachepawl_layout_ssm_state_bytes(l, 9, &u64), CACHEPAWL_INVALID_ARGUMENT, "i: 9");
  EXPECT_OK(cachepawl_layout_fingerprint(l, fp, sizeof fp));
  EXPECT_ERR(cachepawl_layout_fingerprint(l, fp, 31), CACHEPAWL_INVALID_ARGUMENT, "capacity: 31");
  EXPECT_ERR(cachepawl_layout_fingerprint(l, NULL, 32), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_ERR(cachepawl_layout_page_size_tokens(NULL, &u32), CACHEPAWL_INVALID_ARGUMENT,
             "layout: null");
  EXPECT_ERR(cachepawl_layout_num_layers(l, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");

  /* Canonical JSON round-trips through a file. */
  EXPECT_OK(cachepawl_layout_to_json(l, &json));
  EXPECT_ERR(cachepawl_layout_to_json(l, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  snprintf(path, sizeof path, "/tmp/cachepawl-c-test-layout-%d.json", (int)getpid());
  f = fopen(path, "w");
  CHECK(f != NULL);
  if (f != NULL) {
    fputs(json, f);
    fclose(f);
  }
  cachepawl_string_free(json);
  EXPECT_OK(cachepawl_layout_from_json_file(path, &again));
  EXPECT_OK(cachepawl_layout_fingerprint(again, fp2, sizeof fp2));
  CHECK(memcmp(fp, fp2, sizeof fp) == 0);
  cachepawl_layout_free(again);
  remove(path);
  EXPECT_ERR(cachepawl_layout_from_json_file(path, &again), CACHEPAWL_NOT_FOUND, path);
  EXPECT_ERR(cachepawl_layout_from_json_file(NULL, &again), CACHEPAWL_INVALID_ARGUMENT,
             "path: null");

  /* Bad JSON: syntax, a bad value, a null pointer with a length. */
  EXPECT_ERR(cachepawl_layout_from_json_string("{\"model\": ", 10, &again),
             CACHEPAWL_INVALID_ARGUMENT, "line");
  EXPECT_ERR(cachepawl_layout_from_json_string(kBadDtype, strlen(kBadDtype), &again),
             CACHEPAWL_INVALID_ARGUMENT, "fp13");
  EXPECT_ERR(cachepawl_layout_from_json_string(NULL, 5, &again), CACHEPAWL_INVALID_ARGUMENT,
             "json: null with len 5");
  CHECK(again == NULL);
  cachepawl_layout_free(l);
}

void test_options(void) {
  cachepawl_options* o = NULL;
  cachepawl_layout* l = NULL;
  cachepawl_store* s = (cachepawl_store*)1;

  EXPECT_ERR(cachepawl_options_new(NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");
  EXPECT_OK(cachepawl_options_new(&o));
  /* No layout yet. */
  EXPECT_ERR(cachepawl_options_validate(o), CACHEPAWL_INVALID_ARGUMENT, "layout");
  EXPECT_ERR(cachepawl_store_open(o, &s), CACHEPAWL_INVALID_ARGUMENT, "layout");
  CHECK(s == NULL);
  EXPECT_ERR(cachepawl_store_open(NULL, &s), CACHEPAWL_INVALID_ARGUMENT, "options: null");
  EXPECT_ERR(cachepawl_store_open(o, NULL), CACHEPAWL_INVALID_ARGUMENT, "out: null");

  /* Every setter's bad values, naming the field and value. */
  EXPECT_ERR(cachepawl_options_set_layout_preset(o, "nope", 16), CACHEPAWL_NOT_FOUND, "nope");
  EXPECT_ERR(cachepawl_options_set_layout_preset(o, "jamba-v0.1", 0), CACHEPAWL_INVALID_ARGUMENT,
             "page_size_tokens: 0");
  EXPECT_ERR(cachepawl_options_set_layout_preset(o, NULL, 16), CACHEPAWL_INVALID_ARGUMENT,
             "name: null");
  EXPECT_ERR(cachepawl_options_set_layout_json_file(o, "/nonexistent/l.json"), CACHEPAWL_NOT_FOUND,
             "/nonexistent/l.json");
  EXPECT_ERR(cachepawl_options_set_layout_json_file(o, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "path: null");
  EXPECT_ERR(cachepawl_options_set_layout_json_string(o, "[1, 2]", 6), CACHEPAWL_INVALID_ARGUMENT,
             "cachepawl_options_set_layout_json_string");
  EXPECT_ERR(cachepawl_options_set_layout_json_string(o, NULL, 3), CACHEPAWL_INVALID_ARGUMENT,
             "json: null with len 3");
  EXPECT_ERR(cachepawl_options_set_layout(o, NULL), CACHEPAWL_INVALID_ARGUMENT, "layout: null");
  EXPECT_ERR(cachepawl_options_set_host_bytes(o, 1000), CACHEPAWL_INVALID_ARGUMENT,
             "host_bytes: 1000");
  EXPECT_ERR(cachepawl_options_set_host_bytes(o, 0), CACHEPAWL_INVALID_ARGUMENT, "host_bytes: 0");
  EXPECT_ERR(cachepawl_options_set_disk_dir(o, NULL), CACHEPAWL_INVALID_ARGUMENT, "dir: null");
  EXPECT_ERR(cachepawl_options_add_disk_data_path(o, ""), CACHEPAWL_INVALID_ARGUMENT, "path: ''");
  EXPECT_ERR(cachepawl_options_add_disk_data_path(o, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "path: null");
  EXPECT_ERR(cachepawl_options_set_disk_queue_depth(o, 0), CACHEPAWL_INVALID_ARGUMENT,
             "disk_queue_depth: 0");
  EXPECT_ERR(cachepawl_options_set_disk_queue_depth(o, 5000), CACHEPAWL_INVALID_ARGUMENT,
             "disk_queue_depth: 5000");
  EXPECT_ERR(cachepawl_options_set_write_policy(o, 3), CACHEPAWL_INVALID_ARGUMENT,
             "write_policy: 3");
  EXPECT_ERR(cachepawl_options_set_write_policy(o, -1), CACHEPAWL_INVALID_ARGUMENT,
             "write_policy: -1");
  EXPECT_ERR(cachepawl_options_set_selective_min_hits(o, 0), CACHEPAWL_INVALID_ARGUMENT,
             "selective_min_hits: 0");
  EXPECT_ERR(cachepawl_options_set_cuda_device(o, -2), CACHEPAWL_INVALID_ARGUMENT,
             "cuda_device: -2");
  EXPECT_ERR(cachepawl_options_set_staging_bytes(o, 4096), CACHEPAWL_INVALID_ARGUMENT,
             "staging_bytes: 4096");
  /* Remote tier options: each setter names its field and value. */
  EXPECT_OK(cachepawl_options_set_remote_seeds(o, "redis://127.0.0.1:7000,127.0.0.1:7001"));
  EXPECT_OK(cachepawl_options_set_remote_seeds(o, ""));
  EXPECT_ERR(cachepawl_options_set_remote_seeds(o, "http://x:1"), CACHEPAWL_INVALID_ARGUMENT,
             "remote.seeds");
  EXPECT_ERR(cachepawl_options_set_remote_seeds(o, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "seeds: null");
  EXPECT_OK(cachepawl_options_set_remote_auth(o, "tenant", "s3cret"));
  EXPECT_OK(cachepawl_options_set_remote_auth(o, "", ""));
  EXPECT_ERR(cachepawl_options_set_remote_auth(o, "tenant", ""), CACHEPAWL_INVALID_ARGUMENT,
             "remote.user: 'tenant'");
  EXPECT_ERR(cachepawl_options_set_remote_auth(o, NULL, "pw"), CACHEPAWL_INVALID_ARGUMENT,
             "user: null");
  EXPECT_ERR(cachepawl_options_set_remote_auth(o, "", NULL), CACHEPAWL_INVALID_ARGUMENT,
             "password: null");
  EXPECT_OK(cachepawl_options_set_remote_key_prefix(o, "tenant-a.v1"));
  EXPECT_ERR(cachepawl_options_set_remote_key_prefix(o, "a b"), CACHEPAWL_INVALID_ARGUMENT,
             "remote.key_prefix 'a b'");
  EXPECT_ERR(cachepawl_options_set_remote_key_prefix(o, ""), CACHEPAWL_INVALID_ARGUMENT,
             "remote.key_prefix ''");
  EXPECT_ERR(cachepawl_options_set_remote_key_prefix(o, NULL), CACHEPAWL_INVALID_ARGUMENT,
             "prefix: null");
  EXPECT_OK(cachepawl_options_set_remote_chunk_bytes(o, 1 << 20));
  EXPECT_ERR(cachepawl_options_set_remote_chunk_bytes(o, 1000), CACHEPAWL_INVALID_ARGUMENT,
             "remote.chunk_bytes 1000");
  EXPECT_ERR(cachepawl_options_set_remote_deadline_ms(o, 0), CACHEPAWL_INVALID_ARGUMENT,
             "remote.deadline 0");
  EXPECT_ERR(cachepawl_options_set_remote_lookup_deadline_ms(o, 0), CACHEPAWL_INVALID_ARGUMENT,
             "remote.lookup_deadline_ms: 0");
  EXPECT_ERR(cachepawl_options_set_remote_lookup_deadline_ms(o, 10001), CACHEPAWL_INVALID_ARGUMENT,
             "remote.lookup_deadline_ms: 10001");
  EXPECT_OK(cachepawl_options_set_remote_ttl_seconds(o, 3600));
  EXPECT_OK(cachepawl_options_set_remote_write_policy(o, CACHEPAWL_REMOTE_WRITE_SELECTIVE));
  EXPECT_OK(cachepawl_options_set_remote_write_policy(o, CACHEPAWL_REMOTE_WRITE_ON_EVICT));
  EXPECT_ERR(cachepawl_options_set_remote_write_policy(o, 4), CACHEPAWL_INVALID_ARGUMENT,
             "remote.write_policy: 4");
  EXPECT_ERR(cachepawl_options_set_remote_write_policy(o, -1), CACHEPAWL_INVALID_ARGUMENT,
             "remote.write_policy: -1");
  EXPECT_ERR(cachepawl_options_set_remote_selective_min_hits(o, 0), CACHEPAWL_INVALID_ARGUMENT,
             "remote.selective_min_hits: 0");
  EXPECT_ERR(cachepawl_options_set_remote_max_queued_writes(o, 0), CACHEPAWL_INVALID_ARGUMENT,
             "remote.max_queued_writes: 0");
  EXPECT_ERR(cachepawl_options_set_remote_reader_threads(o, 0), CACHEPAWL_INVALID_ARGUMENT,
             "remote.reader_threads: 0");
  EXPECT_ERR(cachepawl_options_set_remote_reader_threads(o, 65), CACHEPAWL_INVALID_ARGUMENT,
             "remote.reader_threads: 65");
  EXPECT_OK(cachepawl_options_set_remote_reader_threads(o, 8));
  NULL_OPTIONS(cachepawl_options_set_remote_reader_threads(NULL, 4));
  NULL_OPTIONS(cachepawl_options_set_remote_ttl_seconds(NULL, 0));
  NULL_OPTIONS(cachepawl_options_set_host_bytes(NULL, 4096));
  NULL_OPTIONS(cachepawl_options_set_disk_bytes(NULL, 0));
  NULL_OPTIONS(cachepawl_options_set_device_pool_bytes(NULL, 0));
  NULL_OPTIONS(cachepawl_options_set_track_interval_pages(NULL, 0));
  NULL_OPTIONS(cachepawl_options_set_wipe_on_layout_mismatch(NULL, 1));
  NULL_OPTIONS(cachepawl_options_set_stream_priorities(NULL, 0, 0));
  NULL_OPTIONS(cachepawl_options_validate(NULL));

  /* Good values of every setter; the combination is then checked by validate / open. */
  EXPECT_OK(cachepawl_options_set_layout_preset(o, "jamba-v0.1", 16));
  EXPECT_OK(cachepawl_layout_from_json_string(kTinyLayoutJson, strlen(kTinyLayoutJson), &l));
  EXPECT_OK(cachepawl_options_set_layout(o, l));
  cachepawl_layout_free(l);
  EXPECT_OK(cachepawl_options_set_host_bytes(o, 8u << 20));
  EXPECT_OK(cachepawl_options_set_disk_dir(o, "/tmp/unused"));
  EXPECT_OK(cachepawl_options_add_disk_data_path(o, "/tmp/unused/data0"));
  EXPECT_OK(cachepawl_options_set_disk_queue_depth(o, 16));
  EXPECT_OK(cachepawl_options_set_write_policy(o, CACHEPAWL_WRITE_THROUGH_SELECTIVE));
  EXPECT_OK(cachepawl_options_set_selective_min_hits(o, 3));
  EXPECT_OK(cachepawl_options_set_wipe_on_layout_mismatch(o, 1));
  EXPECT_OK(cachepawl_options_set_cuda_device(o, -1));
  EXPECT_OK(cachepawl_options_set_device_pool_bytes(o, 1u << 20));
  EXPECT_OK(cachepawl_options_set_stream_priorities(o, -1, 0));
  EXPECT_ERR(cachepawl_options_set_stream_priorities(o, 0, 5000), CACHEPAWL_INVALID_ARGUMENT,
             "write_stream_priority: 5000");
  EXPECT_ERR(cachepawl_options_set_stream_priorities(o, -1001, 0), CACHEPAWL_INVALID_ARGUMENT,
             "load_stream_priority: -1001");
  EXPECT_OK(cachepawl_options_set_staging_bytes(o, 2u << 20));
  EXPECT_OK(cachepawl_options_set_track_interval_pages(o, 4));
  /* Data paths without a disk budget: the combination is wrong. */
  EXPECT_ERR(cachepawl_options_validate(o), CACHEPAWL_INVALID_ARGUMENT, "disk_bytes");
  EXPECT_ERR(cachepawl_store_open(o, &s), CACHEPAWL_INVALID_ARGUMENT, "disk_bytes");
  EXPECT_OK(cachepawl_options_set_disk_bytes(o, 1u << 20));
  EXPECT_OK(cachepawl_options_validate(o));
  /* The free target is checked against host_bytes (8 MiB here): at most half of it. */
  EXPECT_OK(cachepawl_options_set_host_free_target_bytes(o, 1u << 20));
  EXPECT_OK(cachepawl_options_validate(o));
  EXPECT_OK(cachepawl_options_set_host_free_target_bytes(o, 5u << 20));
  EXPECT_ERR(cachepawl_options_validate(o), CACHEPAWL_INVALID_ARGUMENT,
             "host_free_target_bytes: 5242880");
  NULL_OPTIONS(cachepawl_options_set_host_free_target_bytes(NULL, 0));
  EXPECT_ERR(cachepawl_options_set_save_chunk_entries(o, 0), CACHEPAWL_INVALID_ARGUMENT,
             "save_chunk_entries: 0");
  EXPECT_OK(cachepawl_options_set_save_chunk_entries(o, 64));
  NULL_OPTIONS(cachepawl_options_set_save_chunk_entries(NULL, 1));
  EXPECT_OK(cachepawl_options_set_host_free_target_bytes(o, 1u << 20));
  /* The longest prompt: > 0 at once; at least one page of the layout (4 tokens) in validate. */
  EXPECT_ERR(cachepawl_options_set_max_prompt_tokens(o, 0), CACHEPAWL_INVALID_ARGUMENT,
             "max_prompt_tokens: 0");
  EXPECT_OK(cachepawl_options_set_max_prompt_tokens(o, 3));
  EXPECT_ERR(cachepawl_options_validate(o), CACHEPAWL_INVALID_ARGUMENT,
             "max_prompt_tokens: 3 (must be at least one page of 4 tokens)");
  EXPECT_OK(cachepawl_options_set_max_prompt_tokens(o, 1u << 20));
  EXPECT_OK(cachepawl_options_validate(o));
  NULL_OPTIONS(cachepawl_options_set_max_prompt_tokens(NULL, 1));
  /* The bounds of the waits: at most a day each, checked at once, naming the field. */
  EXPECT_ERR(cachepawl_options_set_host_space_wait_ms(o, 86400001u), CACHEPAWL_INVALID_ARGUMENT,
             "host_space_wait_ms: 86400001");
  EXPECT_OK(cachepawl_options_set_host_space_wait_ms(o, 0));
  NULL_OPTIONS(cachepawl_options_set_host_space_wait_ms(NULL, 1));
  EXPECT_ERR(cachepawl_options_set_host_pinning_wait_ms(o, 86400001u), CACHEPAWL_INVALID_ARGUMENT,
             "host_pinning_wait_ms: 86400001");
  EXPECT_OK(cachepawl_options_set_host_pinning_wait_ms(o, 1000));
  NULL_OPTIONS(cachepawl_options_set_host_pinning_wait_ms(NULL, 1));
  EXPECT_ERR(cachepawl_options_set_stream_wait_ms(o, 86400001u), CACHEPAWL_INVALID_ARGUMENT,
             "stream_wait_ms: 86400001");
  EXPECT_OK(cachepawl_options_set_stream_wait_ms(o, 86400000u));
  NULL_OPTIONS(cachepawl_options_set_stream_wait_ms(NULL, 1));
  EXPECT_OK(cachepawl_options_validate(o));
  EXPECT_OK(cachepawl_options_set_wipe_unreadable_catalog(o, 1));
  NULL_OPTIONS(cachepawl_options_set_wipe_unreadable_catalog(NULL, 1));
  cachepawl_options_free(o);
  cachepawl_options_free(NULL);
}

/* Both eviction policies open a store; other values name the field and value. */
static void test_eviction_policy(void) {
  const cachepawl_eviction_policy policies[] = {CACHEPAWL_EVICTION_LRU, CACHEPAWL_EVICTION_HYBRID};
  size_t i;
  for (i = 0; i < sizeof policies / sizeof policies[0]; ++i) {
    cachepawl_options* o = NULL;
    cachepawl_store* s = NULL;
    EXPECT_OK(cachepawl_options_new(&o));
    EXPECT_OK(
        cachepawl_options_set_layout_json_string(o, kTinyLayoutJson, strlen(kTinyLayoutJson)));
    EXPECT_OK(cachepawl_options_set_host_bytes(o, 4u << 20));
    EXPECT_OK(cachepawl_options_set_cuda_device(o, -1));
    EXPECT_OK(cachepawl_options_set_eviction_policy(o, policies[i]));
    EXPECT_OK(cachepawl_options_validate(o));
    EXPECT_OK(cachepawl_store_open(o, &s));
    CHECK(s != NULL);
    EXPECT_OK(cachepawl_store_close(s));
    cachepawl_store_free(s);
    EXPECT_ERR(cachepawl_options_set_eviction_policy(o, 2), CACHEPAWL_INVALID_ARGUMENT,
               "eviction_policy: 2 (expected CACHEPAWL_EVICTION_LRU (0) or "
               "CACHEPAWL_EVICTION_HYBRID (1))");
    EXPECT_ERR(cachepawl_options_set_eviction_policy(o, -1), CACHEPAWL_INVALID_ARGUMENT,
               "eviction_policy: -1");
    cachepawl_options_free(o);
  }
  NULL_OPTIONS(cachepawl_options_set_eviction_policy(NULL, CACHEPAWL_EVICTION_LRU));
}

int main(void) {
  char dir[64];
  make_temp_dir(dir, sizeof dir);
  test_library_and_layouts();
  test_options();
  test_eviction_policy();
  test_store_round_trip(dir);
  test_reopen_and_prefetch(dir);
  test_bad_store_arguments(dir);
  test_engine_pools();
  test_close_and_lifetimes(dir);
  test_threads(dir);
  test_pure_ssm(dir);
  test_hf_layouts();
  test_window_layouts();
  remove_tree(dir);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
