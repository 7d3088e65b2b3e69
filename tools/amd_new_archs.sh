#!/usr/bin/env bash
# AMD compile check for the seeds' own GPUs: every HIP target of the project for gfx942
# (MI300) and gfx950 (MI355), with Debian sid's hipcc (7.0; HIP 6.4, clang 21), then a
# resource report per kernel and arch.
#
# Debian 12's hipcc (5.2) knows neither arch, trixie's (5.7) not gfx950, so sid's toolchain
# lives in a chroot made once with debootstrap and kept at $(tools/sid_hipcc.sh --root)
# (rebuilt when missing or when the package list below changes; about 1.4 GB). The root is
# not upgraded: delete it to take a newer sid toolchain.
#
# The build is Bazel's own: `--config=rocm --define=mlaps_amd_archs=new` with the rules'
# hipcc replaced by tools/sid_hipcc.sh (--define=mlaps_hipcc=...), so the HIP flags are
# defined once, in tools/build_defs/hip.bzl. Only the HIP compile actions run (the
# hip_library archives of every HIP target, bench and test sources included): the objects
# hold HIP 6.4 device code for sid's runtime and are not linked against Debian 12's
# libamdhip64. Device code is built with -Werror (mlaps_hip_werror=1).
#
# Usage: tools/amd_new_archs.sh [bazel startup options, e.g. --output_base=DIR]
# Needs root (debootstrap, chroot, mount namespaces) and Debian's archive.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # debootstrap, chroot
cd "$(dirname "$0")/.."
ws=$(pwd -P)
root=$(tools/sid_hipcc.sh --root)
t0=$(date +%s)

# The sid packages; a change here rebuilds the root.
sid_packages=(hipcc hip-utils liburi-perl llvm-21)
stamp="sid ${sid_packages[*]}"

make_root() {
  echo "amd_new_archs: making the sid root at $root (once; a few minutes, about 1.4 GB)"
  local new=$root.new
  if ! command -v debootstrap >/dev/null; then
    apt-get install -y -q --no-install-recommends debootstrap >/dev/null ||
      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends debootstrap >/dev/null; }
  fi
  rm -rf "$new"
  debootstrap --variant=minbase sid "$new" http://deb.debian.org/debian >"$root.log" 2>&1 ||
    { tail -n 20 "$root.log" >&2; exit 1; }
  # sid's Release file can be past its Valid-Until date.
  echo 'Acquire::Check-Valid-Until "false";' >"$new/etc/apt/apt.conf.d/99mlaps-no-valid-until"
  unshare --mount --propagation private /bin/sh -c '
    mount -t proc proc "$1/proc" && mount --bind /dev "$1/dev" &&
    chroot "$1" /usr/bin/env DEBIAN_FRONTEND=noninteractive /bin/sh -c "
      apt-get update -q && apt-get install -y -q --no-install-recommends $2 && apt-get clean"
  ' sh "$new" "${sid_packages[*]}" >>"$root.log" 2>&1 || { tail -n 20 "$root.log" >&2; exit 1; }
  echo "$stamp" >"$new/.mlaps-ready"
  rm -rf "$root"
  mv "$new" "$root"
}

if [ "$(cat "$root/.mlaps-ready" 2>/dev/null)" != "$stamp" ]; then
  make_root
else
  echo "amd_new_archs: reusing the sid root at $root"
fi
echo "amd_new_archs: sid hipcc $(chroot "$root" dpkg-query -W -f '${Version}' hipcc)," \
  "$(chroot "$root" /usr/bin/clang-21 --version | head -n 1) ($(($(date +%s) - t0))s)"

# Every HIP compile unit for AMD (NVIDIA-only targets such as NCCL code excluded). The
# pattern names the top-level directories that hold BUILD files, not //..., which would
# descend into bazel-* convenience links pointing at another output base.
pkgs=""
for d in */; do
  case "$d" in bazel-*) continue ;; esac
  [ -n "$(find "$d" \( -name BUILD.bazel -o -name BUILD \) -print -quit)" ] && pkgs="$pkgs + //${d%/}/..."
done
pkgs=${pkgs# + }
flags=(--config=rocm --define=mlaps_amd_archs=new --platform_suffix=rocm-new
  "--define=mlaps_hipcc=$ws/tools/sid_hipcc.sh" --define=mlaps_hip_werror=1)
query_log=$(mktemp)
trap 'rm -f "$query_log"' EXIT
targets=$(bazel "$@" query --noshow_progress \
  "kind(_hip_objects, $pkgs) except attr(tags, requires-cuda, $pkgs)" 2>"$query_log") ||
  { cat "$query_log" >&2; exit 1; }
if [ -z "$targets" ]; then
  echo "amd_new_archs: no HIP targets found under $pkgs" >&2
  exit 1
fi
echo "amd_new_archs: building $(echo $targets | wc -w) HIP targets for gfx942 + gfx950"
# No convenience links (--symlink_prefix=/): bazel-bin keeps pointing at the last host build.
bazel "$@" build --symlink_prefix=/ "${flags[@]}" -- $targets
echo "amd_new_archs: gfx942 + gfx950 compile passed ($(($(date +%s) - t0))s)"

bin=$(bazel "$@" info "${flags[@]}" bazel-bin 2>/dev/null)
objects=()
for t in $targets; do
  pkg=${t#//}
  pkg=${pkg%%:*}
  for o in "$bin/$pkg/_hip_objs/${t##*:}"/*.o; do
    [ -e "$o" ] && objects+=("$o")
  done
done
echo
echo "Resources per kernel and arch (waves = occupancy in waves per SIMD, max 8; limit = what"
echo "bounds it; LDS and scratch in bytes, scratch per lane):"
python3 tools/amd_resources.py "$root" "${objects[@]}"
echo "amd_new_archs: done in $(($(date +%s) - t0))s"
