"""PyTorch tensors as the engine's device pool (skipped cleanly without torch): CPU tensors in
CPU mode, and CUDA tensors on a GPU store when one is present. Every byte is compared after a
save and a load."""

from __future__ import annotations

from typing import Any, Callable, Dict

import pytest

import cachepawl
from conftest import BASE_OPTIONS, PAGE, tokens

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


def round_trip(store: cachepawl.Store, t: Dict[str, Any]) -> None:
    store.register_tensors(
        kv=[(layer[0], layer[1]) for layer in t["kv"]], ssm=list(zip(t["conv"], t["ssm"]))
    )
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
    for layer in t["kv"]:
        assert torch.equal(layer[:, 5:8], layer[:, 0:3])
    for c, s in zip(t["conv"], t["ssm"]):
        assert torch.equal(c[3], c[1]) and torch.equal(s[3], s[1])


def test_cpu_tensors(make_store: Callable[..., cachepawl.Store]) -> None:
    round_trip(make_store(device_pool_bytes=0), engine_tensors("cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors() -> None:
    opts = dict(BASE_OPTIONS, cuda_device=0, device_pool_bytes=0)
    with cachepawl.Store(**opts) as store:
        if not store.gpu_mode:
            pytest.skip("the library runs in CPU mode (built without CUDA?)")
        round_trip(store, engine_tensors("cuda:0"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_stream_wait_takes_torch_streams(make_store: Callable[..., cachepawl.Store]) -> None:
    store = make_store()
    page = store.allocate_device_slot("kv")
    fence = store.save(tokens(PAGE), [page])
    fence.wait(timeout=30)
    # A fired fence answers a stream wait at once, in CPU mode too (the stream's handle is read
    # from .cuda_stream; the default stream's handle 0 waits on the CPU).
    fence.stream_wait(torch.cuda.Stream())
    fence.stream_wait(torch.cuda.current_stream())
    fence.stream_wait(torch.cuda.Stream().cuda_stream)


def test_tensor_errors(make_store: Callable[..., cachepawl.Store]) -> None:
    store = make_store(device_pool_bytes=0)
    t = engine_tensors("cpu")
    kv = [(layer[0], layer[1]) for layer in t["kv"]]
    ssm = list(zip(t["conv"], t["ssm"]))
    with pytest.raises(
        cachepawl.InvalidArgument, match=r"kv\[1\]\[0\]: dtype float32 \(expected bfloat16\)"
    ):
        store.register_tensors(kv=[kv[0], (kv[1][0].float(), kv[1][1])], ssm=ssm)
    with pytest.raises(cachepawl.InvalidArgument, match=r"kv\[0\]\[1\]: strides"):
        store.register_tensors(kv=[(kv[0][0], kv[0][1].transpose(2, 3)), kv[1]], ssm=ssm)
    with pytest.raises(cachepawl.InvalidArgument, match=r"ssm\[0\]\[1\]: dim 0 stride 0"):
        store.register_tensors(
            kv=kv, ssm=[(ssm[0][0], ssm[0][1][:1].expand(SLOTS, 2, 4, 8)), ssm[1]]
        )
    store.register_tensors(kv=kv, ssm=ssm)  # the right tensors still register
