#!/usr/bin/env bash
# Formats every C source and header with the checked-in .clang-format.
# scripts/format.sh --check: report files that would change, exit 1 if any (no edits).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h')
case "${1:-}" in
  --check) clang-format --dry-run --Werror "${files[@]}" ;;
  "") clang-format -i "${files[@]}" ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac
