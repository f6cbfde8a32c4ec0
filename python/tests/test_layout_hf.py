"""Layout.from_hf_config: a Hugging Face config.json as a path, JSON text or a dict; the dtype,
convention, page size and name arguments; errors naming the argument or the config key; and a
store of an LFM2 layout (short convolutions: a conv state, no SSM state) round-tripping pages
and a state byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict

import pytest

import cachepawl
from cachepawl import Kind, Layout
from conftest import fill, tokens

# Jamba with 4 layers: attention at 1 and 3 (attn_layer_period 2, offset 1; 2 KV heads of
# 256 / 4 = 64), Mamba-1 at 0 and 2 (d_inner 2 * 256, d_state 16, d_conv 4).
JAMBA: Dict[str, Any] = {
    "model_type": "jamba",
    "_name_or_path": "test/tiny-jamba",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "attn_layer_period": 2,
    "attn_layer_offset": 1,
    "mamba_d_state": 16,
}
# LFM2 with 4-token pages: short convolutions at 0 and 2 (conv [64, 3] bf16), attention at 1 and
# 3 (2 KV heads of 64 / 4 = 16).
LFM2: Dict[str, Any] = {
    "model_type": "lfm2",
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "layer_types": ["conv", "full_attention", "conv", "full_attention"],
    "conv_L_cache": 3,
}


def test_config_as_dict_text_bytes_or_path(tmp_path: Path) -> None:
    from_dict = Layout.from_hf_config(JAMBA)
    d = from_dict.as_dict()
    assert d["model"] == "test/tiny-jamba" and d["num_layers"] == 4
    assert [a["layer_index"] for a in d["attention_layers"]] == [1, 3]
    assert d["attention_layers"][0]["num_kv_heads"] == 2
    assert d["attention_layers"][0]["head_dim"] == 64
    assert d["ssm_layers"][0]["block"] == "mamba1"
    assert d["ssm_layers"][0]["conv_shape"] == [512, 4]  # transformers keeps all d_conv columns
    assert d["ssm_layers"][0]["ssm_shape"] == [512, 16]
    text = json.dumps(JAMBA, indent=2)
    assert Layout.from_hf_config(text) == from_dict
    assert Layout.from_hf_config("\n  " + text) == from_dict
    assert Layout.from_hf_config(text.encode()) == from_dict
    path = tmp_path / "config.json"
    path.write_text(text)
    assert Layout.from_hf_config(path) == from_dict
    assert Layout.from_hf_config(str(path)) == from_dict


def test_arguments_set_dtypes_convention_page_size_and_name() -> None:
    lay = Layout.from_hf_config(
        JAMBA,
        dtype="fp16",
        state_dtype="bf16",
        convention="sglang",
        page_size_tokens=32,
        model="mine",
    )
    d = lay.as_dict()
    assert (d["model"], d["page_size_tokens"]) == ("mine", 32)
    assert d["attention_layers"][0]["dtype"] == "fp16"
    s = d["ssm_layers"][0]
    assert (s["conv_shape"], s["conv_dtype"], s["ssm_dtype"]) == ([512, 3], "fp16", "bf16")
    assert lay.kv_page_bytes == 2 * 2 * (32 * 2 * 64 * 2)
    assert Layout.from_hf_config(LFM2).ssm_state_bytes(0) == 0
    assert Layout.from_hf_config(LFM2).state_bytes == 2 * 64 * 3 * 2


def test_errors_name_the_argument_or_the_config_key(tmp_path: Path) -> None:
    with pytest.raises(cachepawl.InvalidArgument, match=r"num_key_value_heads: 0 \(must be > 0\)"):
        Layout.from_hf_config({**JAMBA, "num_key_value_heads": 0})
    with pytest.raises(cachepawl.InvalidArgument, match=r"model_type: 'gpt2' \(not a family"):
        Layout.from_hf_config({"model_type": "gpt2"})
    with pytest.raises(
        cachepawl.InvalidArgument, match=r'num_hidden_layers: "4" \(expected an integer\)'
    ):
        Layout.from_hf_config({**JAMBA, "num_hidden_layers": "4"})
    with pytest.raises(cachepawl.InvalidArgument, match=r"cache_dtype: 'fp13' \(unknown dtype"):
        Layout.from_hf_config(JAMBA, dtype="fp13")
    with pytest.raises(cachepawl.InvalidArgument, match=r"state_dtype: 'x' \(unknown dtype"):
        Layout.from_hf_config(JAMBA, state_dtype="x")
    with pytest.raises(cachepawl.InvalidArgument, match=r"convention: 'vllm'"):
        Layout.from_hf_config(JAMBA, convention="vllm")
    with pytest.raises(cachepawl.InvalidArgument, match=r"page_size_tokens: 0 \(must be > 0\)"):
        Layout.from_hf_config(JAMBA, page_size_tokens=0)
    with pytest.raises(cachepawl.InvalidArgument, match=r"page_size_tokens: -1"):
        Layout.from_hf_config(JAMBA, page_size_tokens=-1)
    missing = tmp_path / "none.json"
    with pytest.raises(cachepawl.NotFound, match="hf config " + str(missing)):
        Layout.from_hf_config(missing)
    with pytest.raises(TypeError, match="config: expected a path, JSON text or a dict"):
        Layout.from_hf_config(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dtype"):
        Layout.from_hf_config(JAMBA, dtype=None)  # type: ignore[arg-type]


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    # 100,000 levels used to overflow the stack inside the library (SIGSEGV of the engine's
    # process); nesting past 64 levels is refused before parsing.
    deep = b"[" * 100000 + b"]" * 100000  # bytes: text not starting with "{" is a path
    with pytest.raises(cachepawl.InvalidArgument, match=r"nested deeper than 64 levels"):
        Layout.from_hf_config(deep)
    nested = '{"model_type": "mamba2", "x": ' + '{"a": ' * 100000 + "1" + "}" * 100001
    with pytest.raises(cachepawl.InvalidArgument, match=r"line 1, column \d+: arrays and objects"):
        Layout.from_hf_config(nested)


def test_model_types() -> None:
    types = cachepawl.hf_model_types()
    assert types == sorted(types)
    assert {"jamba", "lfm2", "zamba2", "gemma3", "qwen3_next"} <= set(types)


def test_a_shortconv_layout_round_trips_through_a_store(
    make_store: Callable[..., cachepawl.Store],
) -> None:
    layout = Layout.from_hf_config(LFM2, page_size_tokens=4)
    store = make_store(layout=layout, layout_json=None)
    kv_bytes, state_bytes = layout.kv_page_bytes, layout.state_bytes
    assert store.record_bytes("state") == state_bytes == 2 * 64 * 3 * 2
    pages, slot, kv, state = fill(store, 2, seed=4, kv_bytes=kv_bytes, state_bytes=state_bytes)
    toks = tokens(8, first=4242)
    store.save(toks, pages, state_slot=slot, state_depth_tokens=8).wait(timeout=30)
    m = store.lookup(toks)
    assert m.reusable_pages == 2
    dst = [store.allocate_device_slot(Kind.KV) for _ in range(2)]
    dst_slot = store.allocate_device_slot(Kind.STATE)
    store.write_device_record(Kind.STATE, dst_slot, bytes(state_bytes))
    with store.lock(m):
        store.load(m, dst, dst_slot).wait(timeout=30)
    assert [store.read_device_record(Kind.KV, p) for p in dst] == kv
    assert store.read_device_record(Kind.STATE, dst_slot) == state


def test_tensor_parallel_ranks_split_heads_and_channels() -> None:
    whole = Layout.from_hf_config(JAMBA)
    assert (whole.tp_size, whole.tp_rank) == (1, 0)
    for rank in range(2):
        share = Layout.from_hf_config(JAMBA, tp_size=2, tp_rank=rank)
        assert share == whole.shard(2, rank)
        assert (share.tp_size, share.tp_rank) == (2, rank)
        # 2 KV heads and d_inner 512 split 2 ways: half of every record.
        assert share.kv_page_bytes * 2 == whole.kv_page_bytes
        assert share.state_bytes * 2 == whole.state_bytes
    assert whole.shard(2, 0).fingerprint != whole.shard(2, 1).fingerprint
    # 4 ranks: a KV head each (replicated), a quarter of the Mamba channels.
    four = whole.shard(4, 3)
    assert four.kv_page_bytes * 2 == whole.kv_page_bytes
    assert four.state_bytes * 4 == whole.state_bytes
    with pytest.raises(
        cachepawl.InvalidArgument, match=r"attention_layers\[0\].num_kv_heads: 2 \(tp_size 3"
    ):
        whole.shard(3, 0)
    with pytest.raises(cachepawl.InvalidArgument, match=r"tp_rank: 2 \(must be < tp_size 2\)"):
        Layout.from_hf_config(JAMBA, tp_size=2, tp_rank=2)
    with pytest.raises(cachepawl.InvalidArgument, match="already one rank's"):
        whole.shard(2, 0).shard(2, 0)
    with pytest.raises(cachepawl.InvalidArgument, match="tp_size"):
        whole.shard(-1, 0)

