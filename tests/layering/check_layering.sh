#!/usr/bin/env bash
# The house drawn from the includes: every folder of the library may include only the folders
# below it (and itself). Fails naming each file and include that points up or sideways.
#
#   capi      -> ipc store layouts tiers redis vocab
#   ipc       -> store index tiers transfer layouts cuda vocab
#   store     -> index tiers transfer layouts cuda vocab
#   transfer  -> tiers cuda vocab
#   tiers     -> redis cuda vocab
#   layouts, index, cuda, redis -> vocab
#   vocab     -> (nothing)
#
# tools/, tests/, examples/ and python/ sit on top and may include anything.
# Usage: check_layering.sh [SOURCE_DIR]   (default: the repository holding this script)
set -euo pipefail
src=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"}
declare -A allowed=(
  [vocab]="vocab"
  [layouts]="layouts vocab"
  [index]="index vocab"
  [cuda]="cuda vocab"
  [redis]="redis vocab"
  [tiers]="tiers redis cuda vocab"
  [transfer]="transfer tiers cuda vocab"
  [store]="store index tiers transfer layouts cuda vocab"
  [ipc]="ipc store index tiers transfer layouts cuda vocab"
  [capi]="capi ipc store layouts tiers redis vocab"
)
bad=0
checked=0
for folder in "${!allowed[@]}"; do
  [[ -d $src/$folder ]] || { echo "check_layering: no folder $src/$folder" >&2; exit 2; }
  while IFS= read -r -d '' file; do
    checked=$((checked + 1))
    while IFS= read -r target; do
      if [[ " ${allowed[$folder]} " != *" $target "* ]]; then
        echo "${file#"$src"/}: includes \"$target/...\" (a $folder/ file may include only: ${allowed[$folder]})"
        bad=$((bad + 1))
      fi
    done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([a-z_]+)\/.*/\1/p' "$file" | sort -u)
  done < <(find "$src/$folder" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) -print0)
done
if ((checked == 0)); then
  echo "check_layering: no source file found under $src" >&2
  exit 2
fi
if ((bad > 0)); then
  echo "check_layering: $bad include(s) point up or sideways in the house (tests/layering/check_layering.sh)" >&2
  exit 1
fi
echo "check_layering: $checked files, every include points down"
