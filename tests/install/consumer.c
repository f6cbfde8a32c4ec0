/* A C consumer of an installed Cachepawl (tests/install/check_install.sh builds it with
 * pkg-config and with find_package, links it against libcachepawl.so only, and runs it with a
 * store folder as its argument): through <cachepawl/cachepawl.h> alone it opens a store with a
 * store-owned device pool (CPU mode) and a disk tier, writes two KV pages and a Mamba state into
 * device slots, saves them, looks the prompt up, loads the prefix into other slots, and compares
 * every byte. Exits 0 when all of it holds; otherwise prints what failed and exits 1. */
#include <cachepawl/cachepawl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGES 2

static int fail(const char* what, cachepawl_status st) {
  fprintf(stderr, "C consumer: %s: %s: %s\n", what, cachepawl_status_name(st),
          cachepawl_last_error());
  return 1;
}

#define CHECK(what, call)          \
  do {                             \
    cachepawl_status st_ = (call); \
    if (st_ != CACHEPAWL_OK) {     \
      rc = fail(what, st_);        \
      goto done;                   \
    }                              \
  } while (0)

static void fill(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (uint8_t)x;
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s STORE_DIR\n", argv[0]);
    return 2;
  }
  int rc = 0;
  cachepawl_options* o = NULL;
  cachepawl_store* store = NULL;
  cachepawl_layout* layout = NULL;
  cachepawl_match* m = NULL;
  cachepawl_fence* f = NULL;
  uint8_t* want[PAGES + 1] = {NULL, NULL, NULL};
  uint8_t* got = NULL;
  uint64_t src[PAGES + 1], dst[PAGES + 1];
  uint64_t bytes[2] = {0, 0};
  uint32_t page_tokens = 0;
  uint32_t tokens[PAGES * 16];
  size_t reusable = 0;

  printf("C consumer: cachepawl %s, C ABI %u\n", cachepawl_version(),
         (unsigned)cachepawl_abi_version());
  if (cachepawl_abi_version() != CACHEPAWL_ABI_VERSION) {
    fprintf(stderr, "C consumer: library ABI %u, header ABI %u\n",
            (unsigned)cachepawl_abi_version(), (unsigned)CACHEPAWL_ABI_VERSION);
    return 1;
  }
  CHECK("options", cachepawl_options_new(&o));
  CHECK("layout", cachepawl_options_set_layout_preset(o, "jamba-v0.1", 16));
  CHECK("host_bytes", cachepawl_options_set_host_bytes(o, 128u << 20));
  CHECK("disk_dir", cachepawl_options_set_disk_dir(o, argv[1]));
  CHECK("disk_bytes", cachepawl_options_set_disk_bytes(o, 256u << 20));
  CHECK("cuda_device", cachepawl_options_set_cuda_device(o, -1));
  CHECK("device_pool_bytes", cachepawl_options_set_device_pool_bytes(o, 128u << 20));
  CHECK("open", cachepawl_store_open(o, &store));
  CHECK("layout", cachepawl_store_layout(store, &layout));
  CHECK("page size", cachepawl_layout_page_size_tokens(layout, &page_tokens));
  CHECK("KV record", cachepawl_layout_record_bytes(layout, CACHEPAWL_KIND_KV, &bytes[0]));
  CHECK("state record", cachepawl_layout_record_bytes(layout, CACHEPAWL_KIND_STATE, &bytes[1]));
  if (page_tokens != 16) {
    fprintf(stderr, "C consumer: page size %u tokens, expected 16\n", (unsigned)page_tokens);
    rc = 1;
    goto done;
  }
  for (uint32_t i = 0; i < PAGES * 16; ++i) tokens[i] = 1000 + i;

  /* Two pages and the state at their depth, into store-owned slots. */
  for (int i = 0; i <= PAGES; ++i) {
    const cachepawl_kind kind = i < PAGES ? CACHEPAWL_KIND_KV : CACHEPAWL_KIND_STATE;
    const size_t n = (size_t)bytes[i < PAGES ? 0 : 1];
    want[i] = malloc(n);
    if (want[i] == NULL) {
      rc = 1;
      goto done;
    }
    fill(want[i], n, (uint32_t)i + 7u);
    CHECK("allocate source slot", cachepawl_store_allocate_device_slot(store, kind, &src[i]));
    CHECK("allocate destination slot", cachepawl_store_allocate_device_slot(store, kind, &dst[i]));
    CHECK("write record", cachepawl_store_write_device_record(store, kind, src[i], want[i], n));
  }
  CHECK("save", cachepawl_store_save(store, "tenant", 6, tokens, PAGES * 16, 0, src, PAGES,
                                     src[PAGES], PAGES * 16, &f));
  CHECK("save fence", cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  cachepawl_fence_free(f);
  f = NULL;

  CHECK("lookup", cachepawl_store_lookup(store, "tenant", 6, tokens, PAGES * 16, &m));
  CHECK("reusable pages", cachepawl_match_reusable_pages(m, &reusable));
  if (reusable != PAGES) {
    fprintf(stderr, "C consumer: %zu reusable pages, expected %d\n", reusable, PAGES);
    rc = 1;
    goto done;
  }
  CHECK("load", cachepawl_store_load(store, m, dst, PAGES, dst[PAGES], 0, 0, &f));
  CHECK("load fence", cachepawl_fence_wait(f, CACHEPAWL_WAIT_FOREVER));
  got = malloc((size_t)(bytes[1] > bytes[0] ? bytes[1] : bytes[0]));
  if (got == NULL) {
    rc = 1;
    goto done;
  }
  for (int i = 0; i <= PAGES; ++i) {
    const cachepawl_kind kind = i < PAGES ? CACHEPAWL_KIND_KV : CACHEPAWL_KIND_STATE;
    const size_t n = (size_t)bytes[i < PAGES ? 0 : 1];
    memset(got, 0xEE, n);
    CHECK("read record", cachepawl_store_read_device_record(store, kind, dst[i], got, n));
    if (memcmp(got, want[i], n) != 0) {
      fprintf(stderr, "C consumer: %s %d came back with other bytes\n",
              i < PAGES ? "page" : "state", i);
      rc = 1;
      goto done;
    }
  }
  CHECK("close", cachepawl_store_close(store));
  printf("C consumer: saved and loaded %d pages and a state, every byte compared: OK\n", PAGES);

done:
  free(got);
  for (int i = 0; i <= PAGES; ++i) free(want[i]);
  cachepawl_fence_free(f);
  cachepawl_match_free(m);
  cachepawl_layout_free(layout);
  cachepawl_store_free(store);
  cachepawl_options_free(o);
  return rc;
}
