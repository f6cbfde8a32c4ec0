#!/usr/bin/env bash
# The README's main job, after the build: `cachepawl replay` acts as a serving engine running a
# hybrid model (Jamba v0.1: 256 KiB KV pages, 15.3 MiB Mamba states) on a built-in mixed
# workload (multi-turn chat, shared system prompts, agent loops, few-shot), over an embedded
# store in a temporary folder: its own device pool as L1 (the GPU when there is one, host memory
# otherwise), the store's host tier (1 GiB) and disk tier (4 GiB). Every byte it loads back is
# verified; it prints hit rates per tier next to the workload's ceiling, bytes moved, latencies.
# Exit status 1 when any byte was wrong.
set -euo pipefail
build_dir=${1:-build}
"$build_dir/tools/cachepawl" replay --workload mixed --requests 150
