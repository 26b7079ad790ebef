#!/usr/bin/env bash
# Runs service integration tests with every inventoryd they start under valgrind memcheck:
# a wrapper named inventoryd (INVENTORY_BUILD_BIN points the test fixture at it) execs
# valgrind on the real binary. A memory error or a definite leak makes that inventoryd exit 99,
# which fails the test that stops it; the valgrind reports are printed.
#
#   scripts/memcheck.sh [TEST...]      default: every service integration test
#                                      (service/tests/it_*.c; about 2 min)
#
# Env: BUILD_DIR (build), JOBS (2), VALGRIND_ARGS (extra valgrind flags).
# Needs valgrind (apt-get install valgrind); not part of scripts/deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build}
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  for f in service/tests/it_*.c; do tests+=("$(basename "$f" .c)"); done
fi
if ! command -v valgrind >/dev/null 2>&1; then
  echo "scripts/memcheck.sh: valgrind is not installed (apt-get install valgrind)" >&2
  exit 1
fi

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j "${JOBS:-2}" >/dev/null
real_bin=$(cd "$build_dir/bin" && pwd)/inventoryd

work=$(mktemp -d "${TMPDIR:-/tmp}/inventoryd-memcheck.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/logs"
cat >"$work/bin/inventoryd" <<WRAP
#!/usr/bin/env bash
exec valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \\
  --show-leak-kinds=definite ${VALGRIND_ARGS:-} --log-file=$work/logs/vg-%p.log \\
  $real_bin "\$@"
WRAP
chmod +x "$work/bin/inventoryd"

status=0
for t in "${tests[@]}"; do
  echo "== $t (inventoryd under valgrind memcheck)"
  # Direct, not through ctest: ctest would set INVENTORY_BUILD_BIN back to the build dir.
  INVENTORY_BUILD_BIN="$work/bin" SF_START_TIMEOUT_MS=60000 "$build_dir/bin/$t" || status=1
done
n=$(ls "$work/logs" | wc -l)
reports=$(find "$work/logs" -type f -size +0 | wc -l)
echo "== $n inventoryd process(es) ran under valgrind; $reports with a report"
if [ "$reports" -gt 0 ]; then
  find "$work/logs" -type f -size +0 -exec cat {} +
  status=1
fi
exit $status
