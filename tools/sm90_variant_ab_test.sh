#!/usr/bin/env bash
# tools/sm90_variant_ab.sh on a made-up packed bundle: stand-in benchmarks that print the real
# one's progress line with fixed times (base 600 us, v1 540 us per round, v2 fails, v3 hangs), so
# the unpacking, the rounds in turn, the medians and ratios, a failed and a hung run are checked
# without a GPU.
set -euo pipefail
script=$(cd "$(dirname "$0")" && pwd)/sm90_variant_ab.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/b/bin" "$work/b/lib" "$work/pack"
flat=kernels_decode_mla_decode_bench
echo "$flat //kernels/decode:mla_decode_bench" >"$work/b/benches.txt"
fake() {  # NAME DECODE_US [ROUND_STEP]
  cat >"$work/pack/$1" <<FAKE
#!/usr/bin/env bash
[ "\$1" = --only ] || exit 9
n=\$(cat "$work/count.$1" 2>/dev/null || echo 0); echo \$((n + 1)) >"$work/count.$1"
echo "  dense \${2%%,*} B128 ctx8192 H64 q2 f16pv blocks 132 lanes 1: decode \$(($2 + n * ${3:-0})).0 us, reduce 0.0 us, total \$(($2 + n * ${3:-0} + 1)).0 us, merged in the decode 0.0 us, step 0.0 us (merged 0.0 us)"
# With --peer FILE: the table row, peer_us (column 20) 500.0 for bf16 shapes, "-" for others.
if [ "\${3:-}" = --peer ]; then
  [ -r "\$4" ] || exit 8
  case "\$2" in bf16,*) pu=500.0 ;; *) pu=- ;; esac
  echo "dense bf16 f16pv 128 8192 64 2 132 1 256 0 $2.0 0.0 $2.0 3.00 500.0 0.0% - - \$pu -"
fi
FAKE
  chmod +x "$work/pack/$1"
}
fake "$flat" 600 0
fake "$flat.v1" 540 10  # rounds 540, 550, 560 (per process: two shapes share the count)
printf '#!/usr/bin/env bash\necho "out of memory"; exit 3\n' >"$work/pack/$flat.v2"
printf '#!/usr/bin/env bash\nsleep 30\n' >"$work/pack/$flat.v3"
chmod +x "$work/pack/$flat.v2" "$work/pack/$flat.v3"
tar -C "$work/pack" -cJf "$work/b/bin.tar.xz" .

out=$("$script" --bundle "$work/b" --rounds 3 --timeout 2 base,v1,v2,v3 bf16,64,2,128,8192)
echo "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$work/b/bin/$flat.v1" ] || fail "the packed binaries were not unpacked"
grep -qx 'ab bf16,64,2,128,8192 base 1 600.0 601.0' <<<"$out" || fail "base's first round"
grep -qx 'ab bf16,64,2,128,8192 v1 3 560.0 561.0' <<<"$out" || fail "v1's third round"
[ "$(grep -c '^ab bf16,64,2,128,8192 v2 [123] failed$' <<<"$out")" = 3 ] || fail "v2's failures"
grep -qx 'out of memory' <<<"$out" || fail "a failed run's last lines"
[ "$(grep -c '^ab bf16,64,2,128,8192 v3 [123] failed$' <<<"$out")" = 3 ] || fail "v3's timeouts"
# In turn: round 1 of every variant before round 2 of any.
order=$(grep -E '^ab ' <<<"$out" | awk '{print $3 $4}' | tr '\n' ' ')
[ "$order" = "base1 v11 v21 v31 base2 v12 v22 v32 base3 v13 v23 v33 " ] || fail "order: $order"
grep -qx 'median bf16,64,2,128,8192: base 600.0 (1.000) v1 550.0 (0.917) v2 - v3 -' <<<"$out" ||
  fail "the median line"
# --peer: the FlashMLA row's time against each variant's median; a shape without one says so.
echo '{}' >"$work/flashmla.json"
rm -f "$work"/count.*
out=$("$script" --bundle "$work/b" --rounds 1 --peer "$work/flashmla.json" base,v1 \
  bf16,64,2,128,8192 fp8,64,2,128,8192)
echo "$out"
grep -qx 'peer bf16,64,2,128,8192: FlashMLA 500.0 us; base x 0.833 v1 x 0.926' <<<"$out" ||
  fail "the peer line"
grep -qx 'peer fp8,64,2,128,8192: no FlashMLA row' <<<"$out" || fail "a shape without a peer row"
if "$script" --bundle "$work/b" --peer "$work/none.json" base bf16,64,2,128,8192 \
  >"$work/err" 2>&1; then
  fail "an unreadable --peer file ran"
fi
grep -q 'cannot read --peer' "$work/err" || fail "the unreadable --peer message"
# A missing variant is an error before anything runs.
if "$script" --bundle "$work/b" base,v9 bf16,64,2,128,8192 >"$work/err" 2>&1; then
  fail "an unknown variant ran"
fi
grep -q 'no build .*v9' "$work/err" || fail "the unknown variant's message"
echo PASS
