"""Argument conversion for the C calls: every integer is range-checked before ctypes sees it
(ctypes would silently wrap -1 or 2**64 into the C type), and sequences become C arrays.

Errors are :class:`~cachepawl.errors.InvalidArgument` (``name: value (why)``) for values out of
range and ``TypeError`` for values of the wrong type, both naming the argument.
"""

from __future__ import annotations

import array
import ctypes
import operator
import os
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Tuple, Union

from . import _lib
from .errors import InvalidArgument

BytesLike = Union[bytes, bytearray, memoryview]
if TYPE_CHECKING:
    CArray = ctypes.Array[Any]  # a ctypes array passed as a pointer argument
else:
    CArray = Any

_SIZE_MAX = 2 ** (8 * ctypes.sizeof(ctypes.c_size_t))


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected an int, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}") from None


def _ranged(name: str, value: Any, lo: int, hi: int, hi_text: str) -> int:
    v = _int(name, value)
    if not lo <= v < hi:
        raise InvalidArgument(f"{name}: {v} (must be in [{lo}, {hi_text}))")
    return v


def u32(name: str, value: Any) -> int:
    return _ranged(name, value, 0, 2**32, "2**32")


def u64(name: str, value: Any) -> int:
    return _ranged(name, value, 0, 2**64, "2**64")


def size(name: str, value: Any) -> int:
    return _ranged(name, value, 0, _SIZE_MAX, "SIZE_MAX + 1")


def i32(name: str, value: Any) -> int:
    return _ranged(name, value, -(2**31), 2**31, "2**31")


def timeout_ms(name: str, timeout: Optional[float]) -> int:
    """Seconds (None or inf: forever) as the milliseconds of cachepawl_fence_wait, rounded
    up."""
    if timeout is None:
        return _lib.WAIT_FOREVER
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{name}: expected seconds (int or float) or None, got {timeout!r}")
    if timeout != timeout or timeout < 0:  # NaN or negative
        raise InvalidArgument(f"{name}: {timeout} (must be >= 0 seconds, or None to wait forever)")
    if timeout == float("inf"):
        return _lib.WAIT_FOREVER
    ms = int(-(-timeout * 1000 // 1))  # ceil
    return min(ms, _lib.WAIT_FOREVER - 1)


def path(name: str, value: Any) -> bytes:
    """A filesystem path argument as bytes (no NUL inside)."""
    try:
        p = os.fsencode(value)
    except TypeError:
        raise TypeError(
            f"{name}: expected a path (str, bytes or os.PathLike), got {value!r}"
        ) from None
    if b"\0" in p:
        raise InvalidArgument(f"{name}: {value!r} (contains a NUL byte)")
    return p


def text(name: str, value: Any, secret: bool = False) -> bytes:
    """A C string argument (str as UTF-8, or bytes; no NUL inside). With `secret` (a password),
    no error message shows the value."""
    if isinstance(value, str):
        b = value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray)):
        b = bytes(value)
    else:
        what = type(value).__name__ if secret else f"{type(value).__name__} {value!r}"
        raise TypeError(f"{name}: expected str or bytes, got {what}")
    if b"\0" in b:
        if secret:
            raise InvalidArgument(f"{name}: (hidden) contains a NUL byte")
        raise InvalidArgument(f"{name}: {value!r} (contains a NUL byte)")
    return b


def namespace(ns: Any) -> Tuple[Optional[bytes], int]:
    """A namespace as the (pointer, length) pair of the C ABI; "" is (NULL, 0)."""
    if isinstance(ns, str):
        b = ns.encode("utf-8")
    elif isinstance(ns, (bytes, bytearray, memoryview)):
        b = bytes(ns)
    else:
        raise TypeError(f"namespace: expected str or bytes, got {type(ns).__name__} {ns!r}")
    return (b or None), len(b)


def _int_array(
    name: str, values: Any, ctype: Any, typecode: str, bits: int
) -> Tuple[Optional[CArray], int]:
    """A C array of unsigned `bits`-bit ints from a sequence, array or buffer; (NULL, 0) when
    empty."""
    if isinstance(values, (str, bytes, bytearray)):
        raise TypeError(
            f"{name}: expected a sequence of ints, got {type(values).__name__} "
            f"(for raw bytes use array.array({typecode!r}, ...) or a memoryview cast)"
        )
    itemsize = ctypes.sizeof(ctype)
    try:
        mv: Optional[memoryview] = memoryview(values)
    except TypeError:
        mv = None
    if mv is not None:
        if mv.ndim == 1 and mv.itemsize == itemsize and mv.format.lstrip("@=<") in ("I", "L", "Q"):
            n = mv.shape[0] if mv.shape else 0
            if n == 0:
                return None, 0
            return (ctype * n).from_buffer_copy(mv.tobytes()), n
        values = mv.tolist()
    elif hasattr(values, "tolist") and not isinstance(values, (list, tuple)):
        values = values.tolist()  # numpy arrays, torch tensors
    items = list(values) if not isinstance(values, list) else values
    if not items:
        return None, 0
    try:
        arr = array.array(typecode, items)
    except (TypeError, OverflowError):
        for i, v in enumerate(items):
            _ranged(f"{name}[{i}]", v, 0, 2**bits, f"2**{bits}")
        raise  # not reached: one item failed above
    assert arr.itemsize == itemsize
    return (ctype * len(arr)).from_buffer(arr), len(arr)


def tokens(name: str, values: Any) -> Tuple[Optional[CArray], int]:
    """Token ids (uint32) from a list, array.array('I'), numpy array or tensor."""
    return _int_array(name, values, ctypes.c_uint32, "I", 32)


def slots(name: str, values: Any) -> Tuple[Optional[CArray], int]:
    """Device page or slot numbers (uint64)."""
    return _int_array(name, values, ctypes.c_uint64, "Q", 64)


def _bytes_of(name: str, value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, memoryview):
        return value.tobytes()
    raise TypeError(f"{name}: expected bytes, got {type(value).__name__} {value!r}")


def hashes(
    name: str, values: Union[BytesLike, Iterable[BytesLike]]
) -> Tuple[Optional[CArray], int]:
    """Page hashes: one bytes-like of n * 32 bytes, or a sequence of 32-byte bytes-likes."""
    hb = _lib.HASH_BYTES
    if isinstance(values, (bytes, bytearray, memoryview)):
        raw = _bytes_of(name, values)
        if len(raw) % hb != 0:
            raise InvalidArgument(
                f"{name}: {len(raw)} bytes (not a multiple of the {hb} bytes of a page hash)"
            )
    elif isinstance(values, str):
        raise TypeError(f"{name}: expected bytes or a sequence of 32-byte bytes, got str")
    else:
        parts = []
        for i, h in enumerate(values):
            b = _bytes_of(f"{name}[{i}]", h)
            if len(b) != hb:
                raise InvalidArgument(f"{name}[{i}]: {len(b)} bytes (a page hash has {hb})")
            parts.append(b)
        raw = b"".join(parts)
    if not raw:
        return None, 0
    return (ctypes.c_uint8 * len(raw)).from_buffer_copy(raw), len(raw) // hb


def split_hashes(raw: bytes) -> List[bytes]:
    hb = _lib.HASH_BYTES
    return [raw[i : i + hb] for i in range(0, len(raw), hb)]


def readable_buffer(name: str, data: Any) -> Tuple[Any, int]:
    """A pointer argument (c_void_p-compatible) and byte count for a bytes-like object."""
    if isinstance(data, bytes):
        return data, len(data)  # ctypes passes the bytes object's own buffer
    try:
        mv = memoryview(data)
    except TypeError:
        raise TypeError(
            f"{name}: expected bytes, bytearray or memoryview, got {type(data).__name__}"
        ) from None
    if not mv.c_contiguous:
        raise InvalidArgument(f"{name}: not C-contiguous (pass a contiguous buffer)")
    if mv.nbytes == 0:
        return None, 0
    if mv.readonly:
        return mv.tobytes(), mv.nbytes
    return (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B")), mv.nbytes


def writable_buffer(name: str, out: Any) -> Tuple[Any, int]:
    """A pointer argument and byte count for a writable bytes-like object."""
    try:
        mv = memoryview(out)
    except TypeError:
        raise TypeError(
            f"{name}: expected a writable buffer (bytearray, memoryview, ...), got "
            f"{type(out).__name__}"
        ) from None
    if mv.readonly:
        raise InvalidArgument(f"{name}: read-only buffer (pass a bytearray or writable memoryview)")
    if not mv.c_contiguous:
        raise InvalidArgument(f"{name}: not C-contiguous (pass a contiguous buffer)")
    if mv.nbytes == 0:
        return None, 0
    return (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B")), mv.nbytes
