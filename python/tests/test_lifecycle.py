"""Closing a store with operations in flight from Python neither hangs nor crashes: every fence
fires, the objects a store returned outlive it, and a process that exits with a store open
exits cleanly."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest

import cachepawl
from cachepawl import Kind
from conftest import BASE_OPTIONS, KV_BYTES, PAGE, fill, library_env, save_all, tokens


def start_saves(store: cachepawl.Store, n: int, pages_each: int = 2) -> List[cachepawl.Fence]:
    pages, slot, _, _ = fill(store, pages_each, seed=1)
    fences = []
    for i in range(n):
        toks = tokens(pages_each * PAGE, first=100000 + i * 1000)
        fences.append(store.save(toks, pages, state_slot=slot, state_depth_tokens=len(toks)))
    return fences


def settle(fences: List[cachepawl.Fence]) -> Dict[str, int]:
    """Waits for every fence (each must fire at once); counts the outcomes."""
    outcomes: Dict[str, int] = {}
    for f in fences:
        try:
            f.wait(timeout=30)
            key = "ok"
        except cachepawl.Error as e:
            key = e.status_name
        outcomes[key] = outcomes.get(key, 0) + 1
    return outcomes


def test_close_with_saves_and_loads_in_flight(
    make_store: Callable[..., cachepawl.Store], disk_options: Dict[str, Any]
) -> None:
    s = make_store(**disk_options)
    toks = tokens(2 * PAGE)
    save_all(s, toks)
    m = s.lookup(toks)
    dst = [s.allocate_device_slot(Kind.KV) for _ in range(2)]
    fences = start_saves(s, 40)
    fences += [s.load(m, dst) for _ in range(10)]
    s.close()
    assert all(f.ready for f in fences), "close returned before every fence fired"
    outcomes = settle(fences)
    assert sum(outcomes.values()) == 50
    assert set(outcomes) <= {"ok", "Aborted", "FailedPrecondition", "NoSpace"}, outcomes


def reopened_with_disk_prefix(
    make_store: Callable[..., cachepawl.Store], disk_options: Dict[str, Any]
) -> Tuple[cachepawl.Store, cachepawl.Match]:
    """A store reopened over a disk tier holding one 3-page prefix, and its (disk) match."""
    first = make_store(**disk_options)
    toks = tokens(3 * PAGE)
    save_all(first, toks)
    first.close()
    s = make_store(**disk_options)
    return s, s.lookup(toks)


def test_close_with_prefetch_in_flight(
    make_store: Callable[..., cachepawl.Store], disk_options: Dict[str, Any]
) -> None:
    s, m = reopened_with_disk_prefix(make_store, disk_options)
    pf = s.prefetch(m)
    fence = pf.fence
    s.close()
    assert fence.ready
    settle([fence])
    pf.cancel()  # after close: still answers


def test_cancel_prefetch(
    make_store: Callable[..., cachepawl.Store], disk_options: Dict[str, Any]
) -> None:
    s, m = reopened_with_disk_prefix(make_store, disk_options)
    with pytest.raises(RuntimeError):
        with s.prefetch(m) as pf:
            raise RuntimeError("engine gave up")  # the exit cancels
    settle([pf.fence])  # fired, with or without an error


def test_close_from_another_thread_while_saving(make_store: Callable[..., cachepawl.Store]) -> None:
    s = make_store()
    pages, slot, _, _ = fill(s, 2, seed=3)
    stop = threading.Event()
    errors: List[BaseException] = []
    seen: Dict[str, int] = {}

    def worker(base: int) -> None:
        i = 0
        while not stop.is_set():
            toks = tokens(2 * PAGE, first=base + i * 100)
            i += 1
            try:
                s.save(toks, pages).wait(timeout=30)
                s.lookup(toks)
            except cachepawl.FailedPrecondition:
                seen["closed"] = seen.get("closed", 0) + 1
                return
            except cachepawl.Error as e:
                seen[e.status_name] = seen.get(e.status_name, 0) + 1
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)
                return

    threads = [threading.Thread(target=worker, args=(10**6 * (k + 1),)) for k in range(4)]
    for t in threads:
        t.start()
    threading.Event().wait(0.2)
    s.close()
    for t in threads:
        t.join(timeout=60)
    stop.set()
    assert not any(t.is_alive() for t in threads), "a thread hung after close"
    assert not errors, errors
    assert seen.get("closed", 0) == 4


def test_objects_outlive_their_store_close(make_store: Callable[..., cachepawl.Store]) -> None:
    s = make_store()
    toks = tokens(2 * PAGE)
    save_all(s, toks)
    m = s.lookup(toks)
    lock = s.lock(m)
    fences = start_saves(s, 5)
    s.close()
    settle(fences)
    assert m.reusable_pages == 2 and len(m.hashes) == 2 and m.page_tiers
    assert s.layout.kv_page_bytes == KV_BYTES and lock.pages == 2 and lock.has_state
    with pytest.raises(cachepawl.FailedPrecondition, match="closed"):
        s.load(m, [0, 1])


def test_dropped_store_is_freed_with_fences_alive() -> None:
    s = cachepawl.Store(**BASE_OPTIONS)
    fences = start_saves(s, 10)
    m = s.lookup(tokens(2 * PAGE))
    lock = s.lock(m, pages=0)
    del s
    gc.collect()  # cachepawl_store_free: closes, drains
    assert all(f.ready for f in fences)
    settle(fences)
    assert m.num_pages == 2
    lock.release()  # the store is gone: releasing does nothing more, and does not crash


CHILD = """
import sys
import cachepawl
sys.path.insert(0, {tests!r})
from conftest import BASE_OPTIONS, PAGE, tokens
from test_lifecycle import start_saves
s = cachepawl.Store(**BASE_OPTIONS)
fences = start_saves(s, 30)
m = s.lookup(tokens(2 * PAGE, first=100000))
lock = s.lock(m)
{ending}
print("child done", flush=True)
"""


@pytest.mark.parametrize("ending", ["pass", "s.close()", "del s", "import os; os._exit(0)"])
def test_process_exits_with_store_open(ending: str) -> None:
    code = textwrap.dedent(CHILD).format(tests=str(Path(__file__).parent), ending=ending)
    r = subprocess.run(
        [sys.executable, "-c", code], env=library_env(), capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    if "_exit" not in ending:
        assert "child done" in r.stdout
