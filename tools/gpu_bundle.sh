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
#          --no-bench (tests only),
#          --variant NAME=FLAG[,FLAG...] (repeatable): the tests and benchmarks again, built
#            with --define=mlaps_sm90_FLAG=1 for each FLAG (the sm90 kernel variants that
#            kernels/decode/BUILD.bazel lists; an unknown flag is an error before any build),
#            staged as bin/FLAT.NAME (a test runs on bin/FLAT's runfiles); implies --pack,
#          --pack: the binaries travel xz-packed in bin.tar.xz (a dozen 12 MB binaries would
#            pass the device tool's 64 MiB carry; packed each is ~1.5 MB); run.sh unpacks them
#            on its first start (or: tar -C gpu_bundle/bin -xJf gpu_bundle/bin.tar.xz), so carry
#            a bundle before running it here (unpacked, it keeps both).
set -euo pipefail
cd "$(dirname "$0")/.."

out=gpu_bundle
only=.
bench=1
pack=0
variants=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --pack) pack=1; shift ;;
    --variant)
      if ! [[ $2 =~ ^[a-z0-9_]+=[a-z0-9_]+(,[a-z0-9_]+)*$ ]]; then
        echo "gpu_bundle: --variant wants NAME=FLAG[,FLAG...], got '$2'" >&2
        exit 2
      fi
      variants+=("$2"); pack=1; shift 2 ;;
    *) echo "gpu_bundle: unknown option '$1'" >&2; exit 2 ;;
  esac
done

# Every variant flag must be one that kernels/decode/BUILD.bazel declares (sm90_variant_copts):
# a flag no config_setting reads would build the default kernel under a variant's name. Checked
# before anything is built or the old bundle removed.
for v in "${variants[@]}"; do
  for flag in $(echo "${v#*=}" | tr ',' ' '); do
    if [ -z "$(bazel query --noshow_progress "kind(config_setting, //kernels/decode:sm90_$flag)" 2>/dev/null)" ]; then
      echo "gpu_bundle: no variant flag '$flag' (kernels/decode/BUILD.bazel's sm90_variant_copts)" >&2
      exit 2
    fi
  done
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

if [ ${#variants[@]} -gt 0 ]; then
  for v in "${variants[@]}"; do
    name=${v%%=*}
    defines=()
    for flag in $(echo "${v#*=}" | tr ',' ' '); do defines+=("--define=mlaps_sm90_$flag=1"); done
    echo "gpu_bundle: variant $name: ${defines[*]}"
    bazel build --config=cuda "${defines[@]}" $tests $benches
    for b in $tests $benches; do
      pkg=${b#//}; pkg=${pkg%%:*}; bname=${b##*:}
      flat=$(echo "${pkg}_${bname}" | tr '/' '_')
      cp "$bin_root/$pkg/$bname" "$out/bin/$flat.$name"
      echo "$flat.$name $b ${defines[*]}" >>"$out/variants.txt"
    done
  done
  # Leave bazel-bin as the default build again (the staged binaries above are its copies).
  bazel build --config=cuda $tests $benches
fi
if [ "$pack" = 1 ]; then
  binaries=$(cd "$out/bin" && find . -maxdepth 1 -type f -printf '%f\n' | sort)
  # shellcheck disable=SC2086  # file names without spaces (flattened labels)
  (cd "$out/bin" && tar -cJf ../bin.tar.xz $binaries && rm -f $binaries)
fi

cp tools/gpu_bundle_run.sh "$out/run.sh"
chmod +x "$out/run.sh"
git rev-parse --short HEAD >"$out/REVISION" 2>/dev/null || echo unknown >"$out/REVISION"
echo "gpu_bundle: staged in $out ($(du -sh "$out" | cut -f1)): $(wc -l <"$out/tests.txt") test(s), $(wc -l <"$out/benches.txt") benchmark(s), $(ls "$out/lib" | wc -l) librar(y/ies)"
echo "gpu_bundle: run with $out/run.sh [--bench] [--sanitizer memcheck|racecheck]"
