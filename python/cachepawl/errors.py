"""Exceptions: one class per cachepawl_status code of capi/cachepawl.h.

Every failed C call raises the subclass of :class:`Error` for its code, carrying the library's
message (which names the function, the argument or field, and the value at fault). Argument
checks made in Python before a call raise the same classes (mostly :class:`InvalidArgument`)
with messages in the same form (``field: value (why)``).

Thread safety: the classes are immutable; an exception instance belongs to the thread that
raised it.
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional, Type

from . import _lib

OK = 0


class Error(Exception):
    """A Cachepawl error. ``code`` is the cachepawl_status, ``message`` the library's text."""

    code: int = -1

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def status_name(self) -> str:
        """The C status name ("InvalidArgument", ...; "Unknown" for other codes)."""
        return status_name(self.code)


class InvalidArgument(Error, ValueError):
    """A bad argument, option value or layout JSON (CACHEPAWL_INVALID_ARGUMENT)."""

    code = 1


class NotFound(Error, LookupError):
    """No longer cached (recompute), or a file or preset missing (CACHEPAWL_NOT_FOUND)."""

    code = 2


class Corruption(Error):
    """On-disk bytes failed verification (CACHEPAWL_CORRUPTION)."""

    code = 3


class IoError(Error, OSError):
    """The OS refused an operation; the message has the errno (CACHEPAWL_IO_ERROR)."""

    code = 4


class NoSpace(Error):
    """A tier or the device pool is full (CACHEPAWL_NO_SPACE)."""

    code = 5


class Busy(Error):
    """In flight elsewhere: retry once that fence fired (CACHEPAWL_BUSY)."""

    code = 6


class Unavailable(Error):
    """A facility is missing, e.g. no GPU (CACHEPAWL_UNAVAILABLE)."""

    code = 7


class FailedPrecondition(Error):
    """Wrong state: store closed, fence not fired, pool already registered, ...
    (CACHEPAWL_FAILED_PRECONDITION)."""

    code = 8


class TimedOut(Error, TimeoutError):
    """A wait ran out of time (CACHEPAWL_TIMED_OUT)."""

    code = 9


class Aborted(Error):
    """Cancelled, or abandoned because the store closed (CACHEPAWL_ABORTED)."""

    code = 10


class Internal(Error):
    """A bug in Cachepawl (CACHEPAWL_INTERNAL)."""

    code = 11


class Incompatible(Error):
    """On-disk data of another layout or format (CACHEPAWL_INCOMPATIBLE)."""

    code = 12


class OutOfMemory(Error, MemoryError):
    """An allocation in the library failed (CACHEPAWL_OUT_OF_MEMORY)."""

    code = 13


_BY_CODE: Dict[int, Type[Error]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        Corruption,
        IoError,
        NoSpace,
        Busy,
        Unavailable,
        FailedPrecondition,
        TimedOut,
        Aborted,
        Internal,
        Incompatible,
        OutOfMemory,
    )
}


def status_name(code: int) -> str:
    """The library's name of a status code."""
    if not -(2**31) <= code < 2**31:
        return "Unknown"
    name = _lib.lib.cachepawl_status_name(code)
    return str(name.decode()) if name else "Unknown"


def error_for(code: int, message: str) -> Error:
    """The exception for a non-OK ``code`` (an :class:`Error` for codes this package does not
    know, with the code kept)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return Error(f"{message} (status {code}: {status_name(code)})", code)
    return cls(message)


def last_error() -> str:
    """The calling thread's last error message of the library ("" when none)."""
    msg = _lib.lib.cachepawl_last_error()
    return str(msg.decode("utf-8", errors="replace")) if msg else ""


def check(code: int) -> None:
    """Raises the error of a failed C call (reads the thread's last error at once)."""
    if code != OK:
        raise error_for(code, last_error())


def get(fn: Any, ctype: Any, *args: Any) -> Any:
    """Calls ``fn(*args, &out)`` for a C function with one trailing out parameter of `ctype`;
    raises its error, or returns ``out.value``."""
    out = ctype()
    check(fn(*args, ctypes.byref(out)))
    return out.value
