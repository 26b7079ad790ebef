#!/usr/bin/env bash
# `cmake --install` (issue #10, item 9), as a package build does it (DESTDIR, the configured
# prefix): a stripped inventoryd, the documented config file that the installed binary
# accepts, the hardened systemd unit with its paths rewritten to the prefix (checked with
# systemd-analyze when the machine has it) and the docs.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
configured=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build_dir/CMakeCache.txt")
root=$t_dir/root
prefix=$root$configured
DESTDIR=$root cmake --install "$build_dir" --strip >"$t_dir/install.log"

t_check "the binary is installed" test -x "$prefix/bin/inventoryd"
t_check "the binary is stripped" bash -c "! readelf -S '$prefix/bin/inventoryd' | grep -q '\.symtab'"
t_check "the config file is installed" test -f "$prefix/etc/inventoryd/inventoryd.json"
# With the installed config the binary gets as far as probing (exit 1: nothing listens), not
# to a configuration error (exit 2).
set +e
"$prefix/bin/inventoryd" --config "$prefix/etc/inventoryd/inventoryd.json" --port 1 --healthcheck \
  >/dev/null 2>"$t_dir/hc.err"
rc=$?
set -e
t_check "the installed binary accepts the installed config (exit $rc)" test "$rc" = 1
unit=$prefix/lib/systemd/system/inventoryd.service
t_check "the systemd unit is installed" test -f "$unit"
t_check "ExecStart names the installed binary and config" \
  grep -qxF "ExecStart=$configured/bin/inventoryd --config $configured/etc/inventoryd/inventoryd.json" "$unit"
for setting in DynamicUser=yes ProtectSystem=strict NoNewPrivileges=yes ProtectHome=yes \
               PrivateTmp=yes CapabilityBoundingSet= RestrictAddressFamilies=; do
  t_check "the unit sets $setting" grep -q "^$setting" "$unit"
done
t_check "secrets reach the unit as credentials, not flags" \
  bash -c "grep -q '^LoadCredential=admin_token:' '$unit' && ! grep -q -- '--admin-token ' '$unit'"
t_check "the docs are installed" test -f "$prefix/share/doc/inventoryd/deployment.md"
if command -v systemd-analyze >/dev/null 2>&1; then
  # Only the unit's own syntax: the binary path exists, the rest of the system may not.
  # Complaints about the binary not being at its real path (it is under DESTDIR) do not count.
  systemd-analyze verify "$unit" >"$t_dir/verify.log" 2>&1 || true
  if ! grep -v -e 'is not executable' "$t_dir/verify.log" | grep -q .; then
    t_check "systemd-analyze verify" true
  else
    cat "$t_dir/verify.log" >&2
    t_check "systemd-analyze verify" false
  fi
else
  echo "     (systemd-analyze is not installed: unit syntax not verified)"
fi
t_done
