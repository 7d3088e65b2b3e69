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
expect 2 "unknown flag" "$mlaps" --bogus
[ "$(wc -l <"$tmp/err")" = 1 ] || { echo "FAIL: bad flag error is not one line"; fails=$((fails + 1)); }
expect 2 "bad int" "$mlaps" --batch=abc
expect 2 "bad heads" "$mlaps" --heads 17
expect 2 "bad arch" "$mlaps" --arch gfx1100
expect 2 "missing value" "$mlaps" --qlen
expect 2 "unknown command" "$mlaps" frobnicate
expect 1 "unsupported shape" "$mlaps" --arch gfx950 --heads 48
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
