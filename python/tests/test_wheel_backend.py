"""The build backend of ``pip install .`` (python/wheel_backend/cachepawl_build.py), the parts
that need no compiler: versions that must agree, config settings checked before anything runs,
the sdist. tests/install/check_wheel.sh builds, installs and uses a real wheel (CI stage 6)."""

from __future__ import annotations

import importlib.util
import shutil
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

import cachepawl

ROOT = Path(__file__).resolve().parents[2]


def backend() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "cachepawl_build", ROOT / "python" / "wheel_backend" / "cachepawl_build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def version_sources(tmp: Path) -> Path:
    """A copy of the files the backend reads its versions from."""
    for rel in (
        "CMakeLists.txt",
        "pyproject.toml",
        "python/pyproject.toml",
        "python/cachepawl/__init__.py",
        "python/cachepawl/_lib.py",
        "capi/cachepawl.h",
    ):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp / rel)
    return tmp


def test_the_sources_agree_on_one_version() -> None:
    version, abi = backend().versions()
    assert version == cachepawl.__version__
    assert abi == cachepawl._lib.ABI_VERSION


@pytest.mark.parametrize(
    "rel, old, new, message",
    [
        ("CMakeLists.txt", "VERSION 0.", "VERSION 9.",
         "CMakeLists.txt project(cachepawl VERSION) = 9."),
        ("python/cachepawl/__init__.py", '__version__ = "', '__version__ = "7', "__version__ = 7"),
        ("pyproject.toml", 'version = "', 'version = "8', "pyproject.toml version = 8"),
        ("capi/cachepawl.h", "CACHEPAWL_ABI_VERSION 1", "CACHEPAWL_ABI_VERSION 5",
         "CACHEPAWL_ABI_VERSION = 5 but python/cachepawl/_lib.py ABI_VERSION = 1"),
    ],
)  # fmt: skip
def test_a_version_that_disagrees_is_refused_naming_it(
    tmp_path: Path, rel: str, old: str, new: str, message: str
) -> None:
    b = backend()
    root = version_sources(tmp_path)
    text = (root / rel).read_text()
    assert old in text
    (root / rel).write_text(text.replace(old, new, 1))
    b.ROOT, b.PACKAGE = root, root / "python" / "cachepawl"
    with pytest.raises(b.BuildError, match=message.replace("(", r"\(").replace(")", r"\)")):
        b.versions()
    with pytest.raises(b.BuildError):
        b.build_wheel(str(tmp_path))  # before any build
    assert not list(tmp_path.glob("*.whl"))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"tool": "maybe"}, r"config setting tool: 'maybe' \(expected on or off\)"),
        ({"jobs": "0"}, r"config setting jobs: '0' \(expected an integer >= 1\)"),
        ({"jobs": "many"}, r"config setting jobs: 'many'"),
    ],
)
def test_bad_config_settings_are_refused_before_cmake_runs(
    settings: dict, message: str
) -> None:
    b = backend()
    with pytest.raises(b.BuildError, match=message):
        b.build_native(settings)


def test_no_build_requirements() -> None:
    b = backend()
    assert b.get_requires_for_build_wheel() == [] and b.get_requires_for_build_sdist() == []


def test_the_sdist_holds_the_sources_and_its_metadata(tmp_path: Path) -> None:
    b = backend()
    name = b.build_sdist(str(tmp_path))
    version = cachepawl.__version__
    assert name == f"cachepawl-{version}.tar.gz"
    with tarfile.open(tmp_path / name) as tar:
        names = set(tar.getnames())
        base = f"cachepawl-{version}"
        for rel in ("pyproject.toml", "CMakeLists.txt", "capi/cachepawl.h",
                    "python/wheel_backend/cachepawl_build.py", "python/cachepawl/store.py",
                    "PKG-INFO"):  # fmt: skip
            assert f"{base}/{rel}" in names, rel
        assert not any("/build/" in n or "/.git/" in n for n in names)
        info = tar.extractfile(f"{base}/PKG-INFO")
        assert info is not None and f"\nVersion: {version}\n" in info.read().decode()
