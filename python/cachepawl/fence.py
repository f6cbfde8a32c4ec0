"""Fences (vocab/fence.h) and prefetches.

A :class:`Fence` is the completion of one load, save or prefetch. It always fires, with
success or an error, whatever happens to the store (a closed store fires what was in flight,
with Aborted for what it abandons), so a waiter never hangs on a fence. Fences are
thread-safe (several threads may wait on one) and stay valid after their store is closed;
the handle is freed when the object is garbage-collected (that does not cancel the operation).

Waits release the GIL and block in slices of at most 100 ms, so Ctrl-C (KeyboardInterrupt)
interrupts a long wait in the main thread.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any, Callable, Optional

from . import _convert, _lib
from .errors import Error, TimedOut, check, error_for, get

lib = _lib.lib

_TIMED_OUT = TimedOut.code
_SLICE_MS = 100


def _stream_pointer(stream: Any) -> Optional[int]:
    """A cudaStream_t from a torch.cuda.Stream (``.cuda_stream``), an int handle, a
    ctypes.c_void_p, or None."""
    if stream is None:
        return None
    if hasattr(stream, "cuda_stream"):
        value = stream.cuda_stream
        name = f"stream.cuda_stream ({type(stream).__module__}.{type(stream).__name__})"
    elif isinstance(stream, ctypes.c_void_p):
        value, name = (stream.value or 0), "stream"
    else:
        value, name = stream, "stream"
    try:
        handle = _convert.u64(name, value)
    except TypeError:
        raise TypeError(
            f"stream: expected a torch.cuda.Stream, an int cudaStream_t handle or None, got "
            f"{type(stream).__name__}"
        ) from None
    return handle or None


def wait_sliced(
    what: str,
    timeout: Optional[float],
    wait: Callable[[int], int],
    ready: Callable[[], bool],
) -> None:
    """Waits with `wait(ms)` (a C wait returning a status) in slices of at most 100 ms until it
    returns something other than TIMED_OUT, `ready()` says the fence fired (then its status is
    read with wait(0)), or `timeout` seconds passed (None: never). Raises a non-OK status."""
    total = _convert.timeout_ms("timeout", timeout)
    deadline = None if total == _lib.WAIT_FOREVER else time.monotonic() + total / 1000.0
    while True:
        if deadline is None:
            chunk = _SLICE_MS
        else:
            left_ms = int(-(-(deadline - time.monotonic()) * 1000 // 1))
            chunk = max(0, min(_SLICE_MS, left_ms))
        code = wait(chunk)
        if code != _TIMED_OUT:
            check(code)
            return
        if ready():  # fired meanwhile, or the operation itself timed out: its status
            check(wait(0))
            return
        if deadline is not None and time.monotonic() >= deadline:
            raise TimedOut(f"{what}: not fired within timeout {timeout} s")


class Fence(_lib.Owner):
    """The completion of one operation. Thread-safe."""

    def __init__(self, handle: Any) -> None:
        # Internal: takes ownership of a non-NULL cachepawl_fence*.
        self._own(handle, lib.cachepawl_fence_free)

    @property
    def ready(self) -> bool:
        """True once the operation finished (with success or an error)."""
        return bool(get(lib.cachepawl_fence_ready, ctypes.c_int32, self._h))

    def wait(self, timeout: Optional[float] = None) -> None:
        """Blocks until the fence fired or `timeout` seconds passed (None: no limit). Returns
        when the operation succeeded; raises its error (an :class:`Error` subclass, e.g.
        NotFound: recompute) otherwise, or :class:`TimedOut`."""
        wait_sliced(
            "fence",
            timeout,
            lambda ms: int(lib.cachepawl_fence_wait(self._h, ms)),
            lambda: self.ready,
        )

    def result(self) -> Optional[Error]:
        """The operation's error once fired (None: success). FailedPrecondition while the
        fence has not fired yet."""
        code = ctypes.c_int32()
        msg = ctypes.c_void_p()
        check(lib.cachepawl_fence_result(self._h, ctypes.byref(code), ctypes.byref(msg)))
        text = _lib.take_string(msg.value)
        return None if code.value == 0 else error_for(code.value, text)

    @property
    def error(self) -> Optional[Error]:
        """The operation's error once fired, None on success or while it has not fired."""
        return self.result() if self.ready else None

    @property
    def num_layers(self) -> int:
        """Per-layer sub-fences (loads with ``per_layer_fences=True``); 0 when none."""
        return int(get(lib.cachepawl_fence_num_layers, ctypes.c_size_t, self._h))

    def layer_ready(self, layer: int) -> bool:
        """Whether attention layer `layer` (the layer-th attention layer) landed."""
        i = _convert.size("layer", layer)
        return bool(get(lib.cachepawl_fence_layer_ready, ctypes.c_int32, self._h, i))

    def wait_layer(self, layer: int, timeout: Optional[float] = None) -> None:
        """Waits for one per-layer sub-fence; raises like :meth:`wait`."""
        i = _convert.size("layer", layer)
        wait_sliced(
            f"fence layer {i}",
            timeout,
            lambda ms: int(lib.cachepawl_fence_wait_layer(self._h, i, ms)),
            lambda: self.layer_ready(i),
        )

    def stream_wait(self, stream: Any = None) -> None:
        """Makes a CUDA stream wait for the fence without blocking the CPU (when the load still
        had disk reads, the calling thread blocks until they are done).

        `stream`: a ``torch.cuda.Stream`` (its ``.cuda_stream``), an int ``cudaStream_t``
        handle, or None. None, and handle 0 (the legacy default stream), wait on the CPU like
        :meth:`wait`. Raises the operation's error when it failed; Unavailable for a stream on
        a fence that has not fired in CPU mode."""
        ptr = _stream_pointer(stream)
        if ptr is None:
            self.wait()
            return
        check(lib.cachepawl_fence_stream_wait(self._h, ptr))

    def __repr__(self) -> str:
        return f"<cachepawl.Fence ready={self.ready}>"


class Prefetch(_lib.Owner):
    """A disk-to-host prefetch in progress (``Store.prefetch``). Thread-safe. Used as a context
    manager, an exception inside the block cancels it; the prefetch otherwise goes on after the
    object is dropped."""

    def __init__(self, handle: Any) -> None:
        # Internal: takes ownership of a non-NULL cachepawl_prefetch*.
        self._own(handle, lib.cachepawl_prefetch_free)

    @property
    def fence(self) -> Fence:
        """The prefetch's fence (fires when everything is in host memory, or on failure)."""
        h = _lib.FenceP()
        check(lib.cachepawl_prefetch_fence(self._h, ctypes.byref(h)))
        return Fence(h)

    def cancel(self) -> None:
        """Stops what has not started; the fence fires either way."""
        check(lib.cachepawl_prefetch_cancel(self._h))

    def wait(self, timeout: Optional[float] = None) -> None:
        """``self.fence.wait(timeout)``."""
        self.fence.wait(timeout)

    def __enter__(self) -> "Prefetch":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.cancel()
