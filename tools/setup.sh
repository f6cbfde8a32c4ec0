#!/usr/bin/env bash
# Installs Cachepawl's build dependencies (Debian packages) when missing, then configures a build.
#
#   tools/setup.sh [BUILD_DIR] [CMAKE_ARGS...]      (BUILD_DIR defaults to ./build)
#
# Idempotent: packages already installed are not touched, and an existing build folder is
# reconfigured. The CUDA toolkit is not installed here; CMake uses /usr/local/cuda when it is
# there (CACHEPAWL_CUDA=AUTO) and builds the CPU-mode library otherwise.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-"$root/build"}
[ $# -gt 0 ] && shift

packages=(
  build-essential cmake ninja-build pkg-config git
  liburing-dev librocksdb-dev libxxhash-dev libspdlog-dev libssl-dev libhiredis-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev nlohmann-json3-dev libcli11-dev
  python3 python3-pytest python3-venv python3-setuptools
  python3-torch  # the PyTorch path's tests with CPU tensors (python/tests/test_torch.py)
  clang-14 libclang-rt-14-dev
  redis-server redis-tools  # the remote tests' Redis Cluster (redis-server, redis-cli)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

cmake -S "$root" -B "$build_dir" -G Ninja "$@"
