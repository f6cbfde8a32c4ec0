"""A Hugging Face ``transformers`` model's cache, saved to and restored from a Cachepawl store.

    from cachepawl.integrations.transformers import load_cache, save_cache

    store = cachepawl.Store(cachepawl.Layout.from_hf_config(model.config.to_dict()), ...)
    ...  # prefill: model(input_ids, past_key_values=cache, use_cache=True)
    save_cache(store, cache, tokens, model=model)
    ...  # later, maybe in another process, the same store folder:
    cache, reused = load_cache(store, model, tokens)
    model.generate(torch.tensor([tokens]), past_key_values=cache, ...)  # recomputes tokens[reused:]

Pinned to transformers 5.17 (its ``DynamicCache`` keeps every family's per-layer K/V, MLA parts,
conv and recurrent states; MiniMax keeps lightning states in a ``MiniMaxCache``): importing this
module with another version, or without transformers or torch, raises ImportError saying so.

What is saved: the full pages of the cache's tokens (``page_size_tokens`` each) and, when the
cache's length is a whole number of pages, the recurrent state at that depth; a hybrid model's
prefix is reused only up to a depth whose state was saved (the store's rule). ``load_cache``
returns the cache of the longest reusable prefix, never all of ``tokens`` (at least one token is
left for the model to compute logits from), and ``(new empty cache, 0)`` on a miss.

Sliding-window layers keep only their window in transformers' cache: ``save_cache`` saves the
pages that a layer still holds, so save during a chunked prefill (after every chunk, with
``first_page`` = the pages saved before) when the prompt is longer than the window.

The bridge between a store and a model (:class:`CacheBridge`) owns a paged pool of ``max_pages``
pages and one state slot in the model's device memory, registered with the store as its device
pool; ``save_cache`` / ``load_cache`` make one per store on first use. A store serves one model.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

try:
    import torch
    import transformers
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "cachepawl.integrations.transformers needs torch and transformers 5.17 "
        f"(pip install 'transformers==5.17.*'): {e}"
    ) from e

from .. import Busy, Layout, NotFound, Store

#: The transformers release this module hooks into (its cache classes' attributes).
TRANSFORMERS_VERSION = "5.17"

if not transformers.__version__.startswith(TRANSFORMERS_VERSION + "."):
    raise ImportError(
        f"cachepawl.integrations.transformers: transformers {transformers.__version__} is "
        f"installed; this module reads and writes transformers {TRANSFORMERS_VERSION}'s cache "
        f"classes (pip install 'transformers=={TRANSFORMERS_VERSION}.*')"
    )

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def new_cache(model: Any) -> Any:
    """An empty cache of the class the model fills (MiniMax: its MiniMaxCache)."""
    if model.config.model_type == "minimax":
        from transformers.models.minimax.modeling_minimax import MiniMaxCache

        return MiniMaxCache()
    return transformers.DynamicCache(config=model.config)


def model_layout(model: Any, page_size_tokens: int = 16, state_dtype: str = "fp32",
                 name: Optional[str] = None) -> Layout:
    """The layout of `model`'s cache (``Layout.from_hf_config`` of its config, its dtype).

    `name` (default: the config's ``_name_or_path``, i.e. what ``from_pretrained`` was given) is
    the layout's model name, part of its fingerprint: it keeps two models of the same shapes but
    other weights apart in one store folder, so give every process the same one (a hub id)."""
    dtype = _NAMES.get(getattr(model, "dtype", torch.bfloat16))
    if dtype is None:
        raise ValueError(f"model.dtype: {model.dtype} (expected bfloat16, float16 or float32)")
    return Layout.from_hf_config(
        model.config.to_dict(),
        dtype=dtype,
        state_dtype=state_dtype,
        convention="transformers",
        page_size_tokens=page_size_tokens,
        model=name,
    )


class _LayerUpdater:
    """``cache.update(k, v, index)`` in the shape of a cache layer's ``update(k, v)``."""

    def __init__(self, cache: Any, index: int) -> None:
        self.cache, self.index = cache, index

    def update(self, k: Any, v: Any) -> None:
        self.cache.update(k, v, self.index)


def _lightning(cache: Any, index: int) -> Any:
    states = getattr(cache, "linear_cache", [])
    return states[index] if index < len(states) and hasattr(states[index], "shape") else None


class CacheBridge:
    """A paged pool between one model's cache and a store (the store's device pool).

    Thread safety: one save or load at a time (a lock serializes them)."""

    def __init__(self, store: Store, model: Any, *, max_pages: int = 256) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"store: expected a cachepawl.Store, got {type(store).__name__}")
        if not isinstance(max_pages, int) or isinstance(max_pages, bool) or max_pages < 1:
            raise ValueError(f"max_pages: {max_pages!r} (expected an int >= 1)")
        layout = store.layout
        # The cache's geometry must be the store's (the name is the store's: whoever opened it
        # chose the model it serves).
        mine = model_layout(model, layout.page_size_tokens, _state_dtype(layout), layout.model)
        if mine.fingerprint != layout.fingerprint:
            raise ValueError(
                f"the store's layout ({layout.model}, {layout.fingerprint.hex()[:16]}) is not "
                f"this model's cache ({mine.model}, {mine.fingerprint.hex()[:16]}): open the "
                "store with cachepawl.integrations.transformers.model_layout(model)"
            )
        self.store, self.model, self.max_pages = store, model, max_pages
        spec = layout.as_dict()
        self.page = layout.page_size_tokens
        self.attention: List[Dict[str, Any]] = spec.get("attention_layers", [])
        self.recurrent: List[Dict[str, Any]] = spec.get("ssm_layers", [])
        self.device = next(model.parameters()).device
        self._lock = threading.Lock()
        self.kv: List[Tuple[Any, Optional[Any]]] = []
        self.ssm: List[Tuple[Optional[Any], Optional[Any]]] = []
        for a in self.attention:
            dt = _DTYPES[a["dtype"]]
            if a.get("mla"):  # one latent: the compressed KV, then the rotary key
                shape = (max_pages, self.page, a["head_dim"])
                self.kv.append((self._empty(shape, dt), None))
                continue
            shape = (max_pages, self.page, a["num_kv_heads"], a["head_dim"])
            self.kv.append((self._empty(shape, dt), self._empty(shape, dt)))
        for s in self.recurrent:
            conv = None
            if s["conv_shape"]:
                conv = self._empty((1, *s["conv_shape"]), _DTYPES[s["conv_dtype"]])
            rec = None
            if s.get("ssm_shape"):
                rec = self._empty((1, *s["ssm_shape"]), _DTYPES[s["ssm_dtype"]])
            self.ssm.append((conv, rec))
        store.register_tensors(kv=self.kv or None, ssm=self.ssm or None)

    def _empty(self, shape: Sequence[int], dtype: Any) -> Any:
        t = torch.empty(tuple(shape), dtype=dtype, device=self.device)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(0x5A)

    # --- save -----------------------------------------------------------------------------

    def save(self, cache: Any, tokens: Sequence[int], *, namespace: str = "",
             first_page: int = 0) -> int:
        """Saves pages [first_page, P) of the cache's P full pages (and, when the cache's length
        is P pages, the state at that depth) under `namespace`. `tokens` holds at least the
        cache's tokens (a model without attention layers, Mamba-2: exactly them). Returns the
        tokens saved (P pages, or 0)."""
        tokens = list(tokens)
        if self.attention:
            # The first attention layer's count (a MiniMaxCache's layer 0 may be a lightning one).
            first = self.attention[0]["layer_index"]
            layers = getattr(cache, "layers", [])
            if first >= len(layers) or getattr(layers[first], "keys", None) is None:
                return 0  # nothing cached yet
            if layers[first].keys.shape[0] != 1:
                raise ValueError(f"cache: batch {layers[first].keys.shape[0]} (one sequence only)")
            seq = int(layers[first].get_seq_length())
        else:  # no attention layer to count the tokens: they are the cache's
            seq = len(tokens)
        if len(tokens) < seq:
            raise ValueError(f"tokens: {len(tokens)} tokens (the cache holds {seq})")
        pages = seq // self.page
        if not 0 <= first_page <= pages:
            raise ValueError(f"first_page: {first_page} (the cache has {pages} full pages)")
        with_state = bool(self.recurrent) and seq == pages * self.page and pages > 0
        with self._lock:
            for lo in range(first_page, pages, self.max_pages):
                hi = min(pages, lo + self.max_pages)
                for p in range(lo, hi):
                    self._put_page(cache, p, p - lo, seq)
                last = hi == pages
                if last and with_state:
                    self._put_state(cache)
                self._sync()  # the store's copy engines read the pool on their own streams
                kw: Dict[str, Any] = {}
                if last and with_state:
                    kw = dict(state_slot=0, state_depth_tokens=pages * self.page)
                slots = list(range(hi - lo)) if self.attention else []
                self.store.save(tokens[: hi * self.page], slots, namespace=namespace,
                                first_page=lo if slots else 0, **kw).wait()
            if first_page == pages and with_state:  # only the state is new
                self._put_state(cache)
                self._sync()
                self.store.save(tokens[:seq], [], namespace=namespace, first_page=0,
                                state_slot=0, state_depth_tokens=seq).wait()
        return pages * self.page

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _put_page(self, cache: Any, page: int, slot: int, seq: int) -> None:
        start = page * self.page
        for (k_pool, v_pool), a in zip(self.kv, self.attention):
            layer = cache.layers[a["layer_index"]]
            held = int(layer.keys.shape[-2])
            offset = start - (seq - held)  # a sliding layer holds only its last `held` tokens
            if offset < 0:
                raise ValueError(
                    f"attention layer {a['layer_index']} holds the last {held} tokens of {seq}: "
                    f"page {page} is gone from it (save after each prefill chunk, with "
                    "first_page, when the prompt is longer than the window)"
                )
            if v_pool is None:  # MLA: [1, 1, seq, rank] and [1, 1, seq, rope] -> latent
                k_pool[slot].copy_(torch.cat([layer.keys[0, 0, offset:offset + self.page, :],
                                              layer.values[0, 0, offset:offset + self.page, :]],
                                             -1))
                continue
            # [1, heads, seq, dim] -> [page, heads, dim]
            k_pool[slot].copy_(layer.keys[0, :, offset:offset + self.page, :].transpose(0, 1))
            v_pool[slot].copy_(layer.values[0, :, offset:offset + self.page, :].transpose(0, 1))

    def _put_state(self, cache: Any) -> None:
        for (conv, rec), s in zip(self.ssm, self.recurrent):
            if conv is None:  # lightning
                rec[0].copy_(_lightning(cache, s["layer_index"])[0])
                continue
            layer = cache.layers[s["layer_index"]]
            conv[0].copy_(layer.conv_states[0][0])
            if rec is not None:
                rec[0].copy_(layer.recurrent_states[0][0])

    # --- load -----------------------------------------------------------------------------

    def load(self, tokens: Sequence[int], *, namespace: str = "") -> Tuple[Any, int]:
        """The cache of the longest reusable prefix of `tokens` (at most len(tokens) - 1 tokens,
        at most max_pages pages) and its length in tokens; (an empty cache, 0) on a miss."""
        tokens = list(tokens)
        # At least one token is left to the model, and at most max_pages pages are loaded: the
        # lookup covers only that prefix, so that a hybrid model's match ends at a state within it.
        usable = (len(tokens) - 1) // self.page if tokens else 0
        if self.attention:  # (a model without attention layers loads no pages)
            usable = min(usable, self.max_pages)
        if usable == 0:
            return new_cache(self.model), 0
        match = self.store.lookup(tokens[: usable * self.page], namespace=namespace)
        pages = match.reusable_pages
        if pages == 0:
            return new_cache(self.model), 0
        try:
            with self._lock, self.store.lock(match, pages):
                slots = list(range(pages)) if self.attention else []
                state = 0 if self.recurrent else None
                self.store.load(match, slots, state).wait()
                cache = self._to_cache(pages)
                # The cache's copies out of the pool finish before the next load may refill it
                # (the store's copy streams do not wait for this stream).
                self._sync()
                return cache, pages * self.page
        except (NotFound, Busy):  # evicted or dropped meanwhile, or being read: a miss
            return new_cache(self.model), 0

    def _to_cache(self, pages: int) -> Any:
        cache = new_cache(self.model)
        n = pages * self.page
        for (k_pool, v_pool), a in zip(self.kv, self.attention):
            if hasattr(cache, "linear_cache"):  # a MiniMaxCache makes its layers on update
                layer: Any = _LayerUpdater(cache, a["layer_index"])
            else:
                layer = cache.layers[a["layer_index"]]
            if v_pool is None:  # MLA: the latent back into transformers' two parts
                rank = self.model.config.kv_lora_rank
                latent = k_pool[:pages].reshape(n, a["head_dim"])
                layer.update(latent[:, :rank].unsqueeze(0).unsqueeze(0).contiguous(),
                             latent[:, rank:].unsqueeze(0).unsqueeze(0).contiguous())
                continue
            k = k_pool[:pages].reshape(n, a["num_kv_heads"], a["head_dim"])
            v = v_pool[:pages].reshape(n, a["num_kv_heads"], a["head_dim"])
            layer.update(k.transpose(0, 1).unsqueeze(0).contiguous(),
                         v.transpose(0, 1).unsqueeze(0).contiguous())
        for (conv, rec), s in zip(self.ssm, self.recurrent):
            if conv is None:
                cache.set_linear_cache(s["layer_index"], rec[0].unsqueeze(0).clone())
                continue
            layer = cache.layers[s["layer_index"]]
            layer.update_conv_state(conv[0].unsqueeze(0).clone(), state_idx=0)
            if rec is not None:
                layer.update_recurrent_state(rec[0].unsqueeze(0).clone(), state_idx=0)
        return cache


def _state_dtype(layout: Layout) -> str:
    for s in layout.as_dict().get("ssm_layers", []):
        if s.get("ssm_shape") and s["conv_shape"]:
            return str(s["ssm_dtype"])
    return "fp32"


_BRIDGES_LOCK = threading.Lock()


def bridge(store: Store, model: Any, *, max_pages: int = 256) -> CacheBridge:
    """The store's bridge (made on first use with `max_pages`, kept on the store; a store serves
    one model)."""
    with _BRIDGES_LOCK:
        b = getattr(store, "_transformers_bridge", None)
        if b is None:
            b = CacheBridge(store, model, max_pages=max_pages)
            store._transformers_bridge = b  # type: ignore[attr-defined]
        elif b.model is not model:
            raise ValueError("store: its device pool already serves another model")
        return b


def save_cache(store: Store, cache: Any, tokens: Sequence[int], *, model: Any,
               namespace: str = "", first_page: int = 0, max_pages: int = 256) -> int:
    """Saves `cache` (of `model`, holding the first tokens of `tokens`) into `store`; returns
    the tokens saved. See the module's documentation."""
    return bridge(store, model, max_pages=max_pages).save(
        cache, tokens, namespace=namespace, first_page=first_page)


def load_cache(store: Store, model: Any, tokens: Sequence[int], *, namespace: str = "",
               max_pages: int = 256) -> Tuple[Any, int]:
    """(cache, tokens_reused): `model`'s cache of the longest prefix of `tokens` the store can
    restore; feed the model tokens[tokens_reused:]."""
    return bridge(store, model, max_pages=max_pages).load(tokens, namespace=namespace)
