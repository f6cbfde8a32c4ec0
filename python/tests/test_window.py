"""Sliding-window layers through the Python package (Kind.WINDOW): the record sizes of each
kind, the window in tokens and pages, the layers of each kind, the kind names and errors, and a
store-owned device pool refusing the window kind while taking whole KV pages."""

from __future__ import annotations

from typing import Any, Callable

import pytest

import cachepawl
from cachepawl import Kind
from cachepawl.layout import to_kind
from conftest import TINY_LAYOUT_JSON, fill, record

# Layer 0 full attention, layer 1 SSM, layer 2 a 10-token window (3 pages of 4 tokens).
WINDOW_LAYOUT_JSON = """{"model": "test/tiny-window", "num_layers": 3, "page_size_tokens": 4,
 "attention_layers": [
  {"layer_index": 0, "num_kv_heads": 2, "head_dim": 16, "dtype": "bf16"},
  {"layer_index": 2, "num_kv_heads": 2, "head_dim": 16, "dtype": "bf16", "sliding_window": 10}],
 "ssm_layers": [
  {"layer_index": 1, "block": "mamba2", "conv_shape": [8, 3], "conv_dtype": "bf16",
   "ssm_shape": [2, 4, 8], "ssm_dtype": "fp32"}]}
"""
LAYER_KV = 2 * 4 * 2 * 16 * 2  # K and V of one attention layer for one page: [4, 2, 16] bf16


def test_kind_names() -> None:
    assert int(Kind.WINDOW) == 2
    for name in ("window", "WINDOW", "window_kv"):
        assert to_kind(name) is Kind.WINDOW
    assert to_kind(2) is Kind.WINDOW
    with pytest.raises(cachepawl.InvalidArgument, match="'kv', 'state' or 'window'"):
        to_kind("windows")
    with pytest.raises(cachepawl.InvalidArgument, match=r"Kind.WINDOW \(2\)"):
        to_kind(3)


def test_window_layout_sizes() -> None:
    w = cachepawl.Layout.from_json(WINDOW_LAYOUT_JSON)
    assert w.kv_page_bytes == w.record_bytes(Kind.KV) == 2 * LAYER_KV
    assert w.window_kv_record_bytes == w.record_bytes("window") == LAYER_KV
    assert w.full_kv_record_bytes == LAYER_KV
    assert w.window_tokens == 10 and w.window_pages == 3
    assert w.num_attention_layers == 2 and w.num_window_layers == 1 and w.num_ssm_layers == 1
    assert w.layer_index(Kind.WINDOW, 0) == 2 and w.layer_index(Kind.KV, 1) == 2
    with pytest.raises(cachepawl.InvalidArgument, match="1 sliding-window attention layers"):
        w.layer_index(Kind.WINDOW, 1)
    with pytest.raises(cachepawl.InvalidArgument, match="kind: 3"):
        w.record_bytes(3)

    tiny = cachepawl.Layout.from_json(TINY_LAYOUT_JSON)
    assert tiny.window_kv_record_bytes == 0 and tiny.window_tokens == tiny.window_pages == 0
    assert tiny.full_kv_record_bytes == tiny.kv_page_bytes and tiny.num_window_layers == 0

    # Every attention layer windowed: no full-attention part.
    samba = cachepawl.Layout.from_preset("samba-1.3b", 16)
    assert samba.window_kv_record_bytes == samba.kv_page_bytes > 0
    assert samba.full_kv_record_bytes == 0
    assert samba.window_pages == samba.window_tokens // 16 > 0
    assert samba.num_window_layers == samba.num_attention_layers


def test_device_slots_refuse_window(make_store: Callable[..., Any]) -> None:
    s = make_store(layout_json=WINDOW_LAYOUT_JSON)
    assert s.record_bytes(Kind.WINDOW) == LAYER_KV
    for call in (
        lambda: s.allocate_device_slot(Kind.WINDOW),
        lambda: s.free_device_slot("window", 0),
        lambda: s.write_device_record(Kind.WINDOW, 0, bytes(LAYER_KV)),
        lambda: s.read_device_record(Kind.WINDOW, 0),
    ):
        with pytest.raises(cachepawl.InvalidArgument, match="kind: window"):
            call()
    # A KV slot is the whole page, the windowed layer included.
    p = s.allocate_device_slot(Kind.KV)
    data = record(2 * LAYER_KV, 5)
    s.write_device_record(Kind.KV, p, data)
    assert s.read_device_record(Kind.KV, p) == data
    s.free_device_slot(Kind.KV, p)


def test_save_lookup_load_with_a_window(make_store: Callable[..., Any]) -> None:
    """6 pages and the state at 6: the window (3 pages) is saved and loaded for pages 3..5
    only; the windowed layer's bytes of pages 0..2 stay as the engine left them."""
    s = make_store(layout_json=WINDOW_LAYOUT_JSON)
    page = 2 * LAYER_KV  # the full layer, then the windowed layer
    state_bytes = s.record_bytes(Kind.STATE)
    toks = list(range(500, 500 + 6 * 4))
    pages, slot, kv, state = fill(s, 6, seed=4, kv_bytes=page, state_bytes=state_bytes)
    s.save(toks, pages, state_slot=slot, state_depth_tokens=len(toks)).wait(timeout=30)

    m = s.lookup(toks)
    assert (m.reusable_pages, m.window_first_page) == (6, 3)
    assert m.window_tiers == [cachepawl.Tier.HOST] * 3
    assert s.lookup(toks[: 4 * 4]).window_tiers == []  # no state at 4: no hit, no window

    poison = b"\xee" * page
    dst = [s.allocate_device_slot(Kind.KV) for _ in range(6)]
    for p in dst:
        s.write_device_record(Kind.KV, p, poison)
    dst_state = s.allocate_device_slot(Kind.STATE)
    s.load(m, dst, dst_state).wait(timeout=30)
    for i, p in enumerate(dst):
        got = s.read_device_record(Kind.KV, p)
        assert got[:LAYER_KV] == kv[i][:LAYER_KV], f"full layer of page {i}"
        want_window = kv[i][LAYER_KV:] if i >= 3 else poison[LAYER_KV:]
        assert got[LAYER_KV:] == want_window, f"windowed layer of page {i}"
    assert s.read_device_record(Kind.STATE, dst_state) == state
