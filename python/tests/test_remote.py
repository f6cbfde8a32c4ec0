"""The remote tier through the Python package: option checks naming the field and value, a store
that cannot reach its seeds, and two stores sharing a prefix through a real 3-master Redis
Cluster (redis_cluster.py), every byte compared."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import cachepawl
from cachepawl import Kind, Tier
from conftest import BASE_OPTIONS, KV_BYTES, PAGE, STATE_BYTES, save_all, tokens
from redis_cluster import RedisCluster, free_ports, missing_server


@pytest.mark.parametrize(
    "options, needle",
    [
        (dict(remote_seeds="http://127.0.0.1:1"), "remote.seeds"),
        (dict(remote_user="tenant"), "remote.user: 'tenant'"),
        (dict(remote_key_prefix="a b"), "remote.key_prefix 'a b'"),
        (dict(remote_key_prefix=""), "remote.key_prefix ''"),
        (dict(remote_chunk_bytes=1000), "remote.chunk_bytes 1000"),
        (dict(remote_deadline_ms=0), "remote.deadline 0"),
        (dict(remote_lookup_deadline_ms=0), "remote.lookup_deadline_ms: 0"),
        (dict(remote_lookup_deadline_ms=10001), "remote.lookup_deadline_ms: 10001"),
        (dict(remote_write_policy="back"), "remote_write_policy: 'back'"),
        (dict(remote_selective_min_hits=0), "remote.selective_min_hits: 0"),
        (dict(remote_max_queued_writes=0), "remote.max_queued_writes: 0"),
        (dict(remote_ttl_seconds=-1), "remote_ttl_seconds: -1"),
        (dict(remote_chunk_bytes=2**64), "remote_chunk_bytes: 18446744073709551616"),
    ],
)
def test_remote_option_errors_name_the_field(options: Any, needle: str) -> None:
    with pytest.raises(cachepawl.InvalidArgument) as e:
        cachepawl.validate_options(**BASE_OPTIONS, **options)
    assert needle in str(e.value)


def test_remote_options_accepted_and_password_never_shown() -> None:
    cachepawl.validate_options(
        **BASE_OPTIONS,
        remote_seeds="redis://127.0.0.1:7000,127.0.0.1:7001",
        remote_user="tenant",
        remote_password="s3cret",
        remote_key_prefix="tenant-a.v1",
        remote_chunk_bytes=1 << 20,
        remote_deadline_ms=500,
        remote_lookup_deadline_ms=50,
        remote_ttl_seconds=3600,
        remote_write_policy="selective",
        remote_selective_min_hits=3,
        remote_max_queued_writes=128,
    )
    for policy in ("none", "write_through", "through", "SELECTIVE"):
        cachepawl.validate_options(**BASE_OPTIONS, remote_write_policy=policy)
    with pytest.raises(cachepawl.InvalidArgument) as e:
        cachepawl.validate_options(**BASE_OPTIONS, remote_password="s3cret\0x")
    assert "remote_password" in str(e.value) and "s3cret" not in str(e.value)
    with pytest.raises(TypeError) as t:
        cachepawl.validate_options(**BASE_OPTIONS, remote_password=12345)
    assert "12345" not in str(t.value)
    assert Tier.REMOTE == 3 and Tier(3) is Tier.REMOTE


def test_a_store_opens_while_no_seed_answers(tmp_path: Path) -> None:
    seeds = f"redis://127.0.0.1:{free_ports(1)[0]}"
    store = cachepawl.Store(**BASE_OPTIONS, remote_seeds=seeds, remote_deadline_ms=500)
    try:
        assert store.stats()["remote"]["enabled"]
    finally:
        store.close()


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """A 3-master cluster on loopback, killed afterwards even when the test fails."""
    why = missing_server()
    if why is not None:
        if os.environ.get("CI") == "true":  # tools/setup.sh installs it: never skipped in CI
            pytest.fail(f"no Redis Cluster for the remote-tier test under CI: {why}")
        pytest.skip(f"no Redis Cluster for the remote-tier test: {why}")
    cluster = RedisCluster(tmp_path / "redis", masters=3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def wait_for_remote_writes(store: cachepawl.Store, n: int) -> None:
    """Bounded wait until the store's writer stored n entries (not a timing check)."""
    give_up = time.monotonic() + 30
    while store.stats()["remote"]["writes"] < n and time.monotonic() < give_up:
        time.sleep(0.01)
    assert store.stats()["remote"]["writes"] == n, store.stats()["remote"]


def test_two_stores_share_a_prefix_through_the_cluster(
    redis_cluster: RedisCluster, make_store: Callable[..., cachepawl.Store]
) -> None:
    remote = dict(
        remote_seeds=redis_cluster.seeds,
        remote_key_prefix="pytest",
        remote_chunk_bytes=64 << 10,
        remote_lookup_deadline_ms=2000,  # a loaded test machine: no spurious misses
    )
    a = make_store(**remote, remote_write_policy="write_through")
    b = make_store(**remote, remote_write_policy="none")
    toks = tokens(4 * PAGE)
    kv, state = save_all(a, toks, namespace="tenant")
    wait_for_remote_writes(a, 5)  # 4 KV pages and the state

    assert b.lookup(toks, namespace="other").reusable_pages == 0  # namespaces stay apart
    m = b.lookup(toks, namespace="tenant")
    assert (m.reusable_pages, m.kv_only_pages) == (4, 4)
    assert m.page_tiers == [Tier.REMOTE] * 4 and m.state_tier == Tier.REMOTE
    dst = [b.allocate_device_slot(Kind.KV) for _ in range(4)]
    dst_slot = b.allocate_device_slot(Kind.STATE)
    for p in dst:
        b.write_device_record(Kind.KV, p, bytes(KV_BYTES))
    b.write_device_record(Kind.STATE, dst_slot, bytes(STATE_BYTES))
    with b.lock(m) as lock:  # covers the local part only: the remote state is not held here
        assert not lock.has_state
        b.load(m, dst, dst_slot).wait(timeout=30)
    for i, p in enumerate(dst):
        assert b.read_device_record(Kind.KV, p) == kv[i], f"KV page {i}"
    assert b.read_device_record(Kind.STATE, dst_slot) == state
    st = b.stats()["remote"]
    assert st["enabled"] and st["loaded"] == 5 and st["load_failures"] == 0
    assert st["writes_queued"] == 0  # policy none: b writes nothing
    again = b.lookup(toks, namespace="tenant")  # now in b's host memory
    assert again.page_tiers == [Tier.HOST] * 4 and again.state_tier == Tier.HOST
