"""Save, lookup, load and compare every byte, through a store-owned device pool (CPU mode);
reopening a disk tier; namespaces; hashes; per-layer fences; prefetch."""

from __future__ import annotations

from typing import Any, Callable, Dict

import pytest

import cachepawl
from cachepawl import Kind, Tier
from conftest import KV_BYTES, PAGE, STATE_BYTES, fill, load_and_compare, record, save_all, tokens


def test_save_lookup_load_byte_compare(store: cachepawl.Store) -> None:
    toks = tokens(4 * PAGE)
    assert store.lookup(toks).reusable_pages == 0
    kv, state = save_all(store, toks)
    m = store.lookup(toks)
    assert (m.num_pages, m.reusable_pages, m.kv_only_pages) == (4, 4, 4)
    assert m.hit and m.reusable_tokens == 16 and m.page_size_tokens == PAGE
    assert m.page_tiers == [Tier.HOST] * 4 and m.state_tier == Tier.HOST
    assert m.hashes == store.hash_tokens(toks)
    assert all(isinstance(h, bytes) and len(h) == 32 for h in m.hashes)
    load_and_compare(store, m, kv, state)


def test_partial_and_longer_lookups(store: cachepawl.Store) -> None:
    toks = tokens(4 * PAGE)
    save_all(store, toks)
    longer = store.lookup(toks + [1, 2, 3, 4, 5, 6])  # 5 full pages, 4 cached + the state at 4
    assert (longer.num_pages, longer.reusable_pages) == (5, 4)
    shorter = store.lookup(toks[: 2 * PAGE])  # no state at depth 2: KV only
    assert (shorter.reusable_pages, shorter.kv_only_pages) == (0, 2)
    assert shorter.state_tier == Tier.NONE
    assert shorter.checkpoint_hint_pages == 2


def test_tokens_as_array_and_memoryview(store: cachepawl.Store) -> None:
    import array

    toks = tokens(2 * PAGE)
    a = array.array("I", toks)
    assert store.hash_tokens(a) == store.hash_tokens(toks) == store.hash_tokens(tuple(toks))
    assert store.hash_tokens(memoryview(a)) == store.hash_tokens(toks)
    assert store.hash_tokens(array.array("q", toks)) == store.hash_tokens(toks)
    assert store.hash_tokens(toks[:3]) == []  # no full page
    assert store.hash_tokens([]) == []


def test_namespaces_never_share(store: cachepawl.Store) -> None:
    toks = tokens(2 * PAGE)
    assert store.hash_tokens(toks, "a") != store.hash_tokens(toks, "b")
    assert store.hash_tokens(toks, "a") == store.hash_tokens(toks, b"a")
    assert store.hash_tokens(toks) != store.hash_tokens(toks, "a")
    kv, state = save_all(store, toks, namespace="tenant-a")
    assert store.lookup(toks, namespace="tenant-a").reusable_pages == 2
    assert store.lookup(toks, namespace="tenant-b").kv_only_pages == 0
    assert store.lookup(toks).kv_only_pages == 0
    load_and_compare(store, store.lookup(toks, "tenant-a"), kv, state)


def test_hashes_save_and_lookup(store: cachepawl.Store) -> None:
    toks = tokens(3 * PAGE, first=7)
    hashes = store.hash_tokens(toks, "x")
    pages, slot, kv, state = fill(store, 3, seed=5)
    store.save_hashes(b"".join(hashes), pages, state_slot=slot, state_depth_tokens=3 * PAGE).wait(
        timeout=30
    )
    by_list = store.lookup_hashes(hashes)
    by_bytes = store.lookup_hashes(b"".join(hashes))
    by_tokens = store.lookup(toks, "x")
    assert by_list.reusable_pages == by_bytes.reusable_pages == by_tokens.reusable_pages == 3
    load_and_compare(store, by_list, kv, state)


def test_save_in_two_parts_with_first_page(store: cachepawl.Store) -> None:
    toks = tokens(4 * PAGE, first=50)
    pages, slot, kv, state = fill(store, 4, seed=9)
    store.save(toks, pages[:2]).wait(timeout=30)
    store.save(toks, pages[2:], first_page=2, state_slot=slot, state_depth_tokens=4 * PAGE).wait(
        timeout=30
    )
    m = store.lookup(toks)
    assert m.reusable_pages == 4
    # Load only pages 2..3 (the engine holds 0..1) and the state.
    dst = [store.allocate_device_slot(Kind.KV) for _ in range(2)]
    dst_slot = store.allocate_device_slot(Kind.STATE)
    store.load(m, dst, dst_slot, first_page=2).wait(timeout=30)
    assert [store.read_device_record(Kind.KV, p) for p in dst] == kv[2:]
    assert store.read_device_record(Kind.STATE, dst_slot) == state


def test_per_layer_fences(store: cachepawl.Store) -> None:
    toks = tokens(2 * PAGE)
    kv, state = save_all(store, toks)
    fence = load_and_compare(store, store.lookup(toks), kv, state, per_layer_fences=True)
    assert fence.num_layers == 2  # one per attention layer
    for i in range(fence.num_layers):
        fence.wait_layer(i, timeout=10)
        assert fence.layer_ready(i)
    with pytest.raises(cachepawl.InvalidArgument, match="layer"):
        fence.wait_layer(fence.num_layers + 5)


def test_read_record_into_buffer(store: cachepawl.Store) -> None:
    p = store.allocate_device_slot(Kind.KV)
    data = record(KV_BYTES, 3)
    store.write_device_record(Kind.KV, p, memoryview(bytearray(data)))
    out = bytearray(KV_BYTES)
    assert store.read_device_record("kv", p, out) is out and out == data
    view = memoryview(bytearray(KV_BYTES * 2))[KV_BYTES:]
    store.read_device_record(Kind.KV, p, view)
    assert view.tobytes() == data
    store.free_device_slot(Kind.KV, p)


def test_reopen_from_disk(
    make_store: Callable[..., cachepawl.Store], disk_options: Dict[str, Any]
) -> None:
    toks = tokens(3 * PAGE, first=77)
    s1 = make_store(**disk_options)
    kv, state = save_all(s1, toks, namespace="t")
    s1.close()
    assert s1.closed
    s2 = make_store(**disk_options)
    m = s2.lookup(toks, "t")
    assert m.reusable_pages == 3
    assert m.page_tiers == [Tier.DISK] * 3 and m.state_tier == Tier.DISK
    with s2.prefetch(m) as pf:
        pf.wait(timeout=30)
    assert s2.lookup(toks, "t").page_tiers == [Tier.HOST] * 3
    load_and_compare(s2, s2.lookup(toks, "t"), kv, state)
    stats = s2.stats()
    assert stats["bytes_disk_to_host"] > 0
    s2.close()
    s3 = make_store(**disk_options)  # a load straight from disk, without a prefetch
    m3 = s3.lookup(toks, "t")
    assert m3.page_tiers == [Tier.DISK] * 3
    load_and_compare(s3, m3, kv, state)


def test_stats_and_prometheus(store: cachepawl.Store) -> None:
    save_all(store, tokens(2 * PAGE))
    stats = store.stats()
    assert isinstance(stats, dict) and stats["bytes_device_to_host"] >= 2 * KV_BYTES
    text = store.stats_prometheus()
    assert "cachepawl_" in text and text.endswith("\n")


def test_layout_of_store(store: cachepawl.Store) -> None:
    assert store.record_bytes(Kind.KV) == KV_BYTES
    assert store.record_bytes("state") == STATE_BYTES
    assert store.layout.model == "test/tiny-hybrid"
    assert store.page_size_tokens == PAGE and not store.gpu_mode
    assert store.last_error == ""


def test_a_prompt_past_max_prompt_tokens_is_refused(
    make_store: Callable[..., cachepawl.Store],
) -> None:
    # A 717M-token request used to end in std::bad_alloc; calls naming more than
    # max_prompt_tokens are refused before hashing or allocating, naming the option.
    store = make_store(max_prompt_tokens=4 * PAGE)
    toks = tokens(4 * PAGE)
    save_all(store, toks)
    assert store.lookup(toks).reusable_pages == 4
    longer = tokens(4 * PAGE + 1)
    with pytest.raises(cachepawl.InvalidArgument, match=r"tokens: 17 tokens \(more than "
                       r"StoreOptions.max_prompt_tokens 16"):
        store.lookup(longer)
    hashes = store.hash_tokens(tokens(5 * PAGE))
    with pytest.raises(cachepawl.InvalidArgument, match=r"hashes: 5 pages of 4 tokens"):
        store.lookup_hashes(hashes)
    pages, _, _, _ = fill(store, 5, seed=3)
    with pytest.raises(cachepawl.InvalidArgument, match=r"SaveRequest.tokens: 20 tokens"):
        store.save(tokens(5 * PAGE), pages)
    with pytest.raises(cachepawl.InvalidArgument, match=r"SaveRequest.hashes: 5 pages"):
        store.save_hashes(b"".join(hashes), pages)
    # The store goes on serving what fits.
    assert store.lookup(toks).reusable_pages == 4
