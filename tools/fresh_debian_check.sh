#!/usr/bin/env bash
# What a newcomer does, on a fresh Debian 12: a minbase bookworm root (debootstrap), a git
# clone of the commit under test, then the README's two quick-start commands in a chroot:
#   tools/setup.sh && bazel run //tools:mlaps
#   tools/setup.sh && bazel test //...
# setup.sh installs everything from Debian's archive: nothing is preinstalled by hand.
#
# The bootstrapped base is cached as a tarball (first run: a few minutes of debootstrap;
# later runs unpack it in seconds) and every run starts from a fresh copy of it. The .deb
# files apt downloads are kept between runs (MLAPS_DEBIAN_DEBS, default
# /var/tmp/mlaps-bookworm-debs; empty: none kept): apt still installs every package on the
# fresh root, it only skips the download.
# Needs root and Debian's archive. Usage: tools/fresh_debian_check.sh [COMMIT]  (default HEAD)
# Environment: MLAPS_DEBIAN_CACHE (tarball, default /var/tmp/mlaps-bookworm-minbase.tar),
# MLAPS_DEBIAN_MIRROR (default http://deb.debian.org/debian), MLAPS_KEEP_ROOT=1 (keep the
# root for inspection; it is unmounted either way).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse --verify "${1:-HEAD}^{commit}")
cache=${MLAPS_DEBIAN_CACHE:-/var/tmp/mlaps-bookworm-minbase.tar}
mirror=${MLAPS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=http://deb.debian.org/debian-security
debs=${MLAPS_DEBIAN_DEBS-/var/tmp/mlaps-bookworm-debs}
say() { echo "fresh-debian: $*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "fresh-debian: needs root (debootstrap, mount, chroot)" >&2
  exit 2
fi

# --- the cached pristine base -----------------------------------------------------------
if [ ! -s "$cache" ]; then
  if ! command -v debootstrap >/dev/null; then
    say "installing debootstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q debootstrap >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q debootstrap >/dev/null; }
  fi
  base=$(mktemp -d /var/tmp/mlaps-bootstrap.XXXXXX)
  say "debootstrap --variant=minbase bookworm (cached afterwards in $cache)"
  if ! debootstrap --variant=minbase bookworm "$base" "$mirror" >"$base.log" 2>&1; then
    tail -n 20 "$base.log" >&2
    echo "fresh-debian: debootstrap failed; log in $base.log" >&2
    exit 1
  fi
  # A newcomer's Debian 12 has the release, its updates and security.
  cat >"$base/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
  rm -rf "$base"/var/cache/apt/archives/*.deb "$base"/var/lib/apt/lists/*_Packages
  tar -C "$base" --numeric-owner -cf "$cache.tmp" . && mv "$cache.tmp" "$cache"
  rm -rf "$base" "$base.log"
fi

# --- a fresh root from the cache ----------------------------------------------------------
root=$(mktemp -d /var/tmp/mlaps-fresh-debian.XXXXXX)
mounted=()
cleanup() {
  local rc=$?
  # Processes started in the root (the Bazel server) would keep the mounts busy.
  if [ -x "$root/usr/bin/bazel" ] && [ -d "$root/root/mlaps" ]; then
    chroot "$root" /bin/sh -c 'cd /root/mlaps && bazel shutdown' >/dev/null 2>&1 || true
  fi
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null || true
  done
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -R "${mounted[i]}" 2>/dev/null || umount -lR "${mounted[i]}" || true
  done
  if grep -q " $root/" /proc/mounts; then
    echo "fresh-debian: still mounted under $root; not removing it" >&2
  elif [ "${MLAPS_KEEP_ROOT:-0}" = 1 ]; then
    say "root kept in $root"
  else
    rm -rf "$root"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "fresh root $root from $cache"
tar -C "$root" --numeric-owner -xpf "$cache"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount_at() {  # mount ARGS... DIR, remembered for the unmount on exit
  mount "$@"
  mounted+=("${!#}")
}
mount_at -t proc proc "$root/proc"
mount_at -t sysfs sysfs "$root/sys"
mount_at --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"
mount_at -t tmpfs tmpfs "$root/tmp"
if [ -n "$debs" ]; then
  mkdir -p "$debs/partial"
  mount_at --bind "$debs" "$root/var/cache/apt/archives"
fi

say "git clone of $commit"
git clone -q --no-checkout "$repo" "$root/root/mlaps"
git -C "$root/root/mlaps" checkout -q --detach "$commit"

in_root() {  # a login-like clean environment, as a newcomer's root shell has
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/mlaps && $1"
}
for cmd in "tools/setup.sh && bazel run //tools:mlaps" "tools/setup.sh && bazel test //..."; do
  t0=$(date +%s)
  say "\$ $cmd"
  if ! in_root "$cmd"; then
    echo "fresh-debian: FAILED after $(($(date +%s) - t0))s: $cmd" >&2
    exit 1
  fi
  say "ok in $(($(date +%s) - t0))s: $cmd"
done
