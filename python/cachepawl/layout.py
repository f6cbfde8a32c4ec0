"""Model layouts (vocab/model_layout.h): the shapes and dtypes of a model's cache and the
sizes that follow from them.

A :class:`Layout` wraps an immutable ``cachepawl_layout`` handle: thread-safe, freed when the
object is garbage-collected.
"""

from __future__ import annotations

import ctypes
import enum
import json
import os
from typing import Any, Dict, List, Optional, Union

from . import _convert, _lib
from .errors import InvalidArgument, check, get

lib = _lib.lib


class Kind(enum.IntEnum):
    """What a cache entry holds: a KV page (all attention layers) or a sequence's recurrent
    state (all SSM layers; Kind::kMamba in C++). WINDOW (Kind::kWindowKV) names the
    sliding-window attention layers' part of a KV page, which the host and disk tiers keep as a
    record of its own; the layout accessors take it, the device-slot calls refuse it (a device
    page holds every attention layer: use KV)."""

    KV = 0
    STATE = 1
    WINDOW = 2


class Tier(enum.IntEnum):
    """Where an entry lies, fastest first; NONE: nowhere."""

    NONE = -1
    DEVICE = 0
    HOST = 1
    DISK = 2
    REMOTE = 3  #: a Redis Cluster shared by several stores (the remote tier)


KindLike = Union[Kind, str, int]

_KIND_NAMES = {
    "kv": Kind.KV,
    "state": Kind.STATE,
    "mamba": Kind.STATE,
    "window": Kind.WINDOW,
    "window_kv": Kind.WINDOW,
}


def to_kind(kind: KindLike, name: str = "kind") -> Kind:
    """Kind.KV / Kind.STATE / Kind.WINDOW from the enum, "kv" / "state" ("mamba") / "window"
    ("window_kv"), or 0 / 1 / 2."""
    if isinstance(kind, Kind):
        return kind
    if isinstance(kind, str):
        k = _KIND_NAMES.get(kind.lower())
        if k is None:
            raise InvalidArgument(f"{name}: {kind!r} (expected 'kv', 'state' or 'window')")
        return k
    v = _convert.i32(name, kind)
    try:
        return Kind(v)
    except ValueError:
        raise InvalidArgument(
            f"{name}: {v} (expected Kind.KV (0), Kind.STATE (1) or Kind.WINDOW (2))"
        ) from None


def _lines(fn: Any) -> List[str]:
    out = ctypes.c_void_p()
    check(fn(ctypes.byref(out)))
    return [n for n in _lib.take_string(out.value).split("\n") if n]


def preset_names() -> List[str]:
    """The built-in layout presets, sorted."""
    return _lines(lib.cachepawl_layout_preset_names)


def hf_model_types() -> List[str]:
    """The Hugging Face ``model_type`` values :meth:`Layout.from_hf_config` maps, sorted."""
    return _lines(lib.cachepawl_layout_hf_model_types)


class Layout(_lib.Owner):
    """A model's cache layout (a value). Build one with :meth:`from_preset`,
    :meth:`from_json`, :meth:`from_file` or :meth:`from_hf_config`, or read a store's with
    ``Store.layout``."""

    def __init__(self, handle: Any) -> None:
        # Internal: takes ownership of a non-NULL cachepawl_layout*.
        self._own(handle, lib.cachepawl_layout_free)
        self._dict: Dict[str, Any] = {}

    @classmethod
    def from_preset(cls, name: str, page_size_tokens: int = 16) -> "Layout":
        """A built-in preset (see :func:`preset_names`); NotFound naming it when unknown."""
        h = _lib.LayoutP()
        check(
            lib.cachepawl_layout_from_preset(
                _convert.text("name", name),
                _convert.u32("page_size_tokens", page_size_tokens),
                ctypes.byref(h),
            )
        )
        return cls(h)

    @classmethod
    def from_json(cls, text: Union[str, bytes]) -> "Layout":
        """A layout from JSON text (docs/MODELS.md); errors name the key path or line/column."""
        b = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        h = _lib.LayoutP()
        check(lib.cachepawl_layout_from_json_string(b or None, len(b), ctypes.byref(h)))
        return cls(h)

    @classmethod
    def from_file(cls, path: Any) -> "Layout":
        """A JSON layout file; errors start "layout file PATH: "."""
        h = _lib.LayoutP()
        check(lib.cachepawl_layout_from_json_file(_convert.path("path", path), ctypes.byref(h)))
        return cls(h)

    @classmethod
    def from_hf_config(
        cls,
        config: Union[str, bytes, "os.PathLike[str]", Dict[str, Any]],
        *,
        dtype: str = "bf16",
        state_dtype: str = "fp32",
        convention: str = "transformers",
        page_size_tokens: int = 16,
        model: Optional[str] = None,
        tp_size: int = 1,
        tp_rank: int = 0,
    ) -> "Layout":
        """The layout transformers 5.17 keeps for a Hugging Face ``config.json``
        (docs/MODELS.md, "Layouts from a Hugging Face config").

        ``config`` is a path (str or os.PathLike) to the file, its JSON text (a str or bytes
        that starts with "{"), or the config as a dict. ``dtype``: K/V and conv state dtype;
        ``state_dtype``: recurrent state dtype; ``convention``: "transformers" (conv state
        width d_conv) or "sglang" (d_conv - 1); ``model``: the layout's name (default: the
        config's ``_name_or_path``, else its ``model_type``). ``tp_size`` > 1: the layout of
        rank ``tp_rank`` (:meth:`shard`). Errors name the argument, or the config key and value
        (``InvalidArgument``); a missing file is ``NotFound``."""
        tp = (_convert.u32("tp_size", tp_size), _convert.u32("tp_rank", tp_rank))
        args = (
            _convert.text("dtype", dtype),
            _convert.text("state_dtype", state_dtype),
            _convert.text("convention", convention),
            _convert.u32("page_size_tokens", page_size_tokens),
            None if model is None else _convert.text("model", model),
        )
        h = _lib.LayoutP()
        if isinstance(config, dict):
            config = json.dumps(config)
        if isinstance(config, (bytes, bytearray)) or (
            isinstance(config, str) and config.lstrip().startswith("{")
        ):
            b = config.encode("utf-8") if isinstance(config, str) else bytes(config)
            check(lib.cachepawl_layout_from_hf_config_string(b, len(b), *args, ctypes.byref(h)))
        elif isinstance(config, (str, os.PathLike)):
            path = _convert.path("config", config)
            check(lib.cachepawl_layout_from_hf_config_file(path, *args, ctypes.byref(h)))
        else:
            raise TypeError(
                f"config: expected a path, JSON text or a dict, got {type(config).__name__}"
            )
        whole = cls(h)
        return whole if tp == (1, 0) else whole.shard(*tp)

    def shard(self, tp_size: int, tp_rank: int) -> "Layout":
        """Rank ``tp_rank`` of this whole model's layout split ``tp_size`` ways, as vLLM and
        SGLang split attention KV heads (fewer heads than ranks: each replicated), Mamba heads
        and groups, Gated DeltaNet heads and conv channels (docs/MODELS.md, "Tensor
        parallelism"). ``InvalidArgument`` naming the layer's field and value when tp_size does
        not split it, or when this layout is already one rank's."""
        h = _lib.LayoutP()
        check(
            lib.cachepawl_layout_shard(
                self._h,
                _convert.u32("tp_size", tp_size),
                _convert.u32("tp_rank", tp_rank),
                ctypes.byref(h),
            )
        )
        return Layout(h)

    @property
    def tp_size(self) -> int:
        """Tensor-parallel ranks the layout is one of (1: the whole model)."""
        size, rank = ctypes.c_uint32(), ctypes.c_uint32()
        check(lib.cachepawl_layout_tp(self._h, ctypes.byref(size), ctypes.byref(rank)))
        return int(size.value)

    @property
    def tp_rank(self) -> int:
        size, rank = ctypes.c_uint32(), ctypes.c_uint32()
        check(lib.cachepawl_layout_tp(self._h, ctypes.byref(size), ctypes.byref(rank)))
        return int(rank.value)

    # --- sizes -------------------------------------------------------------------------------

    def _u32(self, fn: Any, *args: Any) -> int:
        return int(get(fn, ctypes.c_uint32, self._h, *args))

    def _u64(self, fn: Any, *args: Any) -> int:
        return int(get(fn, ctypes.c_uint64, self._h, *args))

    @property
    def page_size_tokens(self) -> int:
        return self._u32(lib.cachepawl_layout_page_size_tokens)

    @property
    def num_layers(self) -> int:
        """Decoder layers of the whole model."""
        return self._u32(lib.cachepawl_layout_num_layers)

    def record_bytes(self, kind: KindLike) -> int:
        """Bytes of one record: KV a whole KV page (all attention layers, K and V, windowed
        ones included: the device page), STATE a state, WINDOW the sliding-window layers' part
        of a page (0 without windowed layers)."""
        return self._u64(lib.cachepawl_layout_record_bytes, int(to_kind(kind)))

    @property
    def kv_page_bytes(self) -> int:
        return self.record_bytes(Kind.KV)

    @property
    def state_bytes(self) -> int:
        return self.record_bytes(Kind.STATE)

    @property
    def window_kv_record_bytes(self) -> int:
        """The sliding-window layers' K/V of one page (0 without windowed layers)."""
        return self.record_bytes(Kind.WINDOW)

    @property
    def full_kv_record_bytes(self) -> int:
        """The full-attention layers' K/V of one page: kv_page_bytes - window_kv_record_bytes
        (0 when every attention layer is windowed)."""
        return self.kv_page_bytes - self.window_kv_record_bytes

    @property
    def window_tokens(self) -> int:
        """The largest sliding window in tokens (0 without windowed layers)."""
        return self._u32(lib.cachepawl_layout_window_tokens)

    @property
    def window_pages(self) -> int:
        """The pages of windowed KV a load at a depth needs: ceil(window_tokens / page)."""
        return self._u32(lib.cachepawl_layout_window_pages)

    def num_layers_of_kind(self, kind: KindLike) -> int:
        """Attention layers (KV: all of them), SSM layers (STATE) or sliding-window attention
        layers (WINDOW, a subset of KV's) on this rank."""
        k = int(to_kind(kind))
        return int(get(lib.cachepawl_layout_num_layers_of_kind, ctypes.c_size_t, self._h, k))

    @property
    def num_attention_layers(self) -> int:
        return self.num_layers_of_kind(Kind.KV)

    @property
    def num_ssm_layers(self) -> int:
        return self.num_layers_of_kind(Kind.STATE)

    @property
    def num_window_layers(self) -> int:
        return self.num_layers_of_kind(Kind.WINDOW)

    def layer_index(self, kind: KindLike, i: int) -> int:
        """The decoder position of the i-th attention (KV), SSM (STATE) or sliding-window
        attention (WINDOW) layer."""
        return self._u32(
            lib.cachepawl_layout_layer_index, int(to_kind(kind)), _convert.size("i", i)
        )

    def k_bytes_per_page(self, i: int) -> int:
        """Bytes of K of attention layer i for one page (an MLA layer's latent)."""
        return self._u64(lib.cachepawl_layout_k_bytes_per_page, _convert.size("i", i))

    def v_bytes_per_page(self, i: int) -> int:
        """Bytes of V of attention layer i for one page: K's, or 0 for an MLA layer (no V)."""
        return self._u64(lib.cachepawl_layout_v_bytes_per_page, _convert.size("i", i))

    def conv_state_bytes(self, i: int) -> int:
        return self._u64(lib.cachepawl_layout_conv_state_bytes, _convert.size("i", i))

    def ssm_state_bytes(self, i: int) -> int:
        return self._u64(lib.cachepawl_layout_ssm_state_bytes, _convert.size("i", i))

    @property
    def fingerprint(self) -> bytes:
        """The 32-byte layout fingerprint (SHA-256 of every field)."""
        buf = (ctypes.c_uint8 * 32)()
        check(lib.cachepawl_layout_fingerprint(self._h, buf, 32))
        return bytes(buf)

    def to_json(self) -> str:
        """The canonical JSON form."""
        out = ctypes.c_void_p()
        check(lib.cachepawl_layout_to_json(self._h, ctypes.byref(out)))
        return _lib.take_string(out.value)

    def as_dict(self) -> Dict[str, Any]:
        """The canonical JSON form, parsed (model, layers with shapes and dtypes, ...)."""
        if not self._dict:
            self._dict = json.loads(self.to_json())
        return dict(self._dict)

    @property
    def model(self) -> str:
        return str(self.as_dict()["model"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and self.fingerprint == other.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return (
            f"Layout({self.model!r}, page_size_tokens={self.page_size_tokens}, "
            f"kv_page_bytes={self.kv_page_bytes}, state_bytes={self.state_bytes})"
        )
