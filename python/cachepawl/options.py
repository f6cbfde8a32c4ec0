"""Store options (store/vocab/store_options.h) from keyword arguments.

Each keyword maps to one cachepawl_options_set_* call, which checks its value at once; the
combination is checked by ``validate_options`` and ``Store(...)``. A keyword left at None keeps
the library's default (host 1 GiB, no disk, write-through, hybrid eviction, CUDA device 0 when
a GPU is present, no store-owned device pool, ...).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Iterable, Optional, Union

from . import _convert, _lib
from .errors import InvalidArgument, check
from .layout import Layout

lib = _lib.lib

PathLike = Union[str, bytes, "os.PathLike[str]"]

#: write_policy values (store/vocab/store_options.h WritePolicy).
WRITE_POLICIES = {
    "through": 0,  # every entry goes to disk once, right after it reaches host memory
    "selective": 1,  # once it has been hit selective_min_hits times
    "back": 2,  # only when evicted from host memory
}
_POLICY_ALIASES = {
    "write_through": "through",
    "write-through": "through",
    "write_through_selective": "selective",
    "write-through-selective": "selective",
    "write_back": "back",
    "write-back": "back",
}


#: eviction_policy values (store/vocab/store_options.h EvictionPolicy).
EVICTION_POLICIES = {
    "lru": 0,  # per kind, least recently used first (kept for comparison)
    "hybrid": 1,  # prefix units and state value per byte (the library's default)
}


#: remote_write_policy values (store/vocab/store_options.h RemoteWritePolicy).
REMOTE_WRITE_POLICIES = {
    "none": 0,  # read only: this store uses what other stores wrote, writes nothing
    "write_through": 1,  # every saved entry, once, after it reaches host memory (the default)
    "selective": 2,  # once it has been hit remote_selective_min_hits times
    "on_evict": 3,  # when it leaves the last local tier (host or disk)
}
_REMOTE_POLICY_ALIASES = {
    "through": "write_through",
    "write-through": "write_through",
    "on-evict": "on_evict",
    "evict": "on_evict",
}


def _remote_write_policy(value: Any) -> int:
    if isinstance(value, str):
        key = value.lower()
        key = _REMOTE_POLICY_ALIASES.get(key, key)
        if key in REMOTE_WRITE_POLICIES:
            return REMOTE_WRITE_POLICIES[key]
    raise InvalidArgument(
        f"remote_write_policy: {value!r} "
        "(expected 'none', 'write_through', 'selective' or 'on_evict')"
    )


def _secret(name: str, value: Any) -> bytes:
    """A password as a C string; errors never show its value."""
    if isinstance(value, str):
        b = value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray)):
        b = bytes(value)
    else:
        raise TypeError(f"{name}: expected str or bytes, got {type(value).__name__}")
    if b"\0" in b:
        raise InvalidArgument(f"{name}: (hidden) contains a NUL byte")
    return b


def _eviction_policy(value: Any) -> int:
    if isinstance(value, str) and value.lower() in EVICTION_POLICIES:
        return EVICTION_POLICIES[value.lower()]
    raise InvalidArgument(f"eviction_policy: {value!r} (expected 'lru' or 'hybrid')")


def _write_policy(value: Any) -> int:
    if isinstance(value, str):
        key = _POLICY_ALIASES.get(value.lower(), value.lower())
        if key in WRITE_POLICIES:
            return WRITE_POLICIES[key]
    raise InvalidArgument(f"write_policy: {value!r} (expected 'through', 'selective' or 'back')")


class Options(_lib.Owner):
    """An options handle built from keywords (see :class:`cachepawl.Store` for them). Used by
    one thread at a time; freed when garbage-collected."""

    def __init__(
        self,
        layout: Union[str, Layout, None] = None,
        *,
        layout_json: Union[str, bytes, None] = None,
        layout_file: Optional[PathLike] = None,
        page_size_tokens: Optional[int] = None,
        host_bytes: Optional[int] = None,
        host_free_target_bytes: Optional[int] = None,
        save_chunk_entries: Optional[int] = None,
        disk_dir: Optional[PathLike] = None,
        disk_bytes: Optional[int] = None,
        disk_data_paths: Optional[Iterable[PathLike]] = None,
        disk_queue_depth: Optional[int] = None,
        write_policy: Optional[str] = None,
        eviction_policy: Optional[str] = None,
        selective_min_hits: Optional[int] = None,
        wipe_on_layout_mismatch: Optional[bool] = None,
        cuda_device: Optional[int] = None,
        device_pool_bytes: Optional[int] = None,
        load_stream_priority: Optional[int] = None,
        write_stream_priority: Optional[int] = None,
        staging_bytes: Optional[int] = None,
        track_interval_pages: Optional[int] = None,
        remote_seeds: Optional[str] = None,
        remote_user: Optional[str] = None,
        remote_password: Optional[str] = None,
        remote_key_prefix: Optional[str] = None,
        remote_chunk_bytes: Optional[int] = None,
        remote_deadline_ms: Optional[int] = None,
        remote_lookup_deadline_ms: Optional[int] = None,
        remote_ttl_seconds: Optional[int] = None,
        remote_write_policy: Optional[str] = None,
        remote_selective_min_hits: Optional[int] = None,
        remote_max_queued_writes: Optional[int] = None,
    ) -> None:
        h = _lib.OptionsP()
        check(lib.cachepawl_options_new(ctypes.byref(h)))
        self._own(h, lib.cachepawl_options_free)
        self._set_layout(layout, layout_json, layout_file, page_size_tokens)
        if host_bytes is not None:
            check(lib.cachepawl_options_set_host_bytes(h, _convert.u64("host_bytes", host_bytes)))
        if host_free_target_bytes is not None:
            check(
                lib.cachepawl_options_set_host_free_target_bytes(
                    h, _convert.u64("host_free_target_bytes", host_free_target_bytes)
                )
            )
        if save_chunk_entries is not None:
            check(
                lib.cachepawl_options_set_save_chunk_entries(
                    h, _convert.u32("save_chunk_entries", save_chunk_entries)
                )
            )
        if disk_dir is not None:
            check(lib.cachepawl_options_set_disk_dir(h, _convert.path("disk_dir", disk_dir)))
        if disk_bytes is not None:
            check(lib.cachepawl_options_set_disk_bytes(h, _convert.u64("disk_bytes", disk_bytes)))
        if disk_data_paths is not None:
            if isinstance(disk_data_paths, (str, bytes, os.PathLike)):
                raise TypeError("disk_data_paths: expected a list of paths, got a single path")
            for i, p in enumerate(disk_data_paths):
                name = f"disk_data_paths[{i}]"
                data_path = _convert.path(name, p)
                if not data_path:
                    raise InvalidArgument(f"{name}: '' (a data file path is needed)")
                check(lib.cachepawl_options_add_disk_data_path(h, data_path))
        if disk_queue_depth is not None:
            check(
                lib.cachepawl_options_set_disk_queue_depth(
                    h, _convert.u32("disk_queue_depth", disk_queue_depth)
                )
            )
        if write_policy is not None:
            check(lib.cachepawl_options_set_write_policy(h, _write_policy(write_policy)))
        if eviction_policy is not None:
            check(lib.cachepawl_options_set_eviction_policy(h, _eviction_policy(eviction_policy)))
        if selective_min_hits is not None:
            check(
                lib.cachepawl_options_set_selective_min_hits(
                    h, _convert.u32("selective_min_hits", selective_min_hits)
                )
            )
        if wipe_on_layout_mismatch is not None:
            if not isinstance(wipe_on_layout_mismatch, bool):
                raise TypeError(
                    f"wipe_on_layout_mismatch: expected a bool, got {wipe_on_layout_mismatch!r}"
                )
            check(
                lib.cachepawl_options_set_wipe_on_layout_mismatch(h, int(wipe_on_layout_mismatch))
            )
        if cuda_device is not None:
            check(
                lib.cachepawl_options_set_cuda_device(h, _convert.i32("cuda_device", cuda_device))
            )
        if device_pool_bytes is not None:
            check(
                lib.cachepawl_options_set_device_pool_bytes(
                    h, _convert.u64("device_pool_bytes", device_pool_bytes)
                )
            )
        if load_stream_priority is not None or write_stream_priority is not None:
            check(
                lib.cachepawl_options_set_stream_priorities(
                    h,
                    _convert.i32("load_stream_priority", load_stream_priority or 0),
                    _convert.i32("write_stream_priority", write_stream_priority or 0),
                )
            )
        if staging_bytes is not None:
            check(
                lib.cachepawl_options_set_staging_bytes(
                    h, _convert.u64("staging_bytes", staging_bytes)
                )
            )
        if track_interval_pages is not None:
            check(
                lib.cachepawl_options_set_track_interval_pages(
                    h, _convert.u32("track_interval_pages", track_interval_pages)
                )
            )
        if remote_seeds is not None:
            check(
                lib.cachepawl_options_set_remote_seeds(
                    h, _convert.text("remote_seeds", remote_seeds)
                )
            )
        if remote_user is not None or remote_password is not None:
            check(
                lib.cachepawl_options_set_remote_auth(
                    h,
                    _convert.text("remote_user", remote_user or ""),
                    _secret("remote_password", remote_password or ""),
                )
            )
        if remote_key_prefix is not None:
            check(
                lib.cachepawl_options_set_remote_key_prefix(
                    h, _convert.text("remote_key_prefix", remote_key_prefix)
                )
            )
        if remote_write_policy is not None:
            check(
                lib.cachepawl_options_set_remote_write_policy(
                    h, _remote_write_policy(remote_write_policy)
                )
            )
        self._set_remote_numbers(
            remote_chunk_bytes=(
                lib.cachepawl_options_set_remote_chunk_bytes,
                _convert.u64,
                remote_chunk_bytes,
            ),
            remote_deadline_ms=(
                lib.cachepawl_options_set_remote_deadline_ms,
                _convert.u32,
                remote_deadline_ms,
            ),
            remote_lookup_deadline_ms=(
                lib.cachepawl_options_set_remote_lookup_deadline_ms,
                _convert.u32,
                remote_lookup_deadline_ms,
            ),
            remote_ttl_seconds=(
                lib.cachepawl_options_set_remote_ttl_seconds,
                _convert.u32,
                remote_ttl_seconds,
            ),
            remote_selective_min_hits=(
                lib.cachepawl_options_set_remote_selective_min_hits,
                _convert.u32,
                remote_selective_min_hits,
            ),
            remote_max_queued_writes=(
                lib.cachepawl_options_set_remote_max_queued_writes,
                _convert.u32,
                remote_max_queued_writes,
            ),
        )

    def _set_remote_numbers(self, **fields: Any) -> None:
        """Calls each (setter, converter, value) whose value is not None."""
        for name, (setter, convert, value) in fields.items():
            if value is not None:
                check(setter(self._h, convert(name, value)))

    def _set_layout(
        self, layout: Any, layout_json: Any, layout_file: Any, page_size_tokens: Optional[int]
    ) -> None:
        given = [
            n
            for n, v in (
                ("layout", layout),
                ("layout_json", layout_json),
                ("layout_file", layout_file),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise InvalidArgument(
                f"layout: {'none' if not given else ' and '.join(given)} given (pass exactly "
                f"one of layout= (a preset name or a Layout), layout_json=, layout_file=)"
            )
        if page_size_tokens is not None and not isinstance(layout, str):
            raise InvalidArgument(
                f"page_size_tokens: {page_size_tokens} (only with a preset name; a JSON layout "
                f"or Layout carries its own page size)"
            )
        h = self._h
        if isinstance(layout, str):
            pst = 16 if page_size_tokens is None else page_size_tokens
            check(
                lib.cachepawl_options_set_layout_preset(
                    h, _convert.text("layout", layout), _convert.u32("page_size_tokens", pst)
                )
            )
        elif isinstance(layout, Layout):
            check(lib.cachepawl_options_set_layout(h, layout._h))
        elif layout is not None:
            raise TypeError(
                f"layout: expected a preset name (str) or a Layout, got {type(layout).__name__}"
            )
        elif layout_json is not None:
            if not isinstance(layout_json, (str, bytes, bytearray)):
                raise TypeError(
                    f"layout_json: expected str or bytes, got {type(layout_json).__name__}"
                )
            b = layout_json.encode("utf-8") if isinstance(layout_json, str) else bytes(layout_json)
            check(lib.cachepawl_options_set_layout_json_string(h, b or None, len(b)))
        else:
            check(
                lib.cachepawl_options_set_layout_json_file(
                    h, _convert.path("layout_file", layout_file)
                )
            )

    def validate(self) -> None:
        """The checks Store(...) makes on the options alone; raises InvalidArgument."""
        check(lib.cachepawl_options_validate(self._h))


def validate_options(**options: Any) -> None:
    """Checks Store keyword options without opening a store (raises like Store(...))."""
    Options(**options).validate()
