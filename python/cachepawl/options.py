"""Store options (vocab/store_options.h) from keyword arguments.

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

#: write_policy values (vocab/store_options.h WritePolicy).
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


#: eviction_policy values (vocab/store_options.h EvictionPolicy).
EVICTION_POLICIES = {
    "lru": 0,  # per kind, least recently used first (kept for comparison)
    "hybrid": 1,  # prefix units and state value per byte (the library's default)
}


#: remote_write_policy values (vocab/store_options.h RemoteWritePolicy).
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


def _remote_write_policy(name: str, value: Any) -> int:
    if isinstance(value, str):
        key = value.lower()
        key = _REMOTE_POLICY_ALIASES.get(key, key)
        if key in REMOTE_WRITE_POLICIES:
            return REMOTE_WRITE_POLICIES[key]
    raise InvalidArgument(
        f"{name}: {value!r} "
        "(expected 'none', 'write_through', 'selective' or 'on_evict')"
    )


def _flag(name: str, value: Any) -> int:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {value!r}")
    return int(value)


def _eviction_policy(name: str, value: Any) -> int:
    if isinstance(value, str) and value.lower() in EVICTION_POLICIES:
        return EVICTION_POLICIES[value.lower()]
    raise InvalidArgument(f"{name}: {value!r} (expected 'lru' or 'hybrid')")


def _write_policy(name: str, value: Any) -> int:
    if isinstance(value, str):
        key = _POLICY_ALIASES.get(value.lower(), value.lower())
        if key in WRITE_POLICIES:
            return WRITE_POLICIES[key]
    raise InvalidArgument(f"{name}: {value!r} (expected 'through', 'selective' or 'back')")


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
        max_prompt_tokens: Optional[int] = None,
        host_space_wait_ms: Optional[int] = None,
        host_pinning_wait_ms: Optional[int] = None,
        stream_wait_ms: Optional[int] = None,
        disk_dir: Optional[PathLike] = None,
        disk_bytes: Optional[int] = None,
        disk_data_paths: Optional[Iterable[PathLike]] = None,
        disk_queue_depth: Optional[int] = None,
        write_policy: Optional[str] = None,
        eviction_policy: Optional[str] = None,
        selective_min_hits: Optional[int] = None,
        wipe_on_layout_mismatch: Optional[bool] = None,
        wipe_unreadable_catalog: Optional[bool] = None,
        cuda_device: Optional[int] = None,
        device_pool_bytes: Optional[int] = None,
        load_stream_priority: Optional[int] = None,
        write_stream_priority: Optional[int] = None,
        staging_bytes: Optional[int] = None,
        completion_spin_us: Optional[int] = None,
        wait_spin_us: Optional[int] = None,
        inline_dispatch: Optional[bool] = None,
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
        remote_reader_threads: Optional[int] = None,
    ) -> None:
        h = _lib.OptionsP()
        check(lib.cachepawl_options_new(ctypes.byref(h)))
        self._own(h, lib.cachepawl_options_free)
        self._set_layout(layout, layout_json, layout_file, page_size_tokens)
        # In the order of the keywords, so that of several bad values the first is reported.
        u64, u32, i32, text = _convert.u64, _convert.u32, _convert.i32, _convert.text
        self._set_fields(
            host_bytes=(lib.cachepawl_options_set_host_bytes, u64, host_bytes),
            host_free_target_bytes=(
                lib.cachepawl_options_set_host_free_target_bytes,
                u64,
                host_free_target_bytes,
            ),
            save_chunk_entries=(
                lib.cachepawl_options_set_save_chunk_entries,
                u32,
                save_chunk_entries,
            ),
            max_prompt_tokens=(
                lib.cachepawl_options_set_max_prompt_tokens,
                u64,
                max_prompt_tokens,
            ),
            host_space_wait_ms=(
                lib.cachepawl_options_set_host_space_wait_ms,
                u32,
                host_space_wait_ms,
            ),
            host_pinning_wait_ms=(
                lib.cachepawl_options_set_host_pinning_wait_ms,
                u32,
                host_pinning_wait_ms,
            ),
            stream_wait_ms=(lib.cachepawl_options_set_stream_wait_ms, u32, stream_wait_ms),
            disk_dir=(lib.cachepawl_options_set_disk_dir, _convert.path, disk_dir),
            disk_bytes=(lib.cachepawl_options_set_disk_bytes, u64, disk_bytes),
        )
        if disk_data_paths is not None:
            if isinstance(disk_data_paths, (str, bytes, os.PathLike)):
                raise TypeError("disk_data_paths: expected a list of paths, got a single path")
            for i, p in enumerate(disk_data_paths):
                name = f"disk_data_paths[{i}]"
                data_path = _convert.path(name, p)
                if not data_path:
                    raise InvalidArgument(f"{name}: '' (a data file path is needed)")
                check(lib.cachepawl_options_add_disk_data_path(h, data_path))
        self._set_fields(
            disk_queue_depth=(lib.cachepawl_options_set_disk_queue_depth, u32, disk_queue_depth),
            write_policy=(lib.cachepawl_options_set_write_policy, _write_policy, write_policy),
            eviction_policy=(
                lib.cachepawl_options_set_eviction_policy,
                _eviction_policy,
                eviction_policy,
            ),
            selective_min_hits=(
                lib.cachepawl_options_set_selective_min_hits,
                u32,
                selective_min_hits,
            ),
            wipe_on_layout_mismatch=(
                lib.cachepawl_options_set_wipe_on_layout_mismatch,
                _flag,
                wipe_on_layout_mismatch,
            ),
            wipe_unreadable_catalog=(
                lib.cachepawl_options_set_wipe_unreadable_catalog,
                _flag,
                wipe_unreadable_catalog,
            ),
            cuda_device=(lib.cachepawl_options_set_cuda_device, i32, cuda_device),
            device_pool_bytes=(lib.cachepawl_options_set_device_pool_bytes, u64, device_pool_bytes),
        )
        if load_stream_priority is not None or write_stream_priority is not None:
            check(
                lib.cachepawl_options_set_stream_priorities(
                    h,
                    i32("load_stream_priority", load_stream_priority or 0),
                    i32("write_stream_priority", write_stream_priority or 0),
                )
            )
        if not (completion_spin_us is None and wait_spin_us is None and inline_dispatch is None):
            # Unset ones keep their defaults (StoreOptions').
            completion = 20000 if completion_spin_us is None else completion_spin_us
            wait = 2000 if wait_spin_us is None else wait_spin_us
            inline = True if inline_dispatch is None else inline_dispatch
            check(
                lib.cachepawl_options_set_polling(
                    h,
                    u32("completion_spin_us", completion),
                    u32("wait_spin_us", wait),
                    _flag("inline_dispatch", inline),
                )
            )
        self._set_fields(
            staging_bytes=(lib.cachepawl_options_set_staging_bytes, u64, staging_bytes),
            track_interval_pages=(
                lib.cachepawl_options_set_track_interval_pages,
                u32,
                track_interval_pages,
            ),
            remote_seeds=(lib.cachepawl_options_set_remote_seeds, text, remote_seeds),
        )
        if remote_user is not None or remote_password is not None:
            check(
                lib.cachepawl_options_set_remote_auth(
                    h,
                    text("remote_user", remote_user or ""),
                    text("remote_password", remote_password or "", secret=True),
                )
            )
        self._set_fields(
            remote_key_prefix=(
                lib.cachepawl_options_set_remote_key_prefix,
                text,
                remote_key_prefix,
            ),
            remote_write_policy=(
                lib.cachepawl_options_set_remote_write_policy,
                _remote_write_policy,
                remote_write_policy,
            ),
            remote_chunk_bytes=(
                lib.cachepawl_options_set_remote_chunk_bytes,
                u64,
                remote_chunk_bytes,
            ),
            remote_deadline_ms=(
                lib.cachepawl_options_set_remote_deadline_ms,
                u32,
                remote_deadline_ms,
            ),
            remote_lookup_deadline_ms=(
                lib.cachepawl_options_set_remote_lookup_deadline_ms,
                u32,
                remote_lookup_deadline_ms,
            ),
            remote_ttl_seconds=(
                lib.cachepawl_options_set_remote_ttl_seconds,
                u32,
                remote_ttl_seconds,
            ),
            remote_selective_min_hits=(
                lib.cachepawl_options_set_remote_selective_min_hits,
                u32,
                remote_selective_min_hits,
            ),
            remote_max_queued_writes=(
                lib.cachepawl_options_set_remote_max_queued_writes,
                u32,
                remote_max_queued_writes,
            ),
            remote_reader_threads=(
                lib.cachepawl_options_set_remote_reader_threads,
                u32,
                remote_reader_threads,
            ),
        )

    def _set_fields(self, **fields: Any) -> None:
        """Calls each (setter, converter, value) whose value is not None, in the order given:
        converter(name, value) checks the value and makes the C argument, naming the field in
        its error."""
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
