#!/usr/bin/env bash
# Installs a Cachepawl build into a temporary prefix and checks it the way a user consumes it:
#
#   1. the files: libcachepawl.so -> .so.MAJOR (the SONAME) -> .so.MAJOR.MINOR.PATCH, the CMake
#      package, cachepawl.pc, the headers;
#   2. the exports: every dynamic symbol the library defines is in namespace cachepawl or named
#      cachepawl_* (no CUDA runtime, spdlog, fmt, RocksDB... leaking);
#   3. the installed headers are exactly the API: store/store.h, every header directly in
#      vocab/ and the C header cachepawl.h, nothing else; each one compiles alone with
#      only the prefix's include folders on the path, warning-free, and reaches no RocksDB,
#      liburing, xxHash, spdlog, fmt, OpenSSL, nlohmann, hiredis or CUDA header;
#   4. tests/install/consumer.cc built with find_package(Cachepawl) and with pkg-config, linked
#      only to libcachepawl.so, and run: save, load and compare every byte, host then disk tier;
#   5. (hook) the C consumer, once the C API's header is installed.
#
#   tests/install/check_install.sh BUILD_DIR      (a configured and built tree)
#
# CXX and CC pick the consumers' compilers (default c++ and cc). The prefix and every file the
# check writes live in one mktemp -d folder, removed on exit, failure included. Exit status 0
# when everything passed; otherwise 1 with the failed step printed.
set -euo pipefail

if [[ $# -ne 1 || ! -f $1/CMakeCache.txt ]]; then
  echo "usage: $0 BUILD_DIR   (a configured and built Cachepawl build folder)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cxx=${CXX:-c++}
cc=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cachepawl-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

step() { echo "--- check_install: $*"; }
fail() {
  echo "check_install: FAILED: $*" >&2
  exit 1
}

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install"; }

# ---- 1. The files. libdir is wherever cachepawl.pc went (lib, or lib/<multiarch>). ----
pc=$(find "$prefix" -path '*/pkgconfig/cachepawl.pc' -print -quit)
[[ -n $pc ]] || fail "no pkgconfig/cachepawl.pc under $prefix"
libdir=$(dirname "$(dirname "$pc")")
inc=$prefix/include
lib=$libdir/libcachepawl.so
[[ -L $lib ]] || fail "$lib missing or not a symlink"
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ $soname =~ ^libcachepawl\.so\.[0-9]+$ ]] || fail "SONAME '$soname', expected libcachepawl.so.MAJOR"
[[ -L $libdir/$soname ]] || fail "$libdir/$soname missing or not a symlink"
real=$(basename "$(readlink -f "$lib")")
[[ $real =~ ^${soname//./\\.}\.[0-9]+\.[0-9]+$ ]] || fail "$lib resolves to $real, expected $soname.MINOR.PATCH"
for f in CachepawlConfig.cmake CachepawlConfigVersion.cmake CachepawlTargets.cmake; do
  [[ -f $libdir/cmake/Cachepawl/$f ]] || fail "$libdir/cmake/Cachepawl/$f missing"
done
[[ -f $inc/cachepawl/store/store.h ]] || fail "$inc/cachepawl/store/store.h missing"
step "files: $real (SONAME $soname), CMake package, cachepawl.pc, $(find "$inc" -type f | wc -l) headers"

# ---- 2. Exported symbols. ----
nm -D --defined-only "$lib" | awk '{print $NF}' >"$tmp/exports.txt"
c++filt <"$tmp/exports.txt" | paste "$tmp/exports.txt" - |
  grep -Ev $'\t(cachepawl::|(vtable|typeinfo|typeinfo name|guard variable) for cachepawl::|(non-)?virtual thunk to cachepawl::|cachepawl_)' \
    >"$tmp/foreign.txt" || true
if [[ -s $tmp/foreign.txt ]]; then
  head -n 20 "$tmp/foreign.txt" >&2
  fail "$(wc -l <"$tmp/foreign.txt") exported symbols outside namespace cachepawl / cachepawl_*"
fi
step "exports: $(wc -l <"$tmp/exports.txt") symbols, all cachepawl:: or cachepawl_*"

# ---- 3. The installed headers are exactly the API; each compiles alone, only the prefix on the
# include path. ----
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
expected=$( (echo cachepawl/store/store.h; [[ -f $src/capi/cachepawl.h ]] && echo cachepawl/cachepawl.h
  cd "$src" && find vocab layouts -maxdepth 1 -name '*.h' | sed 's#^#cachepawl/#') | sort)
installed=$(cd "$inc" && find . -type f | sed 's#^\./##' | sort)
if [[ $installed != "$expected" ]]; then
  diff <(echo "$expected") <(echo "$installed") >&2 || true
  fail "the installed headers are not store/store.h + vocab/*.h + layouts/*.h + cachepawl.h (diff above)"
fi
forbidden='/(rocksdb|liburing|spdlog|fmt|nlohmann|openssl|cub|thrust|hiredis)/|/(liburing|xxhash|cuda[a-z_]*)\.h|/cuda[^/]*/'
while IFS= read -r header; do
  rel=${header#"$inc"/}
  if [[ $rel == cachepawl/cachepawl.h ]]; then continue; fi  # the C header: step 5
  echo "#include <$rel>" >"$tmp/one.cc"
  "$cxx" -std=c++20 -Wall -Wextra -Werror -I"$inc" -I"$inc/cachepawl" -c "$tmp/one.cc" \
    -o "$tmp/one.o" -MD -MF "$tmp/one.d" || fail "<$rel> does not compile alone"
  if grep -Eo "[^ ]*($forbidden)[^ ]*" "$tmp/one.d" >"$tmp/bad.txt"; then
    cat "$tmp/bad.txt" >&2
    fail "<$rel> reaches a dependency's header"
  fi
done < <(find "$inc" -name '*.h' | sort)
step "headers: exactly store/store.h + vocab/*.h + cachepawl.h; each compiles alone against $inc, no dependency headers reachable"

# A consumer must link nothing but libcachepawl (and the C/C++ runtimes).
check_needed() {
  local bin=$1 bad loads
  bad=$(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' |
    grep -E 'rocksdb|uring|xxhash|spdlog|fmt|ssl|crypto|cuda|hiredis' || true)
  [[ -z $bad ]] || fail "$bin links $bad directly"
  # (Not `ldd | grep -q`: grep quitting early would fail the pipeline under pipefail.)
  loads=$(LD_LIBRARY_PATH=$libdir ldd "$bin")
  [[ $loads == *"$libdir/$soname"* ]] || fail "$bin does not load $libdir/$soname: $loads"
}

# ---- 4a. The CMake consumer. ----
step "CMake consumer: find_package(Cachepawl) with CMAKE_PREFIX_PATH=$prefix"
cmake -S "$here" -B "$tmp/cmake-consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log" >&2; fail "CMake consumer: configure"; }
found=$(sed -n 's/^Cachepawl_DIR:PATH=//p' "$tmp/cmake-consumer/CMakeCache.txt")
[[ $found == "$libdir/cmake/Cachepawl" ]] || fail "find_package found '$found', not $libdir/cmake/Cachepawl"
cmake --build "$tmp/cmake-consumer" >>"$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log" >&2; fail "CMake consumer: build"; }
check_needed "$tmp/cmake-consumer/consumer"
mkdir "$tmp/store-cmake"
LD_LIBRARY_PATH=$libdir "$tmp/cmake-consumer/consumer" "$tmp/store-cmake" ||
  fail "CMake consumer: run"
check_needed "$tmp/cmake-consumer/consumer_c"
mkdir "$tmp/store-cmake-c"
LD_LIBRARY_PATH=$libdir "$tmp/cmake-consumer/consumer_c" "$tmp/store-cmake-c" ||
  fail "CMake C consumer: run"

# ---- 4b. The pkg-config consumer. ----
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs cachepawl) || fail "pkg-config --cflags --libs cachepawl"
step "pkg-config consumer: $cxx -std=c++20 consumer.cc $flags"
# shellcheck disable=SC2086  # word splitting of the flags is intended
"$cxx" -std=c++20 -Wall -Wextra -Werror "$here/consumer.cc" $flags -o "$tmp/pc-consumer" ||
  fail "pkg-config consumer: build"
check_needed "$tmp/pc-consumer"
mkdir "$tmp/store-pc"
LD_LIBRARY_PATH=$libdir "$tmp/pc-consumer" "$tmp/store-pc" || fail "pkg-config consumer: run"

# ---- 5. The C consumer with pkg-config: <cachepawl/cachepawl.h> compiles alone as C11, and
# tests/install/consumer.c builds against it, linked and run like the C++ consumers. ----
if [[ -f $inc/cachepawl/cachepawl.h ]]; then
  echo "#include <cachepawl/cachepawl.h>" >"$tmp/one.c"
  "$cc" -std=c11 -Wall -Wextra -Werror -I"$inc" -fsyntax-only "$tmp/one.c" ||
    fail "<cachepawl/cachepawl.h> does not compile alone as C"
  if [[ -f $here/consumer.c ]]; then
    step "C consumer: $cc -std=c11 consumer.c $flags"
    # shellcheck disable=SC2086
    "$cc" -std=c11 -Wall -Wextra -Werror "$here/consumer.c" $flags -o "$tmp/c-consumer" ||
      fail "C consumer: build"
    check_needed "$tmp/c-consumer"
    mkdir "$tmp/store-c"
    LD_LIBRARY_PATH=$libdir "$tmp/c-consumer" "$tmp/store-c" || fail "C consumer: run"
  else
    step "C consumer: <cachepawl/cachepawl.h> installed but tests/install/consumer.c not written yet: skipped"
  fi
else
  step "C consumer: no <cachepawl/cachepawl.h> installed (no C API yet): skipped"
fi

# ---- 6. The Python package alone over the installed library: `pip install ./python` into a
# fresh virtual environment (offline: the system's setuptools, no build isolation), imported with
# only LD_LIBRARY_PATH pointing at the prefix; `python -m cachepawl` finds the tool installed
# beside the library (PREFIX/bin). Skipped where python3 has no venv or setuptools, unless
# CI=true (tools/setup.sh installs them). ----
python=${CACHEPAWL_PYTHON:-/usr/bin/python3}
if "$python" -c "import venv, ensurepip, setuptools" 2>/dev/null; then
  step "pip install ./python into a venv; import over $libdir"
  "$python" -m venv --system-site-packages "$tmp/venv" >/dev/null || fail "python -m venv"
  "$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-deps --no-index \
    "$here/../../python" >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log" >&2; fail "pip install ./python"; }
  got=$(cd "$tmp" && env -u CACHEPAWL_LIBRARY -u PYTHONPATH LD_LIBRARY_PATH="$libdir" \
    "$tmp/venv/bin/python" -c "import cachepawl; print(cachepawl.library_version())") ||
    fail "import cachepawl with LD_LIBRARY_PATH=$libdir"
  [[ $got == "$(sed -n 's/^project(cachepawl VERSION \([0-9.]*\).*/\1/p' "$here/../../CMakeLists.txt")"* ]] ||
    fail "cachepawl.library_version() = $got"
  if [[ -x $prefix/bin/cachepawl ]]; then
    (cd "$tmp" && env -u CACHEPAWL_LIBRARY -u CACHEPAWL_TOOL -u PYTHONPATH LD_LIBRARY_PATH="$libdir" \
      PATH=/usr/bin:/bin "$tmp/venv/bin/python" -m cachepawl layout --list | grep -q jamba) ||
      fail "python -m cachepawl layout --list did not run $prefix/bin/cachepawl"
  fi
elif [[ ${CI:-} == true ]]; then
  fail "$python has no venv, ensurepip or setuptools (tools/setup.sh installs them)"
else
  step "Python package: $python has no venv, ensurepip or setuptools: skipped"
fi

step "all passed"
