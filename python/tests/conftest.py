"""Shared fixtures: a tiny hybrid layout (2 attention + 2 SSM layers, 4-token pages) and CPU-mode
stores with a store-owned device pool. The package is imported from this source tree (the
tests run without installing it); CACHEPAWL_LIBRARY names the library (CTest sets it)."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cachepawl  # noqa: E402

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
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1])] + [p for p in [env.get("PYTHONPATH")] if p])
    env["CACHEPAWL_LIBRARY"] = cachepawl.library_path
    return env
