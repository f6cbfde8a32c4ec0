"""Loading libcachepawl.so and declaring the C ABI (capi/cachepawl.h) to ctypes.

Every function of the header gets its argtypes and restype here, so that no pointer or size is
ever passed through ctypes' default ``int`` conversion. Handles are distinct pointer types (a
match handle cannot be passed where a fence is expected); strings the library allocates are
received as ``c_void_p`` so that they can be released with ``cachepawl_string_free``.

Where the library comes from, first match wins:

1. ``CACHEPAWL_LIBRARY``: a path to the library file (nothing else is tried when it is set);
2. a ``libcachepawl.so*`` file inside this package (a wheel that bundles it);
3. ``ctypes.util.find_library("cachepawl")`` (the ldconfig cache; ``LD_LIBRARY_PATH``);
4. ``libcachepawl.so.0`` / ``libcachepawl.so`` through the dynamic loader (``LD_LIBRARY_PATH``,
   the ldconfig cache, the default folders), then ``<sys.prefix>/lib`` and ``/usr/local/lib``
   (where ``cmake --install`` puts it by default).

A library whose ``cachepawl_abi_version()`` differs from :data:`ABI_VERSION` is refused with an
ImportError, as is one that lacks a function of the header.

Thread safety: the loaded library and its prototypes are immutable after import.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import weakref
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

#: The C ABI this package binds (CACHEPAWL_ABI_VERSION of capi/cachepawl.h).
ABI_VERSION = 1
#: Environment variable naming the library file to load.
LIBRARY_ENV = "CACHEPAWL_LIBRARY"

HASH_BYTES = 32
NO_SLOT = 2**64 - 1
WAIT_FOREVER = 2**64 - 1
LOAD_PER_LAYER_FENCES = 1


def _handle_type(name: str) -> Any:
    """A distinct pointer type to an opaque struct (never instantiated; only pointed to), so
    that ctypes refuses a handle of one kind where another is expected."""
    return ctypes.POINTER(type(name, (ctypes.Structure,), {}))


OptionsP = _handle_type("cachepawl_options")
LayoutP = _handle_type("cachepawl_layout")
StoreP = _handle_type("cachepawl_store")
PoolP = _handle_type("cachepawl_pool")
MatchP = _handle_type("cachepawl_match")
LockP = _handle_type("cachepawl_lock")
FenceP = _handle_type("cachepawl_fence")
PrefetchP = _handle_type("cachepawl_prefetch")

_status = ctypes.c_int32
_i32 = ctypes.c_int32
_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64
_size = ctypes.c_size_t
_vp = ctypes.c_void_p
_str = ctypes.c_char_p  # arguments, and static strings the library owns
_P = ctypes.POINTER

#: void (*cachepawl_fence_callback)(void* user_data, cachepawl_status status)
FENCE_CALLBACK = ctypes.CFUNCTYPE(None, _vp, _status)

# (name, restype, argtypes) for every function of capi/cachepawl.h, in the header's order.
_PROTOTYPES: List[Tuple[str, Any, Sequence[Any]]] = [
    # Library: versions, errors, strings.
    ("cachepawl_version", _str, ()),
    ("cachepawl_version_number", _u32, ()),
    ("cachepawl_abi_version", _u32, ()),
    ("cachepawl_status_name", _str, (_status,)),
    ("cachepawl_last_error", _str, ()),
    ("cachepawl_store_last_error", _vp, (StoreP,)),  # new string: freed by us
    ("cachepawl_string_free", None, (_vp,)),
    # Layouts.
    ("cachepawl_layout_preset_names", _status, (_P(_vp),)),
    ("cachepawl_layout_from_preset", _status, (_str, _u32, _P(LayoutP))),
    ("cachepawl_layout_from_json_file", _status, (_str, _P(LayoutP))),
    ("cachepawl_layout_from_json_string", _status, (_str, _size, _P(LayoutP))),
    (
        "cachepawl_layout_from_hf_config_string",
        _status,
        (_str, _size, _str, _str, _str, _u32, _str, _P(LayoutP)),
    ),
    (
        "cachepawl_layout_from_hf_config_file",
        _status,
        (_str, _str, _str, _str, _u32, _str, _P(LayoutP)),
    ),
    ("cachepawl_layout_hf_model_types", _status, (_P(_vp),)),
    ("cachepawl_layout_shard", _status, (LayoutP, _u32, _u32, _P(LayoutP))),
    ("cachepawl_layout_tp", _status, (LayoutP, _P(_u32), _P(_u32))),
    ("cachepawl_layout_free", None, (LayoutP,)),
    ("cachepawl_layout_to_json", _status, (LayoutP, _P(_vp))),
    ("cachepawl_layout_page_size_tokens", _status, (LayoutP, _P(_u32))),
    ("cachepawl_layout_record_bytes", _status, (LayoutP, _i32, _P(_u64))),
    ("cachepawl_layout_window_tokens", _status, (LayoutP, _P(_u32))),
    ("cachepawl_layout_window_pages", _status, (LayoutP, _P(_u32))),
    ("cachepawl_layout_num_layers", _status, (LayoutP, _P(_u32))),
    ("cachepawl_layout_num_layers_of_kind", _status, (LayoutP, _i32, _P(_size))),
    ("cachepawl_layout_layer_index", _status, (LayoutP, _i32, _size, _P(_u32))),
    ("cachepawl_layout_k_bytes_per_page", _status, (LayoutP, _size, _P(_u64))),
    ("cachepawl_layout_v_bytes_per_page", _status, (LayoutP, _size, _P(_u64))),
    ("cachepawl_layout_conv_state_bytes", _status, (LayoutP, _size, _P(_u64))),
    ("cachepawl_layout_ssm_state_bytes", _status, (LayoutP, _size, _P(_u64))),
    ("cachepawl_layout_fingerprint", _status, (LayoutP, _P(ctypes.c_uint8), _size)),
    # Options.
    ("cachepawl_options_new", _status, (_P(OptionsP),)),
    ("cachepawl_options_free", None, (OptionsP,)),
    ("cachepawl_options_set_layout_preset", _status, (OptionsP, _str, _u32)),
    ("cachepawl_options_set_layout_json_file", _status, (OptionsP, _str)),
    ("cachepawl_options_set_layout_json_string", _status, (OptionsP, _str, _size)),
    ("cachepawl_options_set_layout", _status, (OptionsP, LayoutP)),
    ("cachepawl_options_set_host_bytes", _status, (OptionsP, _u64)),
    ("cachepawl_options_set_host_free_target_bytes", _status, (OptionsP, _u64)),
    ("cachepawl_options_set_save_chunk_entries", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_max_prompt_tokens", _status, (OptionsP, _u64)),
    ("cachepawl_options_set_host_space_wait_ms", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_host_pinning_wait_ms", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_stream_wait_ms", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_disk_dir", _status, (OptionsP, _str)),
    ("cachepawl_options_set_disk_bytes", _status, (OptionsP, _u64)),
    ("cachepawl_options_add_disk_data_path", _status, (OptionsP, _str)),
    ("cachepawl_options_set_disk_queue_depth", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_write_policy", _status, (OptionsP, _i32)),
    ("cachepawl_options_set_eviction_policy", _status, (OptionsP, _i32)),
    ("cachepawl_options_set_selective_min_hits", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_wipe_on_layout_mismatch", _status, (OptionsP, _i32)),
    ("cachepawl_options_set_wipe_unreadable_catalog", _status, (OptionsP, _i32)),
    ("cachepawl_options_set_cuda_device", _status, (OptionsP, _i32)),
    ("cachepawl_options_set_device_pool_bytes", _status, (OptionsP, _u64)),
    ("cachepawl_options_set_stream_priorities", _status, (OptionsP, _i32, _i32)),
    ("cachepawl_options_set_staging_bytes", _status, (OptionsP, _u64)),
    ("cachepawl_options_set_polling", _status, (OptionsP, _u32, _u32, _i32)),
    ("cachepawl_options_set_track_interval_pages", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_remote_seeds", _status, (OptionsP, _str)),
    ("cachepawl_options_set_remote_auth", _status, (OptionsP, _str, _str)),
    ("cachepawl_options_set_remote_key_prefix", _status, (OptionsP, _str)),
    ("cachepawl_options_set_remote_chunk_bytes", _status, (OptionsP, _u64)),
    ("cachepawl_options_set_remote_deadline_ms", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_remote_lookup_deadline_ms", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_remote_ttl_seconds", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_remote_write_policy", _status, (OptionsP, _i32)),
    ("cachepawl_options_set_remote_selective_min_hits", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_remote_max_queued_writes", _status, (OptionsP, _u32)),
    ("cachepawl_options_set_remote_reader_threads", _status, (OptionsP, _u32)),
    ("cachepawl_options_validate", _status, (OptionsP,)),
    # Store.
    ("cachepawl_store_open", _status, (OptionsP, _P(StoreP))),
    ("cachepawl_store_serve", _status, (OptionsP, _str, _str, _P(StoreP))),
    ("cachepawl_store_attach", _status, (_str, LayoutP, _i32, _u64, _u32, _P(StoreP))),
    ("cachepawl_store_close", _status, (StoreP,)),
    ("cachepawl_store_free", None, (StoreP,)),
    ("cachepawl_store_layout", _status, (StoreP, _P(LayoutP))),
    ("cachepawl_store_gpu_mode", _status, (StoreP, _P(_i32))),
    ("cachepawl_store_stats_json", _status, (StoreP, _P(_vp))),
    ("cachepawl_store_stats_prometheus", _status, (StoreP, _P(_vp))),
    # Device pools.
    ("cachepawl_pool_new", _status, (_i32, _u64, _u64, _P(PoolP))),
    ("cachepawl_pool_free", None, (PoolP,)),
    ("cachepawl_pool_set_kv_layer", _status, (PoolP, _size, _vp, _u64, _vp, _u64)),
    ("cachepawl_pool_set_kv_layer_interleaved", _status, (PoolP, _size, _vp, _u64)),
    ("cachepawl_pool_set_ssm_layer", _status, (PoolP, _size, _vp, _u64, _vp, _u64)),
    ("cachepawl_pool_set_block_contiguous", _status, (PoolP, _vp, _u64, _vp, _u64)),
    ("cachepawl_store_register_device_pool", _status, (StoreP, PoolP)),
    ("cachepawl_store_unregister_device_pool", _status, (StoreP,)),
    ("cachepawl_store_allocate_device_slot", _status, (StoreP, _i32, _P(_u64))),
    ("cachepawl_store_free_device_slot", _status, (StoreP, _i32, _u64)),
    ("cachepawl_store_write_device_record", _status, (StoreP, _i32, _u64, _vp, _size)),
    ("cachepawl_store_read_device_record", _status, (StoreP, _i32, _u64, _vp, _size)),
    # Hashing and lookup.
    (
        "cachepawl_store_hash_tokens",
        _status,
        (StoreP, _str, _size, _P(_u32), _size, _P(ctypes.c_uint8), _size, _P(_size)),
    ),
    ("cachepawl_store_lookup", _status, (StoreP, _str, _size, _P(_u32), _size, _P(MatchP))),
    ("cachepawl_store_lookup_hashes", _status, (StoreP, _P(ctypes.c_uint8), _size, _P(MatchP))),
    ("cachepawl_match_free", None, (MatchP,)),
    ("cachepawl_match_num_pages", _status, (MatchP, _P(_size))),
    ("cachepawl_match_page_size_tokens", _status, (MatchP, _P(_u32))),
    ("cachepawl_match_reusable_pages", _status, (MatchP, _P(_size))),
    ("cachepawl_match_kv_only_pages", _status, (MatchP, _P(_size))),
    ("cachepawl_match_checkpoint_hint_pages", _status, (MatchP, _P(_size))),
    ("cachepawl_match_page_tiers", _status, (MatchP, _P(_i32), _size, _P(_size))),
    ("cachepawl_match_state_tier", _status, (MatchP, _P(_i32))),
    ("cachepawl_match_window_first_page", _status, (MatchP, _P(_size))),
    ("cachepawl_match_window_tiers", _status, (MatchP, _P(_i32), _size, _P(_size))),
    ("cachepawl_match_hashes", _status, (MatchP, _P(ctypes.c_uint8), _size, _P(_size))),
    # Locks.
    ("cachepawl_store_lock", _status, (StoreP, MatchP, _size, _P(LockP))),
    ("cachepawl_store_unlock", _status, (StoreP, LockP)),
    ("cachepawl_lock_free", None, (LockP,)),
    ("cachepawl_lock_pages", _status, (LockP, _P(_size))),
    ("cachepawl_lock_has_state", _status, (LockP, _P(_i32))),
    # Load, save, prefetch.
    (
        "cachepawl_store_load",
        _status,
        (StoreP, MatchP, _P(_u64), _size, _u64, _size, _u32, _P(FenceP)),
    ),
    (
        "cachepawl_store_save",
        _status,
        (StoreP, _str, _size, _P(_u32), _size, _size, _P(_u64), _size, _u64, _u64, _P(FenceP)),
    ),
    (
        "cachepawl_store_save_hashes",
        _status,
        (StoreP, _P(ctypes.c_uint8), _size, _size, _P(_u64), _size, _u64, _u64, _P(FenceP)),
    ),
    ("cachepawl_store_prefetch", _status, (StoreP, MatchP, _P(PrefetchP))),
    ("cachepawl_prefetch_fence", _status, (PrefetchP, _P(FenceP))),
    ("cachepawl_prefetch_cancel", _status, (PrefetchP,)),
    ("cachepawl_prefetch_free", None, (PrefetchP,)),
    # Fences.
    ("cachepawl_fence_ready", _status, (FenceP, _P(_i32))),
    ("cachepawl_fence_wait", _status, (FenceP, _u64)),
    ("cachepawl_fence_result", _status, (FenceP, _P(_status), _P(_vp))),
    ("cachepawl_fence_num_layers", _status, (FenceP, _P(_size))),
    ("cachepawl_fence_layer_ready", _status, (FenceP, _size, _P(_i32))),
    ("cachepawl_fence_wait_layer", _status, (FenceP, _size, _u64)),
    ("cachepawl_fence_stream_wait", _status, (FenceP, _vp)),
    ("cachepawl_fence_on_complete", _status, (FenceP, FENCE_CALLBACK, _vp)),
    ("cachepawl_fence_free", None, (FenceP,)),
]


def _package_candidates() -> List[str]:
    here = Path(__file__).resolve().parent
    found = sorted(str(p) for p in here.glob("libcachepawl.so*"))
    # The unversioned name first, then the SONAME, then full versions.
    return sorted(found, key=lambda p: (len(Path(p).name), p))


def _candidates() -> Tuple[List[str], bool]:
    """The names/paths to try, and whether they came from CACHEPAWL_LIBRARY."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return [env], True
    names: List[str] = _package_candidates()
    found = ctypes.util.find_library("cachepawl")
    if found:
        names.append(found)
    names += ["libcachepawl.so.0", "libcachepawl.so"]
    for folder in (Path(sys.prefix) / "lib", Path("/usr/local/lib")):
        names += [str(folder / "libcachepawl.so.0"), str(folder / "libcachepawl.so")]
    unique: List[str] = []
    for n in names:
        if n not in unique:
            unique.append(n)
    return unique, False


_HOW_TO = (
    "Build it (cmake --build BUILD --target cachepawl_shared) and set "
    "CACHEPAWL_LIBRARY=/path/to/libcachepawl.so, or install it (cmake --install BUILD) where "
    "the dynamic loader finds it, or add its folder to LD_LIBRARY_PATH."
)


def _open() -> Tuple[ctypes.CDLL, str]:
    names, from_env = _candidates()
    if from_env and not os.path.exists(names[0]):
        raise ImportError(
            f"cachepawl: {LIBRARY_ENV}={names[0]!r}: no such file. Set {LIBRARY_ENV} to the "
            f"path of libcachepawl.so (the build tree's BUILD/libcachepawl.so, or an installed "
            f"PREFIX/lib/libcachepawl.so), or unset it to search the default places."
        )
    errors: List[str] = []
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            errors.append(f"{name}: {e}")
    if from_env:
        raise ImportError(
            f"cachepawl: {LIBRARY_ENV}={names[0]!r} could not be loaded ({errors[0]}). "
            f"It must be libcachepawl.so built for this machine. {_HOW_TO}"
        )
    raise ImportError(
        "cachepawl: libcachepawl.so was not found (tried: " + "; ".join(errors) + f"). {_HOW_TO}"
    )


def _declare(lib: ctypes.CDLL, path: str) -> None:
    for name, restype, argtypes in _PROTOTYPES:
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError(
                f"cachepawl: {path} has no function {name}: it is not a libcachepawl.so of C "
                f"ABI version {ABI_VERSION}. {_HOW_TO}"
            ) from None
        fn.restype = restype
        fn.argtypes = list(argtypes)


def _load() -> Tuple[ctypes.CDLL, str]:
    lib, path = _open()
    # The ABI check needs only this function: declare it first, then check, then the rest.
    try:
        abi_fn = lib.cachepawl_abi_version
    except AttributeError:
        raise ImportError(
            f"cachepawl: {path} has no cachepawl_abi_version: not a Cachepawl library. {_HOW_TO}"
        ) from None
    abi_fn.restype = _u32
    abi_fn.argtypes = []
    abi = int(abi_fn())
    if abi != ABI_VERSION:
        raise ImportError(
            f"cachepawl: {path} implements C ABI version {abi}, but this cachepawl package "
            f"binds ABI version {ABI_VERSION}: use the Python package of the same Cachepawl "
            f"source tree as the library (or point {LIBRARY_ENV} at a matching library)."
        )
    _declare(lib, path)
    return lib, path


lib, library_path = _load()


class Owner:
    """Base of the objects that own one C handle: ``_own`` takes it and arranges for `free` to
    release it when the object is garbage-collected (or at interpreter exit)."""

    _h: Any
    _finalizer: "weakref.finalize"

    def _own(self, handle: Any, free: Any) -> None:
        self._h = handle
        self._finalizer = weakref.finalize(self, free, handle)


def take_string(p: Optional[int]) -> str:
    """Decodes and frees a string the library allocated (a ``char**`` result)."""
    if not p:
        return ""
    try:
        data = ctypes.string_at(p)
    finally:
        lib.cachepawl_string_free(p)
    return data.decode("utf-8", errors="replace")
