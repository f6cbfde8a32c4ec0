"""Store options: every bad value raises, naming the field; layouts by preset, JSON, file and
Layout; the store's layout sizes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict

import pytest

import cachepawl
from cachepawl import Kind, _lib
from cachepawl.errors import check
from cachepawl.options import Options
from conftest import BASE_OPTIONS, KV_BYTES, STATE_BYTES, TINY_LAYOUT_JSON


def opts(**overrides: Any) -> Dict[str, Any]:
    o = dict(BASE_OPTIONS)
    o.update(overrides)
    return o


@pytest.mark.parametrize(
    "field, value, exc",
    [
        ("host_bytes", 0, cachepawl.InvalidArgument),
        ("host_bytes", 4097, cachepawl.InvalidArgument),
        ("host_bytes", -1, cachepawl.InvalidArgument),
        ("host_bytes", 2**64, cachepawl.InvalidArgument),
        ("host_bytes", "1G", TypeError),
        ("host_bytes", 1.5, TypeError),
        ("host_bytes", True, TypeError),
        ("host_free_target_bytes", -1, cachepawl.InvalidArgument),
        ("host_free_target_bytes", 1 << 40, cachepawl.InvalidArgument),  # > host_bytes / 2
        ("save_chunk_entries", 0, cachepawl.InvalidArgument),
        ("save_chunk_entries", 2**32, cachepawl.InvalidArgument),
        ("max_prompt_tokens", 0, cachepawl.InvalidArgument),
        ("max_prompt_tokens", 3, cachepawl.InvalidArgument),  # < one page of 4 tokens
        ("max_prompt_tokens", -1, cachepawl.InvalidArgument),
        ("host_space_wait_ms", 86_400_001, cachepawl.InvalidArgument),
        ("host_pinning_wait_ms", 2**32, cachepawl.InvalidArgument),
        ("stream_wait_ms", -1, cachepawl.InvalidArgument),
        ("remote_reader_threads", 0, cachepawl.InvalidArgument),
        ("remote_reader_threads", 65, cachepawl.InvalidArgument),
        ("disk_bytes", -4096, cachepawl.InvalidArgument),
        ("disk_queue_depth", 0, cachepawl.InvalidArgument),
        ("disk_queue_depth", 4097, cachepawl.InvalidArgument),
        ("disk_queue_depth", 2**32 + 1, cachepawl.InvalidArgument),  # would wrap to 1 in C
        ("write_policy", "sideways", cachepawl.InvalidArgument),
        ("write_policy", 1, cachepawl.InvalidArgument),
        ("eviction_policy", "fifo", cachepawl.InvalidArgument),
        ("eviction_policy", 0, cachepawl.InvalidArgument),
        ("selective_min_hits", 0, cachepawl.InvalidArgument),
        ("cuda_device", -2, cachepawl.InvalidArgument),
        ("cuda_device", 2**31, cachepawl.InvalidArgument),
        ("staging_bytes", 1024, cachepawl.InvalidArgument),
        ("completion_spin_us", 1000001, cachepawl.InvalidArgument),
        ("wait_spin_us", 2**32, cachepawl.InvalidArgument),
        ("wait_spin_us", -1, cachepawl.InvalidArgument),
        ("inline_dispatch", "yes", TypeError),
        ("device_pool_bytes", -1, cachepawl.InvalidArgument),
        ("track_interval_pages", -1, cachepawl.InvalidArgument),
        ("load_stream_priority", 2**31, cachepawl.InvalidArgument),
        ("write_stream_priority", -(2**31) - 1, cachepawl.InvalidArgument),
        ("write_stream_priority", 5000, cachepawl.InvalidArgument),  # int32, out of [-1000, 1000]
        ("load_stream_priority", -1001, cachepawl.InvalidArgument),
        ("wipe_on_layout_mismatch", "yes", TypeError),
        ("disk_dir", 3, TypeError),
        ("disk_dir", "a\0b", cachepawl.InvalidArgument),
    ],
)
def test_bad_option_names_field(field: str, value: Any, exc: type) -> None:
    with pytest.raises(exc, match=field):
        cachepawl.Store(**opts(**{field: value}))
    with pytest.raises(exc, match=field):
        cachepawl.validate_options(**opts(**{field: value}))


def test_the_first_bad_keyword_is_reported() -> None:
    """Keywords are applied in the order of the signature: of two bad values, the first one's
    error is raised, whichever kind of setter takes it."""
    with pytest.raises(TypeError, match="disk_data_paths"):
        cachepawl.validate_options(**opts(disk_data_paths="/x", remote_seeds=123))
    with pytest.raises(cachepawl.InvalidArgument, match="host_bytes"):
        cachepawl.validate_options(**opts(host_bytes=-1, write_stream_priority=5000))
    with pytest.raises(TypeError, match="remote_user"):
        cachepawl.validate_options(**opts(remote_user=1, remote_key_prefix="bad prefix!"))


def test_bad_data_paths(tmp_path: Path) -> None:
    with pytest.raises(cachepawl.InvalidArgument, match=r"disk_data_paths\[1\]"):
        cachepawl.Store(**opts(disk_data_paths=[str(tmp_path / "a"), ""]))
    with pytest.raises(TypeError, match="disk_data_paths"):
        cachepawl.Store(**opts(disk_data_paths=str(tmp_path / "a")))
    # Data paths without a disk budget: the combination is checked at open.
    with pytest.raises(cachepawl.InvalidArgument, match="disk_bytes"):
        cachepawl.Store(**opts(disk_data_paths=[str(tmp_path / "a")]))


def test_combination_checked_at_open() -> None:
    with pytest.raises(cachepawl.InvalidArgument, match="disk_dir"):
        cachepawl.Store(**opts(disk_bytes=16 << 20))
    with pytest.raises(cachepawl.InvalidArgument, match="disk_dir"):
        cachepawl.validate_options(**opts(disk_bytes=16 << 20))
    cachepawl.validate_options(**opts())


def test_unknown_keyword() -> None:
    with pytest.raises(TypeError, match="host_byte"):
        cachepawl.Store(**opts(host_byte=1 << 20))


def test_layout_choices(tmp_path: Path) -> None:
    base = {k: v for k, v in BASE_OPTIONS.items() if k != "layout_json"}
    with pytest.raises(cachepawl.InvalidArgument, match="layout: none given"):
        cachepawl.Store(**base)
    with pytest.raises(cachepawl.InvalidArgument, match="layout and layout_json"):
        cachepawl.Store("jamba-v0.1", layout_json=TINY_LAYOUT_JSON, **base)
    with pytest.raises(cachepawl.NotFound, match="no-such-model"):
        cachepawl.Store("no-such-model", **base)
    with pytest.raises(cachepawl.InvalidArgument, match="page_size_tokens"):
        cachepawl.Store("jamba-v0.1", page_size_tokens=0, **base)
    with pytest.raises(cachepawl.InvalidArgument, match="page_size_tokens"):
        cachepawl.Store(layout_json=TINY_LAYOUT_JSON, page_size_tokens=16, **base)
    with pytest.raises(cachepawl.InvalidArgument, match="line|column|num_layers"):
        cachepawl.Store(layout_json='{"model": ', **base)
    with pytest.raises(cachepawl.InvalidArgument):
        cachepawl.Store(layout_json="", **base)
    with pytest.raises(cachepawl.NotFound, match="layout file"):
        cachepawl.Store(layout_file=tmp_path / "missing.json", **base)
    with pytest.raises(TypeError, match="layout"):
        cachepawl.Store(42, **base)

    f = tmp_path / "tiny.json"
    f.write_text(TINY_LAYOUT_JSON)
    tiny = cachepawl.Layout.from_json(TINY_LAYOUT_JSON)
    for kw in (
        {"layout_file": f},
        {"layout_file": str(f)},
        {"layout": tiny},
        {"layout_json": TINY_LAYOUT_JSON.encode()},
    ):
        with cachepawl.Store(**base, **kw) as s:
            assert s.layout == tiny
    big = dict(base, host_bytes=64 << 20, device_pool_bytes=0)
    with cachepawl.Store("llama-3.1-8b", page_size_tokens=32, **big) as s:
        assert s.page_size_tokens == 32 and s.layout.num_ssm_layers == 0


def test_write_policies(make_store: Callable[..., cachepawl.Store], tmp_path: Path) -> None:
    for i, policy in enumerate(["through", "selective", "back", "write_back", "WRITE-THROUGH"]):
        make_store(
            disk_dir=str(tmp_path / str(i)),
            disk_bytes=16 << 20,
            write_policy=policy,
            selective_min_hits=3,
            disk_queue_depth=8,
            wipe_on_layout_mismatch=False,
            staging_bytes=1 << 20,
            load_stream_priority=0,
            write_stream_priority=-1,
            track_interval_pages=2,
        )


def test_eviction_policies(make_store: Callable[..., cachepawl.Store]) -> None:
    for policy in ("lru", "hybrid", "LRU"):
        cachepawl.validate_options(**opts(eviction_policy=policy))
        assert make_store(eviction_policy=policy).layout.num_ssm_layers > 0
    with pytest.raises(cachepawl.InvalidArgument) as e:
        cachepawl.validate_options(**opts(eviction_policy="mru"))
    assert str(e.value) == "eviction_policy: 'mru' (expected 'lru' or 'hybrid')"
    # A number the keyword refuses reaches the C setter directly: it names field and value.
    o = Options(**opts())
    for bad in (2, -1):
        with pytest.raises(cachepawl.InvalidArgument, match=f"eviction_policy: {bad} "):
            check(_lib.lib.cachepawl_options_set_eviction_policy(o._h, bad))


def test_incompatible_disk_layout(
    make_store: Callable[..., cachepawl.Store], disk_options: Dict[str, Any]
) -> None:
    make_store(**disk_options).close()
    other = {k: v for k, v in BASE_OPTIONS.items() if k != "layout_json"}
    with pytest.raises(cachepawl.Incompatible):
        cachepawl.Store("llama-3.1-8b", page_size_tokens=4, **other, **disk_options)
    s = cachepawl.Store(
        "llama-3.1-8b", page_size_tokens=4, wipe_on_layout_mismatch=True, **other, **disk_options
    )
    s.close()


def test_layout_api() -> None:
    names = cachepawl.preset_names()
    assert "jamba-v0.1" in names and names == sorted(names)
    tiny = cachepawl.Layout.from_json(TINY_LAYOUT_JSON)
    assert tiny.page_size_tokens == 4 and tiny.num_layers == 4
    assert tiny.record_bytes(Kind.KV) == tiny.kv_page_bytes == KV_BYTES
    assert tiny.record_bytes("state") == tiny.state_bytes == STATE_BYTES
    assert (tiny.num_attention_layers, tiny.num_ssm_layers) == (2, 2)
    assert [tiny.layer_index(Kind.KV, i) for i in range(2)] == [0, 2]
    assert [tiny.layer_index("state", i) for i in range(2)] == [1, 3]
    assert tiny.k_bytes_per_page(1) == 4 * 2 * 16 * 2
    assert tiny.conv_state_bytes(0) == 48 and tiny.ssm_state_bytes(1) == 256
    assert len(tiny.fingerprint) == 32
    again = cachepawl.Layout.from_json(tiny.to_json())
    assert again == tiny and hash(again) == hash(tiny)
    assert tiny.as_dict()["ssm_layers"][0]["ssm_shape"] == [2, 4, 8]
    assert cachepawl.Layout.from_preset("jamba-v0.1", 16) != tiny
    with pytest.raises(cachepawl.InvalidArgument, match="i: 2"):
        tiny.k_bytes_per_page(2)
    with pytest.raises(cachepawl.InvalidArgument, match="i: -1"):
        tiny.conv_state_bytes(-1)
    with pytest.raises(cachepawl.InvalidArgument, match="kind"):
        tiny.record_bytes("pages")
    with pytest.raises(cachepawl.InvalidArgument, match="kind: 7"):
        tiny.record_bytes(7)
    with pytest.raises(cachepawl.NotFound, match="nope"):
        cachepawl.Layout.from_preset("nope")
    with pytest.raises(cachepawl.InvalidArgument, match="page_size_tokens"):
        cachepawl.Layout.from_preset("jamba-v0.1", 0)
    with pytest.raises(cachepawl.InvalidArgument, match="num_kv_heads"):
        cachepawl.Layout.from_json(
            TINY_LAYOUT_JSON.replace('"num_kv_heads": 2', '"num_kv_heads": 0', 1)
        )
