"""``python -m cachepawl ARGS...``: the ``cachepawl`` command line (``cachepawl --help`` lists its
commands: serve, replay, bench, layout, ...), run with ARGS; its output and exit status are the
program's own.

The program is the one built with the library this package loaded; first match wins:

1. ``CACHEPAWL_TOOL``: a path to the program;
2. a ``cachepawl`` program inside this package (a wheel that bundles it);
3. beside the loaded library: ``<its folder>/../bin/cachepawl`` or, for a multiarch library
   folder (``lib/x86_64-linux-gnu``), ``<its folder>/../../bin/cachepawl`` (where ``cmake
   --install`` puts both), or ``<its folder>/tools/cachepawl`` (a build tree);
4. ``cachepawl`` on ``PATH``.

None found: exit status 127 and a message naming every place tried.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import List, Optional

TOOL_ENV = "CACHEPAWL_TOOL"


def _loaded_library() -> Optional[Path]:
    """The file of the loaded libcachepawl (the loader's answer when it was found by name)."""
    from . import _lib

    path = _lib.library_path
    if os.sep in path:
        return Path(path).resolve()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and "libcachepawl" in Path(fields[5]).name:
                    return Path(fields[5]).resolve()
    except OSError:
        pass
    return None


def _candidates() -> List[Path]:
    if os.environ.get(TOOL_ENV):
        return [Path(os.environ[TOOL_ENV])]
    found = [Path(__file__).resolve().parent / "cachepawl"]
    lib = _loaded_library()
    if lib is not None:
        found += [
            lib.parent.parent / "bin" / "cachepawl",
            lib.parent.parent.parent / "bin" / "cachepawl",
            lib.parent / "tools" / "cachepawl",
        ]
    on_path = shutil.which("cachepawl")
    if on_path:
        found.append(Path(on_path))
    return found


def main(argv: List[str]) -> int:
    tried = _candidates()
    for tool in tried:
        if tool.is_file() and os.access(tool, os.X_OK):
            os.execv(str(tool), [str(tool)] + argv)
    where = ", ".join(str(t) for t in tried) + (", PATH" if TOOL_ENV not in os.environ else "")
    print(
        f"python -m cachepawl: no cachepawl program found (tried {where}); build it with the "
        f"library (the cachepawl target), install both (cmake --install BUILD), or set "
        f"{TOOL_ENV}=/path/to/cachepawl",
        file=sys.stderr,
    )
    return 127


def console_main() -> int:
    """The ``cachepawl`` console script of a wheel built at the repository root."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
