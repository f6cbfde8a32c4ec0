"""Loading the library: versions, the ABI check, and the ImportError that says how to point
at libcachepawl.so when it cannot be loaded (each case in a child interpreter)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import pytest

import cachepawl
from conftest import library_env


def import_in_child(
    library: Optional[str], extra_env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess:
    env = library_env()
    if library is None:
        env.pop("CACHEPAWL_LIBRARY", None)
    else:
        env["CACHEPAWL_LIBRARY"] = library
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-c", "import cachepawl; print(cachepawl.library_path)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )


def test_versions() -> None:
    assert cachepawl.__version__ == cachepawl.library_version()
    major, minor, patch = (int(x) for x in cachepawl.library_version().split("."))
    assert cachepawl.library_version_number() == major * 10000 + minor * 100 + patch
    assert cachepawl.ABI_VERSION == 1 and cachepawl.HASH_BYTES == 32
    assert os.path.exists(cachepawl.library_path)


def _ctype_of(c_type: str) -> object:
    """The ctypes type this package must declare for a C type of the header (spaces removed)."""
    from cachepawl import _lib

    if c_type == "constchar*":
        return ctypes.c_char_p  # strings passed in, and static strings the library owns
    c_type = c_type.replace("const", "")
    scalars = {
        "void": None,
        "uint32_t": ctypes.c_uint32,
        "uint64_t": ctypes.c_uint64,
        "size_t": ctypes.c_size_t,
        "int32_t": ctypes.c_int32,
        "uint8_t": ctypes.c_uint8,
        "cachepawl_status": ctypes.c_int32,
        "cachepawl_kind": ctypes.c_int32,
        "cachepawl_tier": ctypes.c_int32,
        "cachepawl_write_policy": ctypes.c_int32,
        "cachepawl_remote_write_policy": ctypes.c_int32,
        "cachepawl_eviction_policy": ctypes.c_int32,
        "cachepawl_fence_callback": _lib.FENCE_CALLBACK,
    }
    handles = {
        f"cachepawl_{n}*": getattr(_lib, f"{n.capitalize()}P")
        for n in ("options", "layout", "store", "pool", "match", "lock", "fence", "prefetch")
    }
    if c_type in ("void*", "char*"):  # char*: strings the caller frees, kept as addresses
        return ctypes.c_void_p
    if c_type == "char**":
        return ctypes.POINTER(ctypes.c_void_p)
    if c_type in handles:
        return handles[c_type]
    if c_type.endswith("**") and c_type[:-1] in handles:
        return ctypes.POINTER(handles[c_type[:-1]])
    if c_type.endswith("*") and c_type[:-1] in scalars:
        return ctypes.POINTER(scalars[c_type[:-1]])
    return scalars[c_type]


def test_every_prototype_declared() -> None:
    """Every function of capi/cachepawl.h is bound with the ctypes types its C declaration
    maps to (no pointer or size through ctypes' int default), and nothing else is bound."""
    import re

    from cachepawl import _lib

    header = Path(__file__).resolve().parents[2] / "capi" / "cachepawl.h"
    if not header.exists():
        pytest.skip("capi/cachepawl.h is not next to this package")
    text = re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.S)
    table = {name: (restype, list(argtypes)) for name, restype, argtypes in _lib._PROTOTYPES}
    seen = set()
    for ret, name, params in re.findall(
        r"CACHEPAWL_API\s+([^;(]*?)\s*\b(cachepawl_\w+)\s*\(([^)]*)\)", text
    ):
        seen.add(name)
        restype, argtypes = table[name]
        ret = ret.replace(" ", "")
        assert restype is _ctype_of(ret), name
        params = [p.strip() for p in params.split(",") if p.strip() not in ("", "void")]
        expected = [
            _ctype_of(re.match(r"(.*?)\w+$", p, re.S).group(1).replace(" ", "")) for p in params
        ]
        assert argtypes == expected, name
        fn = getattr(_lib.lib, name)
        assert fn.argtypes == argtypes and fn.restype is restype, name
    assert seen == set(table) and len(table) == len(_lib._PROTOTYPES) == 126


def test_missing_library_file() -> None:
    r = import_in_child("/nonexistent/libcachepawl.so")
    assert r.returncode != 0
    assert "ImportError" in r.stderr
    assert "CACHEPAWL_LIBRARY='/nonexistent/libcachepawl.so': no such file" in r.stderr
    assert "libcachepawl.so" in r.stderr and "unset it" in r.stderr


def test_not_a_cachepawl_library() -> None:
    libc = ctypes.util.find_library("c")
    path = next(
        (
            p
            for p in (
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/libc.so.6",
            )
            if os.path.exists(p)
        ),
        None,
    )
    if path is None:
        pytest.skip(f"no libc file to load (find_library: {libc})")
    r = import_in_child(path)
    assert r.returncode != 0
    assert "has no cachepawl_abi_version: not a Cachepawl library" in r.stderr


def test_not_a_library(tmp_path: Path) -> None:
    bogus = tmp_path / "libcachepawl.so"
    bogus.write_text("not an ELF file")
    r = import_in_child(str(bogus))
    assert r.returncode != 0
    assert "could not be loaded" in r.stderr and "CACHEPAWL_LIBRARY" in r.stderr


def test_library_of_another_abi(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a fake library")
    src = tmp_path / "fake.c"
    src.write_text("unsigned cachepawl_abi_version(void) { return 99; }\n")
    so = tmp_path / "libcachepawl.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    r = import_in_child(str(so))
    assert r.returncode != 0
    assert "implements C ABI version 99" in r.stderr and "binds ABI version 1" in r.stderr


def test_library_not_found_anywhere(tmp_path: Path) -> None:
    if ctypes.util.find_library("cachepawl"):
        pytest.skip("a libcachepawl is installed on this machine")
    r = import_in_child(None, {"LD_LIBRARY_PATH": str(tmp_path)})
    if r.returncode == 0:
        pytest.skip(f"the loader found an installed library: {r.stdout.strip()}")
    assert "libcachepawl.so was not found" in r.stderr
    assert "CACHEPAWL_LIBRARY=/path/to/libcachepawl.so" in r.stderr
    assert "LD_LIBRARY_PATH" in r.stderr


def test_found_through_ld_library_path() -> None:
    folder = os.path.dirname(os.path.abspath(cachepawl.library_path))
    r = import_in_child(None, {"LD_LIBRARY_PATH": folder})
    if not any(
        os.path.exists(os.path.join(folder, n)) for n in ("libcachepawl.so.0", "libcachepawl.so")
    ):
        pytest.skip("the library file has another name")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("libcachepawl.so") or r.stdout.strip().startswith(folder)


def test_import_does_not_import_torch() -> None:
    r = subprocess.run(
        [sys.executable, "-c", "import sys, cachepawl; print('torch' in sys.modules)"],
        env=library_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
