#!/bin/sh
# hipcc from Debian sid (hipcc 7.0, HIP 6.4, clang 21: knows gfx942 and gfx950), run inside
# the sid root that tools/amd_new_archs.sh makes. Bazel's hip rules call it in place of
# /usr/bin/hipcc when built with --define=mlaps_hipcc=<absolute path of this file> (see
# tools/build_defs/hip.bzl), so the flags stay those of the rules.
#
# Each call gets a private mount namespace (nothing leaks to the host, no clean-up, no races
# between parallel actions) in which the workspace and the Bazel output base are bind-mounted
# at their own absolute paths inside the root, so the action's relative paths and the
# execroot's symlinks resolve as on the host. Only third-party header directories of the
# host are mounted (abseil, googletest, benchmark, protobuf: the versions the host build and
# its protoc-generated headers use); the C
# library, libstdc++ and HIP headers are sid's own, matching its compiler.
#
#   tools/sid_hipcc.sh --root    prints the root's path (one definition, used by the check)
set -eu
root=/var/tmp/mlaps-sid-hipcc
if [ "${1:-}" = --root ]; then
  echo "$root"
  exit 0
fi
if [ ! -e "$root/.mlaps-ready" ]; then
  echo "sid_hipcc: no sid root at $root: run tools/amd_new_archs.sh" >&2
  exit 2
fi
ws=$(cd "$(dirname "$0")/.." && pwd -P)
cwd=$(pwd -P)
case "$cwd" in
  */sandbox/*) ob=${cwd%%/sandbox/*} ;;  # <output_base>/sandbox/<strategy>/<n>/execroot/<ws>
  */execroot/*) ob=${cwd%%/execroot/*} ;;
  *) ob="" ;;
esac
exec unshare --mount --propagation private /bin/sh -c '
  set -e
  root=$1 ws=$2 ob=$3 cwd=$4
  shift 4
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  for d in "$ws" $ob; do
    mkdir -p "$root$d"
    mount --bind "$d" "$root$d"
  done
  for d in absl gtest gmock benchmark google; do
    if [ -d "/usr/include/$d" ]; then
      mkdir -p "$root/usr/include/$d"
      mount --bind "/usr/include/$d" "$root/usr/include/$d"
    fi
  done
  exec /usr/sbin/chroot "$root" /usr/bin/env -C "$cwd" /usr/bin/hipcc "$@"
' sid_hipcc "$root" "$ws" "$ob" "$cwd" "$@"
