"""The Store: open, lookup, lock, load, save, prefetch, device pools and slots, stats.

Thread safety: every Store method may be called from several threads at once (like the C++
Store); the calls release the GIL while the library works. Objects a store returns (Match,
Lock, Fence, Prefetch) stay valid after it is closed (their own calls still answer; calls
that need the open store raise FailedPrecondition). ``close()`` drains what is in flight
(every fence fires) and is idempotent. The handle is freed (closing the store if still open)
when the Store object is garbage-collected, which a Lock prevents while it exists (it refers
to its store); matches, fences and prefetches do not keep the store.
"""

from __future__ import annotations

import ctypes
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _convert, _lib, torch_pool
from .errors import InvalidArgument, check, get
from .fence import Fence, Prefetch
from .layout import KindLike, Layout, to_kind
from .match import Lock, Match
from .options import Options
from .pool import DevicePool

lib = _lib.lib

Tokens = Union[Sequence[int], Any]  # a list, array.array('I'), numpy array, tensor
Hashes = Union[bytes, Sequence[bytes]]


def _state_slot(slot: Optional[int]) -> int:
    """A state slot argument; None is CACHEPAWL_NO_SLOT (which a number may not spell)."""
    if slot is None:
        return _lib.NO_SLOT
    v = _convert.u64("state_slot", slot)
    if v == _lib.NO_SLOT:
        raise InvalidArgument(f"state_slot: {v} (CACHEPAWL_NO_SLOT; pass None for no state)")
    return v


class Store(_lib.Owner):
    """An open store (``cachepawl_store``). Keyword options mirror the C options:

    * ``layout``: a preset name (``page_size_tokens``, default 16) or a :class:`Layout`;
      or ``layout_json`` (text) or ``layout_file`` (path): exactly one of the three;
    * ``host_bytes`` (pinned host budget, a multiple of 4096), ``host_free_target_bytes``
      (evict ahead to keep this much free; default host_bytes / 16 up to 1 GiB for tiers of
      1 GiB or more, 0: off), ``save_chunk_entries`` (entries per transfer operation of a
      large Save, default 256), ``max_prompt_tokens`` (the longest prompt one call names,
      default 2**24: longer ones raise InvalidArgument), ``host_space_wait_ms`` (default
      30000), ``host_pinning_wait_ms`` (60000) and ``stream_wait_ms`` (60000): the bounds of
      the waits inside calls (docs/EMBEDDING.md, "Waits"), ``disk_dir``, ``disk_bytes``
      (0: no disk tier), ``disk_data_paths``, ``disk_queue_depth``;
    * ``write_policy``: ``'through'`` | ``'selective'`` | ``'back'``; ``selective_min_hits``;
      ``eviction_policy``: ``'hybrid'`` (the default) | ``'lru'`` (which entries leave a full
      tier first); ``wipe_on_layout_mismatch``, ``wipe_unreadable_catalog`` (start empty
      instead of failing the open);
    * ``cuda_device`` (-1: CPU mode), ``device_pool_bytes`` (a store-owned device pool; 0: the
      engine registers its own), ``load_stream_priority``, ``write_stream_priority``,
      ``staging_bytes``, ``track_interval_pages``; ``completion_spin_us`` (20000),
      ``wait_spin_us`` (2000) and ``inline_dispatch`` (True): the CPU spent polling a copy's end
      instead of waking a thread (docs/EMBEDDING.md, section 1).
    * the remote tier, a Redis Cluster several stores share (docs/EMBEDDING.md, "Sharing
      prefixes across replicas: the remote tier"): ``remote_seeds``
      (``"redis://host:port[,host:port...]"``; unset: no remote tier), ``remote_user``,
      ``remote_password``, ``remote_key_prefix``, ``remote_chunk_bytes``, ``remote_deadline_ms``,
      ``remote_lookup_deadline_ms``, ``remote_ttl_seconds``, ``remote_write_policy``:
      ``'write_through'`` (the default) | ``'selective'`` | ``'on_evict'`` | ``'none'``;
      ``remote_selective_min_hits``, ``remote_max_queued_writes``, ``remote_reader_threads``. Lookups report its pages as
      ``Tier.REMOTE``; ``stats()["remote"]`` holds its counters.

    Errors raise the :class:`~cachepawl.Error` subclass of their code, naming the field and
    value. Use as a context manager to close on exit.

    A layout without attention layers (pure SSM, e.g. ``"mamba2-2.7b"``) has no KV: pages are
    still named by the token hashes, but the engine passes no device pages anywhere (the
    ``device_pages`` arguments default to none), registers state tensors only
    (``register_tensors(ssm=[...])``), saves states with ``save(tokens, state_slot=...,
    state_depth_tokens=...)`` and loads a match's state with ``load(match, state_slot=...)``;
    a lookup's ``reusable_pages`` is the depth of the deepest state along the prompt.
    """

    def __init__(self, layout: Union[str, Layout, None] = None, **options: Any) -> None:
        h = options.pop("_handle", None)
        if h is None:
            opts = Options(layout, **options)
            h = _lib.StoreP()
            check(lib.cachepawl_store_open(opts._h, ctypes.byref(h)))
        self._own(h, lib.cachepawl_store_free)
        self._closed = False
        self._pool_owners: List[Any] = []  # memory of a registered pool, kept alive
        lh = _lib.LayoutP()
        check(lib.cachepawl_store_layout(h, ctypes.byref(lh)))
        #: The store's layout (a copy).
        self.layout = Layout(lh)
        #: True when transfers use a GPU; False in CPU mode (device pools in host memory).
        self.gpu_mode = bool(get(lib.cachepawl_store_gpu_mode, ctypes.c_int32, h))
        self.page_size_tokens = self.layout.page_size_tokens

    def _handle(self) -> Any:
        return self._h

    # --- one store for several processes ------------------------------------------------------

    @classmethod
    def serve(
        cls,
        socket_path: str,
        layout: Union[str, Layout, None] = None,
        *,
        socket_group: str = "",
        **options: Any,
    ) -> "Store":
        """Opens a store (the same keyword options as ``Store(...)``) as the owner of a store
        the node's other processes attach to (:meth:`attach`): the host tier in shared memory,
        a server on the Unix socket ``socket_path``, admitting this Unix user (and
        ``socket_group``). Busy when an owner already serves there. docs/EMBEDDING.md, "One
        store for an engine's processes"."""
        opts = Options(layout, **options)
        h = _lib.StoreP()
        check(
            lib.cachepawl_store_serve(
                opts._h,
                _convert.text("socket_path", socket_path),
                _convert.text("socket_group", socket_group),
                ctypes.byref(h),
            )
        )
        return cls(_handle=h)

    @classmethod
    def attach(
        cls,
        socket_path: str,
        *,
        layout: Union[str, Layout, None] = None,
        page_size_tokens: int = 16,
        cuda_device: int = 0,
        device_pool_bytes: int = 0,
        call_timeout_ms: int = 0,
    ) -> "Store":
        """Attaches to the owner serving on ``socket_path``: the same methods, on the owner's
        index and tiers; this process's copy engines move the bytes (its device pool, the
        owner's host tier mapped here). ``layout`` (a preset name or a :class:`Layout`; None:
        any) refuses an owner of another layout (Incompatible). ``cuda_device`` -1: CPU mode;
        ``device_pool_bytes``: a pool of this process's own (0: ``register_tensors``).
        ``call_timeout_ms`` (0: 10000) bounds each call and, while operations are pending, the
        owner's silence: an owner that goes fails them, and every later call, with Unavailable
        (attach again). A tensor-parallel group's owner: ``layout=whole.shard(n, r)`` attaches
        as rank r, whose shares this process's loads and saves move."""
        expected = None
        if isinstance(layout, str):
            expected = Layout.from_preset(layout, page_size_tokens)
        elif layout is not None:
            expected = layout
        h = _lib.StoreP()
        check(
            lib.cachepawl_store_attach(
                _convert.text("socket_path", socket_path),
                expected._h if expected is not None else None,
                _convert.i32("cuda_device", cuda_device),
                _convert.u64("device_pool_bytes", device_pool_bytes),
                _convert.u32("call_timeout_ms", call_timeout_ms),
                ctypes.byref(h),
            )
        )
        return cls(_handle=h)

    # --- lifetime ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Drains in-flight operations (every fence fires), persists the catalog, releases
        memory. Later calls that use the cache raise FailedPrecondition; layout, hashing and
        stats still answer. Idempotent; safe while other threads use the store (their calls
        then fail with FailedPrecondition, their fences fire)."""
        self._closed = True
        check(lib.cachepawl_store_close(self._h))

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    @property
    def last_error(self) -> str:
        """The message of the last failed call that took this store (any thread); ""."""
        return _lib.take_string(lib.cachepawl_store_last_error(self._h))

    # --- sizes -------------------------------------------------------------------------------

    def record_bytes(self, kind: KindLike) -> int:
        """Bytes of one KV page record or one state record of the layout."""
        return self.layout.record_bytes(kind)

    # --- hashing and lookup ------------------------------------------------------------------

    def hash_tokens(self, tokens: Tokens, namespace: Union[str, bytes] = "") -> List[bytes]:
        """The page hash (32 bytes) of every full page of `tokens` under `namespace`."""
        ns, ns_len = _convert.namespace(namespace)
        arr, n = _convert.tokens("tokens", tokens)
        count = ctypes.c_size_t()
        check(
            lib.cachepawl_store_hash_tokens(
                self._h, ns, ns_len, arr, n, None, 0, ctypes.byref(count)
            )
        )
        if count.value == 0:
            return []
        out = (ctypes.c_uint8 * (count.value * _lib.HASH_BYTES))()
        check(
            lib.cachepawl_store_hash_tokens(
                self._h, ns, ns_len, arr, n, out, count.value, ctypes.byref(count)
            )
        )
        return _convert.split_hashes(bytes(out))

    def lookup(self, tokens: Tokens, namespace: Union[str, bytes] = "") -> Match:
        """The longest reusable prefix of `tokens` under `namespace` (a miss is a Match with
        reusable_pages 0, not an error). Refreshes recency."""
        ns, ns_len = _convert.namespace(namespace)
        arr, n = _convert.tokens("tokens", tokens)
        h = _lib.MatchP()
        check(lib.cachepawl_store_lookup(self._h, ns, ns_len, arr, n, ctypes.byref(h)))
        return Match(h)

    def lookup_hashes(self, hashes: Hashes) -> Match:
        """The same from engine-computed page hashes (bytes of n * 32, or 32-byte items)."""
        arr, n = _convert.hashes("hashes", hashes)
        h = _lib.MatchP()
        check(lib.cachepawl_store_lookup_hashes(self._h, arr, n, ctypes.byref(h)))
        return Match(h)

    # --- locks -------------------------------------------------------------------------------

    def lock(self, match: Match, pages: Optional[int] = None) -> Lock:
        """Keeps the first `pages` pages of `match` (default: its reusable_pages; and then the
        state at that depth) from eviction until unlocked. Use as ``with store.lock(m):``."""
        _check_match(match)
        n = match.reusable_pages if pages is None else _convert.size("pages", pages)
        h = _lib.LockP()
        check(lib.cachepawl_store_lock(self._h, match._h, n, ctypes.byref(h)))
        return Lock(self, h)

    # --- load, save, prefetch ----------------------------------------------------------------

    def load(
        self,
        match: Match,
        device_pages: Sequence[int] = (),
        state_slot: Optional[int] = None,
        *,
        first_page: int = 0,
        per_layer_fences: bool = False,
    ) -> Fence:
        """Loads pages [first_page, first_page + len(device_pages)) of `match` into those
        device pages and, when `state_slot` is given, the state at that depth (which must be
        the match's reusable_pages) into that slot. The pages may be used once the fence fired
        OK. Pure SSM layout: no device pages, a state slot, and the state at the match's depth
        (``first_page``, when not 0, is the depth asked for and must be that one). Raises
        InvalidArgument, NotFound (no longer cached: recompute), Busy (another load reads these
        pages from disk), NoSpace."""
        _check_match(match)
        pages, n = _convert.slots("device_pages", device_pages)
        if not isinstance(per_layer_fences, bool):
            raise TypeError(f"per_layer_fences: expected a bool, got {per_layer_fences!r}")
        return _new_fence(
            lib.cachepawl_store_load,
            self._h,
            match._h,
            pages,
            n,
            _state_slot(state_slot),
            _convert.size("first_page", first_page),
            _lib.LOAD_PER_LAYER_FENCES if per_layer_fences else 0,
        )

    def save(
        self,
        tokens: Tokens,
        device_pages: Sequence[int] = (),
        *,
        namespace: Union[str, bytes] = "",
        first_page: int = 0,
        state_slot: Optional[int] = None,
        state_depth_tokens: int = 0,
    ) -> Fence:
        """Copies device pages (pages [first_page, first_page + len(device_pages)) of the full
        pages of `tokens` under `namespace`) and, when `state_slot` is given, the state taken at
        `state_depth_tokens` into host memory (and disk by policy). Pages already cached are
        only refreshed. The device slots may be reused once the fence fired. Pure SSM layout:
        no device pages (InvalidArgument otherwise); the state's pages are named by `tokens`."""
        ns, ns_len = _convert.namespace(namespace)
        arr, n = _convert.tokens("tokens", tokens)
        tail = _save_args(first_page, device_pages, state_slot, state_depth_tokens)
        return _new_fence(lib.cachepawl_store_save, self._h, ns, ns_len, arr, n, *tail)

    def save_hashes(
        self,
        hashes: Hashes,
        device_pages: Sequence[int] = (),
        *,
        first_page: int = 0,
        state_slot: Optional[int] = None,
        state_depth_tokens: int = 0,
    ) -> Fence:
        """:meth:`save` with engine-computed page hashes instead of tokens."""
        arr, n = _convert.hashes("hashes", hashes)
        tail = _save_args(first_page, device_pages, state_slot, state_depth_tokens)
        return _new_fence(lib.cachepawl_store_save_hashes, self._h, arr, n, *tail)

    def prefetch(self, match: Match) -> Prefetch:
        """Brings the disk-resident pages and state of `match` into host memory ahead of a
        load (``prefetch.fence`` fires when done; ``prefetch.cancel()``)."""
        _check_match(match)
        h = _lib.PrefetchP()
        check(lib.cachepawl_store_prefetch(self._h, match._h, ctypes.byref(h)))
        return Prefetch(h)

    # --- device pools ------------------------------------------------------------------------

    def register_device_pool(self, pool: DevicePool) -> None:
        """Registers the engine's device pool (before any load or save). The memory it
        describes must stay valid until unregister_device_pool or close; the store keeps
        ``pool.owners`` alive until then. FailedPrecondition when a pool (or a store-owned one)
        is already there."""
        if not isinstance(pool, DevicePool):
            raise TypeError(f"pool: expected a cachepawl.DevicePool, got {type(pool).__name__}")
        check(lib.cachepawl_store_register_device_pool(self._h, pool._h))
        self._pool_owners.extend(pool.owners)

    def unregister_device_pool(self) -> None:
        """Stops using the registered pool so that its tensors may be freed or resized (a sleep
        mode, a KV cache rebuilt at another size): load and save raise FailedPrecondition from
        now on; returns once every transfer on the pool has finished. Host and disk contents
        stay; register_device_pool / register_tensors may register a new pool after.
        FailedPrecondition when no pool is registered or the pool is store-owned."""
        check(lib.cachepawl_store_unregister_device_pool(self._h))
        self._pool_owners.clear()

    def register_tensors(
        self,
        *,
        kv: Optional[Sequence[Any]] = None,
        ssm: Optional[Sequence[Any]] = None,
        kv_blocks: Any = None,
        state_blocks: Any = None,
        num_pages: Optional[int] = None,
        num_state_slots: Optional[int] = None,
    ) -> None:
        """Registers the engine's PyTorch KV and state tensors as the device pool (see
        cachepawl.torch_pool for the forms and checks). The store keeps the tensors alive. A
        layout without attention layers takes ``ssm=[...]`` (or ``state_blocks=``) alone:
        ``kv`` None or empty, and the pool has no KV pages."""
        self.register_device_pool(
            torch_pool.describe(
                self.layout,
                kv=kv,
                ssm=ssm,
                kv_blocks=kv_blocks,
                state_blocks=state_blocks,
                num_pages=num_pages,
                num_state_slots=num_state_slots,
            )
        )

    def allocate_device_slot(self, kind: KindLike) -> int:
        """Store-owned pool only: a free KV page index or state slot index (NoSpace when full).
        Kind.WINDOW is refused (InvalidArgument): a device page holds every attention layer."""
        k = int(to_kind(kind))
        return int(get(lib.cachepawl_store_allocate_device_slot, ctypes.c_uint64, self._h, k))

    def free_device_slot(self, kind: KindLike, slot: int) -> None:
        """Store-owned pool only: gives a slot back."""
        check(
            lib.cachepawl_store_free_device_slot(
                self._h, int(to_kind(kind)), _convert.u64("slot", slot)
            )
        )

    def write_device_record(self, kind: KindLike, slot: int, record: Any) -> None:
        """Store-owned pool only: copies one record (exactly record_bytes(kind) bytes, page-first
        order) from `record` (bytes, bytearray, memoryview, ...) into the slot."""
        ptr, n = _convert.readable_buffer("record", record)
        check(
            lib.cachepawl_store_write_device_record(
                self._h, int(to_kind(kind)), _convert.u64("slot", slot), ptr, n
            )
        )

    def read_device_record(self, kind: KindLike, slot: int, out: Any = None) -> Any:
        """Store-owned pool only: the slot's record, into `out` (a writable buffer of exactly
        record_bytes(kind) bytes) or a new bytearray; returns it."""
        k = to_kind(kind)
        if out is None:
            out = bytearray(self.layout.record_bytes(k))
        ptr, n = _convert.writable_buffer("out", out)
        check(
            lib.cachepawl_store_read_device_record(
                self._h, int(k), _convert.u64("slot", slot), ptr, n
            )
        )
        return out

    # --- stats -------------------------------------------------------------------------------

    def stats(self) -> Dict[str, Any]:
        """Counters and latency percentiles (the library's JSON, parsed)."""
        out = ctypes.c_void_p()
        check(lib.cachepawl_store_stats_json(self._h, ctypes.byref(out)))
        result: Dict[str, Any] = json.loads(_lib.take_string(out.value))
        return result

    def stats_prometheus(self) -> str:
        """The same in Prometheus text exposition format (metric prefix cachepawl_)."""
        out = ctypes.c_void_p()
        check(lib.cachepawl_store_stats_prometheus(self._h, ctypes.byref(out)))
        return _lib.take_string(out.value)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("gpu" if self.gpu_mode else "cpu mode")
        return f"<cachepawl.Store {self.layout.model!r} {state}>"


def _save_args(
    first_page: int, device_pages: Sequence[int], state_slot: Optional[int], depth: int
) -> Tuple[Any, ...]:
    """The arguments cachepawl_store_save and _save_hashes share, after the pages' names."""
    pages, n = _convert.slots("device_pages", device_pages)
    first = _convert.size("first_page", first_page)
    return first, pages, n, _state_slot(state_slot), _convert.u64("state_depth_tokens", depth)


def _new_fence(fn: Any, *args: Any) -> Fence:
    """Calls a C function whose last parameter is a cachepawl_fence** and wraps the fence."""
    h = _lib.FenceP()
    check(fn(*args, ctypes.byref(h)))
    return Fence(h)


def _check_match(match: Any) -> None:
    if not isinstance(match, Match):
        raise TypeError(f"match: expected a cachepawl.Match, got {type(match).__name__}")
