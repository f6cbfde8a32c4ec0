"""Error paths: closed stores, wrong sizes, bad tokens and hashes, bad loads and saves, lock and
fence misuse; context managers release on exceptions. Every error is the Error subclass of its
status code and names the argument at fault."""

from __future__ import annotations

import array
import ctypes

from typing import Callable

import pytest

import cachepawl
from cachepawl import Kind
from cachepawl.fence import wait_sliced
from conftest import KV_BYTES, PAGE, STATE_BYTES, fill, save_all, tokens


class Boom(Exception):
    pass


def test_error_classes() -> None:
    assert issubclass(cachepawl.InvalidArgument, cachepawl.Error)
    assert issubclass(cachepawl.InvalidArgument, ValueError)
    assert issubclass(cachepawl.TimedOut, TimeoutError)
    assert issubclass(cachepawl.NotFound, LookupError)
    e = cachepawl.NoSpace("tier full")
    assert (e.code, e.status_name, e.message, str(e)) == (5, "NoSpace", "tier full", "tier full")
    codes = {
        cls.code
        for cls in (
            cachepawl.InvalidArgument,
            cachepawl.NotFound,
            cachepawl.Corruption,
            cachepawl.IoError,
            cachepawl.NoSpace,
            cachepawl.Busy,
            cachepawl.Unavailable,
            cachepawl.FailedPrecondition,
            cachepawl.TimedOut,
            cachepawl.Aborted,
            cachepawl.Internal,
            cachepawl.Incompatible,
            cachepawl.OutOfMemory,
        )
    }
    assert codes == set(range(1, 14))
    for cls in (cachepawl.Busy, cachepawl.Aborted, cachepawl.OutOfMemory, cachepawl.IoError):
        assert (
            cls("x").status_name
            == {6: "Busy", 10: "Aborted", 13: "OutOfMemory", 4: "IOError"}[cls.code]
        )
    from cachepawl.errors import error_for

    unknown = error_for(99, "odd")
    assert type(unknown) is cachepawl.Error and unknown.code == 99 and "Unknown" in str(unknown)


def test_closed_store(store: cachepawl.Store) -> None:
    toks = tokens(2 * PAGE)
    save_all(store, toks)
    m = store.lookup(toks)
    lock = store.lock(m)
    store.close()
    store.close()  # idempotent
    assert store.closed
    for call in (
        lambda: store.lookup(toks),
        lambda: store.lookup_hashes(m.hashes),
        lambda: store.lock(m),
        lambda: store.load(m, [0, 1]),
        lambda: store.save(toks, [0, 1]),
        lambda: store.save_hashes(m.hashes, [0, 1]),
        lambda: store.prefetch(m),
        lambda: store.allocate_device_slot(Kind.KV),
        lambda: store.free_device_slot(Kind.KV, 0),
        lambda: store.write_device_record(Kind.KV, 0, bytes(KV_BYTES)),
        lambda: store.read_device_record(Kind.KV, 0),
    ):
        with pytest.raises(cachepawl.FailedPrecondition, match="closed"):
            call()
    assert "closed" in store.last_error
    # Still answering after close: layout, hashing, stats; the match itself.
    assert store.hash_tokens(toks) == m.hashes
    assert store.layout.kv_page_bytes == KV_BYTES
    assert isinstance(store.stats(), dict) and store.stats_prometheus()
    assert m.reusable_pages == 2
    with lock:  # exiting after close does not raise
        pass
    assert not lock.held
    with pytest.raises(cachepawl.FailedPrecondition, match="released"):
        lock.unlock()


def test_wrong_record_sizes(store: cachepawl.Store) -> None:
    p = store.allocate_device_slot(Kind.KV)
    with pytest.raises(cachepawl.InvalidArgument, match="record|bytes"):
        store.write_device_record(Kind.KV, p, bytes(KV_BYTES - 1))
    with pytest.raises(cachepawl.InvalidArgument, match="record|bytes"):
        store.write_device_record(Kind.KV, p, b"")
    with pytest.raises(cachepawl.InvalidArgument, match="record|bytes"):
        store.read_device_record(Kind.KV, p, bytearray(KV_BYTES + 1))
    with pytest.raises(cachepawl.InvalidArgument, match="read-only"):
        store.read_device_record(Kind.KV, p, bytes(KV_BYTES))
    with pytest.raises(cachepawl.InvalidArgument, match="contiguous"):
        store.read_device_record(Kind.KV, p, memoryview(bytearray(2 * KV_BYTES))[::2])
    with pytest.raises(TypeError, match="record"):
        store.write_device_record(Kind.KV, p, "text")
    with pytest.raises(cachepawl.InvalidArgument, match="slot"):
        store.write_device_record(Kind.KV, 10**9, bytes(KV_BYTES))
    with pytest.raises(cachepawl.InvalidArgument, match="slot: -1"):
        store.read_device_record(Kind.KV, -1)
    with pytest.raises(cachepawl.InvalidArgument, match="kind"):
        store.allocate_device_slot("pages")
    with pytest.raises(cachepawl.InvalidArgument, match="kind: 3"):
        store.allocate_device_slot(3)
    with pytest.raises(cachepawl.InvalidArgument, match="kind: window"):  # Kind.WINDOW
        store.allocate_device_slot(2)
    s = store.allocate_device_slot(Kind.STATE)
    with pytest.raises(cachepawl.InvalidArgument):
        store.write_device_record(Kind.STATE, s, bytes(KV_BYTES))
    store.write_device_record(Kind.STATE, s, bytearray(STATE_BYTES))


def test_slots_run_out(store: cachepawl.Store) -> None:
    taken = []
    with pytest.raises(cachepawl.NoSpace):
        for _ in range(100000):
            taken.append(store.allocate_device_slot(Kind.KV))
    assert len(taken) > 10
    store.free_device_slot(Kind.KV, taken[0])
    assert store.allocate_device_slot(Kind.KV) == taken[0]


def test_no_store_owned_pool(make_store: Callable[..., cachepawl.Store]) -> None:
    s = make_store(device_pool_bytes=0)
    with pytest.raises(cachepawl.FailedPrecondition, match="store-owned"):
        s.allocate_device_slot(Kind.KV)
    with pytest.raises(cachepawl.FailedPrecondition):
        s.save(tokens(PAGE), [0]).wait()


def test_bad_tokens(store: cachepawl.Store) -> None:
    with pytest.raises(cachepawl.InvalidArgument, match=r"tokens\[2\]: -1"):
        store.lookup([1, 2, -1, 4])
    with pytest.raises(cachepawl.InvalidArgument, match=r"tokens\[0\]: 4294967296"):
        store.hash_tokens([2**32, 1, 2, 3])
    with pytest.raises(TypeError, match=r"tokens\[1\]"):
        store.lookup([1, 2.0, 3, 4])
    with pytest.raises(TypeError, match="tokens"):
        store.lookup("1234")
    with pytest.raises(TypeError, match="tokens"):
        store.lookup(b"\x01\x02\x03\x04")
    with pytest.raises(TypeError, match="namespace"):
        store.lookup([1, 2, 3, 4], namespace=5)
    with pytest.raises(cachepawl.InvalidArgument, match=r"tokens\[0\]: -5"):
        store.save(array.array("i", [-5, 1, 2, 3]), [0])


def test_bad_hashes(store: cachepawl.Store) -> None:
    good = store.hash_tokens(tokens(2 * PAGE))
    with pytest.raises(cachepawl.InvalidArgument, match="hashes: 31 bytes"):
        store.lookup_hashes(b"x" * 31)
    with pytest.raises(cachepawl.InvalidArgument, match="hashes: 65 bytes"):
        store.lookup_hashes(b"".join(good) + b"x")
    with pytest.raises(cachepawl.InvalidArgument, match=r"hashes\[1\]: 33 bytes"):
        store.lookup_hashes([good[0], good[1] + b"x"])
    with pytest.raises(TypeError, match=r"hashes\[0\]"):
        store.lookup_hashes([1, 2])
    with pytest.raises(TypeError, match="hashes"):
        store.lookup_hashes("ab" * 16)
    with pytest.raises(cachepawl.InvalidArgument, match=r"hashes\[0\]"):
        store.save_hashes([b"short"], [0])
    # Unknown (well-formed) hashes are a miss, not an error.
    assert store.lookup_hashes([bytes([7]) * 32] * 3).kv_only_pages == 0
    with pytest.raises(cachepawl.InvalidArgument, match="all-zero"):
        store.lookup_hashes(bytes(32))
    assert store.lookup_hashes([]).num_pages == 0


def test_bad_saves(store: cachepawl.Store) -> None:
    toks = tokens(2 * PAGE)
    pages, slot, _, _ = fill(store, 2, seed=4)
    with pytest.raises(cachepawl.InvalidArgument, match="state_depth_tokens"):
        store.save(toks, pages, state_slot=slot, state_depth_tokens=3).wait()
    with pytest.raises(cachepawl.InvalidArgument, match="page"):
        store.save(toks, pages + [pages[0]]).wait()  # 3 pages of a 2-page prompt
    with pytest.raises(cachepawl.InvalidArgument, match=r"pages \[5, 7\)"):
        store.save(toks, pages, first_page=5).wait()
    with pytest.raises(cachepawl.InvalidArgument, match="first_page: -1"):
        store.save(toks, pages, first_page=-1)
    with pytest.raises(cachepawl.InvalidArgument):
        store.save(toks, [10**9, 10**9 + 1]).wait()
    with pytest.raises(cachepawl.InvalidArgument, match=r"device_pages\[0\]: -3"):
        store.save(toks, [-3, 1])
    with pytest.raises(cachepawl.InvalidArgument, match="state_slot: -1"):
        store.save(toks, pages, state_slot=-1)
    with pytest.raises(cachepawl.InvalidArgument, match="NO_SLOT"):
        store.save(toks, pages, state_slot=2**64 - 1)
    with pytest.raises(cachepawl.InvalidArgument, match="state_depth_tokens: -4"):
        store.save(toks, pages, state_slot=slot, state_depth_tokens=-4)


def test_bad_loads(store: cachepawl.Store) -> None:
    toks = tokens(2 * PAGE)
    save_all(store, toks)
    m = store.lookup(toks)
    dst = [store.allocate_device_slot(Kind.KV) for _ in range(3)]
    dst_slot = store.allocate_device_slot(Kind.STATE)
    with pytest.raises(cachepawl.InvalidArgument):
        store.load(m, dst).wait()  # 3 pages of a 2-page match
    with pytest.raises(cachepawl.InvalidArgument):
        store.load(m, dst[:1], dst_slot).wait()  # the state is at depth 2, not 1
    with pytest.raises(cachepawl.InvalidArgument):
        store.load(m, dst[:2], first_page=1).wait()
    with pytest.raises(TypeError, match="match"):
        store.load("match", dst)
    with pytest.raises(TypeError, match="per_layer_fences"):
        store.load(m, dst[:2], per_layer_fences=1)
    miss = store.lookup(tokens(2 * PAGE, first=5))
    with pytest.raises(cachepawl.Error):
        store.load(miss, dst[:2]).wait()
    store.load(m, dst[:2], dst_slot).wait(timeout=10)  # the right call works


def test_lock_released_on_exception(store: cachepawl.Store) -> None:
    toks = tokens(2 * PAGE)
    save_all(store, toks)
    m = store.lookup(toks)
    with pytest.raises(Boom):
        with store.lock(m) as lock:
            assert lock.held and lock.pages == 2
            raise Boom()
    assert not lock.held
    with pytest.raises(cachepawl.FailedPrecondition, match="released"):
        lock.unlock()
    # Explicit unlock, then a second one: the C ABI's check.
    lock2 = store.lock(m, pages=1)
    assert lock2.pages == 1 and not lock2.has_state
    lock2.unlock()
    with pytest.raises(cachepawl.FailedPrecondition):
        lock2.unlock()
    with lock2:  # already unlocked: exit does nothing more
        pass
    with pytest.raises(cachepawl.InvalidArgument):
        store.lock(m, pages=5)
    with pytest.raises(cachepawl.InvalidArgument, match="pages: -1"):
        store.lock(m, pages=-1)


def test_locked_entries_survive_and_unlocked_go(make_store: Callable[..., cachepawl.Store]) -> None:
    # A host tier of 12 pages of 4 KiB (two prefixes fit, not three): a locked prefix stays
    # while later saves evict everything else; an unlocked match then fails to load (NotFound).
    s = make_store(host_bytes=12 * 4096)
    kept, gone = tokens(2 * PAGE), tokens(2 * PAGE, first=5000)
    save_all(s, kept, seed=11)
    save_all(s, gone, seed=12)
    m_kept, m_gone = s.lookup(kept), s.lookup(gone)
    assert m_gone.reusable_pages == 2
    with s.lock(m_kept):
        for i in range(4):
            try:
                save_all(s, tokens(2 * PAGE, first=10000 * (i + 1)), seed=20 + i)
            except cachepawl.NoSpace:
                pass
        assert s.lookup(kept).reusable_pages == 2
    assert s.lookup(gone).reusable_pages == 0
    dst = [s.allocate_device_slot(Kind.KV) for _ in range(2)]
    with pytest.raises(cachepawl.NotFound):
        s.load(m_gone, dst).wait(timeout=10)


def test_fence_arguments(store: cachepawl.Store) -> None:
    toks = tokens(PAGE)
    pages, _, _, _ = fill(store, 1, seed=8)
    f = store.save(toks, pages)
    f.wait(timeout=10)
    assert f.ready and f.error is None and f.num_layers == 0
    f.wait(timeout=0)  # fired: returns at once
    f.wait(timeout=float("inf"))
    f.wait(timeout=1e30)
    with pytest.raises(cachepawl.InvalidArgument, match="timeout"):
        f.wait(timeout=-1)
    with pytest.raises(cachepawl.InvalidArgument, match="timeout"):
        f.wait(timeout=float("nan"))
    with pytest.raises(TypeError, match="timeout"):
        f.wait(timeout="1")
    with pytest.raises(cachepawl.InvalidArgument, match="layer: 0"):
        f.layer_ready(0)
    with pytest.raises(cachepawl.InvalidArgument, match="layer: -1"):
        f.wait_layer(-1)
    # stream_wait: None waits on the CPU; a stream handle on a fired fence returns at once.
    f.stream_wait(None)
    f.stream_wait(0)
    f.stream_wait(0x1234)
    f.stream_wait(ctypes.c_void_p(0x1234))

    class FakeTorchStream:
        cuda_stream = 0x5678

    f.stream_wait(FakeTorchStream())
    with pytest.raises(TypeError, match="stream"):
        f.stream_wait("stream")
    with pytest.raises(cachepawl.InvalidArgument, match="stream"):
        f.stream_wait(-1)


def test_wait_loop_slices_and_times_out() -> None:
    """Fence waits block in slices (so Ctrl-C gets through) until the deadline; a fence that
    fires between slices returns its own status (here: the C wait stands in for the library)."""
    calls = []

    def never(ms: int) -> int:
        calls.append(ms)
        return cachepawl.TimedOut.code

    with pytest.raises(cachepawl.TimedOut, match="not fired within timeout 0.25 s"):
        wait_sliced("fence", 0.25, never, lambda: False)
    assert len(calls) >= 3 and max(calls) <= 100
    state = {"n": 0}

    def fires_late(ms: int) -> int:
        state["n"] += 1
        return 0 if ms == 0 else cachepawl.TimedOut.code

    wait_sliced("fence", None, fires_late, lambda: state["n"] >= 3)
    assert state["n"] == 4  # three slices, then the status of the fired fence
