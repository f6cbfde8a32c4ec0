"""Cachepawl for Python: the tiered KV-page and Mamba-state cache store, over its C ABI.

    import cachepawl
    with cachepawl.Store("jamba-v0.1", host_bytes=1 << 30, cuda_device=-1,
                         device_pool_bytes=64 << 20) as store:
        page = store.allocate_device_slot("kv")
        ...
        store.save(tokens, [page]).wait()
        match = store.lookup(tokens)
        with store.lock(match):
            store.load(match, [other_page]).wait()

The package is pure Python (ctypes) over libcachepawl.so: set CACHEPAWL_LIBRARY to the
library's path, or install the library where the dynamic loader finds it (cachepawl._lib says
where it looks). Importing it loads the library and refuses one of another C ABI version.
See docs/EMBEDDING.md ("From Python").
"""

from __future__ import annotations

from . import _lib
from .errors import (
    Aborted,
    Busy,
    Corruption,
    Error,
    FailedPrecondition,
    Incompatible,
    Internal,
    InvalidArgument,
    IoError,
    NoSpace,
    NotFound,
    OutOfMemory,
    TimedOut,
    Unavailable,
)
from .fence import Fence, Prefetch
from .layout import Kind, Layout, Tier, hf_model_types, preset_names
from .match import Lock, Match
from .options import REMOTE_WRITE_POLICIES, WRITE_POLICIES, validate_options
from .pool import DevicePool, buffer_address
from .store import Store

#: The version of this Python package (the Cachepawl release it belongs to).
__version__ = "0.1.0"
#: The C ABI version this package binds; the loaded library implements the same.
ABI_VERSION = _lib.ABI_VERSION
HASH_BYTES = _lib.HASH_BYTES
#: The path (or name) the library was loaded from.
library_path = _lib.library_path


def library_version() -> str:
    """The loaded libcachepawl.so's version, e.g. "0.1.0"."""
    v = _lib.lib.cachepawl_version()
    return str(v.decode()) if v else ""


def library_version_number() -> int:
    """The same as major * 10000 + minor * 100 + patch."""
    return int(_lib.lib.cachepawl_version_number())


__all__ = [
    "ABI_VERSION",
    "Aborted",
    "Busy",
    "Corruption",
    "DevicePool",
    "Error",
    "FailedPrecondition",
    "Fence",
    "HASH_BYTES",
    "Incompatible",
    "Internal",
    "InvalidArgument",
    "IoError",
    "Kind",
    "Layout",
    "Lock",
    "Match",
    "NoSpace",
    "NotFound",
    "OutOfMemory",
    "Prefetch",
    "Store",
    "Tier",
    "TimedOut",
    "Unavailable",
    "REMOTE_WRITE_POLICIES",
    "WRITE_POLICIES",
    "__version__",
    "buffer_address",
    "hf_model_types",
    "library_path",
    "library_version",
    "library_version_number",
    "preset_names",
    "validate_options",
]
