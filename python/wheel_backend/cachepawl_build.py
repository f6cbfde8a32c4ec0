"""The build backend of ``pip install .`` / ``pip wheel .`` at the repository root (PEP 517).

Standard library only, so pip's build isolation needs no package index: the isolated
environment has nothing to install (``requires = []`` in the root pyproject.toml). The wheel is
built with the system's CMake and compilers (what tools/setup.sh installs), CUDA when CMake
finds it (CACHEPAWL_CUDA=AUTO):

1. CMake configures ``build-wheel/`` (or the folder of the ``build-dir`` config setting) as a
   Release build without tests, and builds ``libcachepawl.so`` and the ``cachepawl`` tool (the
   tool is skipped with ``--config-settings tool=off``);
2. the wheel ``cachepawl-<version>-py3-none-<platform>.whl`` holds the Python package
   (python/cachepawl), the library as ``cachepawl/libcachepawl.so`` (the package loads it first
   when CACHEPAWL_LIBRARY is unset) and the tool as ``cachepawl/cachepawl`` (``python -m
   cachepawl`` and the ``cachepawl`` console script run it).

The package is ctypes over the C ABI: no Python ABI in the tag, one wheel for every CPython 3.

Versions must agree or nothing is built: CMake's ``project(cachepawl VERSION ...)``, the
package's ``__version__``, the ``version`` of both pyproject.toml files, and the C ABI version
of capi/cachepawl.h against the package's ``_lib.ABI_VERSION``; a mismatch names both values.

Config settings (``--config-settings KEY=VALUE``): ``build-dir`` (a folder; default
``<root>/build-wheel``, kept so a second install builds only what changed), ``cmake-args`` (more
arguments for the configure, split on spaces), ``tool`` (``on``/``off``), ``jobs`` (parallel
build jobs; default the machine's cores).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

NAME = "cachepawl"
ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / NAME

Settings = Optional[Mapping[str, object]]


class BuildError(RuntimeError):
    """A build that cannot go on; the message names the value at fault."""


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise BuildError(f"cachepawl wheel: cannot read {path}: {e}") from None


def _match(path: Path, pattern: str, what: str) -> str:
    m = re.search(pattern, _read(path), re.M)
    if m is None:
        raise BuildError(f"cachepawl wheel: {path} has no {what} (pattern {pattern!r})")
    return m.group(1)


def versions() -> Tuple[str, int]:
    """The version every source agrees on, and the C ABI version; BuildError otherwise."""
    found: Dict[str, str] = {
        "CMakeLists.txt project(cachepawl VERSION)": _match(
            ROOT / "CMakeLists.txt", r"^project\(cachepawl\s+VERSION\s+([0-9.]+)", "version"
        ),
        "python/cachepawl/__init__.py __version__": _match(
            PACKAGE / "__init__.py", r"^__version__\s*=\s*\"([^\"]+)\"", "__version__"
        ),
        "pyproject.toml version": _match(
            ROOT / "pyproject.toml", r"^version\s*=\s*\"([^\"]+)\"", "version"
        ),
        "python/pyproject.toml version": _match(
            ROOT / "python" / "pyproject.toml", r"^version\s*=\s*\"([^\"]+)\"", "version"
        ),
    }
    if len(set(found.values())) != 1:
        listed = ", ".join(f"{k} = {v}" for k, v in found.items())
        raise BuildError(f"cachepawl wheel: the versions disagree: {listed}")
    header_abi = int(
        _match(ROOT / "capi" / "cachepawl.h", r"^#define\s+CACHEPAWL_ABI_VERSION\s+(\d+)", "ABI")
    )
    package_abi = int(_match(PACKAGE / "_lib.py", r"^ABI_VERSION\s*=\s*(\d+)", "ABI_VERSION"))
    if header_abi != package_abi:
        raise BuildError(
            f"cachepawl wheel: capi/cachepawl.h CACHEPAWL_ABI_VERSION = {header_abi} but "
            f"python/cachepawl/_lib.py ABI_VERSION = {package_abi}"
        )
    return next(iter(found.values())), header_abi


def _setting(settings: Settings, key: str, default: str) -> str:
    value = (settings or {}).get(key, default)
    if isinstance(value, list):  # pip passes a repeated key as a list
        value = " ".join(str(v) for v in value)
    return str(value)


def _run(cmd: List[str], what: str) -> None:
    print("cachepawl wheel: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    try:
        r = subprocess.run(cmd, cwd=str(ROOT), stdout=sys.stderr, stderr=sys.stderr)
    except OSError as e:
        raise BuildError(f"cachepawl wheel: {what}: cannot run {cmd[0]}: {e}") from None
    if r.returncode != 0:
        raise BuildError(f"cachepawl wheel: {what} failed (exit status {r.returncode})")


def build_native(settings: Settings) -> Tuple[Path, Optional[Path]]:
    """Configures and builds; returns the library file and the tool (None with tool=off)."""
    build_dir = Path(_setting(settings, "build-dir", str(ROOT / "build-wheel"))).resolve()
    tool = _setting(settings, "tool", "on").lower()
    if tool not in ("on", "off"):
        raise BuildError(f"cachepawl wheel: config setting tool: {tool!r} (expected on or off)")
    jobs = _setting(settings, "jobs", str(os.cpu_count() or 1))
    if not jobs.isdigit() or int(jobs) < 1:
        raise BuildError(
            f"cachepawl wheel: config setting jobs: {jobs!r} (expected an integer >= 1)"
        )
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError(
            "cachepawl wheel: cmake not found on PATH (tools/setup.sh installs it with the "
            "compilers and libraries the build needs)"
        )
    configure = [cmake, "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 "-DCACHEPAWL_BUILD_TESTS=OFF",
                 f"-DCACHEPAWL_BUILD_TOOLS={'ON' if tool == 'on' else 'OFF'}"]  # fmt: skip
    if not (build_dir / "CMakeCache.txt").exists() and shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    configure += shlex.split(_setting(settings, "cmake-args", ""))
    _run(configure, "the CMake configure")
    targets = ["cachepawl_shared"] + (["cachepawl"] if tool == "on" else [])
    _run([cmake, "--build", str(build_dir), "-j", jobs, "--target", *targets], "the CMake build")
    library = build_dir / "libcachepawl.so"
    program = build_dir / "tools" / "cachepawl" if tool == "on" else None
    for f in [library] + ([program] if program else []):
        if not f.exists():
            raise BuildError(f"cachepawl wheel: the build did not make {f}")
    return library.resolve(), program


def _platform_tag() -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def metadata(version: str) -> str:
    readme = _read(ROOT / "python" / "README.md")
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        "Summary: A tiered GPU/host/NVMe/remote cache store for the KV pages and Mamba/SSM "
        "states of hybrid LLMs (Python bindings with the library built in)\n"
        "Requires-Python: >=3.8\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Typing :: Typed\n"
        "Provides-Extra: test\n"
        "Requires-Dist: pytest ; extra == 'test'\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme
    )


class _Wheel:
    """A wheel file written entry by entry, with its RECORD."""

    def __init__(self, path: Path) -> None:
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records: List[str] = []

    def add(self, name: str, data: bytes, executable: bool = False) -> None:
        info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = ((0o755 if executable else 0o644) | 0o100000) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{name},sha256={digest},{len(data)}")

    def close(self, record_name: str) -> None:
        self.records.append(f"{record_name},,")
        info = zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o644 | 0o100000) << 16
        self.zip.writestr(info, "\n".join(self.records) + "\n")
        self.zip.close()


def _package_files() -> List[Path]:
    """The package's modules (its subpackages' too) and py.typed."""
    return sorted(
        p
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and (p.suffix == ".py" or p.name == "py.typed")
    )


# PEP 517 hooks --------------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Settings = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Settings = None) -> List[str]:
    return []


def build_wheel(
    wheel_directory: str, config_settings: Settings = None, metadata_directory: Optional[str] = None
) -> str:
    version, _abi = versions()
    library, program = build_native(config_settings)
    name = f"{NAME}-{version}-py3-none-{_platform_tag()}.whl"
    out = Path(wheel_directory) / name
    dist_info = f"{NAME}-{version}.dist-info"
    wheel = _Wheel(out)
    try:
        for f in _package_files():
            wheel.add(f"{NAME}/{f.relative_to(PACKAGE).as_posix()}", f.read_bytes())
        wheel.add(f"{NAME}/libcachepawl.so", library.read_bytes())
        if program is not None:
            wheel.add(f"{NAME}/cachepawl", program.read_bytes(), executable=True)
        wheel.add(f"{dist_info}/METADATA", metadata(version).encode())
        wheel.add(
            f"{dist_info}/WHEEL",
            (
                "Wheel-Version: 1.0\nGenerator: cachepawl_build\nRoot-Is-Purelib: false\n"
                f"Tag: py3-none-{_platform_tag()}\n"
            ).encode(),
        )
        if program is not None:
            wheel.add(
                f"{dist_info}/entry_points.txt",
                b"[console_scripts]\ncachepawl = cachepawl.__main__:console_main\n",
            )
        wheel.close(f"{dist_info}/RECORD")
    except BaseException:
        wheel.zip.close()
        out.unlink(missing_ok=True)
        raise
    return name


def _sdist_files() -> List[str]:
    """The files git tracks or would (not ignored), or without git every file but build folders
    and caches."""
    try:
        r = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"],
            capture_output=True,
            check=True,
        )
        return sorted(f for f in r.stdout.decode().split("\0") if f and (ROOT / f).is_file())
    except (OSError, subprocess.CalledProcessError):
        skip = re.compile(r"^(build[^/]*|\.git|\.device|\.cache)(/|$)|(^|/)__pycache__(/|$)")
        return sorted(
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file() and not skip.search(str(p.relative_to(ROOT)))
        )


def build_sdist(sdist_directory: str, config_settings: Settings = None) -> str:
    version, _abi = versions()
    base = f"{NAME}-{version}"
    name = f"{base}.tar.gz"
    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel in _sdist_files():
            tar.add(str(ROOT / rel), arcname=f"{base}/{rel}", recursive=False)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = metadata(version).encode()
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return name
