#!/usr/bin/env bash
# The README's main job, after the build: shows a real model layout and hashes a prompt.
# (The replay harness replaces this once it lands.)
set -euo pipefail
build_dir=${1:-build}
cp=$build_dir/tools/cachepawl
"$cp" layout --list
"$cp" layout jamba-v0.1
seq 1 64 | "$cp" hash --page-size 16 --namespace demo
