"""``python -m cachepawl``: the command line of the library's build, its exit status kept; a
program that cannot be found is a clear error (exit 127) naming the places tried."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import pythonpath


def run(args, **env_changes):  # type: ignore[no-untyped-def]
    env = dict(os.environ, PYTHONPATH=pythonpath())
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return subprocess.run([sys.executable, "-m", "cachepawl"] + args, capture_output=True,
                          text=True, env=env, timeout=120)


def test_runs_the_command_line_beside_the_library() -> None:
    r = run(["layout", "--list"])
    assert r.returncode == 0, r.stderr
    assert "jamba-v0.1\n" in r.stdout and "gpt-oss-120b\n" in r.stdout


def test_keeps_the_programs_exit_status_and_message() -> None:
    r = run(["layout", "no-such-layout"])
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "no-such-layout" in r.stderr


def test_a_program_that_is_not_there_is_exit_127_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere" / "cachepawl")
    r = run(["layout", "--list"], CACHEPAWL_TOOL=missing)
    assert r.returncode == 127
    assert missing in r.stderr and "CACHEPAWL_TOOL" in r.stderr
