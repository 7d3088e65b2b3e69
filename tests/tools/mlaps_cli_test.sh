#!/usr/bin/env bash
# The mlaps CLI end to end: exit codes (0 ok, 1 wrong plan / unsupported, 2 bad usage), the
# files it writes, and check catching a tampered plan.
set -uo pipefail
mlaps=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
cd "$tmp"
fails=0 passed=0
expect() {  # expected-exit-code description command...
  local want=$1 what=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL $what: exit $got, want $want"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok   $what"; passed=$((passed + 1))
  fi
}
expect 0 "default plan" "$mlaps"
grep -q "^gfx950 (256 CUs)" "$tmp/out" && grep -q "^sm90 (132 CUs)" "$tmp/out" || { echo "FAIL summary lines"; fails=$((fails + 1)); }
grep -q "SVG written to $tmp/mlaps_plan.sm90.svg" "$tmp/out" && [ -s "$tmp/mlaps_plan.gfx950.svg" ] || { echo "FAIL: default SVGs"; cat "$tmp/out"; fails=$((fails + 1)); }
# sm90 plans carry the simulator's predicted decode time (calibrated registry costs); the AMD
# registries have none, so their summaries print no prediction.
expect 0 "predicted time" "$mlaps" plan --arch sm90,gfx950 --dtype bf16 --heads 16 --qlen 1 --batch 128 --ctx_min 8192 --ctx_max 8192 --svg ""
[ "$(grep -c "^  predicted  decode [0-9.]* us" "$tmp/out")" = 1 ] || { echo "FAIL: one predicted line (sm90 only)"; cat "$tmp/out"; fails=$((fails + 1)); }
# Bad usage: exit 2 and exactly one line on stderr naming the problem.
bad() {  # expected-stderr description args...
  local want=$1 what=$2
  shift 2
  expect 2 "$what" "$mlaps" "$@"
  if [ "$(wc -l <"$tmp/err")" != 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL $what: stderr '$(cat "$tmp/err")', want one line with '$want'"; fails=$((fails + 1))
  fi
}
bad "mlaps: unknown flag --bogus" "unknown flag" --bogus
bad "flag --batch=abc: expected an integer" "bad int" --batch=abc
bad "flag --causal=maybe: expected true or false" "bad bool" --causal=maybe
bad "num_heads = 17: must be one of 16, 32, 48, 64, 128" "bad heads" --heads 17
bad "arch 'gfx1100' is not one of gfx942, gfx950, sm90" "bad arch" --arch gfx1100
bad "dtype 'fp4' is not one of bf16, fp8" "bad dtype" --dtype fp4
bad "flag --qlen needs a value" "missing value" --qlen
bad "--batch=0: must be >= 1" "empty batch" --batch 0
bad "--ctx_min=9 --ctx_max=3: need 0 <= min <= max" "ctx range" --ctx_min 9 --ctx_max 3
bad "page_size = 12: must be a power of two" "bad page" --page_size 12
bad "kv_granularity = 24: must be a power of two" "bad granularity" --kv_granularity 24
bad "policy 'fastest' is not one of" "bad policy" --policy fastest
bad "unexpected argument 'stray'" "stray argument" plan stray
bad "check needs --plan FILE and --batch FILE, or --raw_dir DIR" "check without files" check
expect 2 "unknown command" "$mlaps" frobnicate
grep -qF "unknown command 'frobnicate'" "$tmp/err" || { echo "FAIL: unknown command message"; fails=$((fails + 1)); }
expect 1 "unsupported shape" "$mlaps" --arch gfx950 --heads 48
grep -qF "unsupported" "$tmp/err" || { echo "FAIL: unsupported message"; fails=$((fails + 1)); }
expect 0 "plan to files" "$mlaps" plan --arch sm90 --batch 8 --out "$tmp/plan.txt" --batch_out "$tmp/batch.txt"
expect 0 "check own plan" "$mlaps" check --plan "$tmp/plan.txt" --batch "$tmp/batch.txt"
expect 0 "replay batch file" "$mlaps" plan --batch_file "$tmp/batch.txt" --out "$tmp/plan2.txt"
cmp -s "$tmp/plan.txt" "$tmp/plan2.txt" || { echo "FAIL: replayed plan differs"; fails=$((fails + 1)); }
sed '0,/kv_end: \([0-9]*\)/s//kv_end: 99999/' "$tmp/plan.txt" >"$tmp/bad.txt"
expect 1 "check tampered plan" "$mlaps" check --plan "$tmp/bad.txt" --batch "$tmp/batch.txt"
grep -q "kv_range work 0" "$tmp/out" || { echo "FAIL: violation not named"; cat "$tmp/out"; fails=$((fails + 1)); }
expect 2 "check missing file" "$mlaps" check --plan "$tmp/nope.txt" --batch "$tmp/batch.txt"
expect 0 "simulate" "$mlaps" simulate --arch sm90,gfx950 --dtype fp8 --heads 64 --qlen 3
expect 0 "render" "$mlaps" render --arch sm90 --batch 8 --svg "$tmp/p.svg"
grep -q "lower bound" "$tmp/p.svg" || { echo "FAIL: svg"; fails=$((fails + 1)); }
echo "$passed passed, $fails failed"
[ "$fails" = 0 ]
