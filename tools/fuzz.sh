#!/usr/bin/env bash
# Runs every libFuzzer target of a CACHEPAWL_FUZZ=ON build for a while (docs/RELIABILITY.md, "Fuzzing").
#
#   tools/fuzz.sh BUILD_DIR SECONDS_PER_TARGET [TARGET...]     (default: every target)
#
# Each target (BUILD_DIR/tests/fuzz/fuzz_<name>) runs in this process, one job, for
# SECONDS_PER_TARGET seconds (-max_total_time), 10 s per input at most (-timeout), 2 GiB of RSS
# at most, starting from a copy of tests/fuzz/corpus/<name> and tests/fuzz/regressions/<name> in
# a temporary folder (the repository is not modified), with tests/fuzz/<name>.dict when there is
# one. Prints per target: executions, exec/s, coverage (cov: edges, ft: features), corpus size.
# Exits 1 when a target crashed, hung, leaked or ran out of memory; the input that did it and the
# log are kept in the temporary folder, whose path is printed (add the input to
# tests/fuzz/regressions/<name>/ once fixed). Build the targets first: ninja -C BUILD_DIR fuzz.
set -euo pipefail

if [[ $# -lt 2 ]] || ! [[ $2 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 BUILD_DIR SECONDS_PER_TARGET [TARGET...]" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$1
seconds=$2
shift 2
fuzz_src=$root/tests/fuzz

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$fuzz_src"/fuzz_*.cc; do
    name=$(basename "$f" .cc)
    targets+=("${name#fuzz_}")
  done
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/cachepawl-fuzz.XXXXXX")
failed=()
printf '%-14s %10s %8s %7s %7s %8s  %s\n' target execs exec/s cov ft corpus result
for name in "${targets[@]}"; do
  bin=$build/tests/fuzz/fuzz_$name
  if [[ ! -x $bin ]]; then
    echo "fuzz: $bin missing (configure with -DCACHEPAWL_FUZZ=ON and build the 'fuzz' target)" >&2
    exit 2
  fi
  corpus=$work/corpus/$name
  mkdir -p "$corpus" "$work/artifacts/$name"
  for seeds in "$fuzz_src/corpus/$name" "$fuzz_src/regressions/$name"; do
    if [[ -d $seeds ]]; then cp -r "$seeds"/. "$corpus"/; fi
  done
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
    -artifact_prefix="$work/artifacts/$name/")
  if [[ -f $fuzz_src/$name.dict ]]; then args+=(-dict="$fuzz_src/$name.dict"); fi
  # Records are a 4 KiB header block and a payload: room for a few pages of payload.
  if [[ $name == record_header ]]; then args+=(-max_len=16384); fi
  # JSON decoders: room for documents nested past the depth limit (64 levels) many times over
  # and for large configs, not only the 4 KiB libFuzzer picks from small seeds.
  case $name in layout_json | hf_config | trace_line | c_abi) args+=(-max_len=262144) ;; esac
  log=$work/$name.log
  status=0
  # The targets' own temporary files (the C ABI target's stores) go under $work too: libFuzzer
  # ends with _Exit, so a target's exit-time cleanup does not run.
  mkdir -p "$work/tmp/$name"
  TMPDIR=$work/tmp/$name ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    "$bin" "${args[@]}" "$corpus" >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  size=$(find "$corpus" -type f | wc -l)
  result=ok
  if [[ $status -ne 0 ]]; then
    result="FAILED (exit $status): $log"
    failed+=("$name")
  fi
  printf '%-14s %10s %8s %7s %7s %8s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
    "${ft:-?}" "$size" "$result"
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: ${failed[*]} failed; logs and inputs (artifacts/<target>/) kept in $work" >&2
  for name in "${failed[@]}"; do
    echo "--- $name: the end of $work/$name.log" >&2
    tail -40 "$work/$name.log" >&2
  done
  exit 1
fi
rm -rf "$work"
