#!/usr/bin/env bash
# Builds the mlaps wheel offline: the C ABI library with Bazel, a staged package (mlaps/*.py,
# mlaps/_lib/*.so with the shared libraries a plain Linux lacks), then Debian's setuptools.
#   python/build_wheel.sh [--cuda] [--out DIR]     (default DIR: python/dist)
# --cuda also builds libmlaps_cuda.so (--config=cuda, needs nvcc). The staged package is left
# in DIR/stage/ (PYTHONPATH=DIR/stage works without installing).
# Bazel: $BAZEL (default bazel) with $MLAPS_BAZEL_FLAGS (e.g. --output_base=...).
set -euo pipefail
cd "$(dirname "$0")/.."
out=python/dist
cuda=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) cuda=1; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "build_wheel: unknown option '$1'" >&2; exit 2 ;;
  esac
done
bazel=(${BAZEL:-bazel} ${MLAPS_BAZEL_FLAGS:-})
"${bazel[@]}" build --symlink_prefix=/ //python:libmlaps_c.so
cpu_bin=$("${bazel[@]}" info bazel-bin 2>/dev/null)
libs=("$cpu_bin/python/libmlaps_c.so")
if [ $cuda = 1 ]; then
  "${bazel[@]}" build --symlink_prefix=/ --config=cuda //python:libmlaps_cuda.so
  libs+=("$("${bazel[@]}" info --config=cuda bazel-bin 2>/dev/null)/python/libmlaps_cuda.so")
fi

stage="$out/stage"
rm -rf "$stage"
mkdir -p "$stage/mlaps/_lib" "$stage/mlaps/gpu"
cp python/mlaps/*.py "$stage/mlaps/"
cp python/gpu/*.py "$stage/mlaps/gpu/"
cp python/setup.py "$stage/"
# Libraries every glibc Linux (and an NVIDIA driver machine) has; the rest travel along.
system_lib='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libz|libcuda|libcudart|libnvidia-.*)\.so'
for lib in "${libs[@]}"; do
  cp "$lib" "$stage/mlaps/_lib/"
  chmod u+w "$stage/mlaps/_lib/$(basename "$lib")"
  ldd "$lib" | awk '/=> \//{print $1, $3}' | while read -r soname path; do
    if ! [[ $soname =~ $system_lib ]]; then cp -nL "$path" "$stage/mlaps/_lib/$soname"; fi
  done
done
(cd "$stage" && /usr/bin/python3 setup.py -q bdist_wheel --dist-dir "$PWD/.." >/dev/null 2>&1) || {
  echo "build_wheel: setup.py bdist_wheel failed; rerun in $stage for the log" >&2; exit 1; }
rm -rf "$stage/build" "$stage"/*.egg-info
echo "build_wheel: $(ls "$out"/mlaps-*.whl | tail -n 1) ($(ls "$stage/mlaps/_lib" | wc -l) libraries)"
