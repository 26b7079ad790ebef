#!/usr/bin/env bash
# Makes the base images the Dockerfiles start FROM (debian:bookworm, debian:bookworm-slim) without
# any image registry: `debootstrap --variant=minbase bookworm` into a temporary folder, packed as a
# tarball in the cache (reused when present), then `docker import`ed under both names. Images
# already in the engine are kept as they are (delete them, or set DOCKER_BASE_REFRESH=1, to
# rebuild). Needs root (debootstrap) and a running dockerd.
#
# Env: DOCKER (docker), DEBIAN_MIRROR (the first deb.debian.org-style URI of apt's sources, else
#      http://deb.debian.org/debian), INVENTORY_CACHE_DIR (${XDG_CACHE_HOME:-$HOME/.cache}/inventoryd),
#      DOCKER_BASE_REFRESH=1 (make the tarball and the images again).
set -euo pipefail
cd "$(dirname "$0")/.."

docker=${DOCKER:-docker}
cache=${INVENTORY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inventoryd}
tarball=$cache/debian-bookworm-minbase.tar.gz
names=(debian:bookworm debian:bookworm-slim)

have_all=1
for n in "${names[@]}"; do
  "$docker" image inspect "$n" >/dev/null 2>&1 || have_all=0
done
if [ "$have_all" = 1 ] && [ "${DOCKER_BASE_REFRESH:-0}" != 1 ]; then
  echo "docker-base.sh: ${names[*]} already in the engine"
  exit 0
fi

mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # The machine's own Debian mirror (deb822 or one-line sources), so the images use what works here.
  mirror=$(sed -n 's/^URIs:[[:space:]]*\(http[^[:space:]]*\/debian\)[[:space:]]*$/\1/p' \
             /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }' \
             /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi

if [ ! -s "$tarball" ] || [ "${DOCKER_BASE_REFRESH:-0}" = 1 ]; then
  mkdir -p "$cache"
  work=$(mktemp -d /tmp/inventoryd-debootstrap.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  echo "docker-base.sh: debootstrap --variant=minbase bookworm from $mirror (once; cached in $tarball)"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2
    echo "docker-base.sh: debootstrap failed" >&2
    exit 1
  }
  # What an image needs not carry: package lists and caches (apt-get update fetches fresh ones).
  rm -rf "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/var/cache/apt/"*.bin \
         "$work/rootfs/var/cache/apt/archives/"*.deb
  tar -C "$work/rootfs" --numeric-owner -czf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
fi

for n in "${names[@]}"; do
  "$docker" import --change 'CMD ["/bin/bash"]' "$tarball" "$n" >/dev/null
  echo "docker-base.sh: imported $n"
done
