#!/usr/bin/env bash
# Layers of a C tree, lowest first, as its layers.txt writes them: lockcore/src/layers.txt
# (docs/lockcore.md, "Internals: layers") and service/src/layers.txt (docs/design.md,
# "Layers"). Every file of the tree sits on one layer and uses only its own layer and the layers
# listed before it, never one listed after it. Two readings, each of which fails on an upward use:
#   includes  every `#include "x.h"` of a source or header of the tree names a header of the
#             same layer or an earlier one;
#   symbols   every symbol an object of the libraries refers to and another of their objects
#             defines (nm) is defined on the same layer or an earlier one: the calls, which
#             the includes alone do not show.
# A layers.txt line is "layer file file ..." where a file may be a folder ("base/": every .c and
# .h directly in it); files are known by their base names, which must be unique in the tree.
# A .c or .h file of the tree that layers.txt does not place, or a placed file that is gone,
# fails too.
#
# Usage: check_layers.sh SRC_DIR [LIBRARY.a ...]  (without a library only the includes are read)
#        check_layers.sh --self-test              (shows that both readings catch an upward use)
# Environment: LAYERS (SRC_DIR/layers.txt), NM (nm), CC (cc, for --self-test).
set -euo pipefail
export LC_ALL=C

# check SRC_DIR LAYERS [LIBRARY ...]: prints every violation; exit 1 if any.
check() {
  local src=$1 layers=$2
  shift 2
  local libs=("$@")
  declare -A rank=() layer=() where=()
  local i=0 name files f bad=0 path

  # every .c and .h of the tree, by base name
  while read -r path; do
    f=${path##*/}
    if [[ -n ${where[$f]:-} ]]; then
      echo "layers: two files named $f (${where[$f]#$src/} and ${path#$src/}): names must be unique"
      bad=1
    fi
    where[$f]=$path
  done < <(find "$src" -type f \( -name '*.c' -o -name '*.h' \) | sort)

  while read -r name files; do
    [[ -z $name || $name == \#* ]] && continue
    i=$((i + 1))
    for f in $files; do
      local placed=()
      if [[ $f == */ ]]; then
        [[ -d $src/$f ]] || { echo "layers: $f is placed on $name but is not a folder of $src"; bad=1; continue; }
        for path in "$src/$f"*.c "$src/$f"*.h; do
          [[ -e $path ]] && placed+=("${path##*/}")
        done
      else
        [[ -n ${where[${f##*/}]:-} ]] || { echo "layers: $f is placed on $name but is not in $src"; bad=1; continue; }
        placed+=("${f##*/}")
      fi
      local g
      for g in "${placed[@]}"; do
        if [[ -n ${rank[$g]:-} ]]; then
          echo "layers: $g is placed twice (${layer[$g]} and $name)"
          bad=1
        fi
        rank[$g]=$i
        layer[$g]=$name
      done
    done
  done <"$layers"

  local h
  for f in "${!where[@]}"; do
    path=${where[$f]}
    if [[ -z ${rank[$f]:-} ]]; then
      echo "layers: ${path#$src/} is on no layer of $layers"
      bad=1
      continue
    fi
    while read -r h; do
      h=${h##*/}
      [[ -n ${where[$h]:-} ]] || continue # a public or generated header, below every layer
      if [[ -n ${rank[$h]:-} && ${rank[$h]} -gt ${rank[$f]} ]]; then
        echo "include: $f (${layer[$f]}) includes $h (${layer[$h]}, a later layer)"
        bad=1
      fi
    done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/p' "$path")
  done

  if [[ ${#libs[@]} -gt 0 ]]; then
    # nm -A -P: "LIB[member.c.o]: NAME TYPE VALUE SIZE"; U = used, upper-case others = defined.
    local table
    table=$("${NM:-nm}" -A -P "${libs[@]}" | sed -nE 's/^[^[]*\[([^]]+)\.o\]: ([^ ]+) ([A-Za-z]) .*/\1 \2 \3/p')
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
# both readings must name it. Once with the files named one by one, once by their folders.
self_test_one() {
  local form=$1 t lo=. hi=.
  t=$(mktemp -d)
  trap 'rm -rf "${t:-}"; trap - RETURN' RETURN
  if [[ $form == folders ]]; then
    lo=lo hi=hi
    mkdir "$t/lo" "$t/hi"
    printf 'low lo/\nhigh hi/\n' >"$t/layers.txt"
  else
    printf 'low low.h low.c\nhigh high.h high.c\n' >"$t/layers.txt"
  fi
  printf 'int low_fn(void);\n' >"$t/$lo/low.h"
  printf 'int high_fn(void);\n' >"$t/$hi/high.h"
  printf '#include "low.h"\n#include "high.h"\nint low_fn(void) { return high_fn(); }\n' >"$t/$lo/low.c"
  printf '#include "low.h"\n#include "high.h"\nint high_fn(void) { return 1; }\n' >"$t/$hi/high.c"
  (cd "$t" && "${CC:-cc}" -I"$lo" -I"$hi" -c "$lo/low.c" -o low.c.o &&
    "${CC:-cc}" -I"$lo" -I"$hi" -c "$hi/high.c" -o high.c.o &&
    ar rcs libt.a low.c.o high.c.o && rm low.c.o high.c.o)
  local out
  if out=$(check "$t" "$t/layers.txt" "$t/libt.a"); then
    echo "self-test ($form): an upward include and call passed the check"
    return 1
  fi
  grep -q '^include: low.c (low) includes high.h' <<<"$out" ||
    { echo "self-test ($form): the upward include was not reported:"; echo "$out"; return 1; }
  grep -q '^symbol: low.c (low) uses high_fn of high.c' <<<"$out" ||
    { echo "self-test ($form): the upward call was not reported:"; echo "$out"; return 1; }
}

self_test() {
  self_test_one files && self_test_one folders || return 1
  echo "self-test: ok (an upward include and an upward call are both reported, files named one by one or by folder)"
}

if [[ ${1:-} == --self-test ]]; then
  self_test
  exit
fi
[[ $# -ge 1 && -d $1 ]] || { echo "usage: $0 SRC_DIR [LIBRARY.a ...] | --self-test" >&2; exit 2; }
src=${1%/}
shift
layers=${LAYERS:-$src/layers.txt}
[[ -f $layers ]] || { echo "layers: no $layers"; exit 1; }
if check "$src" "$layers" "$@"; then
  echo "layers: ok ($(grep -cvE '^[[:space:]]*(#|$)' "$layers") layers; includes${1:+ and symbols} checked)"
else
  echo "layers: FAILED (the comment at the top of $layers says where they are described)"
  exit 1
fi
