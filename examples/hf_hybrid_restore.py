#!/usr/bin/env python3
"""The restore check: a real hybrid model, run by `transformers`, decodes bit-exactly from KV pages
and recurrent states that came back from the store, from disk, in a new process.

For every family asked for, a tiny model with seeded random weights (no download: the configs
are below) runs in bf16 on the GPU, in two processes:

  save     prefill the prompt one page at a time, as an engine's chunked prefill does; after
           each page copy that page's K/V and the recurrent state at that depth from the
           model's `DynamicCache` into the engine's paged pool (tensors registered with the
           store as its device pool) and Save them (namespace "tenant-a"); decode 32 tokens
           greedily from the untouched cache and keep the logits; Save the first pages again
           under "tenant-b" with other bytes; Close the store (disk tier, write-through).
  restore  a new process rebuilds the model from the same seed (its weights' digest must
           match), reopens the store on the same folder, looks the prompt up, Loads the pages
           and the state into fresh, poisoned pool slots, builds a `DynamicCache` from them and
           decodes the same 32 steps: every step's logits must equal the original's bit for bit.

Also checked: the layout built by `Layout.from_hf_config(config.json)` equals, tensor by
tensor, the shapes and dtypes of the model's own cache; a longer prompt sharing the first
pages reuses exactly the saved depth and no more; a Load asking for the state at a depth other
than the loaded pages' is refused by the store; namespaces never see each other's entries.
The largest logit difference against a full recompute without a cache is reported (a number,
not a pass: the kernels differ).

Usage (the GPU machine; the library from a build of this repository):
  CACHEPAWL_LIBRARY=build/libcachepawl.so PYTHONPATH=python \\
      python3 examples/hf_hybrid_restore.py [--families mamba2,jamba,gemma3_text|all] [--workdir DIR]
      [--page-size 16] [--prompt-pages 6] [--decode-steps 32] [--set [FAMILY.]KEY=JSON ...]

--set changes the tiny configs (shapes, layer patterns): `--set hidden_size=512` for every
family whose config class has the key, `--set jamba.attn_layer_period=4` for one family.

Prints one summary line per family and exits non-zero on any mismatch. Needs torch with CUDA
and transformers >= 5 (whose DynamicCache holds every family's recurrent state per layer).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

PAGE = 16  # tokens per page (the store's page size; --page-size)
VOCAB = 512

COMMON = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=64, use_mamba_kernels=False)

# model_type -> overrides of the config class's defaults (small, but every cache kind of the
# family present). Keys the config class does not have are left out automatically.
FAMILIES: Dict[str, Dict[str, Any]] = {
    "mamba2": dict(num_heads=8, head_dim=64, state_size=16, n_groups=2, conv_kernel=4,
                   chunk_size=32, expand=2),
    "falcon_mamba": dict(state_size=16, expand=2, conv_kernel=4),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                  expert_layer_offset=1, num_experts=2, num_experts_per_tok=1, mamba_d_state=16,
                  mamba_expand=2, mamba_dt_rank=16),
    "gemma3_text": dict(num_hidden_layers=6, sliding_window=32),
    "bamba": dict(attn_layer_indices=[1, 3], mamba_n_heads=8, mamba_d_head=64, mamba_n_groups=1,
                  mamba_d_state=16, mamba_expand=2, mamba_d_conv=4, mamba_chunk_size=32),
    "zamba2": dict(num_hidden_layers=6,
                   layers_block_type=["mamba", "mamba", "hybrid", "mamba", "mamba", "hybrid"],
                   mamba_d_state=16, n_mamba_heads=8, num_mem_blocks=1, adapter_rank=8,
                   mamba_ngroups=1, chunk_size=32),
    "falcon_h1": dict(mamba_n_heads=8, mamba_d_head=64, mamba_n_groups=1, mamba_d_state=16,
                      mamba_d_conv=4, mamba_d_ssm=512, mamba_chunk_size=32),
    "granitemoehybrid": dict(layer_types=["mamba", "attention", "mamba", "attention"],
                             mamba_n_heads=8, mamba_d_head=64, mamba_d_state=16,
                             mamba_n_groups=1, num_local_experts=2, num_experts_per_tok=1,
                             shared_intermediate_size=256, mamba_chunk_size=32),
    "nemotron_h": dict(hybrid_override_pattern="M*M-", mamba_num_heads=8, mamba_head_dim=64,
                       ssm_state_size=16, n_groups=1, expand=2, conv_kernel=4, chunk_size=32),
    "qwen3_next": dict(full_attention_interval=2, linear_num_key_heads=2,
                       linear_num_value_heads=4, linear_key_head_dim=32,
                       linear_value_head_dim=32, linear_conv_kernel_dim=4, num_experts=2,
                       num_experts_per_tok=1, moe_intermediate_size=128,
                       shared_expert_intermediate_size=128),
    "qwen3_5_text": dict(full_attention_interval=2, linear_num_key_heads=2,
                         linear_num_value_heads=4, linear_key_head_dim=32,
                         linear_value_head_dim=32, linear_conv_kernel_dim=4),
    "qwen3_5_moe_text": dict(full_attention_interval=2, linear_num_key_heads=2,
                             linear_num_value_heads=4, linear_key_head_dim=32,
                             linear_value_head_dim=32, linear_conv_kernel_dim=4, num_experts=2,
                             num_experts_per_tok=1, moe_intermediate_size=128,
                             shared_expert_intermediate_size=128),
    "lfm2": dict(layer_types=["conv", "full_attention", "conv", "full_attention"],
                 conv_L_cache=3, block_dim=256),
    "lfm2_moe": dict(layer_types=["conv", "full_attention", "conv", "full_attention"],
                     conv_L_cache=3, num_experts=2, num_experts_per_tok=1, num_dense_layers=1,
                     moe_intermediate_size=128),
    "gpt_oss": dict(sliding_window=32, num_local_experts=2, num_experts_per_tok=1),
    # MLA: keys expand to every query head, so num_key_value_heads is num_attention_heads.
    "deepseek_v3": dict(num_key_value_heads=4, kv_lora_rank=64, q_lora_rank=64,
                        qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
                        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                        first_k_dense_replace=1, moe_intermediate_size=128),
    # Lightning attention (a state, no conv) on the odd layers; MiniMaxCache holds its states.
    "minimax": dict(layer_types=["full_attention", "linear_attention", "full_attention",
                                 "linear_attention"], num_local_experts=2, num_experts_per_tok=1),
    "zamba": dict(layer_types=["linear_attention", "hybrid", "linear_attention", "hybrid"],
                  n_mamba_heads=2,
                  mamba_d_state=16, mamba_expand=2, attention_head_dim=64),
    "olmo_hybrid": dict(layer_types=["linear_attention", "full_attention", "linear_attention",
                                     "full_attention"], linear_num_key_heads=2,
                        linear_num_value_heads=4, linear_key_head_dim=32,
                        linear_value_head_dim=32, linear_conv_kernel_dim=4, pad_token_id=0,
                        eos_token_id=2),
    "kimi_linear": dict(num_key_value_heads=4, kv_lora_rank=64, qk_rope_head_dim=16,
                        qk_nope_head_dim=32, v_head_dim=32,
                        layer_types=["linear_attention", "full_attention", "linear_attention",
                                     "full_attention"],
                        linear_head_dim=32, linear_num_heads=4, linear_conv_kernel_dim=4,
                        num_local_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                        moe_intermediate_size=128, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2),
    "llama": dict(),
}
ALIASES = {"gemma3": "gemma3_text", "mamba-2": "mamba2"}
DEFAULT_FAMILIES = "all"

SEED = 20261124
PROMPT_PAGES = 6  # --prompt-pages
DECODE_STEPS = 32  # --decode-steps
# --set: config overrides, "*" for every family, else per family.
SETS: Dict[str, Dict[str, Any]] = {}
NS_A, NS_B, NS_C = "tenant-a", "tenant-b", "tenant-c"
B_PAGES = 2  # the pages saved again under NS_B


class CheckFailed(Exception):
    pass


def require(cond: bool, what: str) -> None:
    if not cond:
        raise CheckFailed(what)


# ----------------------------------------------------------------------------------------------
# The model and its cache (transformers' side)


def build_model(config_dir: str) -> Tuple[Any, Any, str]:
    """The model of config_dir/config.json with weights drawn from SEED, in bf16 on the GPU,
    and the sha256 of its weights (so the restore process proves it has the same model)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(config_dir)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config).to(device="cuda", dtype=torch.bfloat16)
    model.eval()
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return config, model, digest.hexdigest()


def write_config(family: str, config_dir: str) -> None:
    """config_dir/config.json of the tiny model, as save_pretrained writes a hub checkpoint's."""
    from transformers import AutoConfig

    defaults = AutoConfig.for_model(family).to_dict()
    overrides = {**{k: v for k, v in COMMON.items() if k in defaults}, **FAMILIES[family]}
    overrides.update({k: v for k, v in SETS.get("*", {}).items() if k in defaults})
    overrides.update(SETS.get(family, {}))
    if "kv_lora_rank" in defaults:
        # MLA: the rotary embedding's width (head_dim) is the latent's rotary part, which the
        # class derives; COMMON's head_dim must not override it.
        overrides["head_dim"] = overrides.get("qk_rope_head_dim", defaults["qk_rope_head_dim"])
    AutoConfig.for_model(family, **overrides).save_pretrained(config_dir)


def cache_kwarg(model: Any) -> str:
    """The forward argument that carries the cache: Mamba-2 calls it cache_params."""
    params = inspect.signature(model.forward).parameters
    return "past_key_values" if "past_key_values" in params else "cache_params"


def new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    if model.config.model_type == "minimax":  # its own cache class: lightning states apart
        from transformers.models.minimax.modeling_minimax import MiniMaxCache

        return MiniMaxCache()
    return DynamicCache(config=model.config)


def lightning_state(cache: Any, index: int) -> Any:
    """A lightning layer's state in a MiniMaxCache ([batch, heads, head_dim, head_dim])."""
    return cache.linear_cache[index] if index < len(cache.linear_cache) else None


def decode(model: Any, cache: Any, first_token: Any, steps: int) -> Tuple[Any, List[int]]:
    """Greedy decode from `cache`: feeds first_token, then each argmax. Returns every step's
    logits (bf16, [steps, vocab]) and the tokens fed."""
    import torch

    kw = cache_kwarg(model)
    token = first_token.view(1, 1)
    fed: List[int] = []
    logits = []
    with torch.no_grad():
        for _ in range(steps):
            fed.append(int(token.item()))
            out = model(input_ids=token, use_cache=True, **{kw: cache})
            step = out.logits[0, -1, :].clone()
            logits.append(step)
            token = step.argmax().view(1, 1)
    return torch.stack(logits), fed


# ----------------------------------------------------------------------------------------------
# The engine's side: a paged pool registered with the store, and copies between it and the
# model's DynamicCache.


class Updater:
    """cache.update(k, v, index) in the shape of a cache layer's update(k, v)."""

    def __init__(self, cache: Any, index: int) -> None:
        self.cache, self.index = cache, index

    def update(self, k: Any, v: Any) -> None:
        self.cache.update(k, v, self.index)


class PagedPool:
    """The engine's device pool: K and V of every attention layer as
    [num_pages, page, kv_heads, head_dim] (an MLA layer: one latent [num_pages, page, latent],
    the compressed KV then the rotary key, as vLLM keeps it; transformers caches the two parts
    as the layer's keys and values), and conv / recurrent state of every recurrent layer as
    [num_slots, *shape]; poisoned (NaN for floats) so nothing stale passes for loaded data."""

    def __init__(self, layout: Any, num_pages: int, num_slots: int) -> None:
        import torch

        spec = layout.as_dict()
        self.attention = spec.get("attention_layers", [])
        self.recurrent = spec.get("ssm_layers", [])
        self.page = spec["page_size_tokens"]
        self.kv: List[Tuple[Any, Optional[Any]]] = []
        self.ssm: List[Tuple[Any, Optional[Any]]] = []
        dev = "cuda"
        for a in self.attention:
            dt = torch_dtype(a["dtype"])
            if a.get("mla"):
                latent = torch.empty((num_pages, self.page, a["head_dim"]), dtype=dt, device=dev)
                self.kv.append((poison(latent), None))
                continue
            shape = (num_pages, self.page, a["num_kv_heads"], a["head_dim"])
            self.kv.append((poison(torch.empty(shape, dtype=dt, device=dev)),
                            poison(torch.empty(shape, dtype=dt, device=dev))))
        for s in self.recurrent:
            if not s["conv_shape"]:  # lightning: a state, no conv
                self.ssm.append((None, poison(torch.empty(
                    (num_slots, *s["ssm_shape"]), dtype=torch_dtype(s["ssm_dtype"]),
                    device=dev))))
                continue
            conv = poison(torch.empty((num_slots, *s["conv_shape"]),
                                      dtype=torch_dtype(s["conv_dtype"]), device=dev))
            rec = None
            if s.get("ssm_shape"):
                rec = poison(torch.empty((num_slots, *s["ssm_shape"]),
                                         dtype=torch_dtype(s["ssm_dtype"]), device=dev))
            self.ssm.append((conv, rec))

    def register(self, store: Any) -> None:
        store.register_tensors(kv=self.kv, ssm=self.ssm)

    def put_page(self, cache: Any, page_slot: int) -> None:
        """The last `page` tokens of every attention layer's K/V in `cache` -> page_slot."""
        import torch

        for (k_pool, v_pool), a in zip(self.kv, self.attention):
            layer = cache.layers[a["layer_index"]]
            if v_pool is None:  # MLA: [1, 1, seq, kv_lora_rank] and [1, 1, seq, rope] -> latent
                k_pool[page_slot].copy_(torch.cat(
                    [layer.keys[0, 0, -self.page:, :], layer.values[0, 0, -self.page:, :]], -1))
                continue
            # [1, heads, seq, dim] -> [page, heads, dim]
            k_pool[page_slot].copy_(layer.keys[0, :, -self.page:, :].transpose(0, 1))
            v_pool[page_slot].copy_(layer.values[0, :, -self.page:, :].transpose(0, 1))

    def put_state(self, cache: Any, slot: int) -> None:
        for (conv, rec), s in zip(self.ssm, self.recurrent):
            if conv is None:
                rec[slot].copy_(lightning_state(cache, s["layer_index"])[0])
                continue
            layer = cache.layers[s["layer_index"]]
            conv[slot].copy_(layer.conv_states[0][0])
            if rec is not None:
                rec[slot].copy_(layer.recurrent_states[0][0])

    def to_cache(self, model: Any, pages: List[int], slot: int) -> Any:
        """A fresh DynamicCache holding pages `pages` (in order) and the state in `slot`."""
        import torch

        cache = new_cache(model)
        index = torch.tensor(pages, device="cuda", dtype=torch.long)
        for (k_pool, v_pool), a in zip(self.kv, self.attention):
            n = len(pages) * self.page
            if not hasattr(cache, "linear_cache"):
                layer = cache.layers[a["layer_index"]]
            else:  # a MiniMaxCache makes its layers as they are first updated
                layer = Updater(cache, a["layer_index"])
            if v_pool is None:  # MLA: the latent back into transformers' two parts
                rank = model.config.kv_lora_rank
                latent = k_pool.index_select(0, index).reshape(n, a["head_dim"])
                layer.update(latent[:, :rank].unsqueeze(0).unsqueeze(0).contiguous(),
                             latent[:, rank:].unsqueeze(0).unsqueeze(0).contiguous())
                continue
            k = k_pool.index_select(0, index).reshape(n, a["num_kv_heads"], a["head_dim"])
            v = v_pool.index_select(0, index).reshape(n, a["num_kv_heads"], a["head_dim"])
            layer.update(k.transpose(0, 1).unsqueeze(0).contiguous(),
                         v.transpose(0, 1).unsqueeze(0).contiguous())
        for (conv, rec), s in zip(self.ssm, self.recurrent):
            if conv is None:
                cache.set_linear_cache(s["layer_index"], rec[slot].unsqueeze(0).clone())
                continue
            layer = cache.layers[s["layer_index"]]
            layer.update_conv_state(conv[slot].unsqueeze(0).clone(), state_idx=0)
            if rec is not None:
                layer.update_recurrent_state(rec[slot].unsqueeze(0).clone(), state_idx=0)
        return cache

    def page_bytes(self, page_slot: int) -> bytes:
        out = bytearray()
        for k_pool, v_pool in self.kv:
            out += tensor_bytes(k_pool[page_slot])
            if v_pool is not None:
                out += tensor_bytes(v_pool[page_slot])
        return bytes(out)


def torch_dtype(name: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def poison(t: Any) -> Any:
    return t.fill_(float("nan"))


def tensor_bytes(t: Any) -> bytes:
    import torch

    return t.contiguous().view(torch.uint8).cpu().numpy().tobytes()


def check_layout_against_cache(layout: Any, cache: Any) -> None:
    """Every tensor the layout (from config.json) describes has the shape and dtype of the
    model's own cache tensor, and every cache tensor of the model is in the layout."""
    spec = layout.as_dict()
    names = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    described = set()
    for a in spec.get("attention_layers", []):
        i = a["layer_index"]
        layer = cache.layers[i]
        if a.get("mla"):  # one head of kv_lora_rank (keys) and one of the rotary part (values)
            got = ((layer.keys.shape[1], layer.values.shape[1],
                    layer.keys.shape[3] + layer.values.shape[3]),
                   names[str(layer.keys.dtype).replace("torch.", "")])
            want = ((1, 1, a["head_dim"]), a["dtype"])
            require(got == want, f"layer {i} MLA latent: cache has {got}, layout says {want}")
            described.add((i, "kv"))
            continue
        got = (tuple(layer.keys.shape[1:2]) + tuple(layer.keys.shape[3:]),
               names[str(layer.keys.dtype).replace("torch.", "")])
        want = ((a["num_kv_heads"], a["head_dim"]), a["dtype"])
        require(got == want, f"layer {i} K: cache has {got}, layout says {want}")
        described.add((i, "kv"))
    for s in spec.get("ssm_layers", []):
        i = s["layer_index"]
        if not s["conv_shape"]:  # lightning: the K^T V state alone, in a MiniMaxCache
            rec = lightning_state(cache, i)
            require(rec is not None and len(getattr(rec, "shape", ())) == 4,
                    f"layer {i}: the layout has a lightning state, the cache none")
            got = (tuple(rec.shape[1:]), names[str(rec.dtype).replace("torch.", "")])
            want = (tuple(s["ssm_shape"]), s["ssm_dtype"])
            require(got == want, f"layer {i} lightning state: cache has {got}, layout says {want}")
            described.add((i, "ssm"))
            continue
        layer = cache.layers[i]
        conv = layer.conv_states[0]
        got = (tuple(conv.shape[1:]), names[str(conv.dtype).replace("torch.", "")])
        want = (tuple(s["conv_shape"]), s["conv_dtype"])
        require(got == want, f"layer {i} conv state: cache has {got}, layout says {want}")
        rec = layer.recurrent_states[0]
        if s.get("ssm_shape"):
            require(rec is not None, f"layer {i}: layout has a recurrent state, the cache none")
            got = (tuple(rec.shape[1:]), names[str(rec.dtype).replace("torch.", "")])
            want = (tuple(s["ssm_shape"]), s["ssm_dtype"])
            require(got == want, f"layer {i} recurrent state: cache has {got}, layout says {want}")
        else:
            require(rec is None, f"layer {i}: the cache has a recurrent state the layout lacks")
        described.add((i, "ssm"))
    for i, layer in enumerate(cache.layers):
        if getattr(layer, "keys", None) is not None and layer.keys.numel() > 0:
            require((i, "kv") in described, f"layer {i}: K/V in the cache, not in the layout")
        conv_states = getattr(layer, "conv_states", {}) or {}
        if conv_states.get(0) is not None:
            require((i, "ssm") in described, f"layer {i}: a state in the cache, not in the layout")
    for i, state in enumerate(getattr(cache, "linear_cache", [])):
        if hasattr(state, "shape"):
            require((i, "ssm") in described, f"layer {i}: a lightning state, not in the layout")


# ----------------------------------------------------------------------------------------------
# The two processes


def open_store(layout: Any, store_dir: str) -> Any:
    import cachepawl

    return cachepawl.Store(layout, host_bytes=256 << 20, disk_dir=store_dir,
                           disk_bytes=1 << 30, write_policy="through", cuda_device=0)


def hf_layout(config_dir: str) -> Any:
    import cachepawl

    return cachepawl.Layout.from_hf_config(os.path.join(config_dir, "config.json"),
                                           dtype="bf16", state_dtype="fp32",
                                           convention="transformers", page_size_tokens=PAGE)


def prompt_tokens() -> Any:
    import torch

    g = torch.Generator(device="cpu").manual_seed(SEED + 1)
    return torch.randint(0, VOCAB, (PROMPT_PAGES * PAGE + 1,), generator=g)


def phase_save(family: str, work: str) -> Dict[str, Any]:
    import torch

    config_dir = os.path.join(work, "config")
    write_config(family, config_dir)
    config, model, weights = build_model(config_dir)
    layout = hf_layout(config_dir)
    prompt = prompt_tokens()
    ids = prompt.to("cuda").view(1, -1)
    n_tokens = PROMPT_PAGES * PAGE
    pool = PagedPool(layout, num_pages=4 * PROMPT_PAGES, num_slots=2 * PROMPT_PAGES + 2)
    kw = cache_kwarg(model)
    has_state = layout.num_ssm_layers > 0
    result: Dict[str, Any] = {"weights_sha256": weights, "layout": layout.as_dict()}
    with open_store(layout, os.path.join(work, "store")) as store:
        require(store.gpu_mode, "the store is not in GPU mode (no CUDA device?)")
        pool.register(store)
        cache = new_cache(model)
        tokens = prompt.tolist()
        with torch.no_grad():
            for p in range(PROMPT_PAGES):
                model(input_ids=ids[:, p * PAGE:(p + 1) * PAGE], use_cache=True, **{kw: cache})
                if p == 0:
                    check_layout_against_cache(layout, cache)
                pool.put_page(cache, page_slot=p)
                pool.put_state(cache, slot=p)
                torch.cuda.synchronize()  # the copy engine reads the pool on its own stream
                pages = [p] if layout.num_attention_layers > 0 else []
                state = dict(state_slot=p, state_depth_tokens=(p + 1) * PAGE) if has_state else {}
                # A pure SSM layout (no attention) passes no device pages, anywhere.
                store.save(tokens[:(p + 1) * PAGE], pages, namespace=NS_A,
                           first_page=p if pages else 0, **state).wait(timeout=60)
        # The untouched original decodes.
        logits, fed = decode(model, cache, ids[0, n_tokens], DECODE_STEPS)
        # A full recompute without a cache, for the record (not expected to be bit-equal).
        with torch.no_grad():
            full = torch.tensor(tokens[:n_tokens] + fed, device="cuda").view(1, -1)
            ref = model(input_ids=full, use_cache=False).logits[0, n_tokens:, :]
        result["recompute_max_abs_diff"] = float((ref.float() - logits.float()).abs().max())
        # Namespace isolation: nothing under tenant-b yet; then tenant-b gets other bytes.
        miss = store.lookup(tokens, namespace=NS_B)
        require(miss.reusable_pages == 0 and miss.kv_only_pages == 0,
                f"{NS_B} sees {NS_A}'s entries before saving any: {miss.kv_only_pages} pages")
        b_pages = B_PAGES
        for p in range(b_pages):
            slot = 2 * PROMPT_PAGES + p
            for k_pool, v_pool in pool.kv:
                k_pool[slot].copy_(k_pool[p] + 1)
                if v_pool is not None:  # an MLA layer has its latent alone
                    v_pool[slot].copy_(v_pool[p] - 1)
            for conv, rec in pool.ssm:
                if conv is not None:  # a lightning layer has its state alone
                    conv[PROMPT_PAGES + p].copy_(conv[p] * 2)
                if rec is not None:
                    rec[PROMPT_PAGES + p].copy_(rec[p] * 2)
        torch.cuda.synchronize()
        b_state = dict(state_slot=PROMPT_PAGES + b_pages - 1,
                       state_depth_tokens=b_pages * PAGE) if has_state else {}
        if layout.num_attention_layers > 0:
            store.save(tokens[:b_pages * PAGE], [2 * PROMPT_PAGES + p for p in range(b_pages)],
                       namespace=NS_B, **b_state).wait(timeout=60)
            result["b_page_bytes"] = [hashlib.sha256(pool.page_bytes(2 * PROMPT_PAGES + p))
                                      .hexdigest() for p in range(b_pages)]
        else:
            store.save(tokens[:b_pages * PAGE], [], namespace=NS_B, **b_state).wait(timeout=60)
        result["b_state_bytes"] = state_digest(pool, PROMPT_PAGES + b_pages - 1)
        result["a_state_bytes"] = state_digest(pool, PROMPT_PAGES - 1)
        result["stats_save"] = {k: v for k, v in store.stats().items() if "disk" in k}
    torch.save({"logits": logits.cpu(), "fed": fed, "prompt": prompt},
               os.path.join(work, "original.pt"))
    return result


def state_digest(pool: PagedPool, slot: int) -> str:
    h = hashlib.sha256()
    for conv, rec in pool.ssm:
        if conv is not None:
            h.update(tensor_bytes(conv[slot]))
        if rec is not None:
            h.update(tensor_bytes(rec[slot]))
    return h.hexdigest()


def phase_restore(family: str, work: str, saved: Dict[str, Any]) -> Dict[str, Any]:
    import cachepawl
    import torch

    config_dir = os.path.join(work, "config")
    config, model, weights = build_model(config_dir)
    require(weights == saved["weights_sha256"], "the rebuilt model's weights differ")
    layout = hf_layout(config_dir)
    original = torch.load(os.path.join(work, "original.pt"))
    prompt = original["prompt"]
    tokens = prompt.tolist()
    n_tokens = PROMPT_PAGES * PAGE
    pool = PagedPool(layout, num_pages=4 * PROMPT_PAGES, num_slots=2 * PROMPT_PAGES + 2)
    has_kv = layout.num_attention_layers > 0
    has_state = layout.num_ssm_layers > 0
    result: Dict[str, Any] = {}
    with open_store(layout, os.path.join(work, "store")) as store:
        pool.register(store)
        match = store.lookup(tokens, namespace=NS_A)
        require(match.reusable_pages == PROMPT_PAGES,
                f"after the restart the prompt reuses {match.reusable_pages} pages, expected "
                f"{PROMPT_PAGES}")
        tiers = {t.name for t in match.page_tiers} | {match.state_tier.name}
        result["tiers_after_restart"] = sorted(tiers - {"NONE"})
        # Fresh slots, in another order than at save time.
        load_pages = list(range(4 * PROMPT_PAGES - 1, 3 * PROMPT_PAGES - 1, -1)) if has_kv else []
        slot = 2 * PROMPT_PAGES + 1
        t0 = time.perf_counter()
        store.load(match, load_pages, slot if has_state else None).wait(timeout=60)
        result["load_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
        torch.cuda.synchronize()
        cache = pool.to_cache(model, load_pages, slot)
        logits, fed = decode(model, cache, prompt[n_tokens].to("cuda"), DECODE_STEPS)
        want = original["logits"].to("cuda")
        equal_steps = sum(bool(torch.equal(logits[i], want[i])) for i in range(DECODE_STEPS))
        result["equal_steps"] = equal_steps
        result["max_abs_diff_vs_original"] = float((logits.float() - want.float()).abs().max())
        require(fed == original["fed"], "the restored model chose other tokens")
        require(equal_steps == DECODE_STEPS,
                f"{DECODE_STEPS - equal_steps} of {DECODE_STEPS} decode steps differ")

        # A longer prompt sharing the first pages reuses exactly the saved depth.
        g = torch.Generator(device="cpu").manual_seed(SEED + 2)
        longer = tokens[:n_tokens] + torch.randint(0, VOCAB, (2 * PAGE + 3,), generator=g).tolist()
        m2 = store.lookup(longer, namespace=NS_A)
        require(m2.reusable_pages == PROMPT_PAGES,
                f"a longer prompt reuses {m2.reusable_pages} pages, expected {PROMPT_PAGES}")
        shorter = tokens[:(PROMPT_PAGES - 1) * PAGE + PAGE // 2]
        m3 = store.lookup(shorter, namespace=NS_A)
        require(m3.reusable_pages == PROMPT_PAGES - 1,
                f"a prompt of {len(shorter)} tokens reuses {m3.reusable_pages} pages, expected "
                f"{PROMPT_PAGES - 1}")
        # The state at a depth other than the loaded pages' is refused.
        refused = "n/a: no state" if not has_state else ""
        try:
            if has_state and has_kv:
                store.load(match, load_pages[:-1], slot).wait(timeout=60)
            elif has_state:
                store.load(match, [], slot, first_page=PROMPT_PAGES - 1).wait(timeout=60)
        except cachepawl.Error as e:
            refused = f"{type(e).__name__}: {e}"
        require(refused != "", "a Load of the state at a mismatched depth was not refused")
        result["mismatched_depth_refusal"] = refused

        # Namespaces: tenant-b has its own bytes for the first two pages; tenant-c has nothing.
        mb = store.lookup(tokens, namespace=NS_B)
        require(mb.reusable_pages == B_PAGES,
                f"{NS_B} reuses {mb.reusable_pages} pages, expected {B_PAGES}")
        b_slot = 2 * PROMPT_PAGES
        b_pages = list(range(B_PAGES)) if has_kv else []
        store.load(mb, b_pages, b_slot if has_state else None).wait(timeout=60)
        torch.cuda.synchronize()
        if has_kv:
            got = [hashlib.sha256(pool.page_bytes(p)).hexdigest() for p in b_pages]
            require(got == saved["b_page_bytes"], f"{NS_B}'s pages came back with other bytes")
        require(state_digest(pool, b_slot) == saved["b_state_bytes"],
                f"{NS_B}'s state came back with other bytes")
        require(state_digest(pool, slot) == saved["a_state_bytes"],
                f"{NS_A}'s state came back with other bytes")
        mc = store.lookup(tokens, namespace=NS_C)
        require(mc.kv_only_pages == 0 and mc.reusable_pages == 0, f"{NS_C} sees entries")
    return result


# ----------------------------------------------------------------------------------------------
# Driver: one pair of processes per family, a summary line each.


def run_phase(phase: str, family: str, work: str, passed: List[str]) -> Dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--family", family,
           "--workdir", work] + passed
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out_file = os.path.join(work, f"{phase}.json")
    if proc.returncode != 0 or not os.path.exists(out_file):
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-12:]
        raise CheckFailed(f"{phase} process exited {proc.returncode}: " + " | ".join(tail))
    with open(out_file) as f:
        data: Dict[str, Any] = json.load(f)
    if "error" in data:
        raise CheckFailed(f"{phase}: {data['error']}")
    return data


def summary(family: str, saved: Dict[str, Any], restored: Dict[str, Any]) -> str:
    lay = saved["layout"]
    return (f"{family}: OK  layout from config.json = the model's cache tensors "
            f"({len(lay.get('attention_layers', []))} attention, "
            f"{len(lay.get('ssm_layers', []))} recurrent layers); "
            f"restored {PROMPT_PAGES} pages{' + state' if lay.get('ssm_layers') else ''} from "
            f"{'/'.join(restored['tiers_after_restart'])} "
            f"in a new process (load {restored['load_ms']} ms); "
            f"{restored['equal_steps']}/{DECODE_STEPS} decode steps bit-exact; "
            f"vs full recompute max |dlogit| {saved['recompute_max_abs_diff']:.4g}; "
            f"longer prompt reuses exactly {PROMPT_PAGES} pages; mismatched-depth load refused "
            f"({restored['mismatched_depth_refusal'].split(':')[0]}); namespaces isolated")


def main() -> int:
    global PAGE, PROMPT_PAGES, DECODE_STEPS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default=DEFAULT_FAMILIES,
                    help=f"comma-separated model_types (known: {','.join(FAMILIES)}; 'all')")
    ap.add_argument("--workdir", help="folder for the stores (default: a temporary folder)")
    ap.add_argument("--page-size", type=int, default=PAGE, help="tokens per page (16)")
    ap.add_argument("--prompt-pages", type=int, default=PROMPT_PAGES,
                    help="pages of the saved prompt (6; at least 3)")
    ap.add_argument("--decode-steps", type=int, default=DECODE_STEPS,
                    help="greedy decode steps compared (32)")
    ap.add_argument("--set", action="append", default=[], metavar="[FAMILY.]KEY=JSON",
                    help="a config value of the tiny models (every family's, or one family's)")
    ap.add_argument("--phase", choices=["save", "restore"], help=argparse.SUPPRESS)
    ap.add_argument("--family", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.page_size < 1 or args.prompt_pages < 3 or args.decode_steps < 1:
        print(f"--page-size {args.page_size}, --prompt-pages {args.prompt_pages}, "
              f"--decode-steps {args.decode_steps}: need >= 1, >= 3, >= 1", file=sys.stderr)
        return 2
    PAGE, PROMPT_PAGES, DECODE_STEPS = args.page_size, args.prompt_pages, args.decode_steps
    for item in args.set:
        key, eq, text = item.partition("=")
        family, dot, name = key.rpartition(".")
        if not eq or not name:
            print(f"--set {item}: expected [FAMILY.]KEY=JSON", file=sys.stderr)
            return 2
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            print(f"--set {item}: the value is not JSON ({e})", file=sys.stderr)
            return 2
        SETS.setdefault(family if dot else "*", {})[name] = value
    passed = ["--page-size", str(PAGE), "--prompt-pages", str(PROMPT_PAGES), "--decode-steps",
              str(DECODE_STEPS)] + [a for item in args.set for a in ("--set", item)]

    if args.phase:
        out_file = os.path.join(args.workdir, f"{args.phase}.json")
        try:
            if args.phase == "save":
                data = phase_save(args.family, args.workdir)
            else:
                with open(os.path.join(args.workdir, "save.json")) as f:
                    data = phase_restore(args.family, args.workdir, json.load(f))
        except CheckFailed as e:
            data = {"error": str(e)}
        with open(out_file, "w") as f:
            json.dump(data, f, indent=1)
        return 0

    names = list(FAMILIES) if args.families == "all" else [
        ALIASES.get(f.strip(), f.strip()) for f in args.families.split(",") if f.strip()]
    unknown = [f for f in names if f not in FAMILIES] + [
        f"{f} (in --set)" for f in SETS if f != "*" and f not in FAMILIES]
    if unknown:
        print(f"--families: {','.join(unknown)} (known: {','.join(FAMILIES)})", file=sys.stderr)
        return 2
    root = args.workdir or tempfile.mkdtemp(prefix="cachepawl-hf-restore-")
    failures = 0
    report: Dict[str, Any] = {}
    for family in names:
        work = os.path.join(root, family)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        try:
            saved = run_phase("save", family, work, passed)
            restored = run_phase("restore", family, work, passed)
            print(summary(family, saved, restored), flush=True)
            report[family] = {"save": saved, "restore": restored}
        except CheckFailed as e:
            failures += 1
            print(f"{family}: FAILED  {e}", flush=True)
            report[family] = {"error": str(e)}
    with open(os.path.join(root, "report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(f"{len(names) - failures} passed, {failures} failed")
    if not args.workdir:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
