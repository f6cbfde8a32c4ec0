/* The C ABI test's harness (tests/capi/cachepawl_c_test*.c): checks that count passes and
 * failures, expected-status checks that also look for a word in the error message, the tiny
 * hybrid layout the test uses, and deterministic record contents. Plain C99 + POSIX. */
#ifndef CACHEPAWL_TESTS_CAPI_C_TEST_UTIL_H_
#define CACHEPAWL_TESTS_CAPI_C_TEST_UTIL_H_

#include <stddef.h>
#include <stdint.h>

#include "capi/cachepawl.h"

extern int g_passed;
extern int g_failed;

/* Counts one check; prints the failing ones. */
void check(int ok, const char* what, int line);
#define CHECK(cond) check((cond) != 0, #cond, __LINE__)

/* `call` returned `code` and, unless needle is NULL, the thread's last error contains it. */
void expect_code(cachepawl_status got, cachepawl_status code, const char* needle, const char* what,
                 int line);
#define EXPECT_OK(call) expect_code((call), CACHEPAWL_OK, NULL, #call, __LINE__)
#define EXPECT_ERR(call, code, needle) expect_code((call), (code), (needle), #call, __LINE__)
/* A call on a null handle: InvalidArgument naming the handle. */
#define NULL_OPTIONS(call) EXPECT_ERR(call, CACHEPAWL_INVALID_ARGUMENT, "options: null")
#define NULL_STORE(call) EXPECT_ERR(call, CACHEPAWL_INVALID_ARGUMENT, "store: null")

/* Tiny hybrid layout: 4-token pages, attention layers 0 and 2 (2 KV heads of 16 bf16: 256
 * bytes of K per page, a 1024-byte KV record), SSM layers 1 and 3 (conv 8x3 bf16 = 48 bytes,
 * SSM 2x4x8 fp32 = 256 bytes: a 608-byte state record). */
extern const char kTinyLayoutJson[];
#define TINY_PAGE 4u
#define TINY_K_BYTES 256u
#define TINY_KV_RECORD 1024u
#define TINY_CONV_BYTES 48u
#define TINY_SSM_BYTES 256u
#define TINY_STATE_RECORD 608u

/* Deterministic bytes for `seed`. */
void fill_bytes(uint8_t* out, size_t n, uint64_t seed);
/* tokens[i] = first + i. */
void fill_tokens(uint32_t* out, size_t n, uint32_t first);
/* A fresh folder under /tmp (exits on failure) and its recursive removal. */
void make_temp_dir(char* path, size_t capacity);
void remove_tree(const char* path);
/* -1 (CPU mode), or the GPU named by CACHEPAWL_C_TEST_CUDA_DEVICE. */
int32_t test_cuda_device(void);
/* Opens a store of the tiny layout on test_cuda_device(); disk_dir NULL: host only. */
cachepawl_store* open_tiny_store(const char* disk_dir, uint64_t device_pool_bytes);

/* Saves `num_pages` device pages `src` (the full pages of `tokens`, namespace `ns`) and state
 * slot `src_slot` at their depth, looks the tokens up (all pages reusable), and loads them into
 * pages `dst` and slot `dst_slot`, waiting for each fence. */
void save_and_load_back(cachepawl_store* s, const char* ns, const uint32_t* tokens,
                        size_t num_pages, uint32_t page_size, const uint64_t* src,
                        uint64_t src_slot, const uint64_t* dst, uint64_t dst_slot);

/* The parts of the test, one per file. */
void test_library_and_layouts(void);
void test_options(void);
void test_store_round_trip(const char* dir);
void test_reopen_and_prefetch(const char* dir);
void test_bad_store_arguments(const char* dir);
void test_engine_pools(void);
void test_close_and_lifetimes(const char* dir);
void test_threads(const char* dir);
void test_pure_ssm(const char* dir);
void test_hf_layouts(void);
void test_window_layouts(void);

#endif /* CACHEPAWL_TESTS_CAPI_C_TEST_UTIL_H_ */
