#!/usr/bin/env bash
# `pip install .` and `pip wheel .` at the repository root, the way a Python user installs
# Cachepawl: into a fresh virtual environment, offline (pip's build isolation with no package
# index: the backend, python/wheel_backend/cachepawl_build.py, needs nothing but the standard
# library), then checked from another folder with no CACHEPAWL_LIBRARY set:
#
#   1. the wheel: cachepawl-<version>-py3-none-<platform>.whl holding the package,
#      cachepawl/libcachepawl.so and the cachepawl tool, its version the library's;
#   2. `import cachepawl` loads the library inside the installed package, whose version and C
#      ABI version are the package's;
#   3. a CPU-mode store saves and loads a page and a state, every byte compared;
#   4. `python -m cachepawl` and the `cachepawl` console script run the bundled tool;
#   5. CACHEPAWL_LIBRARY still wins when set, and a bad one is a clear ImportError;
#   6. the Python suite (python/tests) passes through the installed package
#      (CACHEPAWL_TEST_INSTALLED=1; pytest and torch from the system's site-packages).
#
#   tests/install/check_wheel.sh BUILD_DIR
#
# BUILD_DIR is the backend's build folder (its `build-dir` config setting): CI passes its
# Release build, so the backend reconfigures it and builds nothing new; a user's `pip install .`
# builds <root>/build-wheel from scratch. Every file the check writes lives in one mktemp -d
# folder, removed on exit, failure included. Exit status 0 when everything passed; otherwise 1
# with the failed step printed.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR   (the wheel's CMake build folder; made when missing)" >&2
  exit 2
fi
mkdir -p "$1"
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${CACHEPAWL_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cachepawl-wheel-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

step() { echo "--- check_wheel: $*"; }
fail() {
  echo "check_wheel: FAILED: $*" >&2
  exit 1
}

step "a fresh virtual environment from $python"
# The system's site-packages are visible (pytest and torch for step 6), after the venv's own:
# cachepawl is installed nowhere but the venv, and step 2 checks that it loads from there.
"$python" -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1 ||
  { cat "$tmp/venv.log" >&2; fail "python -m venv (tools/setup.sh installs python3-venv)"; }
py=$tmp/venv/bin/python
pip=("$py" -m pip --disable-pip-version-check --no-input)
settings=(--config-settings "build-dir=$build")

step "pip wheel --no-index $root"
"${pip[@]}" wheel --no-index --no-deps -w "$tmp/wheels" "${settings[@]}" "$root" \
  >"$tmp/wheel.log" 2>&1 || { tail -40 "$tmp/wheel.log" >&2; fail "pip wheel ."; }
version=$(sed -n 's/^project(cachepawl VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
wheels=("$tmp"/wheels/cachepawl-"$version"-py3-none-*.whl)
[[ -f ${wheels[0]} ]] ||
  fail "no cachepawl-$version-py3-none-*.whl in $tmp/wheels: $(ls "$tmp/wheels")"
"$py" - "${wheels[0]}" "$version" <<'EOF' || fail "the wheel's contents"
import sys, zipfile
path, version = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(path)
names = set(z.namelist())
need = {"cachepawl/__init__.py", "cachepawl/_lib.py", "cachepawl/py.typed",
        "cachepawl/libcachepawl.so", "cachepawl/cachepawl",
        f"cachepawl-{version}.dist-info/METADATA", f"cachepawl-{version}.dist-info/WHEEL",
        f"cachepawl-{version}.dist-info/RECORD", f"cachepawl-{version}.dist-info/entry_points.txt"}
missing = need - names
assert not missing, f"missing {sorted(missing)}"
meta = z.read(f"cachepawl-{version}.dist-info/METADATA").decode()
assert f"\nVersion: {version}\n" in meta, meta[:300]
assert z.getinfo("cachepawl/cachepawl").external_attr >> 16 & 0o111, "the tool is not executable"
assert z.read("cachepawl/libcachepawl.so")[:4] == b"\x7fELF"
print(f"{path.rsplit('/', 1)[-1]}: {len(names)} files")
EOF

step "pip install --no-index $root (build isolation on, no index)"
"${pip[@]}" install --no-index "${settings[@]}" "$root" >"$tmp/install.log" 2>&1 ||
  { tail -40 "$tmp/install.log" >&2; fail "pip install ."; }

mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
step "import cachepawl from $tmp/elsewhere, CACHEPAWL_LIBRARY unset"
env -u CACHEPAWL_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH "$py" - "$tmp/venv" "$version" <<'EOF' ||
import sys, pathlib, random, tempfile
import cachepawl
from cachepawl import _lib
venv, version = pathlib.Path(sys.argv[1]).resolve(), sys.argv[2]
pkg = pathlib.Path(cachepawl.__file__).resolve().parent
lib = pathlib.Path(cachepawl.library_path).resolve()
assert pkg.is_relative_to(venv), f"package at {pkg}, not in {venv}"
assert lib == pkg / "libcachepawl.so", f"library loaded from {lib}, not {pkg}"
assert cachepawl.__version__ == version, (cachepawl.__version__, version)
assert cachepawl.library_version().startswith(version), cachepawl.library_version()
assert _lib.lib.cachepawl_abi_version() == _lib.ABI_VERSION
layout = """{"model": "t/tiny", "num_layers": 2, "page_size_tokens": 4,
 "attention_layers": [{"layer_index": 0, "num_kv_heads": 2, "head_dim": 16, "dtype": "bf16"}],
 "ssm_layers": [{"layer_index": 1, "block": "mamba2", "conv_shape": [8, 3], "conv_dtype": "bf16",
   "ssm_shape": [2, 4, 8], "ssm_dtype": "fp32"}]}"""
with tempfile.TemporaryDirectory() as d, cachepawl.Store(
    layout_json=layout, host_bytes=1 << 20, disk_dir=d, disk_bytes=1 << 22, cuda_device=-1,
    device_pool_bytes=1 << 20) as store:
    kv, st = store.record_bytes("kv"), store.record_bytes("state")
    page, slot = store.allocate_device_slot("kv"), store.allocate_device_slot("state")
    data = random.Random(5).randbytes(kv), random.Random(6).randbytes(st)
    store.write_device_record("kv", page, data[0])
    store.write_device_record("state", slot, data[1])
    toks = list(range(100, 104))
    store.save(toks, [page], state_slot=slot, state_depth_tokens=4).wait(timeout=30)
    m = store.lookup(toks)
    assert m.reusable_pages == 1, m
    page2, slot2 = store.allocate_device_slot("kv"), store.allocate_device_slot("state")
    store.write_device_record("kv", page2, b"\xa5" * kv)
    store.write_device_record("state", slot2, b"\xa5" * st)
    with store.lock(m):
        store.load(m, [page2], slot2).wait(timeout=30)
    assert bytes(store.read_device_record("kv", page2)) == data[0]
    assert bytes(store.read_device_record("state", slot2)) == data[1]
print(f"cachepawl {cachepawl.__version__} from {pkg}; library {lib.name} "
      f"{cachepawl.library_version()}; a page and a state round-tripped")
EOF
  fail "import and round trip"

step "python -m cachepawl layout --list, and the cachepawl console script"
env -u CACHEPAWL_LIBRARY -u CACHEPAWL_TOOL "$py" -m cachepawl layout --list >"$tmp/list.txt" ||
  fail "python -m cachepawl layout --list"
grep -q jamba "$tmp/list.txt" || fail "python -m cachepawl layout --list printed no jamba layout"
env -u CACHEPAWL_LIBRARY -u CACHEPAWL_TOOL PATH="$tmp/venv/bin:/usr/bin:/bin" cachepawl --help \
  >"$tmp/help.txt" 2>&1 || fail "the cachepawl console script"
grep -q replay "$tmp/help.txt" || fail "cachepawl --help names no replay command"

step "CACHEPAWL_LIBRARY still wins: a missing file is an ImportError naming it"
if CACHEPAWL_LIBRARY=$tmp/none.so "$py" -c "import cachepawl" 2>"$tmp/err.txt"; then
  fail "CACHEPAWL_LIBRARY=$tmp/none.so imported"
fi
grep -q "CACHEPAWL_LIBRARY='$tmp/none.so': no such file" "$tmp/err.txt" ||
  { cat "$tmp/err.txt" >&2; fail "the error does not name CACHEPAWL_LIBRARY"; }

step "python/tests through the installed package"
env -u CACHEPAWL_LIBRARY -u CACHEPAWL_TOOL -u PYTHONPATH CACHEPAWL_TEST_INSTALLED=1 \
  CACHEPAWL_PYTEST_REQUIRE_PASS=1 PYTHONDONTWRITEBYTECODE=1 \
  "$py" -m pytest -q -p no:cacheprovider "$root/python/tests" >"$tmp/pytest.log" 2>&1 ||
  { tail -60 "$tmp/pytest.log" >&2; fail "python/tests through the installed package"; }
tail -1 "$tmp/pytest.log"

step "all passed"
