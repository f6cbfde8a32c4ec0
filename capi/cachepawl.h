/* cachepawl.h: the C ABI of Cachepawl (installed as <cachepawl/cachepawl.h>).
 *
 * A C99 interface to the Store of store/store.h for C, Rust, Go and Python (ctypes) callers.
 * docs/EMBEDDING.md ("From C") walks through it; tests/capi/cachepawl_c_test.c calls every
 * function below.
 *
 * Conventions (they hold for every function unless its comment says otherwise):
 *
 *  - Status: every function returns a cachepawl_status (0 = CACHEPAWL_OK). The codes mirror
 *    cachepawl::Status::Code (vocab/status.h) value for value, plus CACHEPAWL_OUT_OF_MEMORY.
 *    The only exceptions are the functions that cannot fail: the *_free functions (void),
 *    cachepawl_version*, cachepawl_abi_version, cachepawl_status_name, cachepawl_last_error
 *    and cachepawl_store_last_error.
 *  - Error messages: a failed call stores its message (naming the argument or field and the
 *    value at fault, e.g. "tokens: null with num_tokens 32") as the calling thread's last error
 *    (cachepawl_last_error), and, when the call took a store, as that store's last error
 *    (cachepawl_store_last_error). Successful calls leave both unchanged.
 *  - No C++ exception crosses this interface: every exception is caught at the boundary
 *    (std::bad_alloc becomes CACHEPAWL_OUT_OF_MEMORY, anything else CACHEPAWL_INTERNAL).
 *  - Handles are opaque. Each is created by one function (its `out` parameter) and released by
 *    its *_free function, which accepts NULL; using a handle after freeing it is undefined.
 *    A NULL handle or a NULL `out` pointer is CACHEPAWL_INVALID_ARGUMENT, never a crash.
 *    On failure a handle or string result (`**out`) is set to NULL; numbers are left unchanged.
 *  - Pointers with lengths: a NULL pointer is accepted with length 0 and rejected otherwise.
 *    Namespaces are (pointer, length) pairs of bytes, not necessarily NUL-terminated; the empty
 *    namespace (NULL, 0) gives SGLang HiCache's hash chain.
 *  - Strings: `const char*` results are owned by the library (static, or thread-local as
 *    cachepawl_last_error says) and must not be freed. Strings returned through a `char**`
 *    out parameter are new, NUL-terminated, owned by the caller, and must be released with
 *    cachepawl_string_free (not free()). String arguments are read during the call only.
 *  - Arrays returned into caller buffers (`out`, `capacity`, `*count`): `*count` receives the
 *    number of elements there are. `out == NULL` with `capacity == 0` is a size query (OK).
 *    A buffer smaller than needed is CACHEPAWL_INVALID_ARGUMENT naming both sizes; nothing is
 *    written to it, but `*count` is still set.
 *  - Booleans are int32_t (0 or 1). Slots, byte counts and tokens are fixed-width unsigned.
 *  - Thread safety: a store, layout, match and fence may be used by several threads at once
 *    (like the C++ Store). An options or pool handle may be used by one thread at a time.
 *    Freeing a handle while another thread uses it is undefined.
 *  - Lifetime: matches, locks, fences and prefetches stay valid after their store is closed
 *    or freed: their own calls still answer (the fences have all fired), and they are freed
 *    as usual. Freeing the store releases its memory at once; its locks go with it.
 *
 * ABI: functions are only ever added; none changes its signature or meaning while
 * CACHEPAWL_ABI_VERSION stays the same. Bindings check cachepawl_abi_version() at load time.
 *
 * Pure SSM layouts (no attention layers, e.g. Mamba-2; store/store.h says the same for C++):
 * the page hashes still name every prefix, but a page holds no KV, so the engine passes no
 * device pages anywhere. Its pool has 0 KV pages (cachepawl_pool_new(device, 0, slots, ...) and
 * one cachepawl_pool_set_ssm_layer per SSM layer); cachepawl_store_save gets the tokens (or
 * hashes) covering at least the state's depth, NULL and 0 device pages, the state slot and its
 * depth; a lookup's reusable pages are the depth of the deepest state along its pages (its page
 * tiers are none, its kv_only_pages how far the store knows the prompt); cachepawl_store_load
 * gets NULL and 0 device pages and the state slot, and loads the state at the match's depth.
 */
#ifndef CACHEPAWL_CACHEPAWL_H_
#define CACHEPAWL_CACHEPAWL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CACHEPAWL_API
#else
#define CACHEPAWL_API __attribute__((visibility("default")))
#endif

/* The ABI this header describes. Compare with cachepawl_abi_version() at run time. */
#define CACHEPAWL_ABI_VERSION 1

/* ------------------------------------------------------------------------------------------
 * Vocabulary
 * ---------------------------------------------------------------------------------------- */

typedef int32_t cachepawl_status;
enum {
  CACHEPAWL_OK = 0,
  CACHEPAWL_INVALID_ARGUMENT = 1,    /* bad argument, option, layout JSON */
  CACHEPAWL_NOT_FOUND = 2,           /* no longer cached (recompute), file or preset missing */
  CACHEPAWL_CORRUPTION = 3,          /* on-disk bytes failed verification */
  CACHEPAWL_IO_ERROR = 4,            /* the OS said no (errno in the message) */
  CACHEPAWL_NO_SPACE = 5,            /* a tier or the device pool is full */
  CACHEPAWL_BUSY = 6,                /* in flight elsewhere: retry once that fence fired */
  CACHEPAWL_UNAVAILABLE = 7,         /* a facility is missing (no GPU) */
  CACHEPAWL_FAILED_PRECONDITION = 8, /* wrong state: store closed, fence not fired, ... */
  CACHEPAWL_TIMED_OUT = 9,           /* a wait ran out of time */
  CACHEPAWL_ABORTED = 10,            /* cancelled, or abandoned because the store closed */
  CACHEPAWL_INTERNAL = 11,           /* a bug in Cachepawl */
  CACHEPAWL_INCOMPATIBLE = 12,       /* on-disk data of another layout or format */
  CACHEPAWL_OUT_OF_MEMORY = 13       /* C ABI only: an allocation failed (std::bad_alloc) */
};

/* What a cache entry holds: one page of KV (all attention layers), or one sequence's
 * recurrent state (conv + SSM state of all SSM layers; Kind::kMamba in C++).
 * CACHEPAWL_KIND_WINDOW_KV (Kind::kWindowKV) names the sliding-window attention layers' part of
 * a KV page, which the host and disk tiers keep as a record of its own (docs/EMBEDDING.md,
 * "Sliding-window layers"). The layout accessors take it; the device-slot functions do not (a
 * device page always holds every attention layer: use CACHEPAWL_KIND_KV). */
typedef int32_t cachepawl_kind;
enum { CACHEPAWL_KIND_KV = 0, CACHEPAWL_KIND_STATE = 1, CACHEPAWL_KIND_WINDOW_KV = 2 };

/* Where an entry lies, fastest first; CACHEPAWL_TIER_NONE: nowhere. */
typedef int32_t cachepawl_tier;
enum {
  CACHEPAWL_TIER_NONE = -1,
  CACHEPAWL_TIER_DEVICE = 0,
  CACHEPAWL_TIER_HOST = 1,
  CACHEPAWL_TIER_DISK = 2,
  CACHEPAWL_TIER_REMOTE = 3 /* a Redis Cluster shared by several stores (options_set_remote_*) */
};

/* When entries saved to host memory also go to disk (vocab/store_options.h WritePolicy). */
typedef int32_t cachepawl_write_policy;
enum {
  CACHEPAWL_WRITE_THROUGH = 0,           /* once, right after it reaches host memory */
  CACHEPAWL_WRITE_THROUGH_SELECTIVE = 1, /* once it has been hit selective_min_hits times */
  CACHEPAWL_WRITE_BACK = 2               /* only when evicted from host memory */
};

/* Which saved entries this store also writes to the remote tier (vocab/store_options.h
 * RemoteWritePolicy); cachepawl_options_set_remote_write_policy. */
typedef int32_t cachepawl_remote_write_policy;
enum {
  CACHEPAWL_REMOTE_WRITE_NONE = 0,      /* read only: uses what other stores wrote */
  CACHEPAWL_REMOTE_WRITE_THROUGH = 1,   /* every saved entry, once (the default) */
  CACHEPAWL_REMOTE_WRITE_SELECTIVE = 2, /* once it has been hit remote selective_min_hits times */
  CACHEPAWL_REMOTE_WRITE_ON_EVICT = 3   /* when it leaves the last local tier (host or disk) */
};

/* Which entries leave a full tier first (vocab/store_options.h EvictionPolicy). */
typedef int32_t cachepawl_eviction_policy;
enum {
  CACHEPAWL_EVICTION_LRU = 0,   /* per kind, least recently used first (kept for comparison) */
  CACHEPAWL_EVICTION_HYBRID = 1 /* prefix units and state value per byte (the default) */
};

/* Bytes of one page hash (SHA-256 chain, vocab/page_hash.h). */
#define CACHEPAWL_HASH_BYTES 32
/* "No state slot" for the device_state_slot arguments. */
#define CACHEPAWL_NO_SLOT UINT64_MAX
/* Timeout of cachepawl_fence_wait* that never runs out. */
#define CACHEPAWL_WAIT_FOREVER UINT64_MAX
/* cachepawl_store_load flags: one sub-fence per attention layer. */
#define CACHEPAWL_LOAD_PER_LAYER_FENCES 1u

typedef struct cachepawl_options cachepawl_options;   /* Store::Open's settings */
typedef struct cachepawl_layout cachepawl_layout;     /* a model's cache layout (a value) */
typedef struct cachepawl_store cachepawl_store;       /* an open (or closed) store */
typedef struct cachepawl_pool cachepawl_pool;         /* an engine's device pool description */
typedef struct cachepawl_match cachepawl_match;       /* the answer of a lookup */
typedef struct cachepawl_lock cachepawl_lock;         /* an eviction lock on a match prefix */
typedef struct cachepawl_fence cachepawl_fence;       /* the completion of one operation */
typedef struct cachepawl_prefetch cachepawl_prefetch; /* a disk->host prefetch in progress */

/* ------------------------------------------------------------------------------------------
 * Library: versions, errors, strings. All thread-safe.
 * ---------------------------------------------------------------------------------------- */

/* The library's version, e.g. "0.1.0" (static string). */
CACHEPAWL_API const char* cachepawl_version(void);
/* The same as major * 10000 + minor * 100 + patch. */
CACHEPAWL_API uint32_t cachepawl_version_number(void);
/* The ABI the library implements (CACHEPAWL_ABI_VERSION of the header it was built with). */
CACHEPAWL_API uint32_t cachepawl_abi_version(void);
/* "OK", "InvalidArgument", ... "OutOfMemory" (static string); "Unknown" for other values. */
CACHEPAWL_API const char* cachepawl_status_name(cachepawl_status status);
/* The message of the calling thread's last failed call ("" when none). Owned by the library,
 * valid until the calling thread's next failing call into the library. */
CACHEPAWL_API const char* cachepawl_last_error(void);
/* A copy of the message of the last failed call that took `store` (any thread); "" when none.
 * The caller frees it with cachepawl_string_free. NULL only when store is NULL or memory
 * runs out. */
CACHEPAWL_API char* cachepawl_store_last_error(const cachepawl_store* store);
/* Releases a string returned through a `char**` parameter. NULL is fine. */
CACHEPAWL_API void cachepawl_string_free(char* s);

/* ------------------------------------------------------------------------------------------
 * Layouts (vocab/model_layout.h). A layout handle is immutable: thread-safe.
 * ---------------------------------------------------------------------------------------- */

/* Built-in preset names, one per line, sorted (new string). */
CACHEPAWL_API cachepawl_status cachepawl_layout_preset_names(char** out);
/* A preset with the given page size (> 0). NOT_FOUND naming the preset when there is none. */
CACHEPAWL_API cachepawl_status cachepawl_layout_from_preset(const char* name,
                                                            uint32_t page_size_tokens,
                                                            cachepawl_layout** out);
/* A JSON layout file (docs/MODELS.md); errors start "layout file PATH: ". */
CACHEPAWL_API cachepawl_status cachepawl_layout_from_json_file(const char* path,
                                                               cachepawl_layout** out);
/* JSON layout text of `len` bytes; errors name the key path or the line and column. */
CACHEPAWL_API cachepawl_status cachepawl_layout_from_json_string(const char* json, size_t len,
                                                                 cachepawl_layout** out);
/* The layout transformers 5.17 keeps for a Hugging Face config.json (layouts/layout_from_hf.h;
 * docs/MODELS.md, "Layouts from a Hugging Face config"): config text of `len` bytes.
 * cache_dtype: K/V and conv state dtype, state_dtype: recurrent state dtype (names as in layout
 * files: "bf16", "fp32", "float16", ...; NULL: "bf16" / "fp32"). convention: "transformers"
 * (conv state width d_conv) or "sglang" (d_conv - 1); NULL: "transformers". page_size_tokens
 * > 0. model: the layout's name; NULL: the config's _name_or_path, else its model_type.
 * Errors name the argument, or the config key and value. */
CACHEPAWL_API cachepawl_status cachepawl_layout_from_hf_config_string(
    const char* json, size_t len, const char* cache_dtype, const char* state_dtype,
    const char* convention, uint32_t page_size_tokens, const char* model, cachepawl_layout** out);
/* The same from a config.json file; errors start "hf config PATH: ". */
CACHEPAWL_API cachepawl_status cachepawl_layout_from_hf_config_file(
    const char* path, const char* cache_dtype, const char* state_dtype, const char* convention,
    uint32_t page_size_tokens, const char* model, cachepawl_layout** out);
/* The model_type values the two functions above map, one per line, sorted (new string). */
CACHEPAWL_API cachepawl_status cachepawl_layout_hf_model_types(char** out);
/* Rank `tp_rank` of `whole` split `tp_size` ways, as vLLM and SGLang split attention KV heads
 * (fewer heads than ranks: each replicated), Mamba heads and groups, Gated DeltaNet heads and
 * conv channels (layouts/layout_tp.h; docs/MODELS.md, "Tensor parallelism"). `whole` is a
 * whole model's layout (tp_size 1); tp_size 1 gives a copy. INVALID_ARGUMENT naming the layer's
 * field and value when tp_size does not split it, tp_size 0, tp_rank >= tp_size, or a `whole`
 * that is already one rank's. */
CACHEPAWL_API cachepawl_status cachepawl_layout_shard(const cachepawl_layout* whole,
                                                      uint32_t tp_size, uint32_t tp_rank,
                                                      cachepawl_layout** out);
/* The layout's tensor-parallel degree and rank (1 and 0 for a whole model's layout). */
CACHEPAWL_API cachepawl_status cachepawl_layout_tp(const cachepawl_layout* layout,
                                                   uint32_t* tp_size, uint32_t* tp_rank);
CACHEPAWL_API void cachepawl_layout_free(cachepawl_layout* layout);
/* The canonical JSON form (new string). */
CACHEPAWL_API cachepawl_status cachepawl_layout_to_json(const cachepawl_layout* layout, char** out);
CACHEPAWL_API cachepawl_status cachepawl_layout_page_size_tokens(const cachepawl_layout* layout,
                                                                 uint32_t* out);
/* Bytes of one record: KV a whole KV page (all attention layers, K and V, windowed ones
 * included: the device page and the device record), STATE a state (all SSM layers), WINDOW_KV
 * the windowed attention layers' part of a page (0 for a layout without sliding-window layers;
 * the full-attention part is KV minus WINDOW_KV). */
CACHEPAWL_API cachepawl_status cachepawl_layout_record_bytes(const cachepawl_layout* layout,
                                                             cachepawl_kind kind, uint64_t* out);
/* The largest sliding window in tokens (0 without sliding-window layers), and the pages of
 * windowed KV a load at a depth needs: ceil(window_tokens / page_size_tokens). */
CACHEPAWL_API cachepawl_status cachepawl_layout_window_tokens(const cachepawl_layout* layout,
                                                              uint32_t* out);
CACHEPAWL_API cachepawl_status cachepawl_layout_window_pages(const cachepawl_layout* layout,
                                                             uint32_t* out);
/* Decoder layers of the whole model. */
CACHEPAWL_API cachepawl_status cachepawl_layout_num_layers(const cachepawl_layout* layout,
                                                           uint32_t* out);
/* Layers of a kind on this rank: attention layers (KV: all of them, windowed ones included),
 * SSM layers (STATE), or the sliding-window attention layers (WINDOW_KV, a subset of KV's). */
CACHEPAWL_API cachepawl_status cachepawl_layout_num_layers_of_kind(const cachepawl_layout* layout,
                                                                   cachepawl_kind kind,
                                                                   size_t* out);
/* The decoder position (layer_index) of the i-th attention (KV), SSM (STATE) or sliding-window
 * attention (WINDOW_KV) layer. */
CACHEPAWL_API cachepawl_status cachepawl_layout_layer_index(const cachepawl_layout* layout,
                                                            cachepawl_kind kind, size_t i,
                                                            uint32_t* out);
/* Bytes of K of attention layer `i` for one page (an MLA layer's latent). */
CACHEPAWL_API cachepawl_status cachepawl_layout_k_bytes_per_page(const cachepawl_layout* layout,
                                                                 size_t i, uint64_t* out);
/* Bytes of V of attention layer `i` for one page: K's, or 0 for an MLA layer (no V). */
CACHEPAWL_API cachepawl_status cachepawl_layout_v_bytes_per_page(const cachepawl_layout* layout,
                                                                 size_t i, uint64_t* out);
/* Bytes of SSM layer `i`'s conv state and SSM state for one sequence. */
CACHEPAWL_API cachepawl_status cachepawl_layout_conv_state_bytes(const cachepawl_layout* layout,
                                                                 size_t i, uint64_t* out);
CACHEPAWL_API cachepawl_status cachepawl_layout_ssm_state_bytes(const cachepawl_layout* layout,
                                                                size_t i, uint64_t* out);
/* The 32-byte layout fingerprint (SHA-256) into `out` of `capacity` bytes (>= 32). */
CACHEPAWL_API cachepawl_status cachepawl_layout_fingerprint(const cachepawl_layout* layout,
                                                            uint8_t* out, size_t capacity);

/* ------------------------------------------------------------------------------------------
 * Options (vocab/store_options.h). One thread at a time per handle. Each setter checks its
 * value at once (INVALID_ARGUMENT naming the field and value); cachepawl_store_open checks
 * the combination. Defaults are StoreOptions' (host 1 GiB, no disk, CPU/GPU auto, ...).
 * ---------------------------------------------------------------------------------------- */

CACHEPAWL_API cachepawl_status cachepawl_options_new(cachepawl_options** out);
CACHEPAWL_API void cachepawl_options_free(cachepawl_options* options);
/* The layout (required): the last of these four calls wins. Presets and JSON are resolved at
 * once, so a bad name, file or JSON fails here. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_layout_preset(cachepawl_options* options,
                                                                   const char* name,
                                                                   uint32_t page_size_tokens);
CACHEPAWL_API cachepawl_status cachepawl_options_set_layout_json_file(cachepawl_options* options,
                                                                      const char* path);
CACHEPAWL_API cachepawl_status cachepawl_options_set_layout_json_string(cachepawl_options* options,
                                                                        const char* json,
                                                                        size_t len);
/* Copies `layout`. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_layout(cachepawl_options* options,
                                                            const cachepawl_layout* layout);
/* Pinned host budget: > 0, a multiple of 4096. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_host_bytes(cachepawl_options* options,
                                                                uint64_t bytes);
/* Evict ahead: a store thread keeps this many host bytes free (StoreOptions::
 * host_free_target_bytes). Not called: host_bytes / 16, at most 1 GiB, for host tiers of 1 GiB or
 * more, none below. 0: evict only on demand. Checked against host_bytes (at most half of it) by
 * cachepawl_options_validate and cachepawl_store_open. */
CACHEPAWL_API cachepawl_status
cachepawl_options_set_host_free_target_bytes(cachepawl_options* options, uint64_t bytes);
/* Entries per transfer operation of a large Save (StoreOptions::save_chunk_entries, default
 * 256; >= 1): a Save of more crosses the link as several operations behind one fence. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_save_chunk_entries(cachepawl_options* options,
                                                                        uint32_t entries);
/* The longest prompt one call names (StoreOptions::max_prompt_tokens, default 16777216 = 2^24;
 * > 0, and at least one page, checked by cachepawl_options_validate): lookups and saves of more
 * tokens, or of hashes of more pages times the page size, fail with INVALID_ARGUMENT naming it. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_max_prompt_tokens(cachepawl_options* options,
                                                                       uint64_t tokens);
/* The bounds of the waits inside store calls, in ms (each at most 86400000, a day; 0: do not
 * wait). host_space_wait_ms (default 30000): a save or load waits this long for host room while
 * write-on-evict victims or other loads are in flight, then fails NO_SPACE.
 * host_pinning_wait_ms (default 60000): a save or load waits this long for the host tier's
 * background pinning. stream_wait_ms (default 60000): cachepawl_fence_stream_wait on a load that
 * reads from disk or the remote tier first blocks until its copies are enqueued, at most this
 * long, then fails TIMED_OUT having enqueued nothing. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_host_space_wait_ms(cachepawl_options* options,
                                                                        uint32_t ms);
CACHEPAWL_API cachepawl_status
cachepawl_options_set_host_pinning_wait_ms(cachepawl_options* options, uint32_t ms);
CACHEPAWL_API cachepawl_status cachepawl_options_set_stream_wait_ms(cachepawl_options* options,
                                                                    uint32_t ms);
/* Disk tier folder (catalog, and the data file unless data paths are added). */
CACHEPAWL_API cachepawl_status cachepawl_options_set_disk_dir(cachepawl_options* options,
                                                              const char* dir);
/* Disk budget; 0 (the default) disables the disk tier. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_disk_bytes(cachepawl_options* options,
                                                                uint64_t bytes);
/* Adds a data file to stripe over (one per drive); none: one file in the disk folder. */
CACHEPAWL_API cachepawl_status cachepawl_options_add_disk_data_path(cachepawl_options* options,
                                                                    const char* path);
/* io_uring queue depth in [1, 4096] (default 32). */
CACHEPAWL_API cachepawl_status cachepawl_options_set_disk_queue_depth(cachepawl_options* options,
                                                                      uint32_t depth);
CACHEPAWL_API cachepawl_status cachepawl_options_set_write_policy(cachepawl_options* options,
                                                                  cachepawl_write_policy policy);
/* CACHEPAWL_EVICTION_LRU or CACHEPAWL_EVICTION_HYBRID (the default). */
CACHEPAWL_API cachepawl_status
cachepawl_options_set_eviction_policy(cachepawl_options* options, cachepawl_eviction_policy policy);
/* Hits before a write_through_selective entry goes to disk: > 0 (default 2). */
CACHEPAWL_API cachepawl_status cachepawl_options_set_selective_min_hits(cachepawl_options* options,
                                                                        uint32_t hits);
/* Nonzero: a disk catalog of another layout is wiped on open instead of INCOMPATIBLE. */
CACHEPAWL_API cachepawl_status
cachepawl_options_set_wipe_on_layout_mismatch(cachepawl_options* options, int32_t wipe);
/* Nonzero: a disk catalog that cannot be read (damaged) is removed on open and the disk tier
 * starts empty, instead of the open failing (StoreOptions::wipe_unreadable_catalog). */
CACHEPAWL_API cachepawl_status
cachepawl_options_set_wipe_unreadable_catalog(cachepawl_options* options, int32_t wipe);
/* -1: CPU mode always; >= 0: that CUDA device when a GPU is present (default 0). */
CACHEPAWL_API cachepawl_status cachepawl_options_set_cuda_device(cachepawl_options* options,
                                                                 int32_t device);
/* Bytes of a store-owned device pool (KV pages and states under one budget); 0 (default): the
 * engine registers its own pool with cachepawl_store_register_device_pool. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_device_pool_bytes(cachepawl_options* options,
                                                                       uint64_t bytes);
/* CUDA priorities of the store's load and write streams, each in [-1000, 1000] (lower runs first;
 * CUDA clamps a value to the device's range). */
CACHEPAWL_API cachepawl_status cachepawl_options_set_stream_priorities(cachepawl_options* options,
                                                                       int32_t load_priority,
                                                                       int32_t write_priority);
/* Device staging per direction: >= 1 MiB (default 256 MiB). */
CACHEPAWL_API cachepawl_status cachepawl_options_set_staging_bytes(cachepawl_options* options,
                                                                   uint64_t bytes);
/* GPU mode, the CPU the store spends to see a copy's end without a thread's wake-up
 * (docs/EMBEDDING.md, section 1): the device mover's completion threads poll an operation's end
 * for up to `completion_spin_us` (default 20000), a load's or save's fence wait polls for up to
 * `wait_spin_us` (default 2000), each at most 1000000 (0: sleep at once); `inline_dispatch`
 * nonzero (default): a load or save enqueues its copies on the calling thread when nothing of its
 * direction is queued, 0: always on the mover's dispatcher thread. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_polling(cachepawl_options* options,
                                                             uint32_t completion_spin_us,
                                                             uint32_t wait_spin_us,
                                                             int32_t inline_dispatch);
/* Checkpoint hints are rounded down to this many pages (0, the default: one page). */
CACHEPAWL_API cachepawl_status
cachepawl_options_set_track_interval_pages(cachepawl_options* options, uint32_t pages);
/* Remote tier (vocab/store_options.h RemoteOptions; docs/EMBEDDING.md, "Sharing prefixes
 * across replicas: the remote tier"): a Redis Cluster (or one Redis server) several stores share,
 * below disk. Lookups report its pages as CACHEPAWL_TIER_REMOTE; load and prefetch fetch them.
 * Seeds "redis://host:port[,host:port...]"; "" (the default): no remote tier. Checked for
 * syntax here; cachepawl_store_open connects and fails with UNAVAILABLE naming the seeds when
 * no seed answers. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_remote_seeds(cachepawl_options* options,
                                                                  const char* seeds);
/* ACL user and password for AUTH ("" each: none; a user needs a password). The password is
 * never echoed in an error. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_remote_auth(cachepawl_options* options,
                                                                 const char* user,
                                                                 const char* password);
/* Namespace of this deployment's keys: 1 to 64 of A-Z a-z 0-9 _ . - (default "cachepawl"). */
CACHEPAWL_API cachepawl_status cachepawl_options_set_remote_key_prefix(cachepawl_options* options,
                                                                       const char* prefix);
/* A larger record is cut into values of this size: 64 KiB to 512 MiB (default 8 MiB). */
CACHEPAWL_API cachepawl_status cachepawl_options_set_remote_chunk_bytes(cachepawl_options* options,
                                                                        uint64_t bytes);
/* One batch of remote reads or writes: 1 ms to 10 minutes (default 2000 ms). */
CACHEPAWL_API cachepawl_status cachepawl_options_set_remote_deadline_ms(cachepawl_options* options,
                                                                        uint32_t ms);
/* The existence check of one lookup: 1 to 10000 ms (default 20); past it the remote part is a
 * miss. */
CACHEPAWL_API cachepawl_status
cachepawl_options_set_remote_lookup_deadline_ms(cachepawl_options* options, uint32_t ms);
/* Expiry of written values in seconds; 0 (the default): none. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_remote_ttl_seconds(cachepawl_options* options,
                                                                        uint32_t seconds);
/* CACHEPAWL_REMOTE_WRITE_NONE, _THROUGH (the default), _SELECTIVE or _ON_EVICT. */
CACHEPAWL_API cachepawl_status cachepawl_options_set_remote_write_policy(
    cachepawl_options* options, cachepawl_remote_write_policy policy);
/* Hits before a CACHEPAWL_REMOTE_WRITE_SELECTIVE entry is written: > 0 (default 2). */
CACHEPAWL_API cachepawl_status
cachepawl_options_set_remote_selective_min_hits(cachepawl_options* options, uint32_t hits);
/* Writes waiting for the cluster beyond this many are dropped and counted: > 0 (default
 * 4096). */
CACHEPAWL_API cachepawl_status
cachepawl_options_set_remote_max_queued_writes(cachepawl_options* options, uint32_t writes);
/* Threads fetching remote records for loads and prefetches (default 4; in [1, 64]): the
 * fetches of different calls run in parallel. */
CACHEPAWL_API cachepawl_status
cachepawl_options_set_remote_reader_threads(cachepawl_options* options, uint32_t threads);
/* The checks cachepawl_store_open makes on the options alone. */
CACHEPAWL_API cachepawl_status cachepawl_options_validate(const cachepawl_options* options);

/* ------------------------------------------------------------------------------------------
 * Store: open, close, layout. Store calls are thread-safe (several threads at once).
 * ---------------------------------------------------------------------------------------- */

/* Opens (or creates) a store; a disk tier reopens its catalog. `options` is only read (the
 * caller keeps and frees it). A rank's layout (cachepawl_layout_shard, tp_size > 1) opens a
 * tensor-parallel group's store: an entry is a hit once every rank saved its share; this
 * process's loads and saves move its layout's rank's shares, and the other ranks' processes
 * attach (cachepawl_store_serve, cachepawl_store_attach). Errors: INVALID_ARGUMENT,
 * INCOMPATIBLE (disk data of another layout), IO_ERROR, ... */
CACHEPAWL_API cachepawl_status cachepawl_store_open(const cachepawl_options* options,
                                                    cachepawl_store** out);
/* Opens a store as cachepawl_store_open does, as the owner of a store the node's other
 * processes attach to (docs/EMBEDDING.md, "One store for an engine's processes"): the host tier
 * in shared memory, a server on the Unix socket `socket_path` (at most 107 bytes), admitting
 * the owner's Unix user and, when `socket_group` is non-NULL and non-empty, that group. This
 * process uses the store as an open one; closing it ends the attached processes' sessions.
 * Errors: those of cachepawl_store_open, INVALID_ARGUMENT (the socket path or group), BUSY (an
 * owner already serves on that socket). */
CACHEPAWL_API cachepawl_status cachepawl_store_serve(const cachepawl_options* options,
                                                     const char* socket_path,
                                                     const char* socket_group,
                                                     cachepawl_store** out);
/* Attaches to the owner serving on `socket_path`: the same calls, on the owner's index and
 * tiers; this process's own copy engines move the bytes between its device pool and the
 * owner's host tier (mapped here). `expected_layout` (may be NULL: any) makes the attach fail
 * with INCOMPATIBLE when the owner serves another layout; cachepawl_store_layout says which it
 * serves. A tensor-parallel group's owner (a layout of cachepawl_layout_shard): an expected
 * layout of rank r (of the same group) attaches as rank r, whose shares this process's loads
 * and saves move (NULL: rank 0). `cuda_device` -1: CPU mode (device pools in host memory);
 * `device_pool_bytes` > 0: a device pool of this process's own (cachepawl_store_allocate_slot), 0:
 * register one. `call_timeout_ms` (0: 10000) bounds each call's wait for the owner and, while
 * operations are pending, the owner's silence: an owner gone or silent fails every pending call and
 * fence, and every later call, with UNAVAILABLE (attach again). Errors: UNAVAILABLE (no owner
 * serves there), FAILED_PRECONDITION (refused: another Unix user), INCOMPATIBLE (another build's
 * protocol, another layout), INVALID_ARGUMENT. */
CACHEPAWL_API cachepawl_status cachepawl_store_attach(
    const char* socket_path, const cachepawl_layout* expected_layout, int32_t cuda_device,
    uint64_t device_pool_bytes, uint32_t call_timeout_ms, cachepawl_store** out);
/* Drains in-flight operations (every fence fires), persists the catalog, releases memory.
 * Later calls that use the cache (lookup, lock, load, save, prefetch, pool and slot calls)
 * fail with FAILED_PRECONDITION; layout, gpu mode, hashing and stats still answer (the stats
 * then hold the final counters). Idempotent: closing twice is OK. Must not be called from a
 * fence callback. */
CACHEPAWL_API cachepawl_status cachepawl_store_close(cachepawl_store* store);
/* Closes the store (when open), releases its memory and the handle. NULL is fine. */
CACHEPAWL_API void cachepawl_store_free(cachepawl_store* store);
/* A copy of the store's layout (the caller frees it). */
CACHEPAWL_API cachepawl_status cachepawl_store_layout(const cachepawl_store* store,
                                                      cachepawl_layout** out);
/* 1 when transfers use a GPU, 0 in CPU mode (device pools in host memory). */
CACHEPAWL_API cachepawl_status cachepawl_store_gpu_mode(const cachepawl_store* store, int32_t* out);
/* Counters and latency percentiles (new strings): one JSON object, or Prometheus text
 * exposition format (metric prefix cachepawl_). The JSON's "remote" object holds the remote
 * tier's counters (vocab/store_stats.h RemoteStats: "enabled", writes_queued, writes,
 * write_failures, writes_dropped, lookup_pages, loaded, load_failures, checksum_failures,
 * transport_errors, deleted_bad, ...). */
CACHEPAWL_API cachepawl_status cachepawl_store_stats_json(const cachepawl_store* store, char** out);
CACHEPAWL_API cachepawl_status cachepawl_store_stats_prometheus(const cachepawl_store* store,
                                                                char** out);

/* ------------------------------------------------------------------------------------------
 * Device pools (vocab/device_pool.h). Either the store owns one (options' device_pool_bytes)
 * and hands out slots, or the engine describes its own tensors with a pool handle and
 * registers it once, before any load or save. Addresses are device pointers (host pointers
 * in CPU mode, device -1); the store never frees them.
 * ---------------------------------------------------------------------------------------- */

/* An empty description: `num_pages` KV page slots and `num_state_slots` state slots of the
 * memory of CUDA device `device` (-1: host memory). A layout without attention layers has no
 * KV pages: num_pages 0 (registration refuses more), and no KV layer or kv_base is set. */
CACHEPAWL_API cachepawl_status cachepawl_pool_new(int32_t device, uint64_t num_pages,
                                                  uint64_t num_state_slots, cachepawl_pool** out);
CACHEPAWL_API void cachepawl_pool_free(cachepawl_pool* pool);
/* Attention layer `i` (the i-th attention layer of the layout) with K and V separate: page p's
 * K is K-bytes-per-page contiguous bytes at k_base + p * k_page_stride, V likewise. A stride
 * of 0 means packed (K bytes per page). An MLA layer ("mla": true) has its latent as K and no
 * V (0 bytes): v_base NULL, v_page_stride 0; any other layer's NULL v_base is refused at
 * registration. */
CACHEPAWL_API cachepawl_status cachepawl_pool_set_kv_layer(cachepawl_pool* pool, size_t i,
                                                           void* k_base, uint64_t k_page_stride,
                                                           void* v_base, uint64_t v_page_stride);
/* Attention layer `i` with K and V interleaved per page, [num_pages, 2, page, heads, dim]:
 * V = K + K bytes per page; a page_stride of 0 means packed (2 * K bytes per page; an MLA
 * layer's page is its latent alone, [num_pages, page, 1, latent]). */
CACHEPAWL_API cachepawl_status cachepawl_pool_set_kv_layer_interleaved(cachepawl_pool* pool,
                                                                       size_t i, void* base,
                                                                       uint64_t page_stride);
/* SSM layer `i`: state slot s's conv state at conv_base + s * conv_slot_stride, its SSM state
 * at ssm_base + s * ssm_slot_stride. Strides of 0 mean packed (the state's bytes). A layer
 * without an SSM state (block "shortconv", 0 bytes) takes ssm_base NULL, a layer without a conv
 * state (block "lightning") conv_base NULL; for every other layer a NULL base is refused when
 * the pool is registered. */
CACHEPAWL_API cachepawl_status cachepawl_pool_set_ssm_layer(cachepawl_pool* pool, size_t i,
                                                            void* conv_base,
                                                            uint64_t conv_slot_stride,
                                                            void* ssm_base,
                                                            uint64_t ssm_slot_stride);
/* Block-contiguous instead of per-layer: page p is the whole KV record (page-first order) at
 * kv_base + p * page_stride, state s the whole state record at state_base + s * state_stride.
 * Strides of 0 mean the record size. Exclusive with the per-layer setters. */
CACHEPAWL_API cachepawl_status cachepawl_pool_set_block_contiguous(cachepawl_pool* pool,
                                                                   void* kv_base,
                                                                   uint64_t page_stride,
                                                                   void* state_base,
                                                                   uint64_t state_stride);
/* Registers the described pool (copied; the handle may be freed after). INVALID_ARGUMENT
 * naming the layer and value when it does not fit the layout (a layer not set, overlapping
 * slots, a pointer of another device); FAILED_PRECONDITION when a pool (or a store-owned
 * one) is already there. */
CACHEPAWL_API cachepawl_status cachepawl_store_register_device_pool(cachepawl_store* store,
                                                                    const cachepawl_pool* pool);

/* Stops using the registered pool so that the engine may free or resize its tensors: load and
 * save fail with FAILED_PRECONDITION from the call on; it returns once every operation in
 * flight on the pool has fired its fence, and after it no byte of the pool is touched. Host and
 * disk contents stay; a new pool may then be registered. FAILED_PRECONDITION when no pool is
 * registered, the pool is store-owned, or the store is closed. */
CACHEPAWL_API cachepawl_status cachepawl_store_unregister_device_pool(cachepawl_store* store);

/* Store-owned pool only (FAILED_PRECONDITION otherwise): a free slot (a KV page index or a
 * state slot index; NO_SPACE when full), and giving it back. */
CACHEPAWL_API cachepawl_status cachepawl_store_allocate_device_slot(cachepawl_store* store,
                                                                    cachepawl_kind kind,
                                                                    uint64_t* out);
CACHEPAWL_API cachepawl_status cachepawl_store_free_device_slot(cachepawl_store* store,
                                                                cachepawl_kind kind, uint64_t slot);
/* Store-owned pool only: copies one slot's record (exactly cachepawl_layout_record_bytes of
 * `kind`, in page-first record order) from `record` (host memory) into the slot, or back. */
CACHEPAWL_API cachepawl_status cachepawl_store_write_device_record(
    cachepawl_store* store, cachepawl_kind kind, uint64_t slot, const void* record, size_t bytes);
CACHEPAWL_API cachepawl_status cachepawl_store_read_device_record(cachepawl_store* store,
                                                                  cachepawl_kind kind,
                                                                  uint64_t slot, void* record,
                                                                  size_t bytes);

/* ------------------------------------------------------------------------------------------
 * Hashing and lookup. A match handle is immutable: thread-safe.
 * ---------------------------------------------------------------------------------------- */

/* The page hashes of every full page of `tokens` under namespace (ns, ns_len): *count =
 * num_tokens / page_size_tokens hashes of CACHEPAWL_HASH_BYTES each, into `out` of
 * `capacity` hashes (capacity * 32 bytes). */
CACHEPAWL_API cachepawl_status cachepawl_store_hash_tokens(const cachepawl_store* store,
                                                           const char* ns, size_t ns_len,
                                                           const uint32_t* tokens,
                                                           size_t num_tokens, uint8_t* out,
                                                           size_t capacity, size_t* count);
/* The longest reusable prefix of `tokens` (hybrid rule: KV pages and the state at exactly
 * that depth). A miss is not an error: reusable pages 0. Refreshes recency. */
CACHEPAWL_API cachepawl_status cachepawl_store_lookup(cachepawl_store* store, const char* ns,
                                                      size_t ns_len, const uint32_t* tokens,
                                                      size_t num_tokens, cachepawl_match** out);
/* The same from `num_hashes` engine-computed page hashes (num_hashes * 32 bytes). The all-zero
 * hash is refused (INVALID_ARGUMENT naming its index): the store reserves it. */
CACHEPAWL_API cachepawl_status cachepawl_store_lookup_hashes(cachepawl_store* store,
                                                             const uint8_t* hashes,
                                                             size_t num_hashes,
                                                             cachepawl_match** out);
CACHEPAWL_API void cachepawl_match_free(cachepawl_match* match);
/* Full pages of the lookup (the number of hashes). */
CACHEPAWL_API cachepawl_status cachepawl_match_num_pages(const cachepawl_match* match, size_t* out);
CACHEPAWL_API cachepawl_status cachepawl_match_page_size_tokens(const cachepawl_match* match,
                                                                uint32_t* out);
/* Pages reusable under the hybrid rule (times page_size_tokens: the reusable tokens). */
CACHEPAWL_API cachepawl_status cachepawl_match_reusable_pages(const cachepawl_match* match,
                                                              size_t* out);
/* Longest prefix whose KV pages exist, state or not. */
CACHEPAWL_API cachepawl_status cachepawl_match_kv_only_pages(const cachepawl_match* match,
                                                             size_t* out);
/* kv_only_pages rounded down to the track interval: where to save a state while recomputing. */
CACHEPAWL_API cachepawl_status cachepawl_match_checkpoint_hint_pages(const cachepawl_match* match,
                                                                     size_t* out);
/* The fastest tier of each of the first kv_only_pages pages (array convention); none for a
 * pure SSM layout (its pages hold nothing: *count is 0). */
CACHEPAWL_API cachepawl_status cachepawl_match_page_tiers(const cachepawl_match* match,
                                                          cachepawl_tier* out, size_t capacity,
                                                          size_t* count);
/* Layouts with sliding-window layers: the first page of the window a load at reusable_pages
 * reads (reusable_pages - window pages, at least 0); 0 without windowed layers or a hit. */
CACHEPAWL_API cachepawl_status cachepawl_match_window_first_page(const cachepawl_match* match,
                                                                 size_t* out);
/* The fastest tier of the windowed KV of each page of [window_first_page, reusable_pages)
 * (array convention); none without windowed layers or a hit. */
CACHEPAWL_API cachepawl_status cachepawl_match_window_tiers(const cachepawl_match* match,
                                                            cachepawl_tier* out, size_t capacity,
                                                            size_t* count);
/* The fastest tier of the state at reusable_pages; CACHEPAWL_TIER_NONE when there is none. */
CACHEPAWL_API cachepawl_status cachepawl_match_state_tier(const cachepawl_match* match,
                                                          cachepawl_tier* out);
/* Every page hash of the lookup, num_pages * 32 bytes (array convention, in hashes). */
CACHEPAWL_API cachepawl_status cachepawl_match_hashes(const cachepawl_match* match, uint8_t* out,
                                                      size_t capacity, size_t* count);

/* ------------------------------------------------------------------------------------------
 * Locks. A lock handle may be used by several threads; unlock happens once.
 * ---------------------------------------------------------------------------------------- */

/* Keeps the first `pages` pages of `match` (and, when pages == reusable_pages and the layout
 * has SSM layers, the state at that depth) from eviction until unlocked. */
CACHEPAWL_API cachepawl_status cachepawl_store_lock(cachepawl_store* store,
                                                    const cachepawl_match* match, size_t pages,
                                                    cachepawl_lock** out);
/* Releases the lock (the handle stays valid until freed). FAILED_PRECONDITION when already
 * unlocked, or when `lock` belongs to another store. */
CACHEPAWL_API cachepawl_status cachepawl_store_unlock(cachepawl_store* store, cachepawl_lock* lock);
/* Unlocks (when still locked and the store is open) and releases the handle. NULL is fine. */
CACHEPAWL_API void cachepawl_lock_free(cachepawl_lock* lock);
/* The pages the lock holds: those asked for, less the pages at their end that a lookup found
 * only in the remote tier (not in this store until a load or prefetch fetched them). */
CACHEPAWL_API cachepawl_status cachepawl_lock_pages(const cachepawl_lock* lock, size_t* out);
CACHEPAWL_API cachepawl_status cachepawl_lock_has_state(const cachepawl_lock* lock, int32_t* out);

/* ------------------------------------------------------------------------------------------
 * Load, save, prefetch. Each returns a fence (a new handle) that always fires.
 * ---------------------------------------------------------------------------------------- */

/* Loads pages [first_page, first_page + num_device_pages) of `match` into device pages
 * `device_pages`, and, unless device_state_slot is CACHEPAWL_NO_SLOT, the state at depth
 * (first_page + num_device_pages) pages, which must equal the match's reusable pages.
 * Pure SSM layout: num_device_pages must be 0 and a state slot given; the depth is then
 * first_page, 0 standing for the match's reusable pages (any other depth: INVALID_ARGUMENT
 * naming both). flags: 0 or CACHEPAWL_LOAD_PER_LAYER_FENCES (no sub-fences without attention
 * layers). Errors: INVALID_ARGUMENT; NOT_FOUND when
 * something of the match is no longer cached (recompute); BUSY when another load or prefetch
 * reads one of these pages from disk now; NO_SPACE when host memory cannot take the disk
 * hits. The device pages may be used once the fence fired OK. */
CACHEPAWL_API cachepawl_status cachepawl_store_load(cachepawl_store* store,
                                                    const cachepawl_match* match,
                                                    const uint64_t* device_pages,
                                                    size_t num_device_pages,
                                                    uint64_t device_state_slot, size_t first_page,
                                                    uint32_t flags, cachepawl_fence** out);
/* Copies device pages (and optionally a state) into host memory (and disk by policy): pages
 * [first_page, first_page + num_device_pages) of the full pages of `tokens` under namespace
 * (ns, ns_len), and, unless device_state_slot is CACHEPAWL_NO_SLOT, the state taken at
 * state_depth_tokens (a multiple of the page size). Pages already cached are only refreshed.
 * The device slots may be reused once the fence fired. Pure SSM layout: num_device_pages must
 * be 0 (device_pages NULL); the state's pages are the tokens' first state_depth_tokens. */
CACHEPAWL_API cachepawl_status cachepawl_store_save(
    cachepawl_store* store, const char* ns, size_t ns_len, const uint32_t* tokens,
    size_t num_tokens, size_t first_page, const uint64_t* device_pages, size_t num_device_pages,
    uint64_t device_state_slot, uint64_t state_depth_tokens, cachepawl_fence** out);
/* The same with `num_hashes` engine-computed page hashes instead of tokens. */
CACHEPAWL_API cachepawl_status cachepawl_store_save_hashes(
    cachepawl_store* store, const uint8_t* hashes, size_t num_hashes, size_t first_page,
    const uint64_t* device_pages, size_t num_device_pages, uint64_t device_state_slot,
    uint64_t state_depth_tokens, cachepawl_fence** out);
/* Brings the disk-resident pages and state of `match` into host memory ahead of a load. */
CACHEPAWL_API cachepawl_status cachepawl_store_prefetch(cachepawl_store* store,
                                                        const cachepawl_match* match,
                                                        cachepawl_prefetch** out);
/* The prefetch's fence (a new handle). Thread-safe. */
CACHEPAWL_API cachepawl_status cachepawl_prefetch_fence(const cachepawl_prefetch* prefetch,
                                                        cachepawl_fence** out);
/* Stops what has not started; the fence fires either way. Thread-safe. */
CACHEPAWL_API cachepawl_status cachepawl_prefetch_cancel(cachepawl_prefetch* prefetch);
/* Releases the handle; the prefetch itself goes on. NULL is fine. */
CACHEPAWL_API void cachepawl_prefetch_free(cachepawl_prefetch* prefetch);

/* ------------------------------------------------------------------------------------------
 * Fences (vocab/fence.h). Thread-safe; freeing a fence does not cancel its operation.
 * ---------------------------------------------------------------------------------------- */

/* *out = 1 once the operation finished (with success or an error). */
CACHEPAWL_API cachepawl_status cachepawl_fence_ready(const cachepawl_fence* fence, int32_t* out);
/* Blocks until the fence fired or timeout_ms passed (CACHEPAWL_WAIT_FOREVER: no limit).
 * Returns the operation's status (its message is the last error when not OK), or TIMED_OUT. */
CACHEPAWL_API cachepawl_status cachepawl_fence_wait(const cachepawl_fence* fence,
                                                    uint64_t timeout_ms);
/* The operation's result once fired: *code (and, when `message` is not NULL, a new string, ""
 * for OK, that the caller frees). FAILED_PRECONDITION while not fired yet. */
CACHEPAWL_API cachepawl_status cachepawl_fence_result(const cachepawl_fence* fence,
                                                      cachepawl_status* code, char** message);
/* Per-layer sub-fences (loads with CACHEPAWL_LOAD_PER_LAYER_FENCES): their number (0 when
 * none), whether layer `layer` (the layer-th attention layer) landed, and a wait for it. */
CACHEPAWL_API cachepawl_status cachepawl_fence_num_layers(const cachepawl_fence* fence,
                                                          size_t* out);
CACHEPAWL_API cachepawl_status cachepawl_fence_layer_ready(const cachepawl_fence* fence,
                                                           size_t layer, int32_t* out);
CACHEPAWL_API cachepawl_status cachepawl_fence_wait_layer(const cachepawl_fence* fence,
                                                          size_t layer, uint64_t timeout_ms);
/* Makes `cuda_stream` (a cudaStream_t) wait for the fence without blocking the CPU (when the
 * load had disk reads left, the calling thread blocks until they are done). NULL stream: waits
 * on the CPU and returns the operation's status (CPU mode). A non-NULL stream on a fence
 * that already fired returns its status at once; on one that has not fired and has no GPU
 * side (CPU mode, or a build without CUDA): UNAVAILABLE. */
CACHEPAWL_API cachepawl_status cachepawl_fence_stream_wait(const cachepawl_fence* fence,
                                                           void* cuda_stream);
/* Runs fn(user_data, status) once the fence fires: at once on this thread when it already
 * has, else on a store thread. fn must return quickly and must not wait on fences or close
 * or free a store. */
typedef void (*cachepawl_fence_callback)(void* user_data, cachepawl_status status);
CACHEPAWL_API cachepawl_status cachepawl_fence_on_complete(const cachepawl_fence* fence,
                                                           cachepawl_fence_callback fn,
                                                           void* user_data);
CACHEPAWL_API void cachepawl_fence_free(cachepawl_fence* fence);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CACHEPAWL_CACHEPAWL_H_ */
