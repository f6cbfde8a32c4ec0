"""One store for several processes: an owner (Store.serve) in a child Python process, this
process attached (Store.attach); pages saved by one process load byte for byte in the other,
and an owner that goes makes the attached store's calls raise Unavailable."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cachepawl
from conftest import PAGE, TINY_LAYOUT_JSON, load_and_compare, pythonpath, save_all, tokens

OWNER = textwrap.dedent(
    """
    import json, sys
    import cachepawl
    from conftest import save_all, tokens
    s = cachepawl.Store.serve({sock!r}, layout_json={layout!r}, host_bytes=1 << 22,
                              cuda_device=-1, device_pool_bytes=1 << 20)
    kv, state = save_all(s, tokens(3 * 4, first=5000), seed=7)
    print(json.dumps({{"kv": [k.hex() for k in kv], "state": state.hex()}}), flush=True)
    sys.stdin.read()  # until this process's stdin closes
    s.close()
    """
)


@pytest.fixture
def owner(tmp_path: Path):  # type: ignore[no-untyped-def]
    sock = str(tmp_path / "owner.sock")
    tests = str(Path(__file__).resolve().parent)
    code = OWNER.format(sock=sock, layout=TINY_LAYOUT_JSON)
    env = dict(os.environ, PYTHONPATH=pythonpath(tests))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        line = b""
        while not line.startswith(b"{"):  # (the library's log lines come first)
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "the owner process ended before it served"
        yield sock, proc, line
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_attached_process_loads_what_the_owner_saved_and_back(owner) -> None:  # type: ignore[no-untyped-def]
    import json, sys

    sock, proc, line = owner
    saved = json.loads(line)
    with cachepawl.Store.attach(sock, cuda_device=-1, device_pool_bytes=1 << 20) as s:
        assert s.layout.model == "test/tiny-hybrid" and not s.gpu_mode
        m = s.lookup(tokens(3 * PAGE, first=5000))
        assert m.reusable_pages == 3
        load_and_compare(s, m, [bytes.fromhex(k) for k in saved["kv"]], bytes.fromhex(saved["state"]))
        kv, state = save_all(s, tokens(2 * PAGE, first=9000), seed=3)
        load_and_compare(s, s.lookup(tokens(2 * PAGE, first=9000)), kv, state)
        assert s.stats()["serve"]["attaches"] >= 1
        # The owner goes: the next call raises Unavailable.
        proc.kill()
        proc.wait(timeout=30)
        with pytest.raises(cachepawl.Unavailable):
            s.lookup(tokens(2 * PAGE, first=9000))


def test_attach_refusals(tmp_path: Path, owner) -> None:  # type: ignore[no-untyped-def]
    sock, _, _ = owner
    with pytest.raises(cachepawl.Unavailable):
        cachepawl.Store.attach(str(tmp_path / "nobody.sock"), cuda_device=-1)
    other = cachepawl.Layout.from_preset("jamba-v0.1")
    with pytest.raises(cachepawl.Incompatible, match="Jamba"):
        cachepawl.Store.attach(sock, layout=other, cuda_device=-1)
    with pytest.raises(cachepawl.InvalidArgument, match="socket_path"):
        cachepawl.Store.attach("x" * 200, cuda_device=-1)


def rank_layout_json(rank: int) -> str:
    """The tiny layout as rank ``rank`` of a 2-rank tensor-parallel group (same shapes)."""
    return TINY_LAYOUT_JSON.replace(
        '"page_size_tokens": 4,', f'"page_size_tokens": 4, "tp_size": 2, "tp_rank": {rank},'
    )


def test_rank_processes_share_one_group_store(tmp_path: Path) -> None:
    """The owner serves rank 0 of a tensor-parallel group; this process attaches as rank 1.
    A prompt only rank 0 saved is a miss; once rank 1 saved its shares it is a hit, and rank
    1's load gets rank 1's bytes back (not rank 0's)."""
    import json, sys

    sock = str(tmp_path / "owner.sock")
    tests = str(Path(__file__).resolve().parent)
    code = OWNER.format(sock=sock, layout=rank_layout_json(0))
    env = dict(os.environ, PYTHONPATH=pythonpath(tests))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        line = b""
        while not line.startswith(b"{"):
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "the owner process ended before it served"
        owners = json.loads(line)
        rank1 = cachepawl.Layout.from_json(rank_layout_json(1))
        with cachepawl.Store.attach(
            sock, layout=rank1, cuda_device=-1, device_pool_bytes=1 << 20
        ) as s:
            assert (s.layout.tp_size, s.layout.tp_rank) == (2, 1)
            toks = tokens(3 * PAGE, first=5000)
            assert s.lookup(toks).reusable_pages == 0  # rank 1's shares are missing
            kv, state = save_all(s, toks, seed=9)
            m = s.lookup(toks)
            assert m.reusable_pages == 3
            assert kv[0] != bytes.fromhex(owners["kv"][0])
            load_and_compare(s, m, kv, state)
        with pytest.raises(cachepawl.Incompatible, match="tp_size 1"):
            cachepawl.Store.attach(
                sock, layout=cachepawl.Layout.from_json(TINY_LAYOUT_JSON), cuda_device=-1
            )
    finally:
        proc.kill()
        proc.wait(timeout=30)
