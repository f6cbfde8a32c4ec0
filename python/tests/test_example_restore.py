"""examples/hf_hybrid_restore.py (the restore check, run on a GPU machine with transformers):
its argument errors need neither torch nor transformers, and every family it runs is one the
library's config converter maps. The check itself is recorded in docs/VALIDATION.md."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import cachepawl

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "hf_hybrid_restore.py"


def test_unknown_family_is_a_usage_error_naming_it() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--families", "mamba2,no-such-family"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--families: no-such-family" in proc.stderr


def test_every_family_of_the_check_is_mapped_by_the_converter() -> None:
    spec = importlib.util.spec_from_file_location("hf_hybrid_restore", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no torch at module level
    mapped = set(cachepawl.hf_model_types())
    assert set(module.FAMILIES) <= mapped, set(module.FAMILIES) - mapped
    assert "mamba2" in module.FAMILIES and "gemma3_text" in module.FAMILIES
