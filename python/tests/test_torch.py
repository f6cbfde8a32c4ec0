"""PyTorch tensors as the engine's device pool: CPU tensors in CPU mode (every form, the checks
of dtype, shape, stride, contiguity, device and slot counts, fences' stream arguments without
CUDA), and CUDA tensors on a GPU store where one is present (the tests named ``cuda_only``: they
skip in CI, which has no GPU). Every byte is compared after a save and a load.

Without torch the module skips, except under CACHEPAWL_PYTEST_REQUIRE_TORCH=1 (CTest in a build
configured with CACHEPAWL_REQUIRE_PYTHON_TESTS=ON, so CI), where it fails: tools/setup.sh installs
Debian's python3-torch."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict

import pytest

import cachepawl
from conftest import BASE_OPTIONS, KV_BYTES, PAGE, STATE_BYTES, tokens

if os.environ.get("CACHEPAWL_PYTEST_REQUIRE_TORCH") == "1":
    try:
        import torch
    except ImportError as e:  # pragma: no cover - CI installs it
        raise ImportError(
            f"torch is missing ({e}): tools/setup.sh installs python3-torch for /usr/bin/python3"
        ) from e
else:
    torch = pytest.importorskip("torch")

PAGES, SLOTS = 8, 4


def engine_tensors(device: str) -> Dict[str, Any]:
    """vLLM-style layer tensors: KV [2, num_blocks, page, heads, dim] per attention layer, conv
    and SSM state [num_slots, ...] per SSM layer."""
    g = torch.Generator().manual_seed(7)
    kv = [
        torch.randn(2, PAGES, 4, 2, 16, generator=g).to(torch.bfloat16).to(device) for _ in range(2)
    ]
    conv = [torch.randn(SLOTS, 8, 3, generator=g).to(torch.bfloat16).to(device) for _ in range(2)]
    ssm = [torch.randn(SLOTS, 2, 4, 8, generator=g).to(device) for _ in range(2)]
    return dict(kv=kv, conv=conv, ssm=ssm)


def save_and_load(store: cachepawl.Store) -> None:
    """Saves pages 0-2 and state slot 1, loads them into pages 5-7 and slot 3."""
    toks = tokens(3 * PAGE)
    fence = store.save(toks, [0, 1, 2], state_slot=1, state_depth_tokens=3 * PAGE)
    fence.wait(timeout=30)
    m = store.lookup(toks)
    assert m.reusable_pages == 3
    with store.lock(m):
        fence = store.load(m, [5, 6, 7], 3)
        if store.gpu_mode:
            stream = torch.cuda.Stream()
            fence.stream_wait(stream)  # a torch.cuda.Stream: its .cuda_stream
            stream.synchronize()
        fence.wait(timeout=30)


def poison(t: Any, rows: slice) -> None:
    """Overwrites t[rows] (dim 0) with a pattern that no saved record has."""
    t[rows].view(torch.uint8).fill_(0xA5)


def round_trip(store: cachepawl.Store, t: Dict[str, Any]) -> None:
    store.register_tensors(
        kv=[(layer[0], layer[1]) for layer in t["kv"]], ssm=list(zip(t["conv"], t["ssm"]))
    )
    for layer in t["kv"]:
        poison(layer[0], slice(5, 8))
        poison(layer[1], slice(5, 8))
    for c, s in zip(t["conv"], t["ssm"]):
        poison(c, slice(3, 4))
        poison(s, slice(3, 4))
    save_and_load(store)
    for layer in t["kv"]:
        assert torch.equal(layer[:, 5:8], layer[:, 0:3])
    for c, s in zip(t["conv"], t["ssm"]):
        assert torch.equal(c[3], c[1]) and torch.equal(s[3], s[1])


def test_cpu_tensors_per_layer_k_and_v(make_store: Callable[..., cachepawl.Store]) -> None:
    round_trip(make_store(device_pool_bytes=0), engine_tensors("cpu"))


def test_cpu_tensors_interleaved_kv(make_store: Callable[..., cachepawl.Store]) -> None:
    """kv=[T]: K and V interleaved per page, [num_pages, 2, page, heads, dim]."""
    store = make_store(device_pool_bytes=0)
    g = torch.Generator().manual_seed(11)
    kv = [torch.randn(PAGES, 2, 4, 2, 16, generator=g).to(torch.bfloat16) for _ in range(2)]
    t = engine_tensors("cpu")
    store.register_tensors(kv=kv, ssm=list(zip(t["conv"], t["ssm"])))
    for layer in kv:
        poison(layer, slice(5, 8))
    save_and_load(store)
    for layer in kv:
        assert torch.equal(layer[5:8], layer[0:3])
    for c, s in zip(t["conv"], t["ssm"]):
        assert torch.equal(c[3], c[1]) and torch.equal(s[3], s[1])


def test_cpu_tensors_block_contiguous_bytes(make_store: Callable[..., cachepawl.Store]) -> None:
    """kv_blocks / state_blocks: one record per row, raw bytes (uint8), any row stride."""
    store = make_store(device_pool_bytes=0)
    g = torch.Generator().manual_seed(13)
    # A row stride larger than the record (padding after each page) is accepted.
    kv_rows = torch.randint(0, 256, (PAGES, KV_BYTES + 64), generator=g, dtype=torch.uint8)
    kv_blocks = kv_rows[:, :KV_BYTES]
    state_blocks = torch.randint(0, 256, (SLOTS, STATE_BYTES), generator=g, dtype=torch.uint8)
    store.register_tensors(kv_blocks=kv_blocks, state_blocks=state_blocks)
    poison(kv_blocks, slice(5, 8))
    poison(state_blocks, slice(3, 4))
    padding = kv_rows[:, KV_BYTES:].clone()
    save_and_load(store)
    assert torch.equal(kv_blocks[5:8], kv_blocks[0:3])
    assert torch.equal(state_blocks[3], state_blocks[1])
    assert torch.equal(kv_rows[:, KV_BYTES:], padding)  # nothing written past a record


def test_cpu_tensor_counts_up_to_the_tensors_rows(
    make_store: Callable[..., cachepawl.Store],
) -> None:
    """num_pages / num_state_slots may use fewer rows than the tensors hold, never more."""
    store = make_store(device_pool_bytes=0)
    t = engine_tensors("cpu")
    kv = [(layer[0], layer[1]) for layer in t["kv"]]
    ssm = list(zip(t["conv"], t["ssm"]))
    with pytest.raises(cachepawl.InvalidArgument, match=r"num_pages: 9 \(the tensors hold 8"):
        store.register_tensors(kv=kv, ssm=ssm, num_pages=9)
    store.register_tensors(kv=kv, ssm=ssm, num_pages=6, num_state_slots=2)
    past_the_pool = r"slot: 6 \(the device pool has 6 KV pages"
    with pytest.raises(cachepawl.InvalidArgument, match=past_the_pool):
        store.save(tokens(PAGE), [6]).wait(timeout=30)


def test_cpu_tensor_errors(make_store: Callable[..., cachepawl.Store]) -> None:
    store = make_store(device_pool_bytes=0)
    t = engine_tensors("cpu")
    kv = [(layer[0], layer[1]) for layer in t["kv"]]
    ssm = list(zip(t["conv"], t["ssm"]))
    bad = cachepawl.InvalidArgument
    # dtype
    with pytest.raises(bad, match=r"kv\[1\]\[0\]: dtype float32 \(expected bfloat16\)"):
        store.register_tensors(kv=[kv[0], (kv[1][0].float(), kv[1][1])], ssm=ssm)
    # a page's block not contiguous
    with pytest.raises(bad, match=r"kv\[0\]\[1\]: strides"):
        store.register_tensors(kv=[(kv[0][0], kv[0][1].transpose(2, 3)), kv[1]], ssm=ssm)
    # slots that overlap (stride 0 in dim 0)
    with pytest.raises(bad, match=r"ssm\[0\]\[1\]: dim 0 stride 0"):
        store.register_tensors(
            kv=kv, ssm=[(ssm[0][0], ssm[0][1][:1].expand(SLOTS, 2, 4, 8)), ssm[1]]
        )
    # the shape of a page: one head too few
    with pytest.raises(bad, match=r"kv\[0\]\[0\]: 128 bytes per page .* needs 256"):
        one_head = torch.zeros(PAGES, 4, 1, 16, dtype=torch.bfloat16)
        store.register_tensors(kv=[(one_head, kv[0][1]), kv[1]], ssm=ssm)
    # the state's shape
    with pytest.raises(bad, match=r"ssm\[1\]\[0\]: .* bytes per slot"):
        short_conv = torch.zeros(SLOTS, 4, 3, dtype=torch.bfloat16)
        store.register_tensors(kv=kv, ssm=[ssm[0], (short_conv, ssm[1][1])])
    # dim 0 disagreeing between tensors of one kind
    with pytest.raises(bad, match=r"kv\[1\]\[1\]: 7 pages in dim 0 \(expected 8, like kv\[0\]"):
        store.register_tensors(kv=[kv[0], (kv[1][0], kv[1][1][:7])], ssm=ssm)
    # the number of layers
    with pytest.raises(bad, match=r"kv: 1 entries \(layout 'test/tiny-hybrid' has 2 attention"):
        store.register_tensors(kv=kv[:1], ssm=ssm)
    with pytest.raises(bad, match=r"ssm\[0\]: expected a \(conv, ssm\) pair"):
        store.register_tensors(kv=kv, ssm=[(ssm[0][0],), ssm[1]])
    # a device the store cannot copy from
    meta = torch.empty(PAGES, 4, 2, 16, dtype=torch.bfloat16, device="meta")
    with pytest.raises(bad, match=r"kv\[0\]\[0\]: device meta \(expected a CUDA tensor"):
        store.register_tensors(kv=[(meta, meta), kv[1]], ssm=ssm)
    # not a tensor at all
    with pytest.raises(TypeError, match=r"kv\[0\]\[0\]: expected a torch.Tensor, got builtins"):
        store.register_tensors(kv=[([0] * 8, kv[0][1]), kv[1]], ssm=ssm)
    # the two forms at once
    with pytest.raises(bad, match=r"kv_blocks/state_blocks: exclusive with kv/ssm"):
        store.register_tensors(kv=kv, ssm=ssm, kv_blocks=t["kv"][0])
    store.register_tensors(kv=kv, ssm=ssm)  # the right tensors still register
    save_and_load(store)


def test_cpu_stream_arguments_without_cuda(make_store: Callable[..., cachepawl.Store]) -> None:
    """In CPU mode a fence's stream argument is checked and never dereferenced: None and handle 0
    wait on the CPU; a handle on a fence that has not fired is Unavailable; other types are a
    TypeError naming what was given."""
    store = make_store(device_pool_bytes=0)
    t = engine_tensors("cpu")
    store.register_tensors(
        kv=[(layer[0], layer[1]) for layer in t["kv"]], ssm=list(zip(t["conv"], t["ssm"]))
    )
    fence = store.save(tokens(PAGE), [0])
    fence.stream_wait(None)
    fence.stream_wait(0)
    assert fence.ready

    class FakeStream:  # what a torch.cuda.Stream offers: .cuda_stream
        cuda_stream = 0

    fence.stream_wait(FakeStream())
    with pytest.raises(TypeError, match=r"stream: expected a torch.cuda.Stream.*got Tensor"):
        fence.stream_wait(torch.zeros(1))
    with pytest.raises(TypeError, match=r"got str"):
        fence.stream_wait("stream")
    # A fired fence answers any handle at once, without touching it.
    fence.stream_wait(0x1234)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_only_tensors_round_trip() -> None:
    opts = dict(BASE_OPTIONS, cuda_device=0, device_pool_bytes=0)
    with cachepawl.Store(**opts) as store:
        if not store.gpu_mode:
            pytest.skip("the library runs in CPU mode (built without CUDA?)")
        round_trip(store, engine_tensors("cuda:0"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_only_stream_wait_takes_torch_streams(
    make_store: Callable[..., cachepawl.Store],
) -> None:
    store = make_store()
    page = store.allocate_device_slot("kv")
    fence = store.save(tokens(PAGE), [page])
    fence.wait(timeout=30)
    # A fired fence answers a stream wait at once, in CPU mode too (the stream's handle is read
    # from .cuda_stream; the default stream's handle 0 waits on the CPU).
    fence.stream_wait(torch.cuda.Stream())
    fence.stream_wait(torch.cuda.current_stream())
    fence.stream_wait(torch.cuda.Stream().cuda_stream)


MLA_LAYOUT_JSON = """{"model": "test/tiny-mla", "num_layers": 3, "page_size_tokens": 4,
 "attention_layers": [
  {"layer_index": 0, "num_kv_heads": 1, "head_dim": 24, "dtype": "bf16", "mla": true},
  {"layer_index": 2, "num_kv_heads": 2, "head_dim": 16, "dtype": "bf16"}],
 "ssm_layers": [
  {"layer_index": 1, "block": "kda", "conv_shape": [24, 3], "conv_dtype": "bf16",
   "ssm_shape": [2, 4, 4], "ssm_dtype": "fp32"}]}"""


def test_cpu_tensors_mla_latent_without_v(make_store: Callable[..., cachepawl.Store]) -> None:
    """An MLA layer is one latent tensor per layer ([pages, page, latent], vLLM's form), no V."""
    store = make_store(layout_json=MLA_LAYOUT_JSON, device_pool_bytes=0)
    assert store.layout.as_dict()["attention_layers"][0]["mla"] is True
    g = torch.Generator().manual_seed(17)
    latent = torch.randn(PAGES, 4, 24, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(PAGES, 4, 2, 16, generator=g).to(torch.bfloat16) for _ in range(2))
    conv = torch.randn(SLOTS, 24, 3, generator=g).to(torch.bfloat16)
    state = torch.randn(SLOTS, 2, 4, 4, generator=g)
    bad = cachepawl.InvalidArgument
    with pytest.raises(bad, match=r"kv\[0\]: expected the latent tensor, \(latent,\) or"):
        store.register_tensors(kv=[(latent, latent), (k, v)], ssm=[(conv, state)])
    with pytest.raises(bad, match=r"kv\[0\]: 96 bytes per page .* needs 192 \(the MLA latent"):
        short = torch.zeros(PAGES, 4, 12, dtype=torch.bfloat16)
        store.register_tensors(kv=[short, (k, v)], ssm=[(conv, state)])
    for form in (latent, (latent,), (latent, None)):
        store.register_tensors(kv=[form, (k, v)], ssm=[(conv, state)])
        store.unregister_device_pool()
    store.register_tensors(kv=[latent, (k, v)], ssm=[(conv, state)])
    for t in (latent, k, v):
        poison(t, slice(5, 8))
    poison(conv, slice(3, 4))
    poison(state, slice(3, 4))
    save_and_load(store)
    for t in (latent, k, v):
        assert torch.equal(t[5:8], t[0:3])
    assert torch.equal(conv[3], conv[1]) and torch.equal(state[3], state[1])


LIGHTNING_LAYOUT_JSON = """{"model": "test/tiny-lightning", "num_layers": 3, "page_size_tokens": 4,
 "attention_layers": [{"layer_index": 0, "num_kv_heads": 2, "head_dim": 16, "dtype": "bf16"}],
 "ssm_layers": [
  {"layer_index": 1, "block": "lightning", "conv_shape": [], "conv_dtype": "bf16",
   "ssm_shape": [2, 4, 4], "ssm_dtype": "bf16"},
  {"layer_index": 2, "block": "mamba2", "conv_shape": [8, 3], "conv_dtype": "bf16",
   "ssm_shape": [2, 4, 8], "ssm_dtype": "fp32"}]}"""


def test_cpu_tensors_lightning_state_without_conv(
    make_store: Callable[..., cachepawl.Store],
) -> None:
    """A lightning layer (MiniMax) has a state and no conv: its entry is (None, state)."""
    store = make_store(layout_json=LIGHTNING_LAYOUT_JSON, device_pool_bytes=0)
    g = torch.Generator().manual_seed(19)
    k, v = (torch.randn(PAGES, 4, 2, 16, generator=g).to(torch.bfloat16) for _ in range(2))
    lightning = torch.randn(SLOTS, 2, 4, 4, generator=g).to(torch.bfloat16)
    conv = torch.randn(SLOTS, 8, 3, generator=g).to(torch.bfloat16)
    state = torch.randn(SLOTS, 2, 4, 8, generator=g)
    with pytest.raises(cachepawl.InvalidArgument, match=r"ssm\[0\]: expected \(None, state\)"):
        store.register_tensors(kv=[(k, v)], ssm=[(conv, lightning), (conv, state)])
    store.register_tensors(kv=[(k, v)], ssm=[(None, lightning), (conv, state)])
    for t in (k, v):
        poison(t, slice(5, 8))
    for t in (lightning, conv, state):
        poison(t, slice(3, 4))
    save_and_load(store)
    assert torch.equal(k[5:8], k[0:3]) and torch.equal(v[5:8], v[0:3])
    for t in (lightning, conv, state):
        assert torch.equal(t[3], t[1])
