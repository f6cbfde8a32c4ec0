"""A pure SSM layout (no attention layers, as Mamba-2) through the Python package: an engine's
state tensors registered with no KV (``kv`` None or empty, or ``state_blocks``), states saved
and loaded with no device pages, prompts that branch sharing the state before the branch, a
state at another depth refused, and a reopened store finding the states on disk. Every loaded
byte is compared with what was saved, in slots poisoned first."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import cachepawl
from cachepawl import DevicePool, buffer_address
from cachepawl.torch_pool import TensorView
from conftest import PAGE, record, tokens
from test_pool import FakeTensor

SSM_LAYOUT_JSON = """{"model": "test/tiny-ssm", "num_layers": 2, "page_size_tokens": 4,
 "ssm_layers": [
  {"layer_index": 0, "block": "mamba2", "conv_shape": [8, 3], "conv_dtype": "bf16",
   "ssm_shape": [2, 4, 8], "ssm_dtype": "fp32"},
  {"layer_index": 1, "block": "mamba2", "conv_shape": [8, 3], "conv_dtype": "bf16",
   "ssm_shape": [2, 4, 8], "ssm_dtype": "fp32"}]}
"""
CONV, SSM = 8 * 3 * 2, 2 * 4 * 8 * 4  # bytes of one slot's conv and SSM state per layer
STATE = 2 * (CONV + SSM)
SLOTS = 4


class States:
    """An engine's state tensors in host buffers: per layer [SLOTS, 8, 3] bf16 and
    [SLOTS, 2, 4, 8] fp32, or one [SLOTS, STATE] block."""

    def __init__(self, block: bool = False) -> None:
        self.block = bytearray(SLOTS * STATE) if block else None
        self.layers = [(bytearray(SLOTS * CONV), bytearray(SLOTS * SSM)) for _ in range(2)]

    def tensors(self) -> Dict[str, Any]:
        def view(buf: bytearray, shape: Tuple[int, ...], itemsize: int, dtype: str) -> Any:
            strides, n = [], 1
            for d in reversed(shape):
                strides.insert(0, n)
                n *= d
            return FakeTensor(
                TensorView("", buffer_address(buf), shape, tuple(strides), itemsize, dtype, -1, "")
            )

        if self.block is not None:
            return dict(state_blocks=view(self.block, (SLOTS, STATE), 1, "uint8"))
        return dict(
            ssm=[
                (view(c, (SLOTS, 8, 3), 2, "bfloat16"), view(s, (SLOTS, 2, 4, 8), 4, "float32"))
                for c, s in self.layers
            ]
        )

    def _parts(self, slot: int) -> List[Tuple[bytearray, int, int]]:
        if self.block is not None:
            return [(self.block, slot * STATE, STATE)]
        return [(c, slot * CONV, CONV) for c, _ in self.layers] + [
            (s, slot * SSM, SSM) for _, s in self.layers
        ]

    def write(self, slot: int, data: bytes) -> None:
        at = 0
        for buf, off, n in self._parts(slot):
            buf[off : off + n] = data[at : at + n]
            at += n

    def read(self, slot: int) -> bytes:
        return b"".join(bytes(buf[off : off + n]) for buf, off, n in self._parts(slot))


def open_store(tmp_path: Path, engine: States, **register: Any) -> cachepawl.Store:
    store = cachepawl.Store(
        layout_json=SSM_LAYOUT_JSON,
        host_bytes=1 << 20,
        cuda_device=-1,
        disk_dir=str(tmp_path / "disk"),
        disk_bytes=16 << 20,
    )
    store.register_tensors(**engine.tensors(), **register)
    return store


def save_state(
    store: cachepawl.Store, engine: States, toks: List[int], pages: int, seed: int
) -> bytes:
    data = record(STATE, seed)
    engine.write(0, data)
    store.save(toks, state_slot=0, state_depth_tokens=pages * PAGE).wait(timeout=30)
    return data


def load_state(store: cachepawl.Store, engine: States, match: cachepawl.Match) -> bytes:
    engine.write(3, b"\xee" * STATE)
    with store.lock(match) as lock:
        assert lock.has_state
        store.load(match, state_slot=3).wait(timeout=30)
    return engine.read(3)


@pytest.mark.parametrize("kv", [None, []])
def test_states_branch_load_and_survive_a_reopen(tmp_path: Path, kv: Any) -> None:
    engine = States()
    a = tokens(4 * PAGE)
    b = a[: 3 * PAGE] + tokens(PAGE, first=9000)  # shares 3 pages with a, then diverges
    with open_store(tmp_path, engine, kv=kv) as store:
        assert store.layout.num_layers_of_kind("kv") == 0
        at3 = save_state(store, engine, a, 3, seed=3)
        a4 = save_state(store, engine, a, 4, seed=4)
        m = store.lookup(b)
        assert (m.reusable_pages, m.kv_only_pages) == (3, 3)
        assert m.page_tiers == [] and m.state_tier == cachepawl.Tier.HOST
        assert load_state(store, engine, m) == at3
        b4 = save_state(store, engine, b, 4, seed=5)
        for toks, want in ((a, a4), (b, b4), (b[: 3 * PAGE], at3)):
            m = store.lookup(toks)
            assert m.reusable_pages == len(toks) // PAGE
            assert load_state(store, engine, m) == want
        # Another namespace, the same tokens: nothing.
        assert store.lookup(a, namespace="other").kv_only_pages == 0
    engine2 = States()
    with open_store(tmp_path, engine2, kv=kv) as store:
        for toks, want in ((a, a4), (b, b4), (b[: 3 * PAGE], at3)):
            m = store.lookup(toks)
            assert m.state_tier == cachepawl.Tier.DISK
            assert load_state(store, engine2, m) == want


def test_state_blocks_form(tmp_path: Path) -> None:
    engine = States(block=True)
    toks = tokens(2 * PAGE)
    with open_store(tmp_path, engine) as store:
        saved = save_state(store, engine, toks, 2, seed=11)
        assert load_state(store, engine, store.lookup(toks)) == saved


def test_kv_arguments_and_other_depths_are_refused(tmp_path: Path) -> None:
    engine = States()
    toks = tokens(3 * PAGE)
    with open_store(tmp_path, engine) as store:
        save_state(store, engine, toks, 3, seed=1)
        m = store.lookup(toks)
        with pytest.raises(cachepawl.InvalidArgument, match=r"first_page: 2 .* depth 3 pages"):
            store.load(m, state_slot=3, first_page=2)
        with pytest.raises(cachepawl.InvalidArgument, match="no attention layers"):
            store.load(m, [0], 3)
        with pytest.raises(cachepawl.InvalidArgument, match="device_state_slot: none"):
            store.load(m)
        with pytest.raises(cachepawl.InvalidArgument, match=r"SaveRequest.device_pages: 2 pages"):
            store.save(toks, [0, 1], state_slot=0, state_depth_tokens=3 * PAGE)
        with pytest.raises(cachepawl.InvalidArgument, match="reusable_pages 0"):
            store.load(store.lookup(tokens(3 * PAGE, first=5000)), state_slot=3)
    # KV tensors or KV pages for a layout without attention layers.
    store = cachepawl.Store(layout_json=SSM_LAYOUT_JSON, host_bytes=1 << 20, cuda_device=-1)
    with store:
        with pytest.raises(cachepawl.InvalidArgument, match=r"kv: 1 entries .* 0 attention"):
            store.register_tensors(kv=[engine.tensors()["ssm"][0]], **engine.tensors())
        pool = DevicePool(8, SLOTS, device=-1)
        for s, (conv, ssm) in enumerate(engine.layers):
            pool.set_ssm_layer(s, buffer_address(conv), 0, buffer_address(ssm), 0)
        with pytest.raises(cachepawl.InvalidArgument, match="num_pages: 8"):
            store.register_device_pool(pool)


def test_store_owned_pool_has_state_slots_only() -> None:
    with cachepawl.Store(
        layout_json=SSM_LAYOUT_JSON, host_bytes=1 << 20, cuda_device=-1, device_pool_bytes=1 << 16
    ) as store:
        with pytest.raises(cachepawl.InvalidArgument, match="kind: kv .* no attention layers"):
            store.allocate_device_slot("kv")
        slot = store.allocate_device_slot("state")
        data = record(STATE, 21)
        store.write_device_record("state", slot, data)
        toks = tokens(2 * PAGE, first=77)
        store.save(toks, state_slot=slot, state_depth_tokens=2 * PAGE).wait(timeout=30)
        m = store.lookup(toks)
        dst = store.allocate_device_slot("state")
        store.write_device_record("state", dst, bytes(STATE))
        store.load(m, state_slot=dst).wait(timeout=30)
        assert store.read_device_record("state", dst) == data
