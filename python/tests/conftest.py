"""Shared fixtures: a tiny hybrid layout (2 attention + 2 SSM layers, 4-token pages) and CPU-mode
stores with a store-owned device pool. The package is imported from this source tree (the
tests run without installing it; CACHEPAWL_LIBRARY names the library, CTest sets it), or, with
CACHEPAWL_TEST_INSTALLED=1, as installed (tests/install/check_wheel.sh: the wheel's package and
the library inside it)."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

#: The folders a Python process needs on its path to import the cachepawl under test: this
#: source tree's python/, or none when testing the installed package.
PACKAGE_PATHS: List[str] = (
    []
    if os.environ.get("CACHEPAWL_TEST_INSTALLED") == "1"
    else [str(Path(__file__).resolve().parents[1])]
)
sys.path[:0] = PACKAGE_PATHS


def pythonpath(*first: str) -> str:
    """PYTHONPATH for a child Python: `first`, PACKAGE_PATHS, then the inherited one."""
    inherited = [p for p in [os.environ.get("PYTHONPATH")] if p]
    return os.pathsep.join(list(first) + PACKAGE_PATHS + inherited)

import cachepawl  # noqa: E402
from cachepawl import Kind  # noqa: E402

TINY_LAYOUT_JSON = """{"model": "test/tiny-hybrid", "num_layers": 4, "page_size_tokens": 4,
 "attention_layers": [
  {"layer_index": 0, "num_kv_heads": 2, "head_dim": 16, "dtype": "bf16"},
  {"layer_index": 2, "num_kv_heads": 2, "head_dim": 16, "dtype": "bf16"}],
 "ssm_layers": [
  {"layer_index": 1, "block": "mamba2", "conv_shape": [8, 3], "conv_dtype": "bf16",
   "ssm_shape": [2, 4, 8], "ssm_dtype": "fp32"},
  {"layer_index": 3, "block": "mamba2", "conv_shape": [8, 3], "conv_dtype": "bf16",
   "ssm_shape": [2, 4, 8], "ssm_dtype": "fp32"}]}
"""
PAGE = 4  # tokens per page of the tiny layout
KV_BYTES = 2 * 2 * (4 * 2 * 16 * 2)  # 2 layers, K and V, [4, 2, 16] bf16
STATE_BYTES = 2 * (8 * 3 * 2 + 2 * 4 * 8 * 4)  # 2 layers, conv bf16 + ssm fp32

# CPU mode always (no GPU is needed; cuda_device=-1 even where one is present).
BASE_OPTIONS: Dict[str, Any] = dict(
    layout_json=TINY_LAYOUT_JSON, host_bytes=1 << 20, cuda_device=-1, device_pool_bytes=1 << 20
)


_passed = 0


def pytest_runtest_logreport(report: Any) -> None:
    global _passed
    if report.when == "call" and report.passed:
        _passed += 1


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """Under CTest (CACHEPAWL_PYTEST_REQUIRE_PASS=1) a run in which no test passed fails:
    pytest itself exits 5 only when nothing was collected, not when everything skipped."""
    if (
        os.environ.get("CACHEPAWL_PYTEST_REQUIRE_PASS") == "1"
        and session.exitstatus == 0
        and _passed == 0
    ):
        print("\ncachepawl: no test passed (CACHEPAWL_PYTEST_REQUIRE_PASS=1)", file=sys.stderr)
        session.exitstatus = 1


def record(nbytes: int, seed: int) -> bytes:
    """Deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(nbytes)


def tokens(n: int, first: int = 1000) -> list:
    return list(range(first, first + n))


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., cachepawl.Store]]:
    """Opens CPU-mode stores with BASE_OPTIONS overridden by keywords; closes them after."""
    opened = []

    def make(**overrides: Any) -> cachepawl.Store:
        opts = dict(BASE_OPTIONS)
        opts.update(overrides)
        s = cachepawl.Store(**opts)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(make_store: Callable[..., cachepawl.Store]) -> cachepawl.Store:
    return make_store()


@pytest.fixture
def disk_options(tmp_path: Path) -> Dict[str, Any]:
    return dict(disk_dir=str(tmp_path / "disk"), disk_bytes=16 << 20, write_policy="through")


def library_env() -> Dict[str, str]:
    """The environment for a child Python that imports cachepawl from this tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath()
    env["CACHEPAWL_LIBRARY"] = cachepawl.library_path
    return env


# --- helpers: records in a store-owned pool, saved and loaded back -------------------------


def fill(
    store: cachepawl.Store,
    n_pages: int,
    seed: int,
    kv_bytes: int = KV_BYTES,
    state_bytes: int = STATE_BYTES,
) -> Tuple[List[int], int, List[bytes], bytes]:
    """Allocates n_pages KV slots and one state slot and writes random records into them (of
    the test layout's sizes unless given)."""
    pages = [store.allocate_device_slot(Kind.KV) for _ in range(n_pages)]
    kv = [record(kv_bytes, seed * 1000 + i) for i in range(n_pages)]
    for p, data in zip(pages, kv):
        store.write_device_record(Kind.KV, p, data)
    slot = store.allocate_device_slot("state")
    state = record(state_bytes, seed * 1000 + 999)
    store.write_device_record("state", slot, state)
    return pages, slot, kv, state


def save_all(
    store: cachepawl.Store, toks: List[int], namespace: str = "", seed: int = 1
) -> Tuple[List[bytes], bytes]:
    pages, slot, kv, state = fill(store, len(toks) // PAGE, seed)
    store.save(
        toks, pages, namespace=namespace, state_slot=slot, state_depth_tokens=len(toks)
    ).wait(timeout=30)
    return kv, state


def load_and_compare(
    store: cachepawl.Store, match: cachepawl.Match, kv: List[bytes], state: bytes, **load_kw: Any
) -> cachepawl.Fence:
    n = match.reusable_pages
    dst = [store.allocate_device_slot(Kind.KV) for _ in range(n)]
    dst_slot = store.allocate_device_slot(Kind.STATE)
    for p in dst:  # make sure the load writes them
        store.write_device_record(Kind.KV, p, bytes(KV_BYTES))
    store.write_device_record(Kind.STATE, dst_slot, bytes(STATE_BYTES))
    with store.lock(match) as lock:
        assert lock.pages == n and lock.has_state
        fence = store.load(match, dst, dst_slot, **load_kw)
        fence.wait(timeout=30)
    assert fence.ready and fence.error is None and fence.result() is None
    for i, p in enumerate(dst):
        assert store.read_device_record(Kind.KV, p) == kv[i], f"KV page {i}"
    assert store.read_device_record(Kind.STATE, dst_slot) == state
    return fence
