#!/usr/bin/env bash
# Runner of a GPU bundle made by tools/gpu_bundle.sh. Needs no Bazel.
#   run.sh [--bench] [--bench-only] [--sanitizer TOOL] [--filter REGEX] [--timeout S]
# One summary line per binary, then 'N passed, N failed'. Logs go to $OUT (when set) or
# ./logs. Benchmarks print their whole output (their tables) and count as passed when they
# exit 0.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run_tests=1 run_bench=0 sanitizer="" filter=. timeout_s=600
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) run_bench=1; shift ;;
    --bench-only) run_bench=1; run_tests=0; shift ;;
    --sanitizer) sanitizer=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done

# The binaries of a packed bundle (gpu_bundle.sh --pack, --variant) travel in bin.tar.xz: unpacked
# once, where they belong.
if [ -f "$here/bin.tar.xz" ] && [ ! -e "$here/bin/.unpacked" ]; then
  tar -C "$here/bin" -xJf "$here/bin.tar.xz" && touch "$here/bin/.unpacked"
fi

logs=${OUT:-$here/logs}
mkdir -p "$logs"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# NCCL comes from the machine's PyTorch environment (nvidia-nccl-cu13) when it has one.
nccl_dir=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
[ -n "$nccl_dir" ] && [ -d "$nccl_dir" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl_dir"
export NCCL_NVLS_ENABLE=0

wrap=()
if [ -n "$sanitizer" ]; then
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  [ -n "$cs" ] || { echo "run.sh: compute-sanitizer not found" >&2; exit 2; }
  wrap=("$cs" --tool "$sanitizer" --error-exitcode 99 --print-limit 20)
fi

echo "bundle $(cat "$here/REVISION" 2>/dev/null) on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs)${sanitizer:+, under compute-sanitizer $sanitizer}"
passed=0 failed=0
run_one() {  # kind flat label
  local kind=$1 flat=$2 label=$3 log rc start secs detail
  log="$logs/$flat.log"
  start=$(date +%s%N)
  (
    cd "$here/bin"
    if [ -d "$flat.runfiles/mlaps" ]; then
      export TEST_SRCDIR="$here/bin/$flat.runfiles" TEST_WORKSPACE=mlaps
      cd "$flat.runfiles/mlaps"
    fi
    timeout "$timeout_s" "${wrap[@]}" "$here/bin/$flat"
  ) >"$log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN{printf "%.1f", (b-a)/1e9}')
  if [ "$kind" = bench ]; then cat "$log"; fi
  detail=$(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ tests?|ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tr -s ' \n' ' ' | sed 's/ *$//')
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
    printf 'PASS %-8s %-55s %6ss %s\n' "$kind" "$label" "$secs" "$detail"
  else
    failed=$((failed + 1))
    printf 'FAIL %-8s %-55s %6ss rc=%d %s\n' "$kind" "$label" "$secs" "$rc" "$detail"
    grep -E 'Failure|FAILED|error|Error' "$log" | head -n 15 | sed 's/^/    /'
  fi
}
if [ $run_tests = 1 ]; then
  while read -r flat label; do
    [[ $label =~ $filter ]] && run_one test "$flat" "$label"
  done <"$here/tests.txt"
fi
if [ $run_bench = 1 ]; then
  while read -r flat label; do
    [[ $label =~ $filter ]] && run_one bench "$flat" "$label"
  done <"$here/benches.txt"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
