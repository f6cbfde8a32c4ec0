"""cachepawl.integrations: importable without any engine; an engine module without its engine
(or with another transformers than the pinned one) raises ImportError saying what is missing.
The transformers round trip itself needs transformers 5.17 and a GPU: it runs on the GPU
machine (examples/hf_cache_integration_check.py, docs/VALIDATION.md)."""

import importlib
import sys

import pytest


def test_the_package_imports_without_any_engine() -> None:
    import cachepawl.integrations as integrations

    assert "transformers" in (integrations.__doc__ or "")


def test_the_transformers_module_says_what_is_missing() -> None:
    try:
        import transformers  # noqa: F401

        have = transformers.__version__
    except ImportError:
        have = None
    if have is not None and have.startswith("5.17."):
        pytest.skip("transformers 5.17 is installed: the module imports (the GPU check runs it)")
    sys.modules.pop("cachepawl.integrations.transformers", None)
    with pytest.raises(ImportError) as e:
        importlib.import_module("cachepawl.integrations.transformers")
    assert "transformers" in str(e.value) and "5.17" in str(e.value), str(e.value)
