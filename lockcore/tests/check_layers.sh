#!/usr/bin/env bash
# lockcore's layers (docs/lockcore.md, "Internals: layers"): every file of lockcore/src sits on
# one layer of lockcore/src/layers.txt and uses only its own layer and the layers listed before
# it, never one listed after it. Two readings, each of which fails on an upward use:
#   includes  every `#include "x.h"` of a source or header of SRC_DIR names a header of the
#             same layer or an earlier one;
#   symbols   every symbol an object of the library refers to and another of its objects
#             defines (nm) is defined on the same layer or an earlier one: the calls, which
#             the includes alone do not show.
# A file of SRC_DIR that layers.txt does not place, or a placed file that is gone, fails too.
#
# Usage: check_layers.sh SRC_DIR [LIBRARY.a]    (without LIBRARY only the includes are read)
#        check_layers.sh --self-test            (shows that both readings catch an upward use)
# Environment: LAYERS (SRC_DIR/layers.txt), NM (nm), CC (cc, for --self-test).
set -euo pipefail
export LC_ALL=C

# check SRC_DIR LAYERS [LIBRARY]: prints every violation; exit 1 if any.
check() {
  local src=$1 layers=$2 lib=${3:-}
  declare -A rank=() layer=()
  local i=0 name files f bad=0
  while read -r name files; do
    [[ -z $name || $name == \#* ]] && continue
    i=$((i + 1))
    for f in $files; do
      if [[ -n ${rank[$f]:-} ]]; then
        echo "layers: $f is placed twice (${layer[$f]} and $name)"
        bad=1
      fi
      rank[$f]=$i
      layer[$f]=$name
      [[ -e $src/$f ]] || { echo "layers: $f is placed on $name but is not in $src"; bad=1; }
    done
  done <"$layers"

  local path h
  for path in "$src"/*.c "$src"/*.h; do
    f=${path##*/}
    if [[ -z ${rank[$f]:-} ]]; then
      echo "layers: $f is on no layer of $layers"
      bad=1
      continue
    fi
    while read -r h; do
      [[ -e $src/$h ]] || continue # a public header (lockcore/…), below every layer
      if [[ -n ${rank[$h]:-} && ${rank[$h]} -gt ${rank[$f]} ]]; then
        echo "include: $f (${layer[$f]}) includes $h (${layer[$h]}, a later layer)"
        bad=1
      fi
    done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$path")
  done

  if [[ -n $lib ]]; then
    # nm -A -P: "LIB[member.c.o]: NAME TYPE VALUE SIZE"; U = used, upper-case others = defined.
    local table
    table=$("${NM:-nm}" -A -P "$lib" | sed -nE 's/^[^[]*\[([^]]+)\.o\]: ([^ ]+) ([A-Za-z]) .*/\1 \2 \3/p')
    local defs
    defs=$(awk '$3 ~ /^[BDGRSTV]$/ {print $2, $1}' <<<"$table" | sort -u)
    local user sym def
    while read -r user sym def; do
      [[ -z ${rank[$user]:-} || -z ${rank[$def]:-} ]] && continue
      if [[ ${rank[$def]} -gt ${rank[$user]} ]]; then
        echo "symbol: $user (${layer[$user]}) uses $sym of $def (${layer[$def]}, a later layer)"
        bad=1
      fi
    done < <(awk '$3 == "U" {print $2, $1}' <<<"$table" | sort -u |
      join -o 1.2,1.1,2.2 - <(echo "$defs"))
  fi
  return $bad
}

# A two-layer tree whose lower file includes the upper header and calls the upper function:
# both readings must name it.
self_test() {
  local t
  t=$(mktemp -d)
  trap 'rm -rf "$t"' RETURN
  printf 'low low.h low.c\nhigh high.h high.c\n' >"$t/layers.txt"
  printf 'int low_fn(void);\n' >"$t/low.h"
  printf 'int high_fn(void);\n' >"$t/high.h"
  printf '#include "low.h"\n#include "high.h"\nint low_fn(void) { return high_fn(); }\n' >"$t/low.c"
  printf '#include "low.h"\n#include "high.h"\nint high_fn(void) { return 1; }\n' >"$t/high.c"
  (cd "$t" && "${CC:-cc}" -c low.c -o low.c.o && "${CC:-cc}" -c high.c -o high.c.o &&
    ar rcs libt.a low.c.o high.c.o && rm low.c.o high.c.o)
  local out
  if out=$(check "$t" "$t/layers.txt" "$t/libt.a"); then
    echo "self-test: an upward include and call passed the check"
    return 1
  fi
  grep -q '^include: low.c (low) includes high.h' <<<"$out" ||
    { echo "self-test: the upward include was not reported:"; echo "$out"; return 1; }
  grep -q '^symbol: low.c (low) uses high_fn of high.c' <<<"$out" ||
    { echo "self-test: the upward call was not reported:"; echo "$out"; return 1; }
  echo "self-test: ok (an upward include and an upward call are both reported)"
}

if [[ ${1:-} == --self-test ]]; then
  self_test
  exit
fi
[[ $# -ge 1 && -d $1 ]] || { echo "usage: $0 SRC_DIR [LIBRARY.a] | --self-test" >&2; exit 2; }
src=$1
layers=${LAYERS:-$src/layers.txt}
[[ -f $layers ]] || { echo "layers: no $layers"; exit 1; }
if check "$src" "$layers" "${2:-}"; then
  echo "layers: ok ($(grep -cvE '^[[:space:]]*(#|$)' "$layers") layers; includes${2:+ and symbols} checked)"
else
  echo "layers: FAILED (see docs/lockcore.md, \"Internals: layers\")"
  exit 1
fi
