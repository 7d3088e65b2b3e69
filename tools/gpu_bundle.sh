#!/usr/bin/env bash
# Builds every NVIDIA GPU test and GPU benchmark with --config=cuda and stages them, with the
# shared libraries a plain Ubuntu 24.04 + NVIDIA driver machine lacks, into one folder with
# a runner (run.sh) that needs no Bazel. Carry the folder to the GPU machine and run it:
#
#   tools/gpu_bundle.sh                # -> gpu_bundle/ (git-ignored)
#   gpu_bundle/run.sh                  # every test; one line per binary, then 'N passed, N failed'
#   gpu_bundle/run.sh --bench          # then every benchmark
#   gpu_bundle/run.sh --sanitizer memcheck   # tests under compute-sanitizer
#
# Options: --out DIR (default gpu_bundle), --only REGEX (targets whose label matches),
#          --no-bench (tests only).
set -euo pipefail
cd "$(dirname "$0")/.."

out=gpu_bundle
only=.
bench=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --no-bench) bench=0; shift ;;
    *) echo "gpu_bundle: unknown option '$1'" >&2; exit 2 ;;
  esac
done

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "gpu_bundle: no /usr/local/cuda/bin/nvcc here: cannot build the CUDA targets" >&2
  exit 1
fi

tests=$(bazel query --noshow_progress 'attr(tags, "requires-gpu-nvidia", kind("cc_test", //...))' 2>/dev/null | grep -E "$only" || true)
benches=""
if [ "$bench" = 1 ]; then
  benches=$(bazel query --noshow_progress 'attr(tags, "gpu", kind("cc_binary", //...))' 2>/dev/null | grep -E "$only" || true)
fi
if [ -z "$tests$benches" ]; then
  echo "gpu_bundle: no GPU targets match '$only'" >&2
  exit 1
fi
echo "gpu_bundle: building $(echo $tests | wc -w) test(s), $(echo $benches | wc -w) benchmark(s) with --config=cuda"
bazel build --config=cuda $tests $benches
bin_root=$(bazel info --config=cuda bazel-bin 2>/dev/null)

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
: >"$out/tests.txt"
: >"$out/benches.txt"

# Libraries every Ubuntu 24.04 machine with an NVIDIA driver has; all others are staged.
system_lib='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libnvidia-.*|libnccl)\.so'

stage() {  # label list-file
  local label=$1 list=$2 pkg name flat src
  pkg=${label#//}; pkg=${pkg%%:*}; name=${label##*:}
  flat=$(echo "${pkg}_${name}" | tr '/' '_')
  src="$bin_root/$pkg/$name"
  cp "$src" "$out/bin/$flat"
  if [ -d "$src.runfiles" ]; then
    cp -rL "$src.runfiles" "$out/bin/$flat.runfiles"
    # Shared libraries travel once, in lib/ (NCCL not at all: the GPU machine has its own),
    # and so does the binary (run.sh starts bin/FLAT; its runfiles copy would double the
    # bundle, which must stay under the device tool's 64 MiB).
    find "$out/bin/$flat.runfiles" -depth -type d -name '_solib_*' -exec rm -rf {} +
    rm -f "$out/bin/$flat.runfiles/mlaps/$pkg/$name"
  fi
  ldd "$src" | awk '/=> \//{print $1, $3}' | while read -r soname path; do
    if ! [[ $soname =~ $system_lib ]]; then cp -nL "$path" "$out/lib/$soname"; fi
  done
  echo "$flat $label" >>"$list"
}
for t in $tests; do stage "$t" "$out/tests.txt"; done
for b in $benches; do stage "$b" "$out/benches.txt"; done

cp tools/gpu_bundle_run.sh "$out/run.sh"
chmod +x "$out/run.sh"
git rev-parse --short HEAD >"$out/REVISION" 2>/dev/null || echo unknown >"$out/REVISION"
echo "gpu_bundle: staged in $out ($(du -sh "$out" | cut -f1)): $(wc -l <"$out/tests.txt") test(s), $(wc -l <"$out/benches.txt") benchmark(s), $(ls "$out/lib" | wc -l) librar(y/ies)"
echo "gpu_bundle: run with $out/run.sh [--bench] [--sanitizer memcheck|racecheck]"
