#!/usr/bin/env bash
# Runs `cachepawl bench remote` on a machine that has no Redis installed: against a 3-master Redis
# Cluster and a standalone server started here from a carried folder.
#
#   tools/device-remote-bench.sh DIR [OUTDIR]
#
# DIR holds cachepawl, redis-server, redis-cli and lib/ (their shared libraries). To make it, in a
# folder that .git/info/exclude ignores (e.g. .devrun-remote/; the device tool carries it):
#   strip -o DIR/cachepawl build-rel/tools/cachepawl      (a Release build; CUDA not needed)
#   cp /usr/bin/redis-server /usr/bin/redis-cli DIR/     (redis-server is a link: cp copies it)
#   ../shared/tools/bundle-libs DIR/lib DIR/cachepawl DIR/redis-server DIR/redis-cli Results go to OUTDIR
# ($OUT, else ./remote-bench-out): the JSON runs as NAME.json and, on failure, the servers' logs
# as redis-logs.txt; everything else (machine, tables, errors) goes to stdout (tee it). Every redis-server started here is stopped on exit, failure included.
# Budget: BENCH_BUDGET_S (default 330) seconds in all; optional runs start only while at least
# BENCH_OPTIONAL_S (default 90) seconds are left. Records: BENCH_RECORDS (256K,2M,16M),
# BENCH_MIB (1024), BENCH_REPEAT (3); ports BENCH_PORT_BASE (7601) to +2 (cluster), +9 (standalone)
# and their cluster bus ports (+10000). BENCH_PLAN: the runs, in order (names as below; default
# all but the before-* ones). A run named before-NAME runs NAME with DIR/cachepawl-before (an
# older build carried alongside, for a before/after comparison in one session).
set -uo pipefail

dir=$(cd "${1:?usage: device-remote-bench.sh DIR [OUTDIR]}" && pwd)
out=${2:-${OUT:-$PWD/remote-bench-out}}
mkdir -p "$out"
# The carried libraries reach our three binaries only (system tools keep their own).
libs="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
redis_server() { LD_LIBRARY_PATH=$libs "$dir/redis-server" "$@"; }
redis_cli() { LD_LIBRARY_PATH=$libs "$dir/redis-cli" "$@"; }
budget=${BENCH_BUDGET_S:-330}
optional=${BENCH_OPTIONAL_S:-90}
records=${BENCH_RECORDS:-256K,2M,16M}
mib=${BENCH_MIB:-1024}
repeat=${BENCH_REPEAT:-3}
base=${BENCH_PORT_BASE:-7601}
if ! [[ $base =~ ^[0-9]+$ ]] || [ "$base" -lt 1024 ] || [ "$base" -gt 55000 ]; then
  echo "device-remote-bench: BENCH_PORT_BASE '$base': a port from 1024 to 55000" >&2
  exit 2
fi
cluster_ports=("$base" "$((base + 1))" "$((base + 2))")
standalone_port=$((base + 9))
start_s=$SECONDS
work=$(mktemp -d /tmp/remote-bench.XXXXXX)

pids=()
# shellcheck disable=SC2317  # run by the EXIT trap
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap stop_all EXIT
trap 'exit 130' INT TERM

start_server() {  # PORT CLUSTER(yes|no)
  local port=$1 cluster=$2 d="$work/$1"
  mkdir -p "$d"
  local args=(--port "$port" --bind 127.0.0.1 --dir "$d" --save "" --appendonly no
              --protected-mode no --logfile "$d/redis.log" --daemonize no)
  if [ "$cluster" = yes ]; then
    args+=(--cluster-enabled yes --cluster-config-file "$d/nodes.conf"
           --cluster-node-timeout 5000 --cluster-require-full-coverage no)
  fi
  LD_LIBRARY_PATH=$libs "$dir/redis-server" "${args[@]}" &
  pids+=($!)
}

wait_ping() {  # PORT
  for _ in $(seq 100); do
    [ "$(redis_cli -p "$1" PING 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  echo "redis on port $1 did not answer PING" >&2
  return 1
}

fail() {
  echo "device-remote-bench: $*" >&2
  for p in "${cluster_ports[@]}" "$standalone_port"; do
    [ -f "$work/$p/redis.log" ] && { echo "== port $p"; cat "$work/$p/redis.log"; }
  done >"$out/redis-logs.txt"
  exit 1
}

echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "nproc: $(nproc)"
lscpu | head -20
grep MemTotal /proc/meminfo
uname -a
redis_server --version

for p in "${cluster_ports[@]}"; do start_server "$p" yes; done
start_server "$standalone_port" no
for p in "${cluster_ports[@]}" "$standalone_port"; do wait_ping "$p" || fail "no server on $p"; done
nodes=()
for p in "${cluster_ports[@]}"; do nodes+=("127.0.0.1:$p"); done
redis_cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
  >"$work/create.log" 2>&1 || { cat "$work/create.log"; fail "redis-cli --cluster create"; }
ok=no
for _ in $(seq 200); do
  all=yes
  for p in "${cluster_ports[@]}"; do
    info=$(redis_cli -p "$p" CLUSTER INFO 2>/dev/null)
    grep -q "cluster_state:ok" <<<"$info" && grep -q "cluster_known_nodes:3" <<<"$info" || all=no
  done
  [ $all = yes ] && { ok=yes; break; }
  sleep 0.1
done
[ $ok = yes ] || fail "the cluster did not reach cluster_state:ok"
echo "cluster ready after $((SECONDS - start_s)) s"

status=0
bench() {  # NAME REQUIRED(yes|no) ARGS...
  local name=$1 required=$2
  shift 2
  local left=$((budget - (SECONDS - start_s)))
  if [ "$required" = no ] && [ $left -lt "$optional" ]; then
    echo "== $name: skipped ($left s left)"
    return
  fi
  [ $left -gt 5 ] || { echo "== $name: skipped (no time left)"; return; }
  echo "== $name: $(basename "${BIN:-cachepawl}") bench remote $*"
  local t0=$SECONDS result="$work/$name.out"
  [[ " $* " == *" --json "* ]] && result="$out/$name.json"
  timeout "$left" env LD_LIBRARY_PATH="$libs" "${BIN:-$dir/cachepawl}" bench remote "$@" >"$result" 2>&1
  local rc=$?
  cat "$result"
  echo "== $name: rc=$rc, $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || status=1
}

common=(--records "$records" --mib "$mib" --repeat "$repeat")
cluster=redis://127.0.0.1:${cluster_ports[0]}
standalone=redis://127.0.0.1:$standalone_port
plan=${BENCH_PLAN:-cluster-t8 standalone-t8 cluster-t8-json standalone-t8-json cluster-t4 cluster-t16}
first=yes
for name in $plan; do
  bin="$dir/cachepawl"
  run=$name
  if [[ $name == before-* ]]; then
    bin="$dir/cachepawl-before"
    run=${name#before-}
    [ -x "$bin" ] || { echo "== $name: skipped (no $bin)"; continue; }
  fi
  case $run in
    cluster-t8) args=(--remote "$cluster" --threads 8) ;;
    standalone-t8) args=(--remote "$standalone" --threads 8) ;;
    cluster-t8-json) args=(--remote "$cluster" --threads 8 --json) ;;
    standalone-t8-json) args=(--remote "$standalone" --threads 8 --json) ;;
    cluster-t4) args=(--remote "$cluster" --threads 4) ;;
    cluster-t16) args=(--remote "$cluster" --threads 16) ;;
    *) echo "device-remote-bench: BENCH_PLAN: unknown run '$name'" >&2; status=1; continue ;;
  esac
  # The first two runs are required; later ones only while the budget allows.
  required=no
  [ $first = yes ] && required=yes
  [ "$name" = standalone-t8 ] && required=yes
  first=no
  BIN=$bin bench "$name" $required "${args[@]}" "${common[@]}"
done
for p in "${cluster_ports[@]}" "$standalone_port"; do
  redis_cli -p "$p" INFO memory 2>/dev/null | grep -E "^used_memory_(human|peak_human)" |
    sed "s/^/port $p: /"
done
echo "total $((SECONDS - start_s)) s"
exit $status
