"""Lookup answers (matches) and eviction locks.

A :class:`Match` is immutable and thread-safe; it stays valid after its store closed (calls
that need the store then fail with FailedPrecondition). A :class:`Lock` keeps a prefix from
eviction until unlocked; use it as a context manager so that an exception never leaves it
held. Handles are freed when the objects are garbage-collected; freeing a lock that is still
held unlocks it (when its store is open).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, List, Optional

from . import _convert, _lib
from .errors import Error, FailedPrecondition, check, get
from .layout import Tier

if TYPE_CHECKING:
    from .store import Store

lib = _lib.lib


def _read_array(fn: Any, handle: Any, ctype: Any, per_item: int) -> Any:
    """Reads an array-convention result (size query, then the copy)."""
    count = ctypes.c_size_t()
    check(fn(handle, None, 0, ctypes.byref(count)))
    n = count.value * per_item
    buf = (ctype * max(n, 1))()
    check(fn(handle, buf, count.value, ctypes.byref(count)))
    return buf, count.value


class Match(_lib.Owner):
    """The answer of a lookup: the longest reusable prefix under the hybrid rule (KV pages and
    the state at exactly that depth). A miss is a match with ``reusable_pages == 0``.

    Attributes (read once, at lookup): ``num_pages`` (full pages of the lookup),
    ``page_size_tokens``, ``reusable_pages``, ``kv_only_pages`` (KV present, state or not),
    ``checkpoint_hint_pages`` (where to save a state while recomputing), ``state_tier``
    (:class:`Tier`; Tier.NONE when there is no state at reusable_pages). For a pure SSM layout
    (no KV) ``reusable_pages`` is the depth of the deepest state along the prompt and
    ``kv_only_pages`` how far the store knows the prompt's pages."""

    def __init__(self, handle: Any) -> None:
        # Internal: takes ownership of a non-NULL cachepawl_match*.
        self._own(handle, lib.cachepawl_match_free)
        size = ctypes.c_size_t
        self.num_pages: int = get(lib.cachepawl_match_num_pages, size, handle)
        self.reusable_pages: int = get(lib.cachepawl_match_reusable_pages, size, handle)
        self.kv_only_pages: int = get(lib.cachepawl_match_kv_only_pages, size, handle)
        self.checkpoint_hint_pages: int = get(
            lib.cachepawl_match_checkpoint_hint_pages, size, handle
        )
        self.page_size_tokens: int = get(
            lib.cachepawl_match_page_size_tokens, ctypes.c_uint32, handle
        )
        self.state_tier = Tier(get(lib.cachepawl_match_state_tier, ctypes.c_int32, handle))
        self._hashes: Optional[List[bytes]] = None
        self._tiers: Optional[List[Tier]] = None

    @property
    def reusable_tokens(self) -> int:
        return self.reusable_pages * self.page_size_tokens

    @property
    def hit(self) -> bool:
        return self.reusable_pages > 0

    @property
    def page_tiers(self) -> List[Tier]:
        """The fastest tier of each of the first kv_only_pages pages (none for a pure SSM
        layout, whose pages hold no KV)."""
        if self._tiers is None:
            buf, n = _read_array(lib.cachepawl_match_page_tiers, self._h, ctypes.c_int32, 1)
            self._tiers = [Tier(buf[i]) for i in range(n)]
        return list(self._tiers)

    @property
    def window_first_page(self) -> int:
        """Layouts with sliding-window layers: the first page of the window a load at
        reusable_pages reads (0 without windowed layers or a hit)."""
        return int(get(lib.cachepawl_match_window_first_page, ctypes.c_size_t, self._h))

    @property
    def window_tiers(self) -> List[Tier]:
        """The fastest tier of the windowed KV of each page from window_first_page to
        reusable_pages (none without windowed layers or a hit)."""
        buf, n = _read_array(lib.cachepawl_match_window_tiers, self._h, ctypes.c_int32, 1)
        return [Tier(buf[i]) for i in range(n)]

    @property
    def hashes(self) -> List[bytes]:
        """Every page hash of the lookup (num_pages of 32 bytes each)."""
        if self._hashes is None:
            buf, n = _read_array(
                lib.cachepawl_match_hashes, self._h, ctypes.c_uint8, _lib.HASH_BYTES
            )
            self._hashes = _convert.split_hashes(bytes(buf)[: n * _lib.HASH_BYTES])
        return list(self._hashes)

    def __repr__(self) -> str:
        return (
            f"<cachepawl.Match reusable_pages={self.reusable_pages} "
            f"kv_only_pages={self.kv_only_pages} num_pages={self.num_pages} "
            f"state_tier={self.state_tier.name}>"
        )


class Lock(_lib.Owner):
    """An eviction lock on the first ``pages`` pages of a match (and, when ``has_state``, the
    state at that depth). Thread-safe; unlocking happens once. As a context manager it unlocks
    on exit, also when the block raises."""

    def __init__(self, store: "Store", handle: Any) -> None:
        # Internal: takes ownership of a non-NULL cachepawl_lock*.
        self._store = store
        self._own(handle, lib.cachepawl_lock_free)
        self.pages: int = get(lib.cachepawl_lock_pages, ctypes.c_size_t, handle)
        self.has_state = bool(get(lib.cachepawl_lock_has_state, ctypes.c_int32, handle))
        self._held = True

    @property
    def held(self) -> bool:
        """True until :meth:`unlock` succeeded or the lock was released with its store."""
        return self._held and self._finalizer.alive

    def unlock(self) -> None:
        """Releases the lock. FailedPrecondition when already unlocked (or released)."""
        if not self._finalizer.alive:
            raise FailedPrecondition("lock: released (Lock.release or the end of its with block)")
        check(lib.cachepawl_store_unlock(self._store._handle(), self._h))
        self._held = False

    def release(self) -> None:
        """Unlocks when still held and the store is open, and frees the handle; never raises.
        The object is unusable afterwards (do not call it while another thread unlocks)."""
        self._held = False
        self._finalizer()

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if self._held and not self._store.closed:
                try:
                    self.unlock()
                except Error:
                    if exc_type is None:
                        raise  # else the block's own exception is the one to see
        finally:
            # Whatever happened above, nothing stays locked: lock_free unlocks a held lock.
            self.release()

    def __repr__(self) -> str:
        return f"<cachepawl.Lock pages={self.pages} has_state={self.has_state} held={self.held}>"
