#!/usr/bin/env python3
"""Reads the sm90 timeline probe (MLAPS_SM90_TRACE; mla_decode_sm90_probe.h) that
mla_decode_bench_traced writes with MLAPS_SM90_TRACE_OUT=FILE (one --only case), and prints one
block's walk.

  python3 kernels/decode/sm90_trace_report.py FILE [CTA] [FIRST_KV_BLOCK] [COUNT]

Times are SM clock cycles / 1000 from the block's first event. Warpgroups: A and B the two
consumers, P the producer. Events (tag, Sm90TraceTag in mla_decode_sm90_probe.h): S0 a consumer starts the S of kv block n (1), Siss its
last wgmma issued (2), Sret retired (3); st0 / st1 the wait for the other's statistics of n
(4, 5); sm0 / sm1 its softmax of n (6, 7); pv0 / pv1 its P V of n (8, 9); P the producer starts
block n (11) after reaching it (top, 10), c0 / c4 / c8 its TMA of production positions 0 / 4 / 8
issued (12-14; c8 before the issue, c8i after it, 15); V the producer's first converter thread,
l0 / l4 / l8 when it gets past its wait for position 0 / 4 / 8 landed (1-3). Then the means over
blocks 10-119 of each consumer's phases, each load's latency (c0 / c4, just before the TMA's
issue, and c8i, just after, to l0 / l4 / l8: the load's latency on kernels whose converters do
not widen, e.g. f16pv, else with their backlog), and the period a kv block."""
import array
import sys

CTAS, ROLES, BLOCKS, TAGS = 4, 4, 512, 16
NAMES = {1: "S0", 2: "Siss", 3: "Sret", 4: "st0", 5: "st1", 6: "sm0", 7: "sm1", 8: "pv0",
         9: "pv1", 10: "top", 11: "P", 12: "c0", 13: "c4", 14: "c8", 15: "c8i"}
CONVERTER_NAMES = {1: "l0", 2: "l4", 3: "l8"}  # role 3 (V)


def names_of(role):
    return CONVERTER_NAMES if role == 3 else NAMES


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    words = array.array("I")
    with open(argv[1], "rb") as f:
        words.frombytes(f.read())
    if len(words) != CTAS * ROLES * BLOCKS * TAGS:
        print("%s: %d words, expected %d" % (argv[1], len(words), CTAS * ROLES * BLOCKS * TAGS))
        return 1
    cta = int(argv[2]) if len(argv) > 2 else 0
    first = int(argv[3]) if len(argv) > 3 else 40
    count = int(argv[4]) if len(argv) > 4 else 6

    def raw(role, n, tag):
        return words[((cta * ROLES + role) * BLOCKS + n) * TAGS + tag]

    seen = [raw(r, n, t) for r in range(ROLES) for n in range(BLOCKS) for t in range(TAGS)]
    seen = [v for v in seen if v]
    if not seen:
        print("block %d recorded nothing (not an sm90 TMA launch, or no probe build)" % cta)
        return 1
    base = min(seen)

    def at(role, n, tag):  # cycles since the first event (the clock's low 32 bits wrap)
        v = raw(role, n, tag)
        return (v - base) % (1 << 32) if v else None

    for n in range(first, min(BLOCKS, first + count)):
        cells = ["%s.%s=%.2f" % ("ABPV"[r], names_of(r)[t], at(r, n, t) / 1000.0)
                 for r in range(ROLES) for t in sorted(names_of(r)) if at(r, n, t) is not None]
        print(n, " ".join(cells))

    def mean_span(role, t0, t1):
        d = [at(role, n, t1) - at(role, n, t0) for n in range(10, 120)
             if at(role, n, t0) is not None and at(role, n, t1) is not None]
        return "%.2f" % (sum(d) / len(d) / 1000.0) if d else "-"  # "-": event not recorded

    for role in (0, 1):
        print("%s: S issue %s, S issued -> retired %s, statistics wait %s, softmax %s, P V %s "
              "(kcycles a block)" % ("AB"[role], mean_span(role, 1, 2), mean_span(role, 2, 3),
                                     mean_span(role, 4, 5), mean_span(role, 6, 7),
                                     mean_span(role, 8, 9)))
    def mean_latency(issued, landed):  # producer tag -> converter tag, over blocks 10-119
        d = [at(3, n, landed) - at(2, n, issued) for n in range(10, 120)
             if at(2, n, issued) is not None and at(3, n, landed) is not None]
        return "%.2f" % (sum(d) / len(d) / 1000.0) if d else "-"

    print("loads, TMA issued -> landed seen: position 0 %s, 4 %s, 8 %s (kcycles)" %
          (mean_latency(12, 1), mean_latency(13, 2), mean_latency(15, 3)))
    ends = [at(0, n, 9) for n in range(10, 120) if at(0, n, 9) is not None]
    if len(ends) > 1:
        print("period %.3f kcycles a kv block" % ((ends[-1] - ends[0]) / 1000.0 / (len(ends) - 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
