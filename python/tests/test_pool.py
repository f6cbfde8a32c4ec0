"""Engine-owned device pools in CPU mode (host buffers stand in for the engine's tensors):
per-layer K/V, interleaved and block-contiguous forms through DevicePool and through
torch_pool's checks (TensorView over the same buffers), with every byte compared after a save
and a load; and the errors of each form."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import pytest

import cachepawl
from cachepawl import DevicePool, buffer_address
from cachepawl.torch_pool import TensorView, describe
from conftest import BASE_OPTIONS, KV_BYTES, PAGE, STATE_BYTES, record, tokens

K = 4 * 2 * 16 * 2  # one page of one layer's K: [page 4, heads 2, dim 16] bf16
CONV, SSM = 8 * 3 * 2, 2 * 4 * 8 * 4
PAGES, SLOTS = 8, 4


class Engine:
    """An engine's cache memory in host buffers, one form of the pool."""

    def __init__(self, form: str) -> None:
        self.form = form
        self.kv: List[List[bytearray]] = []  # per layer: [K, V], [interleaved] or [block]
        if form == "separate":
            self.kv = [[bytearray(PAGES * K), bytearray(PAGES * K)] for _ in range(2)]
        elif form == "interleaved":
            self.kv = [[bytearray(PAGES * 2 * K)] for _ in range(2)]
        self.block = bytearray(PAGES * KV_BYTES)
        self.state_block = bytearray(SLOTS * STATE_BYTES)
        self.ssm = [[bytearray(SLOTS * CONV), bytearray(SLOTS * SSM)] for _ in range(2)]

    def buffers(self) -> List[bytearray]:
        return [b for layer in self.kv + self.ssm for b in layer] + [self.block, self.state_block]

    def pool(self) -> DevicePool:
        p = DevicePool(PAGES, SLOTS, device=-1)
        if self.form == "block":
            p.set_block_contiguous(
                buffer_address(self.block), 0, buffer_address(self.state_block), 0
            )
        else:
            for a, bufs in enumerate(self.kv):
                if self.form == "separate":
                    p.set_kv_layer(a, buffer_address(bufs[0]), K, buffer_address(bufs[1]), 0)
                else:
                    p.set_kv_layer_interleaved(a, buffer_address(bufs[0]), 0)
            for s, (conv, ssm) in enumerate(self.ssm):
                p.set_ssm_layer(s, buffer_address(conv), CONV, buffer_address(ssm), 0)
        p.owners.extend(self.buffers())
        return p

    def views(self) -> Dict[str, Any]:
        """The same memory as TensorViews (what torch_pool reads from tensors)."""

        def view(
            name: str, buf: bytearray, shape: Tuple[int, ...], itemsize: int, dtype: str
        ) -> TensorView:
            strides, n = [], 1
            for d in reversed(shape):
                strides.insert(0, n)
                n *= d
            return TensorView(
                name, buffer_address(buf), shape, tuple(strides), itemsize, dtype, -1, "cpu"
            )

        if self.form == "block":
            return dict(
                kv_blocks=view("", self.block, (PAGES, KV_BYTES), 1, "uint8"),
                state_blocks=view("", self.state_block, (SLOTS, STATE_BYTES), 1, "uint8"),
            )
        if self.form == "separate":
            kv: List[Any] = [
                tuple(view("", b, (PAGES, 4, 2, 16), 2, "bfloat16") for b in layer)
                for layer in self.kv
            ]
        else:
            kv = [view("", layer[0], (PAGES, 2, 4, 2, 16), 2, "bfloat16") for layer in self.kv]
        ssm = [
            (view("", c, (SLOTS, 8, 3), 2, "bfloat16"), view("", s, (SLOTS, 2, 4, 8), 4, "float32"))
            for c, s in self.ssm
        ]
        return dict(kv=kv, ssm=ssm)

    def page(self, p: int) -> bytes:
        """Page p's bytes in every layer (whatever the form)."""
        if self.form == "block":
            return bytes(self.block[p * KV_BYTES : (p + 1) * KV_BYTES])
        if self.form == "separate":
            return b"".join(bytes(b[p * K : (p + 1) * K]) for layer in self.kv for b in layer)
        return b"".join(bytes(layer[0][p * 2 * K : (p + 1) * 2 * K]) for layer in self.kv)

    def state(self, s: int) -> bytes:
        if self.form == "block":
            return bytes(self.state_block[s * STATE_BYTES : (s + 1) * STATE_BYTES])
        return b"".join(
            bytes(c[s * CONV : (s + 1) * CONV]) + bytes(m[s * SSM : (s + 1) * SSM])
            for c, m in self.ssm
        )


def engine_store(make_store: Callable[..., cachepawl.Store]) -> cachepawl.Store:
    return make_store(device_pool_bytes=0)


def round_trip(store: cachepawl.Store, engine: Engine) -> None:
    for i, buf in enumerate(engine.buffers()):  # the engine's computed pages and states
        buf[:] = record(len(buf), 100 + i)
    toks = tokens(3 * PAGE, first=321)
    store.save(toks, [0, 1, 2], state_slot=1, state_depth_tokens=3 * PAGE).wait(timeout=30)
    m = store.lookup(toks)
    assert m.reusable_pages == 3
    before = [engine.page(p) for p in range(3)], engine.state(1)
    assert all(engine.page(p) != before[0][0] for p in (5, 6, 7))
    with store.lock(m):
        store.load(m, [5, 6, 7], 3).wait(timeout=30)
    assert [engine.page(p) for p in (5, 6, 7)] == before[0]
    assert engine.state(3) == before[1]


@pytest.mark.parametrize("form", ["separate", "interleaved", "block"])
def test_device_pool_round_trip(make_store: Callable[..., cachepawl.Store], form: str) -> None:
    store = engine_store(make_store)
    engine = Engine(form)
    store.register_device_pool(engine.pool())
    round_trip(store, engine)
    with pytest.raises(cachepawl.FailedPrecondition, match="already"):
        store.register_device_pool(engine.pool())


@pytest.mark.parametrize("form", ["separate", "interleaved", "block"])
def test_tensor_views_round_trip(make_store: Callable[..., cachepawl.Store], form: str) -> None:
    store = engine_store(make_store)
    engine = Engine(form)
    store.register_tensors(**engine.views())
    round_trip(store, engine)


def test_unregistered_pool_is_replaced_and_saved_prefixes_stay(
    make_store: Callable[..., cachepawl.Store],
) -> None:
    store = engine_store(make_store)
    with pytest.raises(cachepawl.FailedPrecondition, match="no device pool is registered"):
        store.unregister_device_pool()
    first = Engine("separate")
    store.register_device_pool(first.pool())
    round_trip(store, first)
    saved = [first.page(p) for p in range(3)], first.state(1)
    store.unregister_device_pool()
    toks = tokens(3 * PAGE, first=321)
    m = store.lookup(toks)
    assert m.reusable_pages == 3  # the host tier keeps it
    with pytest.raises(cachepawl.FailedPrecondition, match="no device pool"):
        store.load(m, [5, 6, 7], 3)
    second = Engine("block")  # a KV cache of another form, as after a resize
    store.register_device_pool(second.pool())
    store.load(m, [5, 6, 7], 3).wait(timeout=30)
    assert [second.page(p) for p in (5, 6, 7)] == saved[0]
    assert second.state(3) == saved[1]


def test_store_owned_pool_refuses_registration(make_store: Callable[..., cachepawl.Store]) -> None:
    store = make_store()
    with pytest.raises(cachepawl.FailedPrecondition, match="already"):
        store.register_device_pool(Engine("block").pool())


def test_device_pool_errors(make_store: Callable[..., cachepawl.Store]) -> None:
    store = engine_store(make_store)
    buf = bytearray(PAGES * 2 * K)
    addr = buffer_address(buf)
    with pytest.raises(cachepawl.InvalidArgument, match="device: -2"):
        DevicePool(PAGES, device=-2)
    with pytest.raises(cachepawl.InvalidArgument, match="num_pages: -1"):
        DevicePool(-1)
    with pytest.raises(cachepawl.InvalidArgument, match="k_base: null"):
        DevicePool(PAGES).set_kv_layer(0, 0, K, addr, K)
    with pytest.raises(cachepawl.InvalidArgument, match="k_base: -5"):
        DevicePool(PAGES).set_kv_layer(0, -5, K, addr, K)
    with pytest.raises(cachepawl.InvalidArgument, match="i: 65536"):
        DevicePool(PAGES).set_kv_layer_interleaved(65536, addr, 0)
    with pytest.raises(cachepawl.FailedPrecondition, match="per-layer"):
        DevicePool(PAGES).set_kv_layer_interleaved(0, addr, 0).set_block_contiguous(addr)
    with pytest.raises(cachepawl.FailedPrecondition, match="block-contiguous"):
        DevicePool(PAGES).set_block_contiguous(addr).set_kv_layer_interleaved(0, addr, 0)
    with pytest.raises(cachepawl.InvalidArgument, match="kv_base"):
        DevicePool(PAGES).set_block_contiguous(0)
    with pytest.raises(cachepawl.InvalidArgument, match="layer 1 not set"):
        store.register_device_pool(DevicePool(PAGES, SLOTS).set_kv_layer_interleaved(0, addr, 0))
    overlapping = Engine("interleaved").pool()
    overlapping.set_kv_layer_interleaved(1, addr, K)  # K bytes apart: pages overlap
    with pytest.raises(cachepawl.InvalidArgument, match=r"attention\[1\].k overlaps"):
        store.register_device_pool(overlapping)
    with pytest.raises(TypeError, match="DevicePool"):
        store.register_device_pool("pool")
    with pytest.raises(cachepawl.InvalidArgument, match="read-only|writable"):
        buffer_address(b"abc")


def view(
    name: str = "t",
    shape: Tuple[int, ...] = (PAGES, 4, 2, 16),
    strides: Any = None,
    itemsize: int = 2,
    dtype: str = "bfloat16",
    device: int = -1,
    ptr: int = 4096,
) -> TensorView:
    if strides is None:
        strides, n = [], 1
        for d in reversed(shape):
            strides.insert(0, n)
            n *= d
    return TensorView(
        name,
        ptr,
        tuple(shape),
        tuple(strides),
        itemsize,
        dtype,
        device,
        "cpu" if device < 0 else f"cuda:{device}",
    )


def test_tensor_checks_name_the_tensor() -> None:
    layout = cachepawl.Layout.from_json(BASE_OPTIONS["layout_json"])
    ok_kv = [(view(), view()), (view(), view())]
    ok_ssm = [
        (view(shape=(SLOTS, 8, 3)), view(shape=(SLOTS, 2, 4, 8), itemsize=4, dtype="float32"))
    ] * 2
    pool = describe(layout, kv=ok_kv, ssm=ok_ssm)
    assert (pool.num_pages, pool.num_state_slots, pool.device) == (PAGES, SLOTS, -1)
    assert describe(layout, kv=ok_kv, ssm=ok_ssm, num_pages=3).num_pages == 3
    cases = [
        (
            dict(kv=[(view(dtype="float16"), view())] + ok_kv[1:], ssm=ok_ssm),
            r"kv\[0\]\[0\]: dtype float16 \(expected bfloat16\)",
        ),
        (
            dict(kv=[(view(), view(shape=(PAGES, 4, 2, 8)))] + ok_kv[1:], ssm=ok_ssm),
            r"kv\[0\]\[1\]: 128 bytes per page .* needs 256 "
            r"\(V \[page_size 4, kv_heads 2, head_dim 16\] of bf16\)",
        ),
        (
            dict(kv=[(view(), view(strides=(512, 64, 16, 1)))] + ok_kv[1:], ssm=ok_ssm),
            r"kv\[0\]\[1\]: strides .* dim 1 has stride 64, expected 32",
        ),
        (
            dict(kv=[(view(strides=(0, 32, 16, 1)), view())] + ok_kv[1:], ssm=ok_ssm),
            r"kv\[0\]\[0\]: dim 0 stride 0 .* would overlap",
        ),
        (
            dict(kv=[(view(), view(device=0))] + ok_kv[1:], ssm=ok_ssm),
            r"kv\[0\]\[1\]: device cuda:0 \(expected the device of kv\[0\]\[0\] \(cpu\)\)",
        ),
        (
            dict(kv=[(view(), view(shape=(PAGES - 1, 4, 2, 16)))] + ok_kv[1:], ssm=ok_ssm),
            r"kv\[0\]\[1\]: 7 pages in dim 0 \(expected 8, like kv\[0\]\[0\]\)",
        ),
        (
            dict(kv=ok_kv[:1], ssm=ok_ssm),
            r"kv: 1 entries \(layout 'test/tiny-hybrid' has 2 attention layers\)",
        ),
        (dict(kv=ok_kv, ssm=None), r"ssm: 0 entries"),
        (dict(kv=[(view(),)] + ok_kv[1:], ssm=ok_ssm), r"kv\[0\]: 1 tensors"),
        (dict(kv=ok_kv, ssm=[view()] * 2), r"ssm\[0\]: expected a \(conv, ssm\) pair"),
        (
            dict(
                kv=ok_kv,
                ssm=[(ok_ssm[0][0], view(shape=(SLOTS, 2, 4, 8), itemsize=2, dtype="bfloat16"))]
                * 2,
            ),
            r"ssm\[0\]\[1\]: dtype bfloat16 \(expected float32\)",
        ),
        (
            dict(kv=[view(), view()], ssm=ok_ssm),
            r"kv\[0\]: 256 bytes per page .* needs 512 \(K and V interleaved",
        ),
        (dict(kv=ok_kv, ssm=ok_ssm, kv_blocks=view()), r"exclusive"),
        (
            dict(kv_blocks=view(shape=(PAGES, KV_BYTES), itemsize=1, dtype="uint8")),
            r"state_blocks: missing",
        ),
        (dict(kv=ok_kv, ssm=ok_ssm, num_pages=PAGES + 1), r"num_pages: 9 \(the tensors hold 8"),
        (
            dict(kv=ok_kv, ssm=[(view(shape=(SLOTS, 8, 3), ptr=0), ok_ssm[0][1])] * 2),
            r"ssm\[0\]\[0\]: data_ptr\(\) is 0",
        ),
    ]
    for kwargs, pattern in cases:
        with pytest.raises(cachepawl.InvalidArgument, match=pattern):
            describe(layout, **kwargs)
    with pytest.raises(
        TypeError, match=r"kv\[0\]\[0\]: expected a torch.Tensor, got builtins.bytearray"
    ):
        describe(layout, kv=[(bytearray(10), view())] + ok_kv[1:], ssm=ok_ssm)
    # fp8 layers also take raw bytes.
    fp8 = cachepawl.Layout.from_json(
        BASE_OPTIONS["layout_json"].replace('"dtype": "bf16"', '"dtype": "fp8_e4m3"')
    )
    byte_kv = [(view(shape=(PAGES, 128), itemsize=1, dtype="uint8"),) * 2] * 2
    assert describe(fp8, kv=byte_kv, ssm=ok_ssm).num_pages == PAGES
    with pytest.raises(cachepawl.InvalidArgument, match="dtype bfloat16"):
        describe(fp8, kv=ok_kv, ssm=ok_ssm)


class FakeDevice:
    def __init__(self, type_: str, index: Any = None) -> None:
        self.type, self.index = type_, index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


class FakeTensor:
    """What torch_pool reads of a torch.Tensor (data_ptr, shape, stride, element_size, dtype,
    device), over a host buffer: the duck-typed path runs without torch installed."""

    __module__ = "torch"  # torch_pool recognises tensors by their type's module

    def __init__(self, v: TensorView, device: FakeDevice = FakeDevice("cpu")) -> None:
        self._v, self.device = v, device
        self.shape = v.shape
        self.dtype = f"torch.{v.dtype}"

    def data_ptr(self) -> int:
        return self._v.ptr

    def stride(self) -> Tuple[int, ...]:
        return self._v.strides

    def element_size(self) -> int:
        return self._v.itemsize


def fake(views: Any) -> Any:
    if isinstance(views, TensorView):
        return FakeTensor(views)
    if isinstance(views, tuple):
        return tuple(fake(v) for v in views)
    if isinstance(views, list):
        return [fake(v) for v in views]
    return {k: fake(v) for k, v in views.items()}


@pytest.mark.parametrize("form", ["separate", "interleaved", "block"])
def test_duck_typed_tensors_round_trip(
    make_store: Callable[..., cachepawl.Store], form: str
) -> None:
    store = engine_store(make_store)
    engine = Engine(form)
    tensors = fake(engine.views())
    store.register_tensors(**tensors)
    leaves = [t for v in tensors.values() for t in (v if isinstance(v, list) else [v])]
    leaves = [x for t in leaves for x in (t if isinstance(t, tuple) else (t,))]
    assert all(any(x is o for o in store._pool_owners) for x in leaves)  # kept alive
    round_trip(store, engine)


def test_duck_typed_tensor_devices() -> None:
    layout = cachepawl.Layout.from_json(BASE_OPTIONS["layout_json"])
    engine = Engine("separate")
    t = fake(engine.views())
    k0 = t["kv"][0][0]
    on_gpu = FakeTensor(k0._v, FakeDevice("cuda", 1))
    with pytest.raises(
        cachepawl.InvalidArgument, match=r"kv\[0\]\[1\]: device cuda:1 .* kv\[0\]\[0\] \(cpu\)"
    ):
        describe(layout, kv=[(k0, on_gpu)] + t["kv"][1:], ssm=t["ssm"])
    with pytest.raises(cachepawl.InvalidArgument, match=r"kv\[0\]\[0\]: device xla:0"):
        describe(
            layout, kv=[(FakeTensor(k0._v, FakeDevice("xla", 0)), k0)] + t["kv"][1:], ssm=t["ssm"]
        )
    all_gpu = describe(
        layout,
        kv=[tuple(FakeTensor(x._v, FakeDevice("cuda")) for x in layer) for layer in t["kv"]],
        ssm=[tuple(FakeTensor(x._v, FakeDevice("cuda")) for x in layer) for layer in t["ssm"]],
    )
    assert all_gpu.device == 0  # "cuda" without an index is device 0


SHORTCONV_LAYOUT_JSON = BASE_OPTIONS["layout_json"].replace(
    '{"layer_index": 3, "block": "mamba2", "conv_shape": [8, 3], "conv_dtype": "bf16",\n'
    '   "ssm_shape": [2, 4, 8], "ssm_dtype": "fp32"}',
    '{"layer_index": 3, "block": "shortconv", "conv_shape": [8, 3], "ssm_shape": []}',
)


@pytest.mark.parametrize("shortconv_entry", ["pair", "single"])
def test_shortconv_layers_take_no_ssm_tensor(
    make_store: Callable[..., cachepawl.Store], shortconv_entry: str
) -> None:
    """A shortconv layer (LFM2) has a conv state and no SSM state: its ssm entry is
    (conv, None) or (conv,), and states still round-trip byte for byte."""
    layout = cachepawl.Layout.from_json(SHORTCONV_LAYOUT_JSON)
    assert layout.ssm_state_bytes(1) == 0 and layout.state_bytes == CONV + SSM + CONV
    store = make_store(layout=layout, layout_json=None, device_pool_bytes=0)
    kv = [[bytearray(PAGES * K), bytearray(PAGES * K)] for _ in range(2)]
    conv = [bytearray(SLOTS * CONV), bytearray(SLOTS * CONV)]
    ssm0 = bytearray(SLOTS * SSM)
    for i, buf in enumerate([b for layer in kv for b in layer] + conv + [ssm0]):
        buf[:] = record(len(buf), 700 + i)
    conv_views = [view(shape=(SLOTS, 8, 3), ptr=buffer_address(c)) for c in conv]
    shortconv = (conv_views[1], None) if shortconv_entry == "pair" else (conv_views[1],)
    store.register_tensors(
        kv=[tuple(view(ptr=buffer_address(b)) for b in layer) for layer in kv],
        ssm=[
            (
                conv_views[0],
                view(shape=(SLOTS, 2, 4, 8), itemsize=4, dtype="float32", ptr=buffer_address(ssm0)),
            ),
            shortconv,
        ],
    )
    toks = tokens(2 * PAGE, first=900)
    store.save(toks, [0, 1], state_slot=0, state_depth_tokens=2 * PAGE).wait(timeout=30)
    m = store.lookup(toks)
    assert m.reusable_pages == 2
    with store.lock(m):
        store.load(m, [2, 3], 1).wait(timeout=30)
    for layer in kv:
        for b in layer:
            assert b[2 * K : 4 * K] == b[0 : 2 * K]
    assert conv[0][CONV : 2 * CONV] == conv[0][:CONV]
    assert ssm0[SSM : 2 * SSM] == ssm0[:SSM]
    assert conv[1][CONV : 2 * CONV] == conv[1][:CONV]


def test_shortconv_entries_are_checked(make_store: Callable[..., cachepawl.Store]) -> None:
    layout = cachepawl.Layout.from_json(SHORTCONV_LAYOUT_JSON)
    kv = [(view(), view()), (view(), view())]
    conv = view(shape=(SLOTS, 8, 3))
    ssm = view(shape=(SLOTS, 2, 4, 8), itemsize=4, dtype="float32")
    with pytest.raises(
        cachepawl.InvalidArgument, match=r"ssm\[1\]\[1\]: expected None: layer 3 is shortconv"
    ):
        describe(layout, kv=kv, ssm=[(conv, ssm), (conv, ssm)])
    with pytest.raises(
        cachepawl.InvalidArgument, match=r"ssm\[1\]: expected \(conv,\) or \(conv, None\)"
    ):
        describe(layout, kv=kv, ssm=[(conv, ssm), conv])
    with pytest.raises(cachepawl.InvalidArgument, match=r"ssm\[0\]: expected a \(conv, ssm\) pair"):
        describe(layout, kv=kv, ssm=[(conv, None), (conv,)])
    with pytest.raises(cachepawl.InvalidArgument, match=r"ssm\[0\]: expected a \(conv, ssm\) pair"):
        describe(layout, kv=kv, ssm=[(conv,), (conv,)])
    # DevicePool directly: a None ssm_base is refused at registration for a layer with a state.
    store = engine_store(make_store)  # the tiny hybrid layout: two mamba2 layers
    engine = Engine("separate")
    pool = engine.pool()
    pool.set_ssm_layer(1, buffer_address(engine.ssm[1][0]), 0, None, 0)
    with pytest.raises(cachepawl.InvalidArgument, match=r"device_pool\.ssm\[1\]\.ssm_base: null"):
        store.register_device_pool(pool)
