"""Device pools from PyTorch tensors: the engine's own KV cache and state tensors described by
data_ptr(), shape and stride (see cachepawl.pool for the forms).

This module never imports torch: a tensor is recognised by duck typing (its type's module is
``torch...`` and it has ``data_ptr``), and everything is read from its attributes. Each
tensor's device, dtype, per-slot contiguity and per-slot size are checked against the store's
layout before anything reaches the C ABI, with errors naming the tensor (``kv[3][1]``) and
the expected value.

Forms (one entry per attention layer of the layout, in order; one per SSM layer):

* ``kv=[(K, V), ...]``: K and V separate, each ``[num_pages, page_size, kv_heads, head_dim]``
  (any view whose dim 0 is the page and whose per-page block is contiguous; vLLM's
  ``[2, num_blocks, ...]`` layer tensor ``t`` is passed as ``(t[0], t[1])``);
* ``kv=[T, ...]``: K and V interleaved per page, ``[num_pages, 2, page_size, kv_heads,
  head_dim]``;
* an MLA layer (``"mla": true`` in the layout: DeepSeek V3, Kimi Linear) has one latent per
  token and no V: ``kv=[..., L, ...]`` (or ``(L,)`` / ``(L, None)``) with L ``[num_pages,
  page_size, latent]`` (any view whose per-page block is contiguous, e.g. vLLM's ``[num_blocks,
  block_size, kv_lora_rank + qk_rope_head_dim]``);
* ``ssm=[(conv, ssm), ...]``: ``[num_slots, *conv_shape]`` and ``[num_slots, *ssm_shape]``;
  a shortconv layer (LFM2: a conv state and no SSM state) is ``(conv, None)`` or ``(conv,)``,
  a lightning layer (MiniMax: a state and no conv state) ``(None, state)``;
* ``kv_blocks=T`` / ``state_blocks=T``: block-contiguous, dim 0 the page (state slot) and the
  rest exactly one KV record (state record) in page-first order; any dtype (uint8 is usual).

fp8 and fp4 layers also accept uint8/int8 tensors (engines keep such caches as raw bytes).

A layout without attention layers (pure SSM, e.g. Mamba-2) has no KV pages: ``kv`` is None or
``[]`` (``kv_blocks`` None) and the pool gets 0 pages; ``ssm`` (or ``state_blocks``) describes
the state slots. KV tensors for such a layout are refused, naming the count.

Thread safety: the functions are pure; the returned DevicePool is used by one thread at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from .errors import InvalidArgument
from .layout import Layout
from .pool import DevicePool

_BYTES = frozenset({"uint8", "int8"})
#: Layout dtype -> acceptable torch dtype names.
_TORCH_DTYPES: Dict[str, FrozenSet[str]] = {
    "fp32": frozenset({"float32"}),
    "fp16": frozenset({"float16"}),
    "bf16": frozenset({"bfloat16"}),
    "fp8_e4m3": frozenset({"float8_e4m3fn", "float8_e4m3fnuz"}) | _BYTES,
    "fp8_e5m2": frozenset({"float8_e5m2", "float8_e5m2fnuz"}) | _BYTES,
    "int8": frozenset({"int8"}),
    "fp4_e2m1": frozenset({"float4_e2m1fn_x2"}) | _BYTES,
}


@dataclass(frozen=True)
class TensorView:
    """What the pool needs of one tensor. ``strides`` are in elements (torch's convention),
    ``device`` is -1 for host memory or the CUDA device index. Built from torch tensors by
    :func:`view_of`; may be built directly for other memory (e.g. a CPU-mode pool in host
    buffers)."""

    name: str
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    itemsize: int
    dtype: str
    device: int
    device_name: str


def is_tensor(x: Any) -> bool:
    """A torch tensor, by duck typing (no torch import)."""
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr")


def view_of(name: str, t: Any) -> TensorView:
    """A TensorView of a torch tensor (or a TensorView, renamed)."""
    if isinstance(t, TensorView):
        return TensorView(
            name, t.ptr, t.shape, t.strides, t.itemsize, t.dtype, t.device, t.device_name
        )
    if not is_tensor(t):
        raise TypeError(
            f"{name}: expected a torch.Tensor, got {type(t).__module__}.{type(t).__name__}"
        )
    dev = t.device
    if dev.type == "cpu":
        device = -1
    elif dev.type == "cuda":
        device = int(dev.index) if dev.index is not None else 0
    else:
        raise InvalidArgument(
            f"{name}: device {dev} (expected a CUDA tensor, or a CPU tensor in CPU mode)"
        )
    dtype = str(t.dtype)
    return TensorView(
        name=name,
        ptr=int(t.data_ptr()),
        shape=tuple(int(s) for s in t.shape),
        strides=tuple(int(s) for s in t.stride()),
        itemsize=int(t.element_size()),
        dtype=dtype[len("torch.") :] if dtype.startswith("torch.") else dtype,
        device=device,
        device_name=str(dev),
    )


def _prod(xs: Sequence[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


class _Checker:
    """Checks tensors one by one and remembers the device and slot counts they imply."""

    def __init__(self) -> None:
        self.device: Optional[int] = None
        self.device_from = ""
        self.counts: Dict[str, Tuple[int, str]] = {}  # unit -> (dim 0, tensor that set it)
        self.owners: List[Any] = []

    def slots(
        self,
        name: str,
        t: Any,
        unit: str,
        slot_bytes: int,
        dtypes: Optional[FrozenSet[str]],
        expect: str,
    ) -> Tuple[int, int]:
        """(base address, byte stride of dim 0) of a [num_slots, ...] tensor whose per-slot
        block must be `slot_bytes` contiguous bytes of one of `dtypes` (None: any)."""
        v = view_of(name, t)
        self.owners.append(t)
        if self.device is None:
            self.device, self.device_from = v.device, f"{name} ({v.device_name})"
        elif v.device != self.device:
            raise InvalidArgument(
                f"{name}: device {v.device_name} (expected the device of {self.device_from})"
            )
        if dtypes is not None and v.dtype not in dtypes:
            raise InvalidArgument(
                f"{name}: dtype {v.dtype} (expected {' or '.join(sorted(dtypes))})"
            )
        if len(v.shape) < 1:
            raise InvalidArgument(f"{name}: a 0-d tensor (expected [num_{unit}s, ...])")
        inner_shape, inner_strides = v.shape[1:], v.strides[1:]
        expected = 1
        for dim in range(len(inner_shape) - 1, -1, -1):
            if inner_shape[dim] != 1 and inner_strides[dim] != expected:
                raise InvalidArgument(
                    f"{name}: strides {v.strides} for shape {v.shape} (each {unit}'s block "
                    f"[1:] must be contiguous; dim {dim + 1} has stride {inner_strides[dim]}, "
                    f"expected {expected})"
                )
            expected *= inner_shape[dim]
        got = _prod(inner_shape) * v.itemsize
        if got != slot_bytes:
            raise InvalidArgument(
                f"{name}: {got} bytes per {unit} (shape {v.shape}, {v.dtype}); the layout "
                f"needs {slot_bytes} ({expect})"
            )
        n = v.shape[0]
        stride = v.strides[0] * v.itemsize
        if n > 1 and stride < slot_bytes:
            raise InvalidArgument(
                f"{name}: dim 0 stride {v.strides[0]} ({stride} bytes) is less than the "
                f"{slot_bytes} bytes of one {unit}: {unit}s would overlap"
            )
        if n >= 1 and v.ptr == 0:
            raise InvalidArgument(f"{name}: data_ptr() is 0")
        prev = self.counts.get(unit)
        if prev is None:
            self.counts[unit] = (n, name)
        elif prev[0] != n:
            raise InvalidArgument(
                f"{name}: {n} {unit}s in dim 0 (expected {prev[0]}, like {prev[1]})"
            )
        return v.ptr, max(stride, slot_bytes) if n <= 1 else stride

    def count(self, unit: str, requested: Optional[int], what: str) -> int:
        have = self.counts.get(unit)
        if requested is None:
            return have[0] if have else 0
        if have is not None and requested > have[0]:
            raise InvalidArgument(f"{what}: {requested} (the tensors hold {have[0]}, {have[1]})")
        return requested


def _layers(
    name: str, items: Optional[Sequence[Any]], n: int, what: str, model: str
) -> Sequence[Any]:
    items = list(items or [])
    if len(items) != n:
        raise InvalidArgument(
            f"{name}: {len(items)} entries (layout '{model}' has {n} {what} layers)"
        )
    return items


# A DevicePool setter to call once the slot counts are known: (method name, arguments).
Setter = Tuple[str, Tuple[int, ...]]


def _block_setters(
    c: _Checker, layout: Layout, d: Dict[str, Any], kv_blocks: Any, state_blocks: Any
) -> List[Setter]:
    args: List[int] = []
    for name, t, unit, nbytes, layers, what in (
        ("kv_blocks", kv_blocks, "page", layout.kv_page_bytes, "attention",
         "one KV record: every attention layer's K and V"),
        ("state_blocks", state_blocks, "slot", layout.state_bytes, "ssm",
         "one state record: every SSM layer's conv and SSM state"),
    ):  # fmt: skip
        if t is not None:
            args += c.slots(name, t, unit, nbytes, None, what)
        elif d[f"{layers}_layers"]:
            raise InvalidArgument(f"{name}: missing (layout '{d['model']}' has {layers} layers)")
        else:
            args += (0, 0)
    return [("set_block_contiguous", tuple(args))]


def _kv_setters(c: _Checker, layout: Layout, d: Dict[str, Any], kv: Any) -> List[Setter]:
    setters: List[Setter] = []
    attention = d["attention_layers"]
    for a, entry in enumerate(_layers("kv", kv, len(attention), "attention", d["model"])):
        spec = attention[a]
        kb = layout.k_bytes_per_page(a)
        dtypes = _TORCH_DTYPES.get(spec["dtype"])
        shape = (
            f"[page_size {d['page_size_tokens']}, kv_heads {spec['num_kv_heads']}, "
            f"head_dim {spec['head_dim']}] of {spec['dtype']}"
        )
        if spec.get("mla"):
            # One latent per token: the tensor itself, or (latent,) / (latent, None).
            latent = entry
            if isinstance(entry, (tuple, list)):
                if len(entry) not in (1, 2) or (len(entry) == 2 and entry[1] is not None):
                    raise InvalidArgument(
                        f"kv[{a}]: expected the latent tensor, (latent,) or (latent, None): "
                        f"layer {spec['layer_index']} is MLA (one latent, no V)"
                    )
                latent = entry[0]
            what = (
                f"the MLA latent [page_size {d['page_size_tokens']}, {spec['head_dim']}] of "
                f"{spec['dtype']}"
            )
            kp, ks = c.slots(f"kv[{a}]", latent, "page", kb, dtypes, what)
            setters.append(("set_kv_layer", (a, kp, ks, 0, 0)))
            continue
        if not isinstance(entry, (tuple, list)):
            what = "K and V interleaved, [2] + " + shape
            bp, bs = c.slots(f"kv[{a}]", entry, "page", 2 * kb, dtypes, what)
            setters.append(("set_kv_layer_interleaved", (a, bp, bs)))
            continue
        if len(entry) != 2:
            raise InvalidArgument(
                f"kv[{a}]: {len(entry)} tensors (expected (K, V) or one interleaved tensor)"
            )
        kp, ks = c.slots(f"kv[{a}][0]", entry[0], "page", kb, dtypes, "K " + shape)
        vp, vs = c.slots(f"kv[{a}][1]", entry[1], "page", kb, dtypes, "V " + shape)
        setters.append(("set_kv_layer", (a, kp, ks, vp, vs)))
    return setters


def _ssm_setters(c: _Checker, layout: Layout, d: Dict[str, Any], ssm: Any) -> List[Setter]:
    setters: List[Setter] = []
    ssm_layers = d["ssm_layers"]
    for s, entry in enumerate(_layers("ssm", ssm, len(ssm_layers), "SSM", d["model"])):
        spec = ssm_layers[s]
        conv_only = not spec["ssm_shape"]  # shortconv: a conv state, no SSM state
        state_only = not spec["conv_shape"]  # lightning: a state, no conv state
        if state_only:
            if not isinstance(entry, (tuple, list)) or len(entry) != 2 or entry[0] is not None:
                raise InvalidArgument(
                    f"ssm[{s}]: expected (None, state): layer {spec['layer_index']} is "
                    f"{spec['block']} (no conv state)"
                )
        elif conv_only:
            if not isinstance(entry, (tuple, list)) or len(entry) not in (1, 2):
                raise InvalidArgument(
                    f"ssm[{s}]: expected (conv,) or (conv, None): layer {spec['layer_index']} "
                    f"is {spec['block']} (no SSM state)"
                )
            if len(entry) == 2 and entry[1] is not None:
                raise InvalidArgument(
                    f"ssm[{s}][1]: expected None: layer {spec['layer_index']} is "
                    f"{spec['block']} (no SSM state)"
                )
        elif not isinstance(entry, (tuple, list)) or len(entry) != 2 or entry[1] is None:
            raise InvalidArgument(f"ssm[{s}]: expected a (conv, ssm) pair of tensors")
        parts = []
        for j, (part, nbytes) in enumerate(
            (("conv", layout.conv_state_bytes(s)), ("ssm", layout.ssm_state_bytes(s)))
        ):
            if (part == "ssm" and conv_only) or (part == "conv" and state_only):
                parts.append((0, 0))
                continue
            dtype = spec[f"{part}_dtype"]
            what = f"{part if part == 'conv' else 'SSM'} state {spec[f'{part}_shape']} of {dtype}"
            parts.append(
                c.slots(f"ssm[{s}][{j}]", entry[j], "slot", nbytes, _TORCH_DTYPES.get(dtype), what)
            )
        (cp, cs), (sp, ss) = parts
        setters.append(("set_ssm_layer", (s, cp, cs, sp, ss)))
    return setters


def describe(
    layout: Layout,
    *,
    kv: Optional[Sequence[Any]] = None,
    ssm: Optional[Sequence[Sequence[Any]]] = None,
    kv_blocks: Any = None,
    state_blocks: Any = None,
    num_pages: Optional[int] = None,
    num_state_slots: Optional[int] = None,
) -> DevicePool:
    """A DevicePool of tensors (see the module doc for the forms). ``num_pages`` and
    ``num_state_slots`` default to the tensors' dim 0 (all tensors of a kind must agree); the
    pool's device is the tensors' (-1 for CPU tensors). The returned pool's ``owners`` lists
    the tensors, which the store keeps alive once registered."""
    d = layout.as_dict()
    c = _Checker()
    if kv_blocks is not None or state_blocks is not None:
        if kv is not None or ssm is not None:
            raise InvalidArgument(
                "kv_blocks/state_blocks: exclusive with kv/ssm (a pool is either "
                "per-layer or block-contiguous)"
            )
        setters = _block_setters(c, layout, d, kv_blocks, state_blocks)
    else:
        setters = _kv_setters(c, layout, d, kv) + _ssm_setters(c, layout, d, ssm)
    pool = DevicePool(
        num_pages=c.count("page", num_pages, "num_pages"),
        num_state_slots=c.count("slot", num_state_slots, "num_state_slots"),
        device=-1 if c.device is None else c.device,
    )
    for method, args in setters:
        getattr(pool, method)(*args)
    pool.owners = c.owners
    return pool
