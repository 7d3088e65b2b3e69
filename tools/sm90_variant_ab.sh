#!/usr/bin/env bash
# On the GPU machine: an A/B of mla_decode_bench builds in a GPU bundle (tools/gpu_bundle.sh
# --variant NAME=...: bin/FLAT.NAME; "base" is the default build, bin/FLAT), shape by shape, the
# variants in turn, ROUNDS rounds, one process a run, so every variant of a shape meets the same
# card minutes apart at most. Compare variants within one call only.
#
#   tools/sm90_variant_ab.sh [--bundle DIR] [--rounds N] [--timeout S] [--peer FILE]
#                            VARIANTS SHAPE...
#     VARIANTS  comma-separated names, e.g. base,v1,v4
#     SHAPE     DTYPE,H,QLEN,BATCH,CTX (mla_decode_bench --only)
#
# Prints each run's decode / total us ("ab SHAPE VARIANT ROUND decode_us total_us"), then per
# shape one line with each variant's median decode us and its ratio to the first variant's
# (< 1: faster). A run that fails or passes S seconds (default 120: a variant that hangs) prints
# "ab SHAPE VARIANT ROUND failed" and its last lines. --peer FILE: FlashMLA's flashmla.json from
# the same device call (.peers_flashmla/run_peers.sh), passed to each run; then per shape also
# "peer SHAPE: FlashMLA P us; VARIANT x R ..." with R = P / the variant's median decode us (> 1:
# faster than FlashMLA), or "no FlashMLA row" where the file has none for the shape.
set -uo pipefail

bundle=gpu_bundle
rounds=2
timeout_s=120
peer=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --peer) peer=$2; shift 2 ;;
    -*) echo "sm90_variant_ab: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: sm90_variant_ab.sh [--bundle DIR] [--rounds N] [--timeout S] [--peer FILE]" \
    "VARIANTS SHAPE..." >&2
  exit 2
fi
IFS=, read -r -a variants <<<"$1"
shift
if [ -n "$peer" ] && [ ! -r "$peer" ]; then
  echo "sm90_variant_ab: cannot read --peer $peer" >&2
  exit 2
fi
peer_args=()
[ -z "$peer" ] || peer_args=(--peer "$peer")

# A packed bundle (gpu_bundle.sh --variant): unpacked once, as run.sh does.
if [ -f "$bundle/bin.tar.xz" ] && [ ! -e "$bundle/bin/.unpacked" ]; then
  tar -C "$bundle/bin" -xJf "$bundle/bin.tar.xz" && touch "$bundle/bin/.unpacked"
fi
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
flat=$(awk '$2 == "//kernels/decode:mla_decode_bench" {print $1}' "$bundle/benches.txt")
if [ -z "$flat" ]; then
  echo "sm90_variant_ab: no //kernels/decode:mla_decode_bench in $bundle/benches.txt" >&2
  exit 1
fi
for v in "${variants[@]}"; do
  bin="$bundle/bin/$flat"
  [ "$v" = base ] || bin="$bin.$v"
  if [ ! -x "$bin" ]; then
    echo "sm90_variant_ab: no build $bin (variant '$v')" >&2
    exit 1
  fi
done

declare -A runs       # "shape variant" -> decode us of each round
declare -A peer_us    # shape -> FlashMLA's median us (the benchmark table's peer_us column)
for shape in "$@"; do
  for ((r = 1; r <= rounds; ++r)); do
    for v in "${variants[@]}"; do
      bin="$bundle/bin/$flat"
      [ "$v" = base ] || bin="$bin.$v"
      log=$(timeout "$timeout_s" "$bin" --only "$shape" "${peer_args[@]}" 2>&1)
      line=$(grep -m1 -E ': decode [0-9.]+ us, reduce [0-9.]+ us, total [0-9.]+ us' <<<"$log")
      if [ -z "$line" ]; then
        echo "ab $shape $v $r failed"
        tail -5 <<<"$log"
        continue
      fi
      decode=$(sed -E 's/.*: decode ([0-9.]+) us.*/\1/' <<<"$line")
      total=$(sed -E 's/.*, total ([0-9.]+) us.*/\1/' <<<"$line")
      echo "ab $shape $v $r $decode $total"
      runs["$shape $v"]+="$decode "
      if [ -n "$peer" ]; then
        # The table's first row of the shape (unindented, unlike the progress lines): column 20
        # is peer_us ("-" without a FlashMLA row).
        p=$(awk '/^(dense|sparse) / {print $20; exit}' <<<"$log")
        [[ "$p" =~ ^[0-9.]+$ ]] && peer_us["$shape"]=$p
      fi
    done
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {
  if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
for shape in "$@"; do
  first="" p=${peer_us["$shape"]:-}
  out="median $shape:" vs_peer="peer $shape: FlashMLA $p us;"
  for v in "${variants[@]}"; do
    m=$(median <<<"${runs["$shape $v"]:-}")
    [ -z "$first" ] && first=$m
    if [ "$m" = "-" ]; then
      out+=" $v -" vs_peer+=" $v -"
      continue
    fi
    if [ "$first" != "-" ]; then out+=" $v $m ($(ratio "$m" "$first"))"; else out+=" $v -"; fi
    [ -z "$p" ] || vs_peer+=" $v x $(ratio "$p" "$m")"
  done
  echo "$out"
  if [ -n "$peer" ]; then
    if [ -n "$p" ]; then echo "$vs_peer"; else echo "peer $shape: no FlashMLA row"; fi
  fi
done
