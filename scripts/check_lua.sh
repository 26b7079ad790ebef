#!/bin/sh
# Usage: scripts/check_lua.sh <dir>...
# Every *.lua file of each <dir> (not of its subdirectories) parses as Lua 5.1, the Lua of
# Redis: `luac5.1 -p` (Debian package lua5.1, scripts/deps.sh), which stops at the first syntax
# error and names its file and line. The lua_syntax test runs it on service/src/store/lua/ as written
# and on the text each script becomes in the binary (cmake/embed_lua.cmake).
set -eu
luac=$(command -v luac5.1 || true)
if [ -z "$luac" ]; then
  echo "check_lua.sh: luac5.1 not found (Debian package lua5.1: scripts/deps.sh installs it)" >&2
  exit 1
fi
n=0
for dir in "$@"; do
  for f in "$dir"/*.lua; do
    if [ ! -f "$f" ]; then
      echo "check_lua.sh: no .lua file in $dir" >&2
      exit 1
    fi
    "$luac" -p "$f" || { echo "check_lua.sh: $f: not valid Lua" >&2; exit 1; }
    n=$((n + 1))
  done
done
echo "check_lua.sh: $n files parse"
