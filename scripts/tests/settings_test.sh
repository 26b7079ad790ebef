#!/usr/bin/env bash
# One list of settings, four places (issue 14): `inventoryd --help`, the man page
# (docs/inventoryd.1), config/inventoryd.json and docs/configuration.md must name the same
# options, the same INVENTORY_* variables and the same config-file keys — none missing, none
# extra. Also: the man page renders without warnings, --help names the man page and the docs,
# and `cmake --install` installs the man page.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
man_page=$repo/docs/inventoryd.1
conf_md=$repo/docs/configuration.md
json=$repo/config/inventoryd.json
modes="--healthcheck --help --version" # modes, not settings: in --help and the man page only

"$bin" --help >"$t_dir/help.txt"
# Options.
grep -oE -- '^  (-[a-zA-Z], )?--[a-z-]+' "$t_dir/help.txt" | grep -oE -- '--[a-z-]+' | sort -u >"$t_dir/help.flags"
sed -n '/^\.SH OPTIONS/,/^\.SH ENVIRONMENT/p' "$man_page" | grep -E '^\.B(R)? ' \
  | grep -oE '\\-\\-[a-z\\-]+' | sed 's/\\-/-/g' | sort -u >"$t_dir/man.flags"
grep -E '^\| ' "$conf_md" | awk -F'|' '{print $3}' | grep -oE -- '`--[a-z-]+' | tr -d '`' | sort -u >"$t_dir/md.flags"
jq -r 'keys[] | select(startswith("_") | not)' "$json" | sed 's/_/-/g; s/^/--/' >"$t_dir/json.flags"
echo "--config" >>"$t_dir/json.flags" # the file cannot name itself
sort -u -o "$t_dir/json.flags" "$t_dir/json.flags"
for m in $modes; do
  t_check "$m is in --help" grep -qxF -- "$m" "$t_dir/help.flags"
  t_check "$m is in the man page" grep -qxF -- "$m" "$t_dir/man.flags"
done
grep -vxF -f <(tr ' ' '\n' <<<"$modes") "$t_dir/help.flags" >"$t_dir/help.settings" || true
grep -vxF -f <(tr ' ' '\n' <<<"$modes") "$t_dir/man.flags" >"$t_dir/man.settings" || true

# same LABEL FILE1 FILE2: the two lists are equal (the difference printed when not).
same() {
  if diff "$2" "$3" >"$t_dir/diff" 2>&1; then return 0; fi
  echo "   $1: < $(basename "$2")  > $(basename "$3")" >&2; sed 's/^/   /' "$t_dir/diff" >&2; return 1
}
n=$(wc -l <"$t_dir/md.flags")
t_check "docs/configuration.md lists $n options" test "$n" -ge 25
t_check "--help lists the same options as docs/configuration.md" same options "$t_dir/md.flags" "$t_dir/help.settings"
t_check "the man page lists the same options" same options "$t_dir/md.flags" "$t_dir/man.settings"
t_check "config/inventoryd.json has a key for every option" same options "$t_dir/md.flags" "$t_dir/json.flags"

# Environment variables.
grep -E '^\| ' "$conf_md" | awk -F'|' '{print $4}' | grep -oE 'INVENTORY_[A-Z_]+' | sort -u >"$t_dir/md.env"
sed -n '/^\.SH OPTIONS/,/^\.SH ENVIRONMENT/p' "$man_page" | grep -oE 'INVENTORY_[A-Z_]+' | sort -u >"$t_dir/man.env"
jq -r 'to_entries[] | select(.key | startswith("_")) | .value' "$json" | grep -oE 'env INVENTORY_[A-Z_]+' \
  | sed 's/^env //' | { cat; echo INVENTORY_CONFIG; } | sort -u >"$t_dir/json.env"
t_check "the man page names the same environment variables" same env "$t_dir/md.env" "$t_dir/man.env"
t_check "config/inventoryd.json's comments name the same environment variables" same env "$t_dir/md.env" "$t_dir/json.env"

# Config-file keys.
grep -E '^\| `[a-z_]+` \|' "$conf_md" | awk -F'|' '{print $2}' | tr -d ' `' | sort -u >"$t_dir/md.keys"
jq -r 'keys[] | select(startswith("_") | not)' "$json" | sort -u >"$t_dir/json.keys"
sed -n '/^\.SH OPTIONS/,/^\.SH ENVIRONMENT/p' "$man_page" | grep -oE 'config-file key: \\fB[a-z_]+' \
  | sed 's/.*\\fB//' | sort -u >"$t_dir/man.keys"
t_check "config/inventoryd.json has the keys of docs/configuration.md" same keys "$t_dir/md.keys" "$t_dir/json.keys"
t_check "the man page names the same config-file keys" same keys "$t_dir/md.keys" "$t_dir/man.keys"

t_check "--help says where the man page and the docs are" \
  bash -c "grep -q 'man inventoryd' '$t_dir/help.txt' && grep -q 'docs/' '$t_dir/help.txt'"
if command -v man >/dev/null 2>&1; then
  MANWIDTH=100 man --warnings -l "$man_page" >/dev/null 2>"$t_dir/man.warn" || true
  t_check "the man page renders without warnings" test ! -s "$t_dir/man.warn"
  [ -s "$t_dir/man.warn" ] && cat "$t_dir/man.warn" >&2
fi
DESTDIR=$t_dir/root cmake --install "$build_dir" --component doc >/dev/null
t_check "cmake --install installs the man page" \
  bash -c "find '$t_dir/root' -path '*/man1/inventoryd.1' | grep -q ."
t_done
